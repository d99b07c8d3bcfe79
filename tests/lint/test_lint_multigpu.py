"""The multi-GPU rules of issue 28: each on a minimal script, with the cases that must not fire, and, where a CPU
can show it, the bug happening for real on 2 gloo ranks under plain torchrun (tests/scripts/lint_*.py)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from conftest import torchrun
from ddplab.lint import lint_file, lint_source

SCRIPTS = Path(__file__).parents[1] / "scripts"
PG = "import os\nimport torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n" \
     "dist.destroy_process_group()\n"
NCCL = "import os\nimport torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n" \
       "dist.destroy_process_group()\n"


def rules(source: str, setup: str = PG, show_all: bool = False) -> list[str]:
    return sorted(f.rule for f in lint_source(setup + textwrap.dedent(source), show_all=show_all).findings
                  if f.rule not in ("nccl-hardcoded",))


def expected(path: Path) -> set[tuple[int, str]]:
    return {(n, m.group(1)) for n, line in enumerate(path.read_text().splitlines(), 1)
            if (m := re.search(r"# expect: ([a-z0-9-]+)\s*$", line))}


@pytest.mark.parametrize("name", ["lint_shared_write.py", "lint_unreduced_metric.py", "lint_rank0_break.py",
                                  "lint_local_rank_flag.py"])
def test_each_demo_script_is_found_on_its_line_and_nothing_else(name):
    path = SCRIPTS / name
    assert {(f.line, f.rule) for f in lint_file(path, show_all=True).findings} == expected(path)


# ------------------------------------------------------------------------------------------- the bugs, for real


def test_two_ranks_writing_one_file_lose_one_ranks_lines(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_shared_write.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "run.log").read_text().splitlines()
    # each rank wrote 1000 lines from offset 0 of the same file: the file cannot hold both ranks' lines
    per_rank = [sum(line.startswith(f"rank {r} ") for line in lines) for r in (0, 1)]
    assert len(lines) == 1000 and per_rank != [1000, 1000] and sum(per_rank) == 1000


def test_rank0_reports_its_own_shard_as_the_whole(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_unreduced_metric.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "accuracy 100.0%" in done.stdout  # the whole dataset's accuracy is 50 %


def test_rank0_leaving_the_loop_fails_its_peer(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_rank0_break.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=150, merge_stderr=True)
    assert done.returncode != 0
    assert "rank 0 left the loop after step 1" in done.stdout
    assert "rank 1 left the loop" not in done.stdout  # rank 1 never got out of its all_reduce


def test_torchrun_does_not_pass_the_local_rank_flag(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_local_rank_flag.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("would use device index 0") == 2  # both ranks on one device


# ------------------------------------------------------------------------------------------- minimal cases


def test_local_rank_flag_only_when_it_picks_the_device_and_the_env_is_never_read():
    flag = textwrap.dedent("""
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--local-rank", type=int, default=0)
        args = p.parse_args()
    """)
    assert rules(flag + "torch.cuda.set_device(args.local_rank)\n") == ["local-rank-argparse"]
    assert rules(flag + "gpu = args.local_rank\nmodel = torch.nn.Linear(1, 1).cuda(gpu)\n") == ["local-rank-argparse"]
    assert rules(flag) == []  # accepted for the old launcher, never used
    assert rules(flag + "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n") == []


def test_current_device_never_set():
    assert rules("torch.accelerator.device_index(0)\n") == ["no-set-device"]  # a context manager, alone
    assert rules("with torch.accelerator.device_index(0):\n    pass\n") == []
    assert rules("x = torch.zeros(1).to('cuda')\n", setup=NCCL) == ["no-set-device"]
    assert rules("torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\nx = torch.zeros(1).to('cuda')\n",
                 setup=NCCL) == []
    # nccl and nothing that uses the current device by itself: possible only
    assert rules("x = 1\n", setup=NCCL) == [] and rules("x = 1\n", setup=NCCL, show_all=True) == ["no-set-device"]
    assert rules("torch.cuda.synchronize()\n", setup=NCCL) == ["no-set-device"]
    branch = """
        from torch.nn.parallel import DistributedDataParallel as DDP
        gpu = os.environ.get("GPU")
        model = torch.nn.Linear(1, 1)
        if gpu is not None:
            torch.cuda.set_device(int(gpu))
            model = DDP(model.cuda(int(gpu)), device_ids=[int(gpu)])
        else:
            model.cuda()
            model = DDP(model)
    """
    assert "no-set-device" in rules(branch)


def test_global_rank_as_a_device_index():
    assert rules("""
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank)
    """) == ["global-rank-device-ids"]
    assert rules("""
        from torch.nn.parallel import DistributedDataParallel as DDP
        m = DDP(torch.nn.Linear(1, 1), device_ids=[dist.get_rank()])
    """) == ["global-rank-device-ids"]
    assert rules("""
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank % torch.cuda.device_count())
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        def worker(rank):  # an mp.spawn index: the local one
            torch.cuda.set_device(rank)
    """) == []


def test_unreduced_metric_and_its_reduced_form():
    loop = textwrap.dedent("""
        from torch.utils.data import DataLoader, DistributedSampler
        loader = DataLoader([], sampler=DistributedSampler([]))
        correct = total = 0
        for x, y in loader:
            correct += 1
            total += 2
    """)
    assert rules(loop + "if dist.get_rank() == 0:\n    print(correct / total)\n") == ["unreduced-metric"]
    reduced = "t = torch.tensor([correct, total])\ndist.all_reduce(t)\ncorrect, total = t.tolist()\n"
    assert rules(loop + reduced + "if dist.get_rank() == 0:\n    print(correct / total)\n") == []
    assert rules(loop + "print(dist.get_rank(), correct / total)\n") == []  # every rank says which it is


def test_files_every_rank_writes():
    assert rules("""
        import json
        from torch.utils.tensorboard import SummaryWriter
        with open("config.json", "w") as f:
            json.dump({}, f)
        writer = SummaryWriter("runs/x")
        os.makedirs("runs/x")
        import torchvision
        data = torchvision.datasets.MNIST("data", download=True)
    """) == ["shared-path-write"] * 4
    assert rules("""
        rank = dist.get_rank()
        if rank == 0:
            open("config.json", "w").write("{}")
            os.makedirs("runs/x")
        open(f"rank{rank}.log", "w").write("")
        os.makedirs("runs/y", exist_ok=True)
        text = open("config.json").read()
    """) == []


def test_rank0_leaving_a_loop_with_collectives():
    assert rules("""
        for step in range(10):
            dist.all_reduce(torch.ones(1))
            if dist.get_rank() == 0 and step > 3:
                break
    """) == ["rank0-early-exit"]
    assert rules("""
        for step in range(10):
            dist.all_reduce(torch.ones(1))
            if step > 3:
                break
        for name in ["a", "b"]:
            if dist.get_rank() != 0:
                break
            print(name)
    """) == []


def test_lr_or_batch_scaled_by_the_world_size_twice():
    assert rules("""
        world_size = dist.get_world_size()
        lr = 0.1 * world_size
        from torch.optim import SGD
        opt = SGD([], lr=lr * world_size)
    """) == ["world-size-scaled-twice"]
    assert rules("""
        import argparse
        args = argparse.Namespace(batch_size=256, lr=0.1)
        args.batch_size = args.batch_size // int(os.environ["WORLD_SIZE"])
        per_rank_batch = args.batch_size // dist.get_world_size()
    """) == ["world-size-scaled-twice"]
    assert rules("""
        world_size = dist.get_world_size()
        lr = 0.1 * world_size
        batch = 256 // world_size
        eff_batch = batch * 4
        steps = 1000 // world_size
    """) == []
