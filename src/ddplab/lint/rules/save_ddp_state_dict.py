"""`save-ddp-state-dict`: the DDP wrapper's `state_dict()` saved (`module.` in every key) and never loaded back into a wrapper."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="save-ddp-state-dict",
    severity=BUG,
    what="the DDP wrapper's `state_dict()` saved (`module.` in every key) and never loaded back into a wrapper",
    why="the file does not load into the plain model: every key starts with `module.`",
    example='torch.save(model.state_dict(), "model.pt")',
    fix="save `model.module.state_dict()`",
    check=Checks.check_saving,
    in_modules=False,
)
