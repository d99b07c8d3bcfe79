"""`global-rank-device-ids`: the global rank used as a device index (`device_ids=[rank]`, `set_device(rank)`, `.cuda(rank)`)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.launches import on_one_machine
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="global-rank-device-ids",
    severity=BUG,
    what="the global rank used as a device index (`device_ids=[rank]`, `set_device(rank)`, `.cuda(rank)`)",
    why="on the second machine the global rank is past the last GPU: invalid device ordinal",
    example="torch.cuda.set_device(dist.get_rank())",
    fix="use the local rank: `local_rank = int(os.environ['LOCAL_RANK'])`",
    doubt=on_one_machine("the global rank is the local one"),
    check=Checks.check_global_rank_device,
)
