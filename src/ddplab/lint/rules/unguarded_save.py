"""`unguarded-save`: `torch.save` on every rank to the same file."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="unguarded-save",
    severity=BUG,
    what="`torch.save` on every rank to the same file",
    why="all processes write one file at once: a corrupt checkpoint, or N copies of the work",
    example='torch.save(model.module.state_dict(), "model.pt")',
    fix="save on global rank 0 only: `if dist.get_rank() == 0: torch.save(...)`",
    observed="several ranks writing one path",
    check=Checks.check_saving,
    fires=(
        """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
from torch.nn.parallel import DistributedDataParallel as DDP

rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
model = DDP(torch.nn.Linear(2, 2))
torch.save(model.module.state_dict(), "model.pt")
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
from torch.nn.parallel import DistributedDataParallel as DDP

rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
model = DDP(torch.nn.Linear(2, 2))
if rank == 0:
    torch.save(model.module.state_dict(), "model.pt")
dist.destroy_process_group()
""",
    ),
    callers_guard=True,
)
