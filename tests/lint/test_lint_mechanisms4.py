"""Issue 28, fourth pass over the tuning sets (2 and 3): each miss or false alarm fixed as a mechanism, with a minimal
script that shows it and its twin that must behave the other way."""

from __future__ import annotations

import textwrap

from ddplab.lint import lint_source

HEAD = "import os\nimport time\nimport torch\nimport torch.distributed as dist\n"


def names(source: str, show_all: bool = False) -> list[str]:
    """The rule of each finding; the source is dedented and put after HEAD."""
    return sorted(f.rule for f in lint_source(HEAD + textwrap.dedent(source), show_all=show_all).findings)


# ------------------------------------------------------------------------------------------- unreduced metric

METER = """
from torch.utils.data import DataLoader, DistributedSampler
from torch.nn.parallel import DistributedDataParallel as DDP

class AverageMeter:
    def __init__(self):
        self.sum = self.count = 0
    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

def train(loader, model, optimizer, rank):
    batch_time = AverageMeter()
    losses = AverageMeter()
    end = time.time()
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.update(loss.item(), x.size(0))
        batch_time.update(time.time() - end)
        if rank == 0:
            print("loss {loss.avg:.3f}".format(loss=losses))

dist.init_process_group("gloo")
ds = torch.utils.data.TensorDataset(torch.zeros(8, 2), torch.zeros(8, 1))
loader = DataLoader(ds, sampler=DistributedSampler(ds))
model = DDP(torch.nn.Linear(2, 1))
train(loader, model, torch.optim.SGD(model.parameters(), 0.1), dist.get_rank())
dist.destroy_process_group()
"""


def test_running_meter_shown_on_rank0_is_one_shard():
    """`losses.update(loss.item(), n)` on an AverageMeter in a loop over this rank's batches, shown under a rank-0
    test: the meter is a sum in an object, 1/N of the data."""
    assert "unreduced-metric" in names(METER)


def test_meter_of_reduced_value_or_timer_is_quiet():
    """The same meter fed a value that came out of a reducer (`reduced = reduce_tensor(loss)`) holds the whole; a
    timer meter (`batch_time.update(time.time() - end)`) is no metric."""
    reduced = METER.replace("        losses.update(loss.item(), x.size(0))\n",
                            "        reduced = reduce_tensor(loss.detach())\n"
                            "        losses.update(reduced.item(), x.size(0))\n")
    reduced = "def reduce_tensor(t):\n    dist.all_reduce(t)\n    return t / dist.get_world_size()\n" + reduced
    assert "unreduced-metric" not in names(reduced, show_all=True)
    timer_only = METER.replace('print("loss {loss.avg:.3f}".format(loss=losses))',
                               'print("time {t.avg:.3f}".format(t=batch_time))')
    assert "unreduced-metric" not in names(timer_only, show_all=True)


# ------------------------------------------------------------------------------------------- backend

def test_backend_chosen_by_operating_system_is_nccl_on_linux():
    """`'gloo' if os.name == 'nt' else 'nccl'`: the choice is by OS, not by CUDA; a Linux machine without GPUs gets
    nccl. The same choice by `torch.cuda.is_available()` is the fix."""
    by_os = """
    def init():
        backend = 'gloo' if os.name == 'nt' else 'nccl'
        dist.init_process_group(backend=backend, init_method='env://')
    init()
    dist.destroy_process_group()
    """
    assert "nccl-hardcoded" in names(by_os)
    inline = by_os.replace("backend=backend", "backend='gloo' if sys.platform.startswith('win') else 'nccl'")
    assert "nccl-hardcoded" in names(inline.replace("def init():", "import sys\n    def init():"))
    by_cuda = by_os.replace("os.name == 'nt'", "not torch.cuda.is_available()")
    assert "nccl-hardcoded" not in names(by_cuda, show_all=True)
    gloo_on_linux = by_os.replace("'gloo' if os.name == 'nt' else 'nccl'", "'nccl' if os.name == 'nt' else 'gloo'")
    assert "nccl-hardcoded" not in names(gloo_on_linux, show_all=True)


# ------------------------------------------------------------------------------------------- shared writes

LOG_HELPERS = """
import os

def setup_logging(save_path, run_name):
    results_dir = os.path.join(save_path, run_name)
    os.makedirs(results_dir, exist_ok=True)
    return [save_path, results_dir]

def save_train_logging(arg, save_path):
    with open(f"{save_path}/train.log", "a") as f:
        f.write(f"{arg}\\n")
"""

LOG_MAIN = """
import argparse
import torch
import torch.distributed as dist
from utils import setup_logging, save_train_logging

def train(args):
    dist.init_process_group("gloo")
    results_logging = setup_logging(save_path=args.result_path, run_name=args.run_name)
    results_dir = results_logging[1]
    save_train_logging(arg=args, save_path=results_dir)
    dist.destroy_process_group()

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--result_path", default="results")
    parser.add_argument("--run_name", default="run")
    train(parser.parse_args())
"""


def _write(folder, files):
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder / "train.py"


def _shared(path, show_all=False):
    from ddplab.lint import lint_file
    return [(f.line, f.confidence) for f in lint_file(path, show_all=show_all).findings
            if f.rule == "shared-path-write"]


def test_path_parameter_given_a_config_path_through_a_helper_is_shared(tmp_path):
    """`save_train_logging(save_path=results_dir)` where results_dir = setup_logging(args.result_path, ...)[1]:
    by data flow in the caller the path is the same on every rank, so the helper's append is a race (sure)."""
    script = _write(tmp_path / "a", {"train.py": LOG_MAIN, "utils.py": LOG_HELPERS})
    assert [c for _, c in _shared(script)] == ["sure"]


def test_path_parameter_stamped_per_process_stays_possible(tmp_path):
    """The same call where the helper stamps the folder with the clock, or the caller passes the rank's own folder:
    the paths may differ per rank, so the finding stays possible (hidden by default)."""
    stamped = LOG_HELPERS.replace("os.path.join(save_path, run_name)",
                                  "os.path.join(save_path, run_name + time.strftime('%H%M%S'))")
    script = _write(tmp_path / "b", {"train.py": LOG_MAIN, "utils.py": "import time\n" + stamped})
    assert _shared(script) == [] and [c for _, c in _shared(script, show_all=True)] == ["possible"]
    per_rank = LOG_MAIN.replace("results_dir = results_logging[1]",
                                "results_dir = os.path.join(results_logging[1], str(dist.get_rank()))")
    script = _write(tmp_path / "c", {"train.py": "import os\n" + per_rank, "utils.py": LOG_HELPERS})
    assert _shared(script) == []


VAL_STEPS = """
from torch.nn.parallel import DistributedDataParallel as DDP

def print0(*args):
    if int(os.environ.get("RANK", 0)) == 0:
        print(*args)

class ShardLoader:
    def __init__(self, path, rank, world):
        self.data = torch.load(path, map_location="cpu")[rank::world]
        self.i = 0
    def next_batch(self):
        self.i += 1
        return self.data[self.i - 1]

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
val_loader = ShardLoader("val.pt", rank, dist.get_world_size())
steps = 0
for step in range(100):
    with torch.no_grad():
        val_loss = 0.0
        for _ in range(20):
            x, y = val_loader.next_batch()
            val_loss += (model(x) - y).pow(2).mean().item()
            steps += 1
        val_loss /= 20
    torch.cuda.synchronize()
    if steps % 100 == 0:
        print0(f"step {step} steps {steps} val loss {val_loss}")
dist.destroy_process_group()
"""


def test_val_loss_over_next_batch_steps_shown_by_rank0_helper():
    """`for _ in range(n): x, y = val_loader.next_batch(); val_loss += ...` over a loader built with the rank,
    shown by `print0` (a helper that prints only where RANK is 0): one shard's loss as the whole validation loss.
    `torch.cuda.synchronize()` waits for this GPU and reduces nothing."""
    assert "unreduced-metric" in names(VAL_STEPS)


def test_val_loss_all_reduced_or_step_counter_is_quiet():
    """The same loss all-reduced before print0 is the whole; a step counter (`steps += 1`, used as a step index in
    `steps % 100`) shown alone is no metric, nor is a time or a rate over time."""
    reduced = VAL_STEPS.replace("        val_loss /= 20\n",
                                "        val_loss /= 20\n"
                                "        t = torch.tensor(val_loss)\n"
                                "        dist.all_reduce(t)\n"
                                "        val_loss = t.item() / dist.get_world_size()\n")
    assert "unreduced-metric" not in names(reduced, show_all=True)
    counter = VAL_STEPS.replace(' val loss {val_loss}"', '"')
    assert "unreduced-metric" not in names(counter, show_all=True)
    timed = VAL_STEPS.replace("        val_loss /= 20\n", "        val_loss /= 20\n        t0 = time.time()\n") \
        .replace("            steps += 1\n", "            steps += 1\n            wait += time.time() - t0\n") \
        .replace("steps = 0\n", "steps = 0\nwait = 0.0\n").replace(' val loss {val_loss}"', ' rate {steps / wait}"')
    assert "unreduced-metric" not in names(timed, show_all=True)


# ------------------------------------------------------------------------------------------- endless generators

ENDLESS = """
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

def cycle(dl):
    while True:
        for batch in dl:
            yield batch

def main():
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    data = cycle(loader)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0.0
    for step in range(1000):
        x, y = next(data)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        if dist.get_rank() == 0:
            print(f"loss {total / (step + 1)}")
    dist.destroy_process_group()

main()
"""


def test_batches_from_an_endless_generator_over_the_loader():
    """`data = cycle(loader)`, `next(data)` in a step loop: the batches are this rank's shard, so a running loss
    shown on rank 0 is 1/N of the data; and every restart of the `while True` is a new pass over the sampler, whose
    set_epoch nobody calls (reported at the sampler: there is no epoch loop)."""
    found = names(ENDLESS)
    assert "unreduced-metric" in found and "sampler-no-set-epoch" in found


def test_endless_generator_twins_are_quiet():
    """The loss all-reduced before it is shown; the generator counting its passes into set_epoch; a single pass
    over the loader with no outer loop: nothing to report."""
    reduced = ENDLESS.replace("        total += loss.item()\n",
                 "        t = loss.detach().clone()\n        dist.all_reduce(t)\n        total += t.item()\n")
    assert "unreduced-metric" not in names(reduced, show_all=True)
    counted = ENDLESS.replace("def cycle(dl):\n    while True:\n",
                              "def cycle(dl):\n    epoch = 0\n    while True:\n"
                              "        dl.sampler.set_epoch(epoch)\n        epoch += 1\n")
    assert "sampler-no-set-epoch" not in names(counted, show_all=True)
    one_pass = ENDLESS.replace("    while True:\n        for batch in dl:\n            yield batch\n",
                               "    for batch in dl:\n        yield batch\n")
    assert "sampler-no-set-epoch" not in names(one_pass, show_all=True)


# ------------------------------------------------------------------------------------------- rank-0 early exit

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
    assert "rank0-early-exit" in names(EARLY)


def test_break_decided_on_every_rank_or_in_an_inner_loop_is_quiet():
    """The same stop decided by every rank (no rank test around the break), or a break that only leaves rank 0's own
    inner loop (a preview over a few samples), leaves no one waiting."""
    everyone = EARLY.replace("    if rank == 0:\n        val = loss.item()", "    if True:\n        val = loss.item()")
    assert "rank0-early-exit" not in names(everyone, show_all=True)
    inner = EARLY.replace("        if val < best:\n            best = val\n        else:\n            break\n",
                          "        for i in range(3):\n            if i > val:\n                break\n")
    assert "rank0-early-exit" not in names(inner, show_all=True)


# ------------------------------------------------------------------------------------------- global rank as the GPU

GLOBAL_GPU = """
from torch.nn.parallel import DistributedDataParallel as DDP

def build(model, device):
    model = model.to(device)
    return DDP(model, device_ids=[device])

dist.init_process_group("nccl")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = build(torch.nn.Linear(4, 1), rank)
x = torch.ones(2, 4).to(f"cuda:{rank}")
dist.destroy_process_group()
"""


def test_global_rank_through_a_helper_parameter_and_cuda_fstring():
    """`build(model, rank)` where build does DDP(device_ids=[device]) and .to(device), and .to(f"cuda:{rank}"): the
    global rank picks the GPU by data flow (through the parameter every call fills with it). A `.to()` of a rank
    already reported at its DDP/set_device use is that same mistake, not another (`model.to(device)` in build)."""
    lines = sorted(f.line for f in lint_source(HEAD + textwrap.dedent(GLOBAL_GPU)).findings
                   if f.rule == "global-rank-device-ids")
    assert lines == [10, 17]


def test_local_rank_through_the_same_helper_is_quiet():
    """The same helper given the local rank, and .to(f"cuda:{local_rank}"): the GPU of this machine."""
    local = GLOBAL_GPU.replace("build(torch.nn.Linear(4, 1), rank)", "build(torch.nn.Linear(4, 1), local_rank)") \
        .replace('f"cuda:{rank}"', 'f"cuda:{local_rank}"')
    assert "global-rank-device-ids" not in names(local, show_all=True)



# ------------------------------------------------------------------------------------------- trainer attributes

TRAINER = """
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class Trainer:
    def __init__(self, model, train_data, optimizer):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])
        self.train_data = train_data
        self.optimizer = optimizer
        self.epoch_loss = 0.0

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        self.epoch_loss = 0.0
        for source, targets in self.train_data:
            self.epoch_loss += self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))
        if self.gpu_id == 0:
            print(f"Epoch {epoch} | loss {self.epoch_loss / len(self.train_data)}")


dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
model = torch.nn.Linear(4, 1)
trainer = Trainer(model, DataLoader(ds, sampler=DistributedSampler(ds)), torch.optim.SGD(model.parameters(), 0.1))
for epoch in range(5):
    trainer._run_epoch(epoch)
dist.destroy_process_group()
"""


def test_sum_kept_in_a_trainer_attribute_is_one_shard():
    """`self.epoch_loss += self._run_batch(...)` over this rank's batches, printed under `gpu_id == 0`: a sum kept
    in an attribute is as much one shard's as a local one."""
    assert "unreduced-metric" in names(TRAINER)


def test_trainer_attribute_reduced_first_is_quiet():
    """The same attribute all-reduced (through a tensor) before the print is the whole."""
    reduced = TRAINER.replace("        if self.gpu_id == 0:\n",
                              "        t = torch.tensor([self.epoch_loss])\n        dist.all_reduce(t)\n"
                              "        if self.gpu_id == 0:\n") \
        .replace("loss {self.epoch_loss / len(self.train_data)}", "loss {t.item() / len(self.train_data)}")
    assert "unreduced-metric" not in names(reduced, show_all=True)


# ------------------------------------------------------------------------------------------- scaled twice

SCALED_HELPER = """
import argparse

def get_lr(args, world_size):
    return args.lr * world_size

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
args = p.parse_args()
dist.init_process_group("gloo")
world_size = dist.get_world_size()
args.lr = args.lr * world_size
lr = get_lr(args, world_size)
dist.destroy_process_group()
"""


def test_lr_scaled_again_inside_a_helper():
    """`args.lr = args.lr * world_size`, then `lr = get_lr(args, world_size)` whose return multiplies args.lr by the
    world size again: scaled twice."""
    assert "world-size-scaled-twice" in names(SCALED_HELPER)


def test_lr_scaled_once_by_the_helper_is_quiet():
    """The helper alone scales it once."""
    once = SCALED_HELPER.replace("args.lr = args.lr * world_size\n", "")
    assert "world-size-scaled-twice" not in names(once, show_all=True)


LIST_MEAN = """
import numpy as np
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("gloo")
g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
train_loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    train_loader.sampler.set_epoch(epoch)
    losses = []
    for x, y in train_loader:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    avg = np.mean(losses)
    if dist.get_rank() == 0:
        print(f"epoch {epoch} loss {avg}")
dist.destroy_process_group()
"""


def test_losses_collected_in_a_list_and_averaged_on_rank0():
    """`losses.append(loss.item())` over this rank's batches, `avg = np.mean(losses)` shown on rank 0: a list is a
    sum kept item by item, one shard's."""
    assert "unreduced-metric" in names(LIST_MEAN)


def test_list_of_all_reduced_losses_is_quiet():
    """Each loss all-reduced in place before it is appended: the list holds whole values."""
    reduced = LIST_MEAN.replace("        losses.append(loss.item())\n",
                                "        t = loss.detach().clone()\n        dist.all_reduce(t)\n"
                                "        losses.append(t.item() / dist.get_world_size())\n")
    assert "unreduced-metric" not in names(reduced, show_all=True)


# ------------------------------------------------------------------------------------------- collectives in helpers

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
    found = [f for f in lint_source(HEAD + textwrap.dedent(HELPER_COLLECTIVE)).findings
             if f.rule == "collective-in-rank-branch"]
    assert [f.line for f in found] == [24]


def test_helper_with_a_collective_called_on_every_rank_is_quiet():
    """The same evaluation on every rank, the print alone under the rank test."""
    everyone = HELPER_COLLECTIVE.replace("    if rank == 0:\n        val = evaluate(model)\n",
                                         "    val = evaluate(model)\n    if rank == 0:\n")
    assert "collective-in-rank-branch" not in names(everyone, show_all=True)


# ------------------------------------------------------------------------------------------- buffers in another module

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
    from ddplab.lint import lint_file
    assert "rank0-ddp-forward" in [f.rule for f in lint_file(script).findings]


def test_rank0_forward_of_a_project_model_without_buffers_is_quiet(tmp_path):
    """The same model with LayerNorm (parameters, no buffers): nothing to broadcast, no hang."""
    script = _write(tmp_path / "b", {"train.py": BN_TRAIN, "models.py": BN_MODELS.replace("BatchNorm1d", "LayerNorm")})
    from ddplab.lint import lint_file
    assert "rank0-ddp-forward" not in [f.rule for f in lint_file(script, show_all=True).findings]


# ------------------------------------------------------------------------------------------- print filter order

FILTER_ORDER = """
import builtins

def setup_for_distributed(is_master):
    builtin_print = builtins.print
    def filtered(*args, **kwargs):
        if is_master or kwargs.pop("force", False):
            builtin_print(*args, **kwargs)
    builtins.print = filtered

def init_dist_and_get_args(extra):
    dist.init_process_group("gloo")
    if extra:
        print("WARNING: unexpected extra args", extra)
    setup_for_distributed(dist.get_rank() == 0)

def main():
    init_dist_and_get_args(os.environ.get("EXTRA"))
    print("training starts")
    dist.destroy_process_group()

main()
"""


def test_print_before_the_filter_is_installed_runs_on_every_rank():
    """The print filter (`builtins.print = ...`) is installed by setup_for_distributed at the end of
    init_dist_and_get_args: the warning printed before it, in the same function, comes from every rank."""
    found = [f for f in lint_source(HEAD + textwrap.dedent(FILTER_ORDER)).findings if f.rule == "unguarded-print"]
    assert [f.line for f in found] == [18] and not found[0].also


def test_print_after_the_filter_is_installed_is_quiet():
    """The same warning printed after setup_for_distributed goes through the filter (rank 0 only)."""
    after = FILTER_ORDER.replace('        print("WARNING: unexpected extra args", extra)\n    setup_for_distributed('
                                 'dist.get_rank() == 0)\n',
                                 '        pass\n    setup_for_distributed(dist.get_rank() == 0)\n'
                                 '    print("WARNING: unexpected extra args", extra)\n')
    assert "unguarded-print" not in names(after, show_all=True)



# ------------------------------------------------------------------------------------------- a correct script

CORRECT = """
import os
import time
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class AverageMeter:
    def __init__(self):
        self.sum = self.count = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

    def all_reduce(self):
        t = torch.tensor([self.sum, self.count], dtype=torch.float64)
        dist.all_reduce(t)
        self.sum, self.count = t.tolist()

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def print0(*a):
    if dist.get_rank() == 0:
        print(*a)


def cycle(loader, sampler):
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def validate(model, loader, device):
    top1 = AverageMeter()
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            out = model(x.to(device))
            top1.update((out.argmax(1) == y.to(device)).float().mean().item(), x.size(0))
    top1.all_reduce()
    return top1.avg


def main():
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randint(0, 2, (256,), generator=g))
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=16, sampler=sampler)
    val_loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds, shuffle=False))
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).to(device),
                device_ids=[local_rank] if torch.cuda.is_available() else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
    data = cycle(loader, sampler)
    losses = AverageMeter()
    start = time.time()
    steps = 0
    for step in range(200):
        x, y = next(data)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.update(t.item() / dist.get_world_size(), x.size(0))
        if step % 50 == 0:
            print0(f"step {step} loss {losses.avg:.3f} {steps / (time.time() - start):.1f} it/s")
        if step % 100 == 0:
            acc = validate(model, val_loader, device)
            print0(f"val acc {acc:.3f}")
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "ckpt.pt")
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_script_with_meters_generators_and_rates_is_quiet():
    """Every idiom above done right: the loss all-reduced in place before the meter, the validation meter reduced by
    its own all_reduce, set_epoch inside the endless generator, a speed (steps / elapsed time) beside the loss, the
    evaluation on every rank: no finding at all."""
    assert names(CORRECT, show_all=True) == []


def test_correct_script_with_the_unreduced_loss_in_the_meter():
    """The twin: the meter fed this rank's own loss.item() is one shard's running loss, shown by print0."""
    wrong = CORRECT.replace("losses.update(t.item() / dist.get_world_size(), x.size(0))",
                            "losses.update(loss.item(), x.size(0))")
    assert names(wrong) == ["unreduced-metric"]



CORRECT_TRAINER = """
import os
import numpy as np
import torch
import torch.nn.functional as F
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        self.step = 0

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        losses = []
        self.epoch_loss = torch.zeros(1, device=self.gpu_id)
        for source, targets in self.train_data:
            loss = self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))
            self.epoch_loss += loss
            self.step += 1
            losses.append(loss)
        dist.all_reduce(self.epoch_loss)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, [l.item() for l in losses])
        if self.global_rank == 0:
            print(f"Epoch {epoch} | step {self.step} | loss {self.epoch_loss.item() / dist.get_world_size():.3f}")
            print(f"median loss {np.median([x for g in gathered for x in g]):.3f}")

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    ddp_setup()
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randint(0, 2, (256,), generator=g))
    loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds))
    model = torch.nn.Linear(4, 2)
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), 1, "snapshot.pt")
    trainer.train(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_trainer_with_reduced_attribute_and_gathered_list_is_quiet():
    """A trainer that all-reduces its epoch-loss attribute, all-gathers its list of losses, and shows its step
    counter (`self.step += 1`) beside them on rank 0: nothing unreduced."""
    assert names(CORRECT_TRAINER, show_all=True) == []


def test_trainer_attribute_not_reduced_is_reported():
    """The twin without the all_reduce of self.epoch_loss: one shard's loss shown as the epoch's."""
    wrong = CORRECT_TRAINER.replace("        dist.all_reduce(self.epoch_loss)\n", "")
    assert names(wrong) == ["unreduced-metric"]



CORRECT_SPAWN = """
import os
import torch
import torch.nn as nn
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def evaluate(model, loader, device):
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            pred = model(x.to(device)).argmax(1)
            correct += (pred == y.to(device)).sum().item()
            total += y.numel()
    return correct / total


def worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world_size)
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randint(0, 2, (256,), generator=g))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank)
    loader = DataLoader(ds, batch_size=16, sampler=sampler)
    test_loader = DataLoader(ds, batch_size=64)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(device),
                device_ids=[rank] if torch.cuda.is_available() else None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        running = torch.zeros(1, device=device)
        n = 0
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.detach()
            n += 1
        dist.all_reduce(running)
        if rank == 0:
            acc = evaluate(model.module, test_loader, device)
            print(f"epoch {epoch} loss {running.item() / (n * world_size):.3f} acc {acc:.3f}")
            torch.save(model.module.state_dict(), "model.pt")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count() or 2
    mp.spawn(worker, args=(world_size,), nprocs=world_size)
"""


def test_correct_spawn_script_whole_test_set_and_batch_count_is_quiet():
    """Rank 0 evaluates `model.module` over a test loader with no sampler (the whole set, via a helper that returns
    correct / total), and shows the all-reduced running loss divided by its batch count times the world size."""
    assert names(CORRECT_SPAWN, show_all=True) == []


def test_spawn_script_evaluating_a_shard_or_unreduced_loss_is_reported():
    """The twins: the helper handed the training loader (this rank's DistributedSampler shard), or the running loss
    not all-reduced."""
    shard = CORRECT_SPAWN.replace("acc = evaluate(model.module, test_loader, device)",
                                  "acc = evaluate(model.module, loader, device)")
    assert names(shard) == ["unreduced-metric"]
    unreduced = CORRECT_SPAWN.replace("        dist.all_reduce(running)\n", "")
    assert names(unreduced) == ["unreduced-metric"]



CORRECT_OPTIONAL_DDP = """
import argparse
import contextlib
import os
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    args.local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.distributed:
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        args.rank = dist.get_rank()
    else:
        args.rank = 0
    device = torch.device("cuda", args.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randn(256, 1, generator=g))
    sampler = DistributedSampler(ds) if args.distributed else RandomSampler(ds)
    loader = DataLoader(ds, batch_size=16, sampler=sampler)
    model = nn.Linear(4, 1).to(device)
    if args.distributed:
        model = DDP(model, device_ids=[args.local_rank] if torch.cuda.is_available() else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available())
    for epoch in range(args.epochs):
        if args.distributed:
            sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % args.accum == 0
            ctx = model.no_sync() if args.distributed and not last else contextlib.nullcontext()
            with ctx:
                with torch.autocast(device.type, enabled=torch.cuda.is_available()):
                    loss = nn.functional.mse_loss(model(x.to(device)), y.to(device)) / args.accum
                scaler.scale(loss).backward()
            if last:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
        if args.rank == 0:
            state = model.module.state_dict() if args.distributed else model.state_dict()
            torch.save({"model": state, "epoch": epoch}, "last.pt")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_optional_ddp_script_is_quiet():
    """DDP only `if args.distributed:`, no_sync on the accumulation micro-steps, set_epoch, and
    `model.module.state_dict() if args.distributed else model.state_dict()`: on the else branch the model was never
    wrapped, so its state_dict is the plain one."""
    assert names(CORRECT_OPTIONAL_DDP, show_all=True) == []


def test_optional_ddp_script_saving_the_wrapper_is_reported():
    """The twin saving `model.state_dict()` on the distributed path too."""
    wrong = CORRECT_OPTIONAL_DDP.replace(
        "state = model.module.state_dict() if args.distributed else model.state_dict()",
        "state = model.state_dict()")
    assert names(wrong) == ["save-ddp-state-dict"]



CORRECT_SLURM = """
import os
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def setup():
    rank = int(os.environ["SLURM_PROCID"])
    world_size = int(os.environ["SLURM_NTASKS"])
    gpus_per_node = torch.cuda.device_count()
    local_rank = rank - gpus_per_node * (rank // gpus_per_node)
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world_size)
    return rank, local_rank, world_size


def main():
    assert torch.cuda.is_available()
    rank, local_rank, world_size = setup()
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randn(256, 1, generator=g))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank)
    loader = DataLoader(ds, batch_size=16, sampler=sampler, num_workers=2, pin_memory=True)
    model = DDP(nn.Linear(4, 1).to(local_rank), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    best = float("inf")
    for epoch in range(5):
        sampler.set_epoch(epoch)
        loss_sum = torch.zeros(2, device=local_rank)
        for x, y in loader:
            x, y = x.to(local_rank, non_blocking=True), y.to(local_rank, non_blocking=True)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += torch.stack([loss.detach() * x.size(0), torch.tensor(float(x.size(0)), device=local_rank)])
        dist.all_reduce(loss_sum)
        epoch_loss = (loss_sum[0] / loss_sum[1]).item()
        stop = torch.zeros(1, device=local_rank)
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_loss:.4f}")
            if epoch_loss < best:
                best = epoch_loss
                torch.save(model.module.state_dict(), "best.pt")
            elif epoch > 2:
                stop += 1
        dist.broadcast(stop, src=0)
        if stop.item() > 0:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_slurm_script_with_the_cuda_check_in_the_caller_is_quiet():
    """`assert torch.cuda.is_available()` in main, then setup() with nccl: the check precedes the group; the local
    rank from SLURM_PROCID modulo the GPUs, sums all-reduced, rank 0's stop decision broadcast before the break."""
    assert names(CORRECT_SLURM, show_all=True) == []


def test_slurm_script_without_an_availability_check_gets_nccl():
    """The twins: no check at all, or a check of the GPU count against the scheduler's (not that GPUs exist)."""
    none = CORRECT_SLURM.replace("    assert torch.cuda.is_available()\n", "")
    assert names(none) == ["nccl-hardcoded"]
    count = CORRECT_SLURM.replace("    assert torch.cuda.is_available()\n",
                                  "    assert int(os.environ['SLURM_GPUS_ON_NODE']) == torch.cuda.device_count()\n")
    assert names(count) == ["nccl-hardcoded"]


def test_buffer_made_only_under_a_condition_is_no_evidence(tmp_path):
    """nanoGPT's attention registers its causal mask only `if not self.flash` (no buffer on torch >= 2): a rank-0
    evaluation through the wrapper of such a model is left alone; the same buffer made unconditionally is reported."""
    attention = BN_MODELS.replace("self.norm = nn.BatchNorm1d(4)",
                                  "self.flash = True\n        if not self.flash:\n"
                                  "            self.register_buffer('bias', torch.ones(4))")
    attention = "import torch\n" + attention
    script = _write(tmp_path / "c", {"train.py": BN_TRAIN, "models.py": attention})
    from ddplab.lint import lint_file
    assert "rank0-ddp-forward" not in [f.rule for f in lint_file(script, show_all=True).findings]
    always = attention.replace("        if not self.flash:\n            self.register_buffer",
                               "        self.register_buffer")
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
    from ddplab.lint import lint_file
    found = [(f.path, f.line) for f in lint_file(script).findings if f.rule == "collective-in-rank-branch"]
    assert found == [(None, 12)]


def test_collective_in_a_module_function_called_on_every_rank_is_quiet(tmp_path):
    """The same evaluation on every rank, the print alone under the test."""
    everyone = ENGINE_MAIN.replace("    if dist.get_rank() == 0:\n        print(evaluate(model.module, torch.ones(2, 4)))",
                                   "    val = evaluate(model.module, torch.ones(2, 4))\n"
                                   "    if dist.get_rank() == 0:\n        print(val)")
    script = _write(tmp_path / "f", {"train.py": everyone, "engine.py": ENGINE})
    from ddplab.lint import lint_file
    assert "collective-in-rank-branch" not in [f.rule for f in lint_file(script, show_all=True).findings]


# ------------------------------------------------------------------------------------------- spawn through a helper

def test_the_main_block_that_hands_its_worker_to_a_project_spawner_runs_once(tmp_path):
    from test_lint_project import found, write
    utils = ("import torch.multiprocessing as mp\n\ndef run(fn, world_size):\n"
             "    mp.spawn(fn, args=(world_size,), nprocs=world_size, join=True)\n")
    train = ("import torch\nimport torch.distributed as dist\nimport utils\n\n"
             "def worker(rank, world_size):\n"
             "    dist.init_process_group('gloo', rank=rank, world_size=world_size)\n\n"
             "if __name__ == '__main__':\n    print('starting')\n    utils.run(worker, 2)\n")
    spawner = write(tmp_path / "a", {"train.py": train, "utils.py": utils})
    assert not [f for f in found(spawner) if f[2] == "unguarded-print"]
    # quiet twin the other way: the helper does not spawn, so the block runs on every launched rank
    plain = write(tmp_path / "b", {"train.py": train, "utils.py": "def run(fn, world_size):\n    fn(0, world_size)\n"})
    assert [f for f in found(plain) if f[2] == "unguarded-print"]
