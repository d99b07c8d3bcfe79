"""Collectives only some ranks reach: collective-in-rank-branch, rank0-early-exit, rank0-ddp-forward (DDP's buffer
broadcast in a forward run on rank 0 only); rank 0 leaving the loop for real on 2 gloo ranks.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

from conftest import torchrun
from lintcase import (
    END,
    GPU,
    HEAD,
    HEAD_TIME,
    SCRIPTS,
    line_rules,
    lint_file,
    lint_source,
    names,
    names_time,
    rules_but_nccl,
)
from lintcase import PG_OPEN as PG
from lintcase import rules_after as rules
from lintcase import write_train as _write

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


def test_collectives_paired_across_a_rank_branch_are_fine():
    assert (
        rules(
            PG,
            """
        t = torch.ones(1)
        if dist.get_rank() == 0:
            out = [torch.zeros(1) for _ in range(dist.get_world_size())]
            dist.gather(t, gather_list=out, dst=0)
        else:
            dist.gather(t, dst=0)
        dist.destroy_process_group()
    """,
        )
        == []
    )


def test_early_return_before_a_collective_hangs():
    assert rules(
        PG,
        """
        def sync(rank):
            if rank != 0:
                return
            dist.barrier()
        dist.destroy_process_group()
    """,
    ) == ["collective-in-rank-branch"]


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


# --------------------------------------------------------------- issue 28's multi-GPU rules (was test_lint_multigpu.py)


def test_rank0_leaving_the_loop_fails_its_peer(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_rank0_break.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=150, merge_stderr=True)
    assert done.returncode != 0
    assert "rank 0 left the loop after step 1" in done.stdout
    assert "rank 1 left the loop" not in done.stdout  # rank 1 never got out of its all_reduce


def test_rank0_leaving_a_loop_with_collectives():
    assert rules_but_nccl("""
        for step in range(10):
            dist.all_reduce(torch.ones(1))
            if dist.get_rank() == 0 and step > 3:
                break
    """) == ["rank0-early-exit"]
    assert (
        rules_but_nccl("""
        for step in range(10):
            dist.all_reduce(torch.ones(1))
            if step > 3:
                break
        for name in ["a", "b"]:
            if dist.get_rank() != 0:
                break
            print(name)
    """)
        == []
    )


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_a_torchvision_network_with_batchnorm_evaluated_through_the_wrapper_on_rank_0():
    source = (
        HEAD
        + """\
        import torchvision.models as models
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(models.resnet50())
        if dist.get_rank() == 0:
            with torch.no_grad():
                out = model(torch.zeros(1, 3, 224, 224))
        dist.destroy_process_group()
    """
    )
    assert line_rules(source) == [(9, "rank0-ddp-forward")]
    assert line_rules(source.replace("resnet50", "vit_b_16")) == []  # LayerNorm only: no buffers to broadcast


# ------------------------------------------------------------- issue 28, third held-out set (was test_lint_heldout3.py)


def test_rank0_goes_first_barrier_pair_is_quiet():
    """`if rank != 0: barrier()` ... `if rank == 0: barrier()`: every rank reaches one barrier (rank 0 downloads
    first); the same without the second half hangs rank 0's peers."""
    pair = """
    def load(path):
        if dist.get_rank() != 0:
            dist.barrier()
        data = open(path).read()
        if dist.get_rank() == 0:
            dist.barrier()
        return data
    load("x")
    dist.destroy_process_group()
    """
    assert "collective-in-rank-branch" not in names(pair)
    alone = pair.replace("        if dist.get_rank() == 0:\n            dist.barrier()\n", "")
    assert "collective-in-rank-branch" in names(alone)


def test_rank0_forward_before_the_ddp_wrap_is_the_bare_module():
    """A rank-0-only forward through `model` before `model = DDP(model)` is no broadcast; the same after the wrap
    hangs the others (docs/lint.md: rank0-ddp-forward)."""
    before = """
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    if dist.get_rank() == 0:
        model(torch.ones(4, 2))
    model = DDP(model)
    model(torch.ones(4, 2)).sum().backward()
    dist.destroy_process_group()
    """
    assert "rank0-ddp-forward" not in names(before, show_all=True)
    lines = before.splitlines()
    wrap = lines.index("    model = DDP(model)")
    after = "\n".join(lines[: wrap - 2] + [lines[wrap]] + lines[wrap - 2 : wrap] + lines[wrap + 1 :])
    assert "rank0-ddp-forward" in names(after)


# ----------------------------------------------------------------- issue 28, fourth pass (was test_lint_mechanisms4.py)


EARLY = """
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
best = 1e9
for epoch in range(10):
    loss = model(torch.ones(2, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        val = loss.item()
        if val < best:
            best = val
        else:
            break
dist.destroy_process_group()
"""


def test_break_deep_under_a_rank0_test_leaves_the_others_waiting():
    """`if rank == 0: ... if val < best: ... else: break`: rank 0 leaves the epoch loop, the others go on to the
    next backward's all-reduce and wait."""
    assert "rank0-early-exit" in names_time(EARLY)


def test_break_decided_on_every_rank_or_in_an_inner_loop_is_quiet():
    """The same stop decided by every rank (no rank test around the break), or a break that only leaves rank 0's own
    inner loop (a preview over a few samples), leaves no one waiting."""
    everyone = EARLY.replace("    if rank == 0:\n        val = loss.item()", "    if True:\n        val = loss.item()")
    assert "rank0-early-exit" not in names_time(everyone, show_all=True)
    inner = EARLY.replace(
        "        if val < best:\n            best = val\n        else:\n            break\n",
        "        for i in range(3):\n            if i > val:\n                break\n",
    )
    assert "rank0-early-exit" not in names_time(inner, show_all=True)


HELPER_COLLECTIVE = """
from torch.nn.parallel import DistributedDataParallel as DDP

def reduce_mean(t):
    t = t.clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()

def evaluate(model):
    with torch.no_grad():
        loss = model.module(torch.ones(2, 4)).pow(2).mean()
    return reduce_mean(loss).item()

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
for epoch in range(3):
    model(torch.ones(2, 4)).sum().backward()
    if rank == 0:
        val = evaluate(model)
        print(f"val {val}")
dist.destroy_process_group()
"""


def test_collective_two_helpers_down_from_a_rank0_test():
    """`if rank == 0: evaluate(model)` where evaluate calls reduce_mean, which runs all_reduce: rank 0 waits in the
    all_reduce for ranks that never call it (reported at the guarded call)."""
    found = [
        f
        for f in lint_source(HEAD_TIME + textwrap.dedent(HELPER_COLLECTIVE)).findings
        if f.rule == "collective-in-rank-branch"
    ]
    assert [f.line for f in found] == [24]


def test_helper_with_a_collective_called_on_every_rank_is_quiet():
    """The same evaluation on every rank, the print alone under the rank test."""
    everyone = HELPER_COLLECTIVE.replace(
        "    if rank == 0:\n        val = evaluate(model)\n", "    val = evaluate(model)\n    if rank == 0:\n"
    )
    assert "collective-in-rank-branch" not in names_time(everyone, show_all=True)


BN_MODELS = """
import torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(4)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(4, 1)
"""


BN_TRAIN = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from models import Net

dist.init_process_group("gloo")
model = DDP(Net())
for epoch in range(2):
    model(torch.ones(2, 4)).sum().backward()
    if dist.get_rank() == 0:
        with torch.no_grad():
            print(model(torch.ones(2, 4)).mean().item())
dist.destroy_process_group()
"""


def test_rank0_forward_of_a_project_model_with_batchnorm_in_another_module(tmp_path):
    """Net (models.py) holds a Block that holds BatchNorm1d: its buffers are broadcast in DDP's forward, so rank 0
    alone evaluating through the wrapper hangs."""
    script = _write(tmp_path / "a", {"train.py": BN_TRAIN, "models.py": BN_MODELS})
    from lintcase import lint_file

    assert "rank0-ddp-forward" in [f.rule for f in lint_file(script).findings]


def test_rank0_forward_of_a_project_model_without_buffers_is_quiet(tmp_path):
    """The same model with LayerNorm (parameters, no buffers): nothing to broadcast, no hang."""
    script = _write(tmp_path / "b", {"train.py": BN_TRAIN, "models.py": BN_MODELS.replace("BatchNorm1d", "LayerNorm")})
    from lintcase import lint_file

    assert "rank0-ddp-forward" not in [f.rule for f in lint_file(script, show_all=True).findings]


def test_buffer_made_only_under_a_condition_is_no_evidence(tmp_path):
    """nanoGPT's attention registers its causal mask only `if not self.flash` (no buffer on torch >= 2): a rank-0
    evaluation through the wrapper of such a model is left alone; the same buffer made unconditionally is reported."""
    attention = BN_MODELS.replace(
        "self.norm = nn.BatchNorm1d(4)",
        "self.flash = True\n        if not self.flash:\n            self.register_buffer('bias', torch.ones(4))",
    )
    attention = "import torch\n" + attention
    script = _write(tmp_path / "c", {"train.py": BN_TRAIN, "models.py": attention})
    from lintcase import lint_file

    assert "rank0-ddp-forward" not in [f.rule for f in lint_file(script, show_all=True).findings]
    always = attention.replace(
        "        if not self.flash:\n            self.register_buffer", "        self.register_buffer"
    )
    script = _write(tmp_path / "d", {"train.py": BN_TRAIN, "models.py": always})
    assert "rank0-ddp-forward" in [f.rule for f in lint_file(script).findings]


ENGINE = """
import torch
import torch.distributed as dist

def evaluate(model, x):
    with torch.no_grad():
        loss = model(x).pow(2).mean()
    dist.all_reduce(loss)
    return loss.item() / dist.get_world_size()
"""


ENGINE_MAIN = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from engine import evaluate

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(4, 1))
for epoch in range(2):
    model(torch.ones(2, 4)).sum().backward()
    if dist.get_rank() == 0:
        print(evaluate(model.module, torch.ones(2, 4)))
dist.destroy_process_group()
"""


def test_collective_in_a_module_function_the_script_calls_on_rank0_only(tmp_path):
    """engine.evaluate all-reduces; the script calls it only under `dist.get_rank() == 0`: reported at that call."""
    script = _write(tmp_path / "e", {"train.py": ENGINE_MAIN, "engine.py": ENGINE})
    from lintcase import lint_file

    found = [(f.path, f.line) for f in lint_file(script).findings if f.rule == "collective-in-rank-branch"]
    assert found == [(None, 12)]


def test_collective_in_a_module_function_called_on_every_rank_is_quiet(tmp_path):
    """The same evaluation on every rank, the print alone under the test."""
    everyone = ENGINE_MAIN.replace(
        "    if dist.get_rank() == 0:\n        print(evaluate(model.module, torch.ones(2, 4)))",
        "    val = evaluate(model.module, torch.ones(2, 4))\n    if dist.get_rank() == 0:\n        print(val)",
    )
    script = _write(tmp_path / "f", {"train.py": everyone, "engine.py": ENGINE})
    from lintcase import lint_file

    assert "collective-in-rank-branch" not in [f.rule for f in lint_file(script, show_all=True).findings]


# ------------------------------------------------------------------ issue 28, sixth pass (was test_lint_mechanisms6.py)


def test_module_function_handed_to_spawn_runs_on_every_rank(tmp_path):
    """`mp.spawn(main, ...)` in the script with `else: main(0, 1)` as the one-GPU fallback: main still runs on
    every rank, so what it does under its own rank test is judged as sure."""
    (tmp_path / "train_module.py").write_text(
        HEAD
        + textwrap.dedent("""
    def main(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        for epoch in range(10):
            for x in range(3):
                model(torch.ones(2)).sum().backward()
            if rank == 0:
                if epoch > 5:
                    break
        dist.destroy_process_group()
    """)
    )
    script = textwrap.dedent("""
    import torch
    from train_module import main

    if __name__ == '__main__':
        n = torch.cuda.device_count()
        if n > 1:
            torch.multiprocessing.spawn(main, args=(n,), nprocs=n)
        else:
            main(0, 1)
    """)
    (tmp_path / "run.py").write_text(script)
    assert "rank0-early-exit" in [f.rule for f in lint_file(tmp_path / "run.py").findings]
    # the workers run another function: main runs only in the one-process fallback, the parent
    (tmp_path / "run.py").write_text(
        script.replace("spawn(main,", "spawn(other,").replace(
            "if __name__", "def other(rank, n):\n    pass\n\nif __name__"
        )
    )
    assert "rank0-early-exit" not in [f.rule for f in lint_file(tmp_path / "run.py").findings]


def test_gpu_option_is_not_a_device_index_test():
    """`if cfg.gpu:` is an on/off option: the collectives under it run on every rank that takes it. A device index
    known from its assignment (`gpu = int(os.environ['LOCAL_RANK'])`) still reads `if gpu:` as `gpu != 0`."""
    src = """
    class C:
        gpu = True
    cfg = C()
    dist.init_process_group("gloo")
    t = torch.ones(1)
    if cfg.gpu:
        dist.all_reduce(t)
    dist.destroy_process_group()
    """
    assert "collective-in-rank-branch" not in names(src)
    held = src.replace("t = torch.ones(1)", "gpu = int(os.environ['LOCAL_RANK'])\n    t = torch.ones(1)").replace(
        "if cfg.gpu:", "if gpu:"
    )
    assert "collective-in-rank-branch" in names(held)


def test_an_exit_under_a_flag_the_project_only_ever_sets_false_never_runs(tmp_path):
    """YOLOv5's and YOLOv9's train.py: `if RANK in {-1, 0}: ... if callbacks.stop_training: return` inside the
    batch loop, where utils/callbacks.py sets `self.stop_training = False  # set True to interrupt training` and
    nothing in the project sets it True: the return never runs. Once some file sets it True, it is rank 0 leaving."""
    (tmp_path / "callbacks.py").write_text(
        textwrap.dedent("""
        class Callbacks:
            def __init__(self):
                self.stop_training = False  # set True to interrupt training

            def run(self, name, *args):
                pass
        """)
    )
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        from callbacks import Callbacks

        RANK = int(os.getenv("RANK", -1))

        def train(callbacks):
            dist.init_process_group("gloo")
            for epoch in range(3):
                for i in range(10):
                    t = torch.ones(1)
                    dist.all_reduce(t)
                    if RANK in {-1, 0}:
                        callbacks.run("on_train_batch_end", i)
                        if callbacks.stop_training:
                            return
            dist.destroy_process_group()

        train(Callbacks())
        """)
    )
    assert "rank0-early-exit" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    stopper = "\nclass Stopper:\n    def hit(self, cb):\n        cb.stop_training = True\n"
    (tmp_path / "callbacks.py").write_text((tmp_path / "callbacks.py").read_text() + stopper)
    assert "rank0-early-exit" in [f.rule for f in lint_file(tmp_path / "train.py").findings]
