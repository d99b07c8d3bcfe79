"""`local-rank-argparse`: the device comes from an argparse `--local_rank` flag and LOCAL_RANK is read nowhere."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule


def _legacy_launch(finding, seen) -> str:
    """The project launches with the legacy launcher and never with torchrun: the flag is passed (before PyTorch 2.0
    as the parser expects it; since then as `--local-rank=N`, which stops the run at its first line, loudly)."""
    where = "" if seen.launches.elastic else seen.launches.legacy
    return f"the project launches with torch.distributed.launch ({where}), which passes the flag" if where else ""


RULE = Rule(
    id="local-rank-argparse",
    severity=BUG,
    what="the device comes from an argparse `--local_rank` flag and LOCAL_RANK is read nowhere",
    why="torchrun does not pass the flag: every rank keeps the default and takes the same GPU; torch.distributed.launch passes it as `--local-rank=N` since PyTorch 2.0, which a parser of `--local_rank` alone refuses",
    example='parser.add_argument("--local_rank", type=int, default=0)',
    fix="`local_rank = int(os.environ['LOCAL_RANK'])` (set by torchrun and `ddplab launch`)",
    check=Checks.check_local_rank_flag,
    doubt=_legacy_launch,
    once=True,
)
