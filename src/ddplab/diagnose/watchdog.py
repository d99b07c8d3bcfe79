"""The hang watchdog of `ddplab launch`: notice that a torchrun job stopped making progress, say where each rank
is stuck, and end every process of the job.

No progress means: no output for `timeout` seconds, and then either idle CPU (every worker below IDLE_CORES of a
core) or every rank's Python stack inside a rendezvous or a collective. A busy rank that prints nothing (a long
epoch) is not a hang. Stacks come from py-spy (`py-spy dump --pid`), which reads any Python process from the
outside: the script needs no cooperation, and a rank stuck in C++ (a TCPStore connect, a gloo recv) shows the
Python call that got it there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil

from ddplab.procs import end_tree

IDLE_CORES = 0.1  # CPU per worker below which it is waiting, not working
STACK_TIMEOUT_S = 10.0

# Python calls a rank waits in for the others: name (py-spy's, qualified by class where there is one) -> kind.
WAIT_CALLS = {
    "init_process_group": "rendezvous", "new_group": "rendezvous", "init_device_mesh": "rendezvous",
    "rendezvous": "rendezvous", "destroy_process_group": "collective",
    "DistributedDataParallel.__init__": "collective",
    **{name: "collective" for name in (
        "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
        "broadcast_object_list", "barrier", "monitored_barrier", "reduce", "reduce_scatter", "reduce_scatter_tensor",
        "gather", "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "send",
        "recv")},
    # DDP all-reduces gradients inside backward(): a rank can wait there for a peer, or just be computing.
    "backward": "ddp", "DistributedDataParallel.forward": "ddp",
}
WAITING = ("rendezvous", "collective")
_LIBRARY_DIRS = tuple(p for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")} if p)


@dataclass
class RankStack:
    rank: int | None
    local_rank: int | None
    pid: int
    kind: str  # rendezvous | collective | ddp | running | unknown
    call: str | None  # the distributed call it waits in (init_process_group, all_reduce, ...)
    where: str | None  # its own code's innermost line: "train.py:23 in main"
    stack: str  # Python stack, outermost call first
    error: str | None = None  # why the stack could not be read


def py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def dump_stack(pid: int) -> tuple[list[dict] | None, str | None]:
    """The main thread's frames (innermost first) of a live Python process, or (None, why not)."""
    exe = py_spy()
    if exe is None:
        return None, "py-spy is not installed (pip install py-spy)"
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True,
                             timeout=STACK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"py-spy gave no stack within {STACK_TIMEOUT_S:g}s"
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["unknown error"])[-1]
        if "ermission" in why:
            why += " (py-spy needs ptrace rights: run as root, or set kernel.yama.ptrace_scope=0)"
        return None, f"py-spy: {why}"
    try:
        threads = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None, "py-spy printed no JSON"
    main = next((t for t in threads if t.get("thread_name") == "MainThread" or t.get("os_thread_id") == pid),
                threads[0] if threads else None)
    return (main or {}).get("frames", []), None


def _is_library(filename: str) -> bool:
    return f"{os.sep}torch{os.sep}" in filename or filename.startswith(_LIBRARY_DIRS) or filename.startswith("<")


def classify(frames: list[dict]) -> tuple[str, str | None, str | None]:
    """(kind, call, where) for a stack, innermost frame first, as py-spy gives it."""
    user = next((i for i, f in enumerate(frames) if not _is_library(f.get("filename", ""))), len(frames))
    where = None
    if user < len(frames):
        f = frames[user]
        where = f"{Path(f['filename']).name}:{f.get('line')} in {f.get('name', '?').rsplit('.', 1)[-1]}"
    for frame in reversed(frames[:user]):  # outermost library call first: the API the script called
        name = frame.get("name", "")
        kind = WAIT_CALLS.get(name) or WAIT_CALLS.get(name.rsplit(".", 1)[-1])
        if kind:
            call = name.rsplit(".", 1)[0] if name.endswith(".__init__") else name.rsplit(".", 1)[-1]
            return kind, call, where
    if any("rendezvous" in f.get("name", "") for f in frames):  # the agent itself, waiting for other nodes
        return "rendezvous", "the launcher's rendezvous", where
    return "running", None, where


def format_stack(frames: list[dict]) -> str:
    return "\n".join(f"  File \"{f.get('filename')}\", line {f.get('line')}, in {f.get('name')}"
                     for f in reversed(frames))


def describe(stacks: list[RankStack], endpoint: str | None) -> str:
    """Where the ranks are stuck, in one sentence a person can act on."""
    if not stacks:
        return "no worker process was found"
    read = [s for s in stacks if s.error is None]
    if not read:
        return f"the ranks' stacks could not be read ({stacks[0].error})"
    waiting = [s for s in read if s.kind in WAITING]
    calls = {s.call for s in waiting}
    who = "both ranks are" if len(read) == 2 else ("the rank is" if len(read) == 1 else f"all {len(read)} ranks are")
    if len(waiting) == len(read) and len(calls) == 1:
        call = calls.pop()
        if call == "init_process_group":
            at = f" the launcher serves on {endpoint}" if endpoint else ""
            return f"{who} inside init_process_group: they never reached the rendezvous{at}"
        if call == "the launcher's rendezvous":
            return f"the launcher is waiting in rendezvous at {endpoint or '?'} for the other nodes to join"
        return (f"{who} inside {call}: each waits for a peer that never sends (a rank on another node, or ranks "
                "that called different collectives or shapes before)")
    if waiting:
        stuck = ", ".join(f"rank {s.rank} in {s.call} ({s.where or '?'})" for s in waiting)
        others = [s for s in read if s.kind not in WAITING]
        if others:
            away = ", ".join(f"rank {s.rank} at {s.where or '?'}" for s in others)
            return f"{stuck} waits for the others, but {away} never joined it"
        return f"the ranks wait in different calls: {stuck}"
    return "no rank is in a distributed call: " + ", ".join(f"rank {s.rank} at {s.where or '?'}" for s in read)


class Watchdog:
    """Tracks a torchrun agent's workers: their pids (to end them all later), and whether they still progress."""

    def __init__(self, agent_pid: int, timeout: float | None, rank_logs: Path | None = None,
                 since: float | None = None):
        """rank_logs: the --log-dir torchrun writes each rank's stdout/stderr under; their growth is the script's
        output. Without it, call note_output() whenever the job prints. since: when the job began (time.monotonic()),
        if before now: start-up time is part of the job."""
        self.agent_pid = agent_pid
        self.timeout = timeout
        # CPU is judged over a window shorter than the timeout, so that a rank that imported torch (busy) and then
        # blocked still counts as idle within one timeout.
        self.idle_window = min(max((timeout or 0) / 2, 2.0), 30.0)
        self.recheck = min(self.idle_window, max(1.0, (timeout or 0) / 8))
        self.suspect: tuple | None = None  # where every rank waited at the last look
        self.rank_logs = rank_logs
        self.seen: dict[int, psutil.Process] = {}
        self.ranks: dict[int, tuple[int | None, int | None]] = {}
        self.pids: frozenset[int] = frozenset()
        self.log_size = -1
        self.last_progress = time.monotonic() if since is None else since
        self.next_check = 0.0
        self.samples: deque[tuple[float, float]] = deque()
        self.reason = ""

    def note_output(self) -> None:
        self.last_progress = time.monotonic()

    def workers(self) -> list[psutil.Process]:
        """The agent's worker processes (its children that torchrun gave a RANK)."""
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

    def _cpu_seconds(self, procs: list[psutil.Process]) -> float:
        total = 0.0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                for p in (proc, *proc.children(recursive=True)):
                    times = p.cpu_times()
                    total += times.user + times.system
        return total

    def _output_size(self) -> int:
        """Bytes the ranks have written (torchrun: LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/std{out,err}.log)."""
        total = 0
        if self.rank_logs is not None:
            for path in self.rank_logs.glob("*/attempt_*/*/std*.log"):
                with contextlib.suppress(OSError):
                    total += path.stat().st_size
        return total

    def poll(self) -> list[RankStack] | None:
        """Every rank's stack when the job is hung, else None (call it a few times a second)."""
        now = time.monotonic()
        procs = self.workers()
        if self.timeout is None:
            return None
        pids = frozenset(p.pid for p in procs)
        if pids != self.pids:  # started or restarted: not progress by itself, but CPU counts begin again
            self.pids = pids
            self.samples.clear()
        size = self._output_size()
        if size != self.log_size:
            self.log_size, self.last_progress = size, now
        self.samples.append((now, self._cpu_seconds(procs)))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.idle_window:
            self.samples.popleft()
        quiet = now - self.last_progress
        if quiet < self.timeout or now < self.next_check:
            return None
        t0, cpu0 = self.samples[0]
        span = now - t0
        idle = span >= self.idle_window * 0.9 and (self.samples[-1][1] - cpu0) / span < IDLE_CORES * max(1, len(procs))
        stacks = self.stacks(procs)
        waiting = bool(stacks) and all(s.kind in WAITING for s in stacks)
        # A healthy job passes through collectives all the time: only the same waits seen twice in a row count.
        where = tuple((s.pid, s.call, s.where) for s in stacks) if waiting else None
        if idle or (waiting and where == self.suspect):
            why = "idle CPU" if idle else "every rank waiting in the same distributed call since the last look"
            self.reason = f"no output for {quiet:.0f}s and {why}"
            return stacks
        # Busy without printing (a long epoch), or a first sight of waiting: look again soon, not a timeout later.
        self.suspect = where
        self.next_check = now + self.recheck
        return None

    def stacks(self, procs: list[psutil.Process] | None = None) -> list[RankStack]:
        procs = self.workers() if procs is None else procs
        targets = [(p.pid, *self.ranks.get(p.pid, (None, None))) for p in procs]
        if not targets:  # no worker yet: the agent itself may be the one waiting (rendezvous with other nodes)
            targets = [(self.agent_pid, None, None)]
        targets.sort(key=lambda t: (t[1] is None, t[1] or 0))
        with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:  # py-spy pauses each rank: be quick
            dumps = list(pool.map(dump_stack, [pid for pid, _, _ in targets]))
        result = []
        for (pid, rank, local_rank), (frames, error) in zip(targets, dumps):
            if frames is None:
                result.append(RankStack(rank, local_rank, pid, "unknown", None, None, "", error))
                continue
            kind, call, where = classify(frames)
            result.append(RankStack(rank, local_rank, pid, kind, call, where, format_stack(frames)))
        return result

    def end_all(self, agent: subprocess.Popen) -> None:
        """Kill the agent and every process it started (workers live in sessions of their own), and reap them."""
        end_tree(agent, self.seen.values())


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
