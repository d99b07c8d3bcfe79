"""`rank0-early-exit`: `if rank == 0: break/return/exit` inside a loop whose iterations run collectives (or DDP's backward)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="rank0-early-exit",
    severity=BUG,
    what="`if rank == 0: break/return/exit` inside a loop whose iterations run collectives (or DDP's backward)",
    why="rank 0 leaves, the others go on to the next all-reduce and wait for it",
    example="if rank == 0 and loss < 0.01:\n    break",
    fix="decide on every rank: broadcast rank 0's decision (`dist.broadcast_object_list`), then break on all ranks",
    check=Checks.check_rank0_leaves_loop,
    callers_guard=True,
)
