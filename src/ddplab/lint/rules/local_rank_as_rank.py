"""`local-rank-as-rank`: the local rank given to init_process_group as the process's rank."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.launches import on_one_machine
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="local-rank-as-rank",
    severity=BUG,
    what="the local rank given to `init_process_group` as the rank (`rank=int(os.environ['LOCAL_RANK'])`)",
    why="on a second machine its processes claim ranks 0, 1, ... again: the job fails or hangs at start-up",
    example="dist.init_process_group('nccl', rank=local_rank, world_size=world_size)",
    fix="pass the global rank (`RANK`), or leave rank and world_size out under torchrun",
    doubt=on_one_machine("the local rank is the rank"),
    check=Checks.check_local_rank_as_rank,
    setup=True,
)
