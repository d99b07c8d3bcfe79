"""`shuffle-with-sampler`: `DataLoader(shuffle=True, sampler=...)`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="shuffle-with-sampler",
    severity=BUG,
    what="`DataLoader(shuffle=True, sampler=...)`",
    why="DataLoader raises: sampler option is mutually exclusive with shuffle",
    example="DataLoader(ds, sampler=DistributedSampler(ds), shuffle=True)",
    fix="drop `shuffle=True`: DistributedSampler shuffles by itself (and `set_epoch` reshuffles each epoch)",
    check=Checks.check_sampler,
    in_modules=False,
)
