"""`sampler-no-set-epoch`: a DistributedSampler whose `set_epoch(epoch)` is never called."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="sampler-no-set-epoch",
    severity=BUG,
    what="a DistributedSampler whose `set_epoch(epoch)` is never called",
    why="every epoch is shuffled the same way: the model sees the same order each time",
    example="for epoch in range(n): for x, y in loader: ...  # no sampler.set_epoch(epoch)",
    fix="call `sampler.set_epoch(epoch)` at the start of every epoch",
    observed="an epoch repeating the last one's order",
    check=Checks.check_sampler,
    opt_in="shown with --all only: whether the sampler shuffles and the loop runs several epochs shows in a run",
    in_modules=False,
)
