"""Reference DDP trainings, one readable module each; every module's docstring is its runbook.

    linear  y = 2x + 1 + noise: the tutorial example, done right
    mlp     classification on synthetic data: the throughput workload
    gpt     a character-level transformer language model on a bundled text

Each runs as `ddplab train NAME --nproc N` and as `torchrun --nproc-per-node N -m ddplab.recipes.NAME`.
Every module in this package is a recipe (it defines RECIPE, a ddplab.train.loop.Recipe): adding one is adding a file.
"""

from __future__ import annotations

from ddplab import discover

# Help lists recipes in the order a learner meets them, simplest first; any other module here comes after.
ORDER = ("linear", "mlp", "gpt")


def names() -> list[str]:
    """Every recipe's name, found without importing the recipes (they import torch)."""
    return discover.modules(__path__, ORDER)
