"""The stages of `ddplab check`. Each worker stage has its module (on_rank runs on every rank and returns a per-rank
dict) and its summary in verdicts.py (runs in the CLI process, which never imports torch: the per-rank dicts into
one StageResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, SKIP, TIMEOUT = "PASS", "FAIL", "SKIP", "TIMEOUT"
# The one registry of stages, in the order they run: each name is a module of this package. preflight runs in the
# CLI process before any worker starts; each worker stage has on_rank(ctx, payload), and verdicts.SUMMARIES[stage].
WORKER_STAGES = ("devices", "collectives", "ddp")
STAGES = ("preflight", *WORKER_STAGES)


def stage_module(name: str):
    """The module of a worker stage, imported on first use (stages import torch; `ddplab --help` must not)."""
    import importlib

    if name not in WORKER_STAGES:
        raise ValueError(f"{name!r} is not a worker stage ({', '.join(WORKER_STAGES)})")
    return importlib.import_module(f"ddplab.checks.{name}")


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
        k in text for k in ("not support", "unsupported", "cannot use", "not implemented")
    )
