"""`rank0-ddp-forward`: a forward through the DDP wrapper on rank 0 only, for a module with buffers (BatchNorm, `register_buffer`)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="rank0-ddp-forward",
    severity=BUG,
    what="a forward through the DDP wrapper on rank 0 only, for a module with buffers (BatchNorm, `register_buffer`)",
    why="DDP broadcasts the buffers in forward; nobody else joins and the run hangs",
    example="if rank == 0:\n    model(x_val)",
    fix="evaluate the plain module on rank 0 (`model.module(...)`), or evaluate on every rank and all_reduce the metric",
    check=Checks.check_rank0_ddp_forward,
    fires=(
        """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4)))
x = torch.randn(8, 2)
model(x).sum().backward()
if rank == 0:
    with torch.no_grad():
        out = model(x)
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4)))
x = torch.randn(8, 2)
model(x).sum().backward()
if rank == 0:
    with torch.no_grad():
        out = model.module(x)
dist.destroy_process_group()
""",
    ),
    in_modules=False,
)
