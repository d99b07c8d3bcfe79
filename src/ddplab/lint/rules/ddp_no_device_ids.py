"""`ddp-no-device-ids`: torch's DDP without `device_ids` on a GPU path where the current device is not set."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="ddp-no-device-ids",
    severity=BUG,
    what="torch's DDP without `device_ids` on a GPU path where the current device is not set",
    why="the module is replicated to GPU 0 of every rank",
    example="model = DDP(model.cuda())",
    fix="`DDP(model, device_ids=[local_rank])` on GPU (`device_ids=None` on CPU), after `torch.cuda.set_device(local_rank)`",
    check=Checks.check_ddp_device_ids,
    fires=(
        """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(2, 2).cuda())
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
model = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
dist.destroy_process_group()
""",
    ),
    in_modules=False,
)
