"""The one hang detector: no progress for `timeout` seconds is a hang, once the evidence at hand agrees.

Progress means different things by who owns the workers:
- ddplab's own workers mark their progress (`progress.mark`): a quiet rank is exactly known, nothing to confirm;
- a user's script only prints: silence alone is not a hang (a long epoch prints nothing), so `ScriptWatch` confirms
  it with idle CPU, or with every rank seen in the same distributed wait (its own) twice in a row (py-spy stacks),
  with no collective started in between (the Flight Recorder's sequence numbers, when the ranks record).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import psutil

from ddplab.flight import reader as flight
from ddplab.launcher import stacks as stack_reader
from ddplab.launcher.logs import output_bytes
from ddplab.launcher.procs import CpuMeter

IDLE_CORES = 0.1  # CPU per worker below which it is waiting, not working
FLIGHT_ANSWER_S = 3.0  # a rank waiting in C++ answers a record request from a thread of its own within moments


class HangDetector:
    def __init__(self, timeout: float | None, since: float | None = None):
        """since: when the job began (time.time()); start-up counts as part of the job."""
        self.timeout = timeout
        self.last_progress = time.time() if since is None else since
        self.reason = ""

    def progressed(self, at: float | None = None) -> None:
        """Progress seen now, or: the newest progress is at `at` (a start-up grace may put it in the future)."""
        self.last_progress = time.time() if at is None else at

    def quiet(self) -> float:
        return time.time() - self.last_progress

    def hung(self, confirm: Callable[[float], str | None] | None = None) -> bool:
        """True once quiet for the timeout and, with `confirm(quiet)`, once it returns why (None: not hung yet)."""
        quiet = self.quiet()
        if self.timeout is None or quiet <= self.timeout:
            return False
        if confirm is None:
            self.reason = f"no rank made progress for {self.timeout:g}s"
            return True
        why = confirm(quiet)
        if why:
            self.reason = f"no output for {quiet:.0f}s and {why}"
        return bool(why)


class ScriptWatch:
    """A user script's ranks under an agent: their pids (to end them all later), and whether they still progress."""

    def __init__(
        self,
        agent_pid: int,
        timeout: float | None,
        rank_logs: Path | None = None,
        since: float | None = None,
        flight_dir: Path | None = None,
    ):
        """rank_logs: the --log-dir torch writes each rank's stdout/stderr under; their growth is the script's
        output. Without it, call note_output() whenever the job prints. since: when the job began (time.time()).
        flight_dir: where the ranks answer Flight Recorder requests (flight.reader), when they record."""
        self.agent_pid = agent_pid
        self.flight_dir = flight_dir
        self.detector = HangDetector(timeout, since)
        # CPU is judged over a window shorter than the timeout, so that a rank that imported torch (busy) and then
        # blocked still counts as idle within one timeout.
        self.idle_window = min(max((timeout or 0) / 2, 2.0), 30.0)
        self.recheck = min(self.idle_window, max(1.0, (timeout or 0) / 8))
        self.suspect: tuple | None = None  # where every rank waited at the last look
        self.suspect_at = 0.0
        self.rank_logs = rank_logs
        self.seen: dict[int, psutil.Process] = {}
        self.ranks: dict[int, tuple[int | None, int | None]] = {}
        self.pids: frozenset[int] = frozenset()
        self.log_size = -1
        self.next_check = 0.0
        self.samples: deque[tuple[float, float]] = deque()  # (time, self.cpu's total)
        self.cpu = CpuMeter()
        self.found: list[stack_reader.RankStack] | None = None

    @property
    def reason(self) -> str:
        return self.detector.reason

    def note_output(self) -> None:
        self.detector.progressed()

    def workers(self) -> list[psutil.Process]:
        """The agent's worker processes (its children that torch gave a RANK)."""
        try:
            children = psutil.Process(self.agent_pid).children()
        except psutil.NoSuchProcess:
            return []
        found = []
        for proc in children:
            if proc.pid not in self.ranks:
                try:
                    env = proc.environ()
                except (psutil.Error, OSError):
                    continue
                if "RANK" not in env and "LOCAL_RANK" not in env:
                    continue
                self.ranks[proc.pid] = (_int(env.get("RANK")), _int(env.get("LOCAL_RANK")))
            self.seen[proc.pid] = proc
            found.append(proc)
        return found

    def _agent(self) -> list[psutil.Process]:
        try:
            return [psutil.Process(self.agent_pid)]
        except psutil.NoSuchProcess:
            return []

    def poll(self) -> list[stack_reader.RankStack] | None:
        """Every rank's stack when the job is hung, else None (call it a few times a second)."""
        now = time.monotonic()
        procs = self.workers()
        if self.detector.timeout is None:
            return None
        pids = frozenset(p.pid for p in procs)
        if pids != self.pids:  # started or restarted: not progress by itself, but CPU counts begin again
            self.pids = pids
            self.samples.clear()
        size = output_bytes(self.rank_logs) if self.rank_logs is not None else 0
        if size != self.log_size:
            self.log_size = size
            self.detector.progressed()
        # The agent with everything under it: while it still imports torch and starts the ranks it is busy, and
        # start-up must not read as an idle (hung) job; once the ranks run, they are what counts.
        self.samples.append((now, self.cpu.read(self._agent())))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.idle_window:
            self.samples.popleft()
        self.found = None
        if self.detector.hung(lambda quiet: self._confirm(procs, now)):
            return self.found
        return None

    def _confirm(self, procs: list[psutil.Process], now: float) -> str | None:
        if now < self.next_check:
            return None
        t0, cpu0 = self.samples[0]
        span = now - t0
        idle = span >= self.idle_window * 0.9 and (self.samples[-1][1] - cpu0) / span < IDLE_CORES * max(1, len(procs))
        found = self.stacks(procs)
        waiting = bool(found) and all(s.kind in stack_reader.WAITING for s in found)
        # A healthy job passes through collectives all the time: only the same waits seen twice in a row count, and
        # a silent loop of collectives sits at the same line at every look: its sequence numbers tell it moves on.
        where = (tuple((s.pid, s.call, s.where) for s in found), self._collectives(found)) if waiting else None
        if idle or (waiting and where == self.suspect):
            self.found = stack_reader.look_inside(found)
            # Per rank: the same wait as before, not one call shared by all (ranks may wait in different calls).
            return (
                "idle CPU"
                if idle
                else (f"each rank still in the distributed wait it was in {now - self.suspect_at:.0f}s before")
            )
        # Busy without printing (a long epoch), or a first sight of waiting: look again soon, not a timeout later.
        self.suspect, self.suspect_at = where, now
        self.next_check = now + self.recheck
        return None

    def _collectives(self, found: list[stack_reader.RankStack]) -> tuple | None:
        """Each rank's newest collective per process group, from the Flight Recorder; None without records (the
        stacks alone must then do)."""
        ranks = [s.rank for s in found if s.rank is not None]
        if self.flight_dir is None or not ranks:
            return None
        dumps = flight.request_dumps(self.flight_dir, ranks, timeout=FLIGHT_ANSWER_S)
        marks = tuple(
            sorted(
                (rank, group, max(seqs))
                for rank, record in dumps.items()
                for group, seqs in flight.collectives(record).items()
                if seqs
            )
        )
        return marks or None

    def stacks(self, procs: list[psutil.Process] | None = None) -> list[stack_reader.RankStack]:
        procs = self.workers() if procs is None else procs
        targets = [(p.pid, *self.ranks.get(p.pid, (None, None))) for p in procs]
        if not targets:  # no worker yet: the agent itself may be the one waiting (rendezvous with other nodes)
            targets = [(self.agent_pid, None, None)]
        targets.sort(key=lambda t: (t[1] is None, t[1] or 0))
        return stack_reader.read_all(targets)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
