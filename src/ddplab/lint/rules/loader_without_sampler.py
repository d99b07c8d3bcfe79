"""`loader-without-sampler`: a training `DataLoader(shuffle=True)` without a DistributedSampler."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="loader-without-sampler",
    severity=BUG,
    what="a training `DataLoader(shuffle=True)` without a DistributedSampler",
    why="every rank reads all the data: N times the work for one pass, and no rank sees a shard",
    example="loader = DataLoader(ds, batch_size=8, shuffle=True)",
    fix="`DataLoader(dataset, sampler=DistributedSampler(dataset))` and `sampler.set_epoch(epoch)` every epoch",
    observed="the same samples on several ranks",
    check=Checks.check_loader_without_sampler,
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
loader = DataLoader(ds, batch_size=8, shuffle=True)
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
