"""`unguarded-save`: `torch.save` on every rank to the same file."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="unguarded-save",
    severity=BUG,
    what="`torch.save` on every rank to the same file",
    why="all processes write one file at once: a corrupt checkpoint, or N copies of the work",
    example='torch.save(model.module.state_dict(), "model.pt")',
    fix="save on global rank 0 only: `if dist.get_rank() == 0: torch.save(...)`",
    observed="several ranks writing one path",
    check=Checks.check_saving,
    callers_guard=True,
)
