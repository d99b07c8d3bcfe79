"""`save-ddp-state-dict`: the DDP wrapper's `state_dict()` saved (`module.` in every key) and never loaded back into a wrapper."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="save-ddp-state-dict",
    severity=BUG,
    what="the DDP wrapper's `state_dict()` saved (`module.` in every key) and never loaded back into a wrapper",
    why="the file does not load into the plain model: every key starts with `module.`",
    example='torch.save(model.state_dict(), "model.pt")',
    fix="save `model.module.state_dict()`",
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
if rank == 0:
    torch.save(model.state_dict(), "model.pt")
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
    in_modules=False,
)
