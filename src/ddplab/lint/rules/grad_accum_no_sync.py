"""`grad-accum-no-sync`: gradient accumulation (a `% k` step, or an inner backward loop) without `no_sync()` / `require_backward_grad_sync`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="grad-accum-no-sync",
    severity=BUG,
    what="gradient accumulation (a `% k` step, or an inner backward loop) without `no_sync()` / `require_backward_grad_sync`",
    why="every backward all-reduces, though only the last of k is used: k-1 of k all-reduces wasted",
    example="loss.backward()\nif (i + 1) % accum == 0: opt.step()",
    fix="run the micro-steps but the last inside `with model.no_sync():`",
    check=Checks.check_grad_accumulation,
    opt_in="shown with --all only: whether the accumulation takes more than one step depends on the configuration",
    fires=(
        """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
model = DDP(torch.nn.Linear(2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
accum = 4
for epoch in range(2):
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        torch.nn.functional.mse_loss(model(x), y).backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
model = DDP(torch.nn.Linear(2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
import contextlib

sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
accum = 4
for epoch in range(2):
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        last = (i + 1) % accum == 0
        with contextlib.nullcontext() if last else model.no_sync():
            torch.nn.functional.mse_loss(model(x), y).backward()
        if last:
            opt.step()
            opt.zero_grad()
dist.destroy_process_group()
""",
    ),
    whole_project=True,
)
