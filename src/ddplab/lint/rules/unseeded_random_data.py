"""`unseeded-random-data`: a dataset (or the tensors a training loop uses) drawn from an unseeded generator."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="unseeded-random-data",
    severity=BUG,
    what="a dataset (or the tensors a training loop uses) drawn from an unseeded generator",
    why="each rank draws a different dataset: the ranks do not train on shards of one set",
    example="x = torch.randn(1000, 2)",
    fix="`torch.manual_seed(0)` first, or draw from `g = torch.Generator().manual_seed(0)`",
    observed="the same samples on several ranks",
    check=Checks.check_random_data,
    opt_in="shown with --all only: whether the ranks draw different data shows in a run",
    fires=(
        """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
x = torch.randn(64, 2)
y = 2 * x + 1
model = DDP(torch.nn.Linear(2, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
x = torch.randn(64, 2)
y = 2 * x + 1
model = DDP(torch.nn.Linear(2, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
""",
    ),
    in_modules=False,
)
