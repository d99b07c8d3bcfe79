"""The stages of `ddplab check`. Each stage module has a worker half (runs on every rank, returns a per-rank dict)
and a summary half (runs in the CLI process, turns the per-rank dicts into one StageResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, SKIP, TIMEOUT = "PASS", "FAIL", "SKIP", "TIMEOUT"
WORKER_STAGES = ("devices", "collectives", "ddp")
STAGES = ("preflight", *WORKER_STAGES)


@dataclass
class StageResult:
    name: str
    status: str
    seconds: float = 0.0
    figure: str = ""  # the key figure, one short line
    cause: str = ""  # why it did not pass, one line
    fix: str = ""  # what to do about it, one line
    details: dict = field(default_factory=dict)


class Skip(Exception):
    """An operation that cannot run in this setting (e.g. send/recv on one rank): SKIP with this reason."""


def unsupported(error: Exception) -> bool:
    """Whether an exception from a collective means "this backend lacks it" rather than "it went wrong"."""
    text = str(error).lower()
    return isinstance(error, (Skip, NotImplementedError)) or any(
        k in text for k in ("not support", "unsupported", "cannot use", "not implemented"))
