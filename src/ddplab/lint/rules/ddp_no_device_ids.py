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
    in_modules=False,
)
