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
    fires=(
        """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world_size = dist.get_world_size()
lr = 0.1 * world_size
opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=lr * world_size)
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world_size = dist.get_world_size()
lr = 0.1 * world_size
opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=lr)
dist.destroy_process_group()
""",
    ),
)
