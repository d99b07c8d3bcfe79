"""What each rank did, and the one rule that names the rank whose failure caused the others'."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RankOutcome:
    rank: int
    pid: int | None = None
    exitcode: int | None = None
    error: str | None = None  # "ValueError: message", one line
    traceback: str | None = None
    phase: str | None = None  # last thing the rank said it was doing
    seq: int = 0  # how many marks it made: who is behind whom
    output_tail: str = ""
    stack: str | None = None  # Python stack when the run was declared hung
    result: Any = None
    attempts: int = 0  # how many times the elastic agent started this rank (restarts + 1)


@dataclass
class RunResult:
    status: str  # ok | failed | hang
    seconds: float
    nproc: int
    master_port: int
    ranks: list[RankOutcome]
    root_cause: int | None = None  # rank of the first failure
    stalled: list[int] = field(default_factory=list)  # ranks that never arrived where the others wait
    reason: str = ""
    run_dir: str = ""
    last_progress: float | None = None  # epoch seconds of the last mark any rank made
    flight: Any = None  # flight.reader.FlightReport: which collective each rank last called (a failed run)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def results(self) -> list[Any]:
        return [r.result for r in self.ranks]

    def rank(self, rank: int) -> RankOutcome:
        return next(r for r in self.ranks if r.rank == rank)

    def summary(self) -> str:
        """One line a user can act on."""
        if self.status == "ok":
            return f"{self.nproc} rank(s) finished in {self.seconds:.1f}s"
        if self.status == "hang":
            waiting = [r for r in self.ranks if r.rank not in self.stalled]
            if not waiting:
                return f"{self.reason}: every rank is stuck in {self.ranks[0].phase or 'start-up'}"
            late = ", ".join(
                f"rank {r.rank} (last in {r.phase or 'start-up'})" for r in self.ranks if r.rank in self.stalled
            )
            where = ", ".join(str(r.rank) for r in waiting)
            return f"{self.reason}: {late} never reached {waiting[0].phase}, where rank(s) {where} wait"
        if self.status == "failed" and self.root_cause is not None:
            r = self.rank(self.root_cause)
            return (
                f"rank {r.rank} failed ({exit_text(r.exitcode)}) in {r.phase or 'start-up'}: "
                f"{r.error or 'no error text'}"
            )
        return self.reason


@dataclass
class Failed:
    """A rank that ended badly, as the root-cause rule sees it."""

    rank: int
    exitcode: int | None
    text: str  # its own last words: traceback or output tail
    time: float  # when it failed (its error's stamp, or when its output last changed)


# torch's workers turn the agent's SIGTERM into a Python exception (elastic/multiprocessing/api.py), exit code 1.
ENDED_BY_LAUNCHER = re.compile(r"SignalException: Process \d+ got signal: (?:15|9|1|2)\b")


def root_cause(failed: list[Failed]) -> int | None:
    """The rank whose failure came first in cause, not merely in time. In order:
    1. it was not ended by the launcher: once one rank fails, torch's agent sends SIGTERM to the rest;
    2. its own error is not one that follows another rank's failure ("Connection closed by peer", a watchdog
       timeout...): the rank that aborted in C++ (exit -6) is the cause of its peers' Python tracebacks;
    3. the earliest.
    launch (a user's script), check, train, bench and scale all name their root cause with this rule."""
    if not failed:
        return None
    consequence = _consequence_patterns()

    def order(f: Failed):
        # A SIGTERM exit code alone does not say who came first: a rank that already raised its own error may be
        # ended by the agent while it still tears down, after a peer's consequence error reached the agent first.
        ended = bool(ENDED_BY_LAUNCHER.search(f.text or "")) or (
            f.exitcode == -signal.SIGTERM and "Traceback" not in (f.text or "")
        )
        follows = any(p.search(f.text or "") for p in consequence)
        return ended, follows, f.time

    return min(failed, key=order).rank


def origin_itself(root: Failed, others_finished: bool) -> bool:
    """True when the root-cause rank's own error is one that follows another rank's failure ("Connection closed by
    peer"), yet no rank failed before it: its peers had finished their work and exited cleanly. Then the mechanism
    is this rank's own: it ran a collective (or a DDP forward, which broadcasts buffers) that the others never called,
    and gloo reported their departure. The cause is its own line, not a peer's failure."""
    return others_finished and any(p.search(root.text or "") for p in _consequence_patterns())


def _consequence_patterns() -> list[re.Pattern]:
    from ddplab.explain.matcher import COMPILED  # explain's knowledge of which errors follow another rank's failure

    return [p for rule, patterns in COMPILED if rule.consequence for p in patterns]


def exit_text(code: int | None) -> str:
    """'exit code -9 (SIGKILL): killed: usually the kernel's out-of-memory killer...', for a root-cause line."""
    from ddplab.explain.exitcodes import describe_exit

    return "no exit code" if code is None else describe_exit(code)
