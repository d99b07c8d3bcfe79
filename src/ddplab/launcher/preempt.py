"""The caller's side of a preemption (`ddplab launch`, `ddplab train`): the machine's notice - SIGTERM from a cloud's
spot reclaim or Kubernetes, SIGUSR1/SIGUSR2 from Slurm's --signal - is passed to every rank as SIGTERM, which
ddplab.resume (and the recipes' loop) answer by saving at the same step on every rank; after --grace seconds whatever
is left is ended. Ctrl-C (SIGINT) still stops at once.

SIGTERM goes to the ranks themselves, not through torch's agent: the agent's own shutdown waits a fixed 30 s on the
torch releases before 2.13 (PContext.close(timeout=30)), and the grace is the user's to choose."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ddplab.launcher.procs import pid_alive
from ddplab.stamps import stamp

SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2")
DEFAULT_GRACE_S = 30.0  # GKE's default notice; AWS spot gives 120 s, RunPod's interruptible pods ~5 s
NOTE_VAR = "DDPLAB_PREEMPT_NOTE"  # = ddplab.resume.NOTE_VAR (not imported: that would import torch here)
NOTE_FILE = "preempted.json"
# After the agreed save, how long the ranks have to leave before the rest is ended (and each one still running is
# named with what it was doing): leaving takes well under a second (launcher/bootstrap.py exits without the
# interpreter's teardown), and a machine being taken away has no seconds to spare.
LEAVE_S = 3.0
EXIT_PREEMPTED = 4  # = ddplab.resume.PREEMPTED_EXIT: "preempted, state saved; start it again to resume"


def left_after_save(exit_codes: Iterable[int | None]) -> bool:
    """Every rank that ended left as a saved preemption does: exit 4 after ddplab.resume saved on the notice, or ended
    after that save (SIGTERM from the agent once a peer had left; SIGKILL from `ddplab launch` to a rank that did not
    leave, which it names). The caller checks that the note names the saved step."""
    codes = list(exit_codes)
    return bool(codes) and all(code in (EXIT_PREEMPTED, -signal.SIGTERM, -signal.SIGKILL) for code in codes)


class Forwarder:
    """Catches the notice while installed; forward() passes it on to each rank once; expired() after the grace."""

    def __init__(self, grace: float = DEFAULT_GRACE_S, known=None):
        """known: a callable giving the pids of the ranks seen so far: told from the signal handler itself, not
        at the caller's next poll (up to 0.2 s later, more on a loaded machine)."""
        self.grace = grace
        self.known = known
        self.signal: int | None = None
        self.at = 0.0
        self.sent: set[int] = set()
        self.source = ""  # a notice that was no signal: what said so (launcher/notice.py)
        self._previous: dict = {}

    def __enter__(self) -> Forwarder:
        for name in SIGNALS:
            sig = getattr(signal, name)
            self._previous[sig] = signal.signal(sig, self._seen)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _seen(self, signum, frame) -> None:
        if self.signal is None:
            self.signal, self.at = signum, time.monotonic()
            stamp("launch", "signal")
            if self.known is not None:
                self.forward(self.known())

    def noticed(self, source: str) -> None:
        """A notice from elsewhere (the metadata server): the same stop as SIGTERM, named by its source. Called from
        the polling thread: the source is set before the signal, which the main loop reads."""
        if self.signal is None:
            self.source = source
            self.signal, self.at = signal.SIGTERM, time.monotonic()

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def forward(self, pids: Iterable[int]) -> None:
        for pid in pids:
            if pid not in self.sent:
                self.sent.add(pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
                    stamp("launch", f"told {pid}")

    def ranks_gone(self) -> bool:
        """Every rank that was told has exited (it saved, or could not)."""
        return bool(self.sent) and not any(pid_alive(pid) for pid in self.sent)

    def expired(self) -> bool:
        return self.requested and time.monotonic() - self.at > self.grace

    @property
    def name(self) -> str:
        return self.source or (signal.Signals(self.signal).name if self.signal else "")


def read_note(folder: Path) -> dict:
    """What ddplab.resume wrote: {"step": N, "path": ...} after saving on a signal, {"refused": LINE} when it stopped
    every rank on bad input (exit code 2), {"listening": true} once its signal handler is in place; {} when none."""
    try:
        note = json.loads((folder / NOTE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return note if isinstance(note, dict) else {}


@dataclass
class Preempted:
    """What `ddplab launch` / `ddplab train` say when the machine was taken away (--json prints this)."""

    status: str  # "preempted"
    signal: str
    grace: float
    step: int | None  # None: nothing was saved within the grace
    checkpoint: str | None
    listening: bool = False  # a rank had installed ddplab.resume's signal handler
    # Ranks still running LEAVE_S after the save, each "rank R (pid P): in CALL at FILE:LINE", then ended.
    lingering: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_PREEMPTED if self.step is not None else 1

    def lines(self) -> list[str]:
        """line(), then one line per rank that did not leave after the save."""
        return [self.line()] + [
            f"  {who} was still running {LEAVE_S:g} s after the save, {doing}; it was ended"
            for who, _, doing in (text.partition(": ") for text in self.lingering)
        ]

    def line(self) -> str:
        if self.step is not None:
            return (
                f"preempted ({self.signal}), state saved at step {self.step}: {self.checkpoint}; start the same "
                "command again to resume"
            )
        if self.listening:
            return (
                f"preempted ({self.signal}): the ranks were listening (ddplab.resume) but none said it saved "
                f"within the {self.grace:g} s grace (a longer --grace, or steps and saves that fit in it); every "
                "process was ended"
            )
        return (
            f"preempted ({self.signal}): no rank said it saved within the {self.grace:g} s grace (does the script "
            "use ddplab.resume, or save on SIGTERM itself? or it was still starting: nothing trained yet); every "
            "process was ended"
        )


def outcome(signum_name: str, grace: float, note: dict, lingering=()) -> Preempted:
    """lingering: launcher.stacks.RankStack of each rank still running LEAVE_S after the save."""
    step = note.get("step")
    return Preempted(
        "preempted",
        signum_name,
        grace,
        step if isinstance(step, int) else None,
        note.get("path"),
        note.get("listening") is True,
        [_doing(stack) for stack in lingering],
    )


def _doing(stack) -> str:
    """'rank 1 (pid 42): in all_reduce at train.py:80 in main', from a RankStack."""
    who = f"rank {stack.rank}" if stack.rank is not None else "a rank"
    if stack.error:
        return f"{who} (pid {stack.pid}): its stack could not be read ({stack.error})"
    call = f"in {stack.call} " if stack.call else ""
    return f"{who} (pid {stack.pid}): {call}at {stack.where or 'a line outside the script'}"
