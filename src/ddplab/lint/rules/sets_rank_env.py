"""`sets-rank-env`: RANK / WORLD_SIZE / LOCAL_RANK set in the script, or `init_process_group(rank=0)` as a constant."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="sets-rank-env",
    severity=BUG,
    what="RANK / WORLD_SIZE / LOCAL_RANK set in the script, or `init_process_group(rank=0)` as a constant",
    why="every process claims the same rank, so the group never forms",
    example='os.environ["RANK"] = "0"',
    fix="delete the line, or drop `rank=` / `world_size=`: the launcher gives each process its own",
    check=Checks.check_launcher_env,
    setup=True,
)
