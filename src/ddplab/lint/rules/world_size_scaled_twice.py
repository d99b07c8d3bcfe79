"""`world-size-scaled-twice`: an lr or batch size scaled by the world size, and the result scaled again."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="world-size-scaled-twice",
    severity=BUG,
    what="an lr or batch size scaled by the world size, and the result scaled again",
    why="the value is N times (or 1/N of) what was meant: the run trains with another lr or batch size",
    example="lr = args.lr * world_size\n...\nlr = lr * world_size",
    fix="scale once: decide whether the value is per rank or for the whole job, and convert in one place",
    check=Checks.check_scaled_twice,
)
