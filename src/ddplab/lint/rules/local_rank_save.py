"""`local-rank-save`: saved under `local_rank == 0` (or `rank % gpus_per_node == 0`)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.launches import on_one_machine
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="local-rank-save",
    severity=BUG,
    what="saved under `local_rank == 0` (or `rank % gpus_per_node == 0`)",
    why="one writer per node, all to the same shared file",
    example="if local_rank == 0:\n    torch.save(...)",
    fix="test the global rank: `if dist.get_rank() == 0`",
    observed="several ranks writing one path",
    doubt=on_one_machine("local rank 0 is the only writer"),
    check=Checks.check_saving,
    callers_guard=True,
)
