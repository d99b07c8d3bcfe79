"""ddplab lint: every rule on a script that makes every mistake, clean verdicts on correct scripts (the recipes,
what `ddplab new` writes), and the tricky cases that must not fire."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from conftest import cli
from ddplab.lint import lint_file, lint_source

HERE = Path(__file__).parents[1]
SRC = HERE.parent / "src" / "ddplab"
BAD = HERE / "scripts" / "lint_bad.py"


def expected(path: Path) -> set[tuple[int, str]]:
    """(line, rule) for every `# expect: RULE [RULE...]` comment in the file."""
    found = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"# expect: ([a-z0-9-]+(?: [a-z0-9-]+)*)\s*$", line)
        if m:
            found |= {(number, rule) for rule in m.group(1).split()}
    return found


def rules(setup: str, source: str) -> list[str]:
    return [f.rule for f in lint_source(setup + textwrap.dedent(source)).findings]


def test_every_mistake_is_found_on_its_line_and_nothing_else():
    result = lint_file(BAD)
    assert {(f.line, f.rule) for f in result.findings} == expected(BAD)
    assert result.backend == "nccl" and not result.ok
    assert all(f.message and f.fix for f in result.findings)


def test_all_rules_exist_in_the_bad_script():
    fired = {rule for _, rule in expected(BAD)}
    assert {"sets-master-env", "nccl-hardcoded", "hardcoded-cuda-device", "unseeded-random-data",
            "sampler-no-set-epoch", "shuffle-with-sampler", "save-ddp-state-dict", "unguarded-save",
            "unguarded-print", "load-no-map-location", "no-destroy", "ddp-no-device-ids", "local-rank-save"} <= fired


CLEAN = sorted([HERE / "scripts" / "good_ddp.py", HERE / "scripts" / "lint_trainer_ok.py",
                HERE / "scripts" / "lint_spawn_ok.py", *SRC.glob("recipes/*.py"), *SRC.glob("train/*.py")])
TRAINER_BAD = HERE / "scripts" / "lint_trainer_bad.py"


def test_the_trainer_mistakes_are_found_on_their_lines_and_nothing_else():
    """The careful trainer (lint_trainer_ok.py) with one mistake per pattern: each found where it is."""
    result = lint_file(TRAINER_BAD)
    assert {(f.line, f.rule) for f in result.findings} == expected(TRAINER_BAD)
    assert {"unguarded-print", "local-rank-save", "rank0-ddp-forward", "grad-accum-no-sync",
            "loader-without-sampler"} == {rule for _, rule in expected(TRAINER_BAD)}


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_correct_scripts_lint_clean(path):
    result = lint_file(path)
    assert result.findings == [], [(f.line, f.rule, f.message) for f in result.findings]


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_the_script_ddplab_new_writes_lints_clean(task):
    from ddplab.commands.new import render_script

    result = lint_source(render_script(task), "train.py")
    assert result.findings == [], [(f.line, f.rule, f.message) for f in result.findings]


def test_cli_exit_codes_and_json(tmp_path):
    ran = cli("lint", str(BAD), "--json")
    assert ran.code == 1
    data = ran.json()
    assert {(f["line"], f["rule"]) for f in data["findings"]} == expected(BAD)
    assert data["errors"] == sum(f["level"] == "error" for f in data["findings"]) > 0

    ran = cli("lint", str(HERE / "scripts" / "good_ddp.py"))
    assert ran.code == 0 and "no DDP mistake found" in ran.out

    warnings_only = tmp_path / "warn.py"
    warnings_only.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    ran = cli("lint", str(warnings_only))
    assert ran.code == 0 and "[no-destroy]" in ran.out

    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    nul = tmp_path / "nul.py"  # a NUL byte: the parser's error has no line number
    nul.write_bytes(b"import torch\x00\n")
    for path in (broken, nul, tmp_path / "missing.py"):
        ran = cli("lint", str(path))
        assert ran.code == 2 and "Traceback" not in ran.err and len(ran.err.strip().splitlines()) == 1
        assert ":None" not in ran.err, ran.err


# ----------------------------------------------------------------------------------------------- must not fire

PG = "import os\nimport torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"


def test_launcher_env_only_as_a_fallback_is_fine():
    assert rules(PG, """
        os.environ.setdefault("MASTER_PORT", "29500")
        if "MASTER_ADDR" not in os.environ:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
        dist.destroy_process_group()
    """) == []


def test_rank_guards_in_their_usual_shapes():
    assert rules(PG, """
        rank = dist.get_rank()
        is_main = rank == 0
        def save(model):
            torch.save(model.state_dict(), "m.pt")
        def report():
            if not is_main:
                return
            print("done")
        if dist.get_rank() == 0:
            save(torch.nn.Linear(1, 1))
        report()
        print(f"rank {rank} ready")
        if int(os.environ["RANK"]) != 0:
            pass
        else:
            torch.save({}, "x.pt")
        dist.destroy_process_group()
    """) == []


def test_collectives_paired_across_a_rank_branch_are_fine():
    assert rules(PG, """
        t = torch.ones(1)
        if dist.get_rank() == 0:
            out = [torch.zeros(1) for _ in range(dist.get_world_size())]
            dist.gather(t, gather_list=out, dst=0)
        else:
            dist.gather(t, dst=0)
        dist.destroy_process_group()
    """) == []


def test_early_return_before_a_collective_hangs():
    assert rules(PG, """
        def sync(rank):
            if rank != 0:
                return
            dist.barrier()
        dist.destroy_process_group()
    """) == ["collective-in-rank-branch"]


def test_cuda_picked_from_local_rank_is_fine():
    assert rules(PG.replace("'gloo'", "'nccl' if torch.cuda.is_available() else 'gloo'"), """
        from torch.nn.parallel import DistributedDataParallel as DDP
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(1, 1).cuda(), device_ids=[local_rank])
        state = torch.load("m.pt", map_location=f"cuda:{local_rank}")
        dist.destroy_process_group()
    """) == []


def test_hard_coded_rank_and_init_method_are_errors():
    found = lint_source(textwrap.dedent("""
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://10.0.0.1:23456", rank=0, world_size=2)
        dist.destroy_process_group()
    """))
    assert sorted(f.rule for f in found.findings) == ["sets-master-env", "sets-rank-env"]
    assert not found.ok


def test_the_guides_tutorial_example_shows_its_quiet_mistakes():
    """docs/examples/tutorial_ddp.py: the script learners copy; random data used straight in the loop, no Dataset."""
    from pathlib import Path

    from conftest import cli

    script = Path(__file__).parents[2] / "docs" / "examples" / "tutorial_ddp.py"
    ran = cli("lint", "--json", str(script))
    assert ran.code == 1
    rules = sorted((f["rule"], f["line"]) for f in ran.json()["findings"])
    for expected in [("sets-master-env", 13), ("sets-master-env", 14), ("unseeded-random-data", 18),
                     ("save-ddp-state-dict", 28), ("unguarded-save", 28)]:
        assert expected in rules, rules


# ----------------------------------------------------------------------------------------------- guards, in pairs
# Each pattern twice: the true alarm, then the same code written right (the false alarm lint must not raise).

GPU = PG.replace("'gloo'", "'nccl' if torch.cuda.is_available() else 'gloo'") + \
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
END = "\ndist.destroy_process_group()\n"


def pair(true_alarm: str, false_alarm: str, setup: str = PG) -> tuple[list[str], list[str]]:
    return rules(setup, textwrap.dedent(true_alarm) + END), rules(setup, textwrap.dedent(false_alarm) + END)


def test_a_method_called_only_under_a_guard_is_guarded():
    bad, good = pair("""
        class T:
            def _save(self):
                torch.save({}, "s.pt")
            def run(self, every):
                if every:
                    self._save()
        """, """
        class T:
            def _save(self):
                torch.save({}, "s.pt")
                print("saved")
            def run(self, every):
                if dist.get_rank() == 0 and every:
                    self._save()
        """)
    assert bad == ["unguarded-save"] and good == []


def test_a_function_called_from_a_guarded_and_an_unguarded_site_is_not():
    bad, good = pair("""
        def note(text):
            print(text)
        if dist.get_rank() == 0:
            note("a")
        note("b")
        """, """
        def note(text):
            print(text)
        if dist.get_rank() == 0:
            note("a")
            note("b")
        """)
    assert bad == ["unguarded-print"] and good == []


def test_an_early_exit_guards_the_rest_of_the_function():
    bad, good = pair("""
        def finish(rank):
            if rank != 0:
                rank = 0
            torch.save({}, "f.pt")
        """, """
        def finish(rank):
            if rank != 0:
                return
            torch.save({}, "f.pt")
            print("saved")
        """)
    assert bad == ["unguarded-save"] and good == []


def test_a_guard_stored_in_a_variable():
    bad, good = pair("""
        leader = int(os.environ["RANK"]) != 0
        if leader:
            torch.save({}, "x.pt")
        """, """
        leader = int(os.environ["RANK"]) == 0
        if leader:
            torch.save({}, "x.pt")
            print("saved")
        """)
    assert bad == ["unguarded-save"] and good == []


def test_an_attribute_keeps_the_kind_of_rank_it_was_given():
    """self.gpu_id from LOCAL_RANK: a guard for printing, a mistake for saving; from RANK: fine for both."""
    local, global_ = pair("""
        class T:
            def __init__(self):
                self.gpu_id = int(os.environ["LOCAL_RANK"])
            def end(self):
                if self.gpu_id == 0:
                    print("done")
                    torch.save({}, "t.pt")
        T().end()
        """, """
        class T:
            def __init__(self):
                self.gpu_id = int(os.environ["RANK"])
            def end(self):
                if self.gpu_id == 0:
                    print("done")
                    torch.save({}, "t.pt")
        T().end()
        """)
    assert local == ["local-rank-save"] and global_ == []


def test_a_device_index_guard_is_fine_for_printing():
    bad, good = pair("""
        def train(gpu):
            print("epoch done")
        """, """
        def train(gpu):
            if gpu == 0:
                print("epoch done")
        """)
    assert bad == ["unguarded-print"] and good == []


def test_a_print_that_says_who_prints():
    bad, good = pair("""
        device = torch.device("cpu")
        print(f"running on {device}")
        """, """
        local_rank = int(os.environ["LOCAL_RANK"])
        print(f"[GPU{local_rank}] running")
        print(f"[{os.getpid()}] running")
        """)
    assert bad == ["unguarded-print"] and good == []


def test_saves_that_write_no_shared_file():
    bad, good = pair("""
        import io
        buffer = "state.pt"
        torch.save({}, buffer)
        """, """
        import io
        buffer = io.BytesIO()
        torch.save({}, buffer)
        torch.save({}, f"state-{dist.get_rank()}.pt")
        """)
    assert bad == ["unguarded-save"] and good == []


def test_a_wrapper_checkpoint_loaded_back_into_the_wrapper():
    bad, good = pair("""
        model = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
        """, """
        model = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
        dist.barrier()
        model.load_state_dict(torch.load("m.pt", map_location="cpu"))
        """, PG + "from torch.nn.parallel import DistributedDataParallel as DDP\n")
    assert bad == ["save-ddp-state-dict"] and good == []


def test_a_script_that_spawns_its_workers_is_its_own_launcher():
    spawn = "import torch.multiprocessing as mp\n"
    bad, good = pair("""
        os.environ["MASTER_PORT"] = "29500"
        if __name__ == "__main__":
            print("starting")
        """, """
        os.environ["MASTER_PORT"] = "29500"
        def worker(rank):
            pass
        if __name__ == "__main__":
            print("starting")
            mp.spawn(worker, nprocs=2)
        """, spawn + PG)
    assert bad == ["sets-master-env", "unguarded-print"] and good == []


def test_rank0_evaluation_through_the_wrapper_of_a_module_with_buffers():
    net = "net = DDP(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)){})\n"
    eval_on_rank0 = textwrap.dedent("""
        if dist.get_rank() == 0:
            with torch.no_grad():
                net{}(torch.ones(4, 2))
        """)
    assert rules(GPU, net.format("") + eval_on_rank0.format("") + END) == ["rank0-ddp-forward"]
    assert rules(GPU, net.format("") + eval_on_rank0.format(".module") + END) == []
    assert rules(GPU, net.format(", broadcast_buffers=False") + eval_on_rank0.format("") + END) == []
    no_buffers = "net = DDP(torch.nn.Linear(2, 2))\n"
    assert rules(GPU, no_buffers + eval_on_rank0.format("") + END) == []


def test_a_shuffled_loader_beside_a_distributed_sampler():
    data = "from torch.utils.data import DataLoader, DistributedSampler, Subset\nds = list(range(8))\n"
    bad, good = pair("""
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, batch_size=2, shuffle=True)
        """, """
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, batch_size=2, sampler=sampler)
        mine = Subset(ds, range(dist.get_rank(), 8, dist.get_world_size()))
        own = DataLoader(mine, batch_size=2, shuffle=True)
        if dist.get_rank() == 0:
            whole = DataLoader(ds, batch_size=2, shuffle=True)
        """, PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n"
        + data)
    assert bad == ["loader-without-sampler"] and good == []


@pytest.mark.parametrize("accumulate", ["modulo", "inner-loop"])
def test_gradient_accumulation_without_no_sync(accumulate):
    setup = PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n" \
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.ones(2, 1)\naccum = 4\n"
    loops = {
        "modulo": ("""
            for i in range(8):
                {sync}model(x).sum().backward()
                if (i + 1) % accum == 0:
                    opt.step()
            """, "model.require_backward_grad_sync = (i + 1) % accum == 0\n                "),
        "inner-loop": ("""
            for step in range(2):
                for micro in range(accum):
                    {sync}model(x).sum().backward()
                opt.step()
            """, "model.require_backward_grad_sync = micro == accum - 1\n                    "),
    }
    loop, sync = loops[accumulate]
    bad, good = pair(loop.replace("{sync}", ""), loop.replace("{sync}", sync), setup)
    assert bad == ["grad-accum-no-sync"] and good == []
    if accumulate == "inner-loop":
        with_no_sync = loop.replace("{sync}model(x).sum().backward()",
                                    "with model.no_sync():\n" + " " * 24 + "model(x).sum().backward()")
        assert rules(setup, textwrap.dedent(with_no_sync) + END) == []


def test_a_label_made_from_the_rank_says_who_prints():
    bad, good = pair("""
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cpu")
        loss = torch.ones(1, device=f"cuda:{local_rank}").sum()
        print(device, loss)
        """, """
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda:{}".format(local_rank))
        print("using", device)
        """)
    assert bad == ["unguarded-print"] and good == []


def test_gradient_accumulation_is_found_by_its_shape_not_its_names():
    setup = PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n" \
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.ones(2, 1)\nk = 4\n"
    bad, good = pair("""
        for batch in range(2):
            for j in range(k):
                model(x).sum().backward()
            opt.step()
        """, """
        for batch in range(2):
            for j in range(k):
                model(x).sum().backward()
                opt.step()
        """, setup)
    assert bad == ["grad-accum-no-sync"] and good == []


def test_a_backend_default_nobody_overrides_is_hard_coded():
    bad, good = pair("""
        def setup(backend="nccl"):
            dist.init_process_group(backend=backend)
        setup()
        """, """
        def setup(backend="nccl"):
            dist.init_process_group(backend=backend)
        setup("nccl" if torch.cuda.is_available() else "gloo")
        """, "import os\nimport torch\nimport torch.distributed as dist\n")
    assert bad == ["nccl-hardcoded"] and good == []


def test_random_split_needs_the_same_generator_on_every_rank():
    split = "from torch.utils.data import random_split\nparts = random_split(list(range(10)), [8, 2]{})\n"
    assert rules(PG, split.format("") + END) == ["unseeded-random-split"]
    assert rules(PG, split.format(", generator=torch.Generator().manual_seed(0)") + END) == []
    assert rules(PG + "torch.manual_seed(0)\n", split.format("") + END) == []


def test_a_per_rank_pick_and_the_no_launcher_branch_are_single_voices():
    bad, good = pair("""
        pool = [1, 5, 6, 7]
        def work(rank):
            device = pool[0]
            print(f"training on {device}")
        if "RANK" in os.environ:
            print("launched")
        """, """
        pool = [1, 5, 6, 7]
        def work(rank):
            device = pool[rank]
            print(f"training on {device}")
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            pass
        else:
            print("not distributed: one process")
        """)
    assert bad == ["unguarded-print"] and good == []
    found = lint_source(PG + "print('a')\nprint('b')\n" + END).findings
    assert [(f.line, f.also) for f in found if f.rule == "unguarded-print"] == [(5, [6])]


def test_prints_routed_through_a_replaced_builtin_print():
    """setup_for_distributed: `builtins.print = ...` keeps every print to the main process."""
    bad, good = pair("""
        print("epoch done")
        """, """
        import builtins
        def quiet_unless(is_master):
            builtin_print = builtins.print
            def print(*args, **kwargs):
                if is_master:
                    builtin_print(*args, **kwargs)
            builtins.print = print
        quiet_unless(dist.get_rank() == 0)
        print("epoch done")
        """)
    assert bad == ["unguarded-print"] and good == []


def test_loader_rule_skips_evaluation_loaders_and_sees_a_sampler_that_is_none():
    setup = PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n" \
        "from torch.utils.data import DataLoader, DistributedSampler\nds = list(range(8))\n"
    bad, good = pair("""
        def build(distributed):
            if distributed:
                sampler = DistributedSampler(ds)
            else:
                sampler = None
            sampler = None
            return DataLoader(ds, shuffle=(sampler is None), sampler=sampler)
        """, """
        def build(distributed):
            if distributed:
                sampler = DistributedSampler(ds)
            else:
                sampler = None
            train_loader = DataLoader(ds, shuffle=(sampler is None), sampler=sampler)
            val_loader = DataLoader(ds, batch_size=2, shuffle=True)
            return train_loader, val_loader
        """, setup)
    assert bad == ["loader-without-sampler"] and good == []


def test_random_draws_inside_the_loop_are_noise_not_the_dataset():
    setup = PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n"
    bad, good = pair("""
        x = torch.randn(16, 1)
        for step in range(4):
            model(x).sum().backward()
        """, """
        torch.manual_seed(0)
        x = torch.randn(16, 1)
        for step in range(4):
            noise = torch.randn(16, 1) * 0.01
            model(x + noise).sum().backward()
        """, setup)
    assert bad == ["unseeded-random-data"] and good == []


def test_a_script_that_maps_its_schedulers_ranks_is_its_own_launcher():
    """Under srun without torchrun, copying SLURM_PROCID into RANK is the script's job; a fallback port too."""
    bad, good = pair("""
        os.environ["RANK"] = "0"
        os.environ["MASTER_PORT"] = "29500"
        """, """
        proc_id = int(os.environ["SLURM_PROCID"])
        os.environ["RANK"] = str(proc_id)
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        if "MASTER_PORT" in os.environ:
            pass
        else:
            os.environ["MASTER_PORT"] = "29500"
        """)
    assert bad == ["sets-rank-env", "sets-master-env"] and good == []


def test_cli_lints_several_scripts_at_once():
    good, trainer_ok = HERE / "scripts" / "good_ddp.py", HERE / "scripts" / "lint_trainer_ok.py"
    ran = cli("lint", str(good), str(trainer_ok))
    assert ran.code == 0 and ran.out.count("no DDP mistake found") == 2
    ran = cli("lint", "--json", str(good), str(BAD))
    data = ran.json()
    assert ran.code == 1 and data["ok"] is False
    assert [len(r["findings"]) for r in data["results"]] == [0, len(expected(BAD))]


def test_a_sampler_handed_to_what_runs_the_epochs_sets_its_epoch_there():
    """`Checkpointer(..., sampler=sampler)` then `for epoch in ckpt.epochs(n)` (ddplab.resume, what `ddplab new`
    writes): the epoch is set where the sampler went, out of the rule's sight; kept only by the loader, it is not."""
    setup = PG + "from torch.utils.data import DataLoader, DistributedSampler\nds = list(range(8))\n" \
        "model = torch.nn.Linear(1, 1)\n"
    bad, good = pair("""
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch in range(3):
            for x in loader:
                model(x).sum().backward()
        """, """
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        ckpt = Checkpointer("ckpt", model=model, sampler=sampler)
        for epoch in ckpt.epochs(3):
            for x in ckpt.batches(loader):
                model(x).sum().backward()
        """, setup)
    assert bad == ["sampler-no-set-epoch"] and good == []
