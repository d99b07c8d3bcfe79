"""`sampler-no-set-epoch`: a DistributedSampler whose `set_epoch(epoch)` is never called."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="sampler-no-set-epoch",
    severity=BUG,
    what="a DistributedSampler whose `set_epoch(epoch)` is never called",
    why="every epoch is shuffled the same way: the model sees the same order each time",
    example="for epoch in range(n): for x, y in loader: ...  # no sampler.set_epoch(epoch)",
    fix="call `sampler.set_epoch(epoch)` at the start of every epoch",
    observed="an epoch repeating the last one's order",
    check=Checks.check_sampler,
    opt_in="shown with --all only: whether the sampler shuffles and the loop runs several epochs shows in a run",
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
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
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
sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
dist.destroy_process_group()
""",
    ),
    in_modules=False,
)
