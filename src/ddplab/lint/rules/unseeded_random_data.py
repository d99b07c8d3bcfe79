"""`unseeded-random-data`: a dataset (or the tensors a training loop uses) drawn from an unseeded generator."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="unseeded-random-data",
    severity=BUG,
    what="a dataset (or the tensors a training loop uses) drawn from an unseeded generator",
    why="each rank draws a different dataset: the ranks do not train on shards of one set",
    example="x = torch.randn(1000, 2)",
    fix="`torch.manual_seed(0)` first, or draw from `g = torch.Generator().manual_seed(0)`",
    observed="the same samples on several ranks",
    check=Checks.check_random_data,
    opt_in="shown with --all only: whether the ranks draw different data shows in a run",
    in_modules=False,
)
