"""Reference DDP trainings, one readable module each; every module's docstring is its runbook.

    linear  y = 2x + 1 + noise: the tutorial example, done right
    mlp     classification on synthetic data: the throughput workload
    gpt     a character-level transformer language model on a bundled text

Each runs as `ddplab train NAME --nproc N` and as `torchrun --nproc-per-node N -m ddplab.recipes.NAME`.
"""

NAMES = ("linear", "mlp", "gpt")
