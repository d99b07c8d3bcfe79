"""`local-rank-save`: saved under `local_rank == 0` (or `rank % gpus_per_node == 0`)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="local-rank-save",
    severity=BUG,
    what="saved under `local_rank == 0` (or `rank % gpus_per_node == 0`)",
    why="one writer per node, all to the same shared file",
    example="if local_rank == 0:\n    torch.save(...)",
    fix="test the global rank: `if dist.get_rank() == 0`",
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
if local_rank == 0:
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
