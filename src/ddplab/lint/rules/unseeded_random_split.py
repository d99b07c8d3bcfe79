"""`unseeded-random-split`: `random_split` without a seeded generator."""

from __future__ import annotations

from ddplab.lint import Seen
from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule


def _unseeded_where_it_runs(f, seen: Seen) -> bool:
    """In a module, a split the script (or another module) may seed before: which runs first is not known."""
    return seen.entry or not seen.facts.seeded


RULE = Rule(
    id="unseeded-random-split",
    severity=BUG,
    what="`random_split` without a seeded generator",
    why="each rank splits differently: one rank's test samples are another's training samples",
    example="train, test = random_split(ds, [800, 200])",
    fix="`random_split(dataset, lengths, generator=torch.Generator().manual_seed(0))`",
    check=Checks.check_random_data,
    refine=_unseeded_where_it_runs,
)
