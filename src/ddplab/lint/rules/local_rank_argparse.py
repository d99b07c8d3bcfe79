"""`local-rank-argparse`: the device comes from an argparse `--local_rank` flag and LOCAL_RANK is read nowhere."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="local-rank-argparse",
    severity=BUG,
    what="the device comes from an argparse `--local_rank` flag and LOCAL_RANK is read nowhere",
    why="torchrun does not pass the flag: every rank keeps the default and takes the same GPU; torch.distributed.launch passes it as `--local-rank=N` since PyTorch 2.0, which a parser of `--local_rank` alone refuses",
    example='parser.add_argument("--local_rank", type=int, default=0)',
    fix="`local_rank = int(os.environ['LOCAL_RANK'])` (set by torchrun and `ddplab launch`)",
    check=Checks.check_local_rank_flag,
    once=True,
)
