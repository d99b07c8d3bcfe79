"""Ending a launcher and everything it started, whatever state each process is in; how busy its processes are."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable

import psutil


def end_tree(agent: subprocess.Popen, also: Iterable[psutil.Process] = (), timeout: float = 5) -> None:
    """SIGKILL `agent`, its process group, all its descendants and `also` (workers that already lost their parent,
    or live in sessions of their own), then wait until every one of them is dead."""
    procs = list(also)
    with contextlib.suppress(psutil.NoSuchProcess):
        parent = psutil.Process(agent.pid)
        procs += [parent, *parent.children(recursive=True)]
    for proc in list(procs):  # what the extra processes started themselves (DataLoader workers, compilers)
        with contextlib.suppress(psutil.Error):
            procs += proc.children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(agent.pid, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.is_running():  # False also when the pid now belongs to another process
                proc.kill()
    agent.wait()
    wait_dead(procs, timeout)


def pid_alive(pid: int) -> bool:
    """A process with this pid runs (a zombie - exited, not yet reaped - holds nothing)."""
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_dead(procs: list[psutil.Process], timeout: float) -> None:
    """Wait until each process is gone or a zombie. Orphaned workers are reaped by PID 1 whenever it gets round
    to it (seconds, in some containers), but a zombie already holds nothing: it is dead."""
    deadline = time.monotonic() + timeout
    while (procs := [p for p in procs if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)


class CpuMeter:
    """Seconds a group of processes and everything under them (DataLoader workers do a rank's work) ran on a CPU or
    stood ready for one, as a total that never falls. The second part (Linux's per-thread run delay) is what keeps
    a loaded machine from reading as an idle job: a rank importing torch beside many busy processes gets a tenth of
    a core but wants all of it, while a rank hung in a receive sleeps and accrues neither.

    Every process's and every thread's last reading is kept after it ends: a plain sum over what is alive now falls
    by all a DataLoader worker or a finished launcher child ever used the moment it exits (a process's CPU time
    keeps its ended threads', its run delay does not), and a busy job then reads as one using less than nothing
    (an idle guard took such a job for a stalled one). What ended after the last reading is lost; a parent's
    children_* times are not added, as they would count it twice."""

    def __init__(self) -> None:
        # In integer nanoseconds: a float sum taken in another order (one term moved to _ended) can come out a
        # last bit lower, and the total must never fall.
        self._alive: dict[tuple, int] = {}  # (pid, start time[, tid]): its latest reading
        self._ended = 0  # the last readings of those that ended (a long run's many DataLoader workers: one sum)

    def read(self, procs: Iterable[psutil.Process]) -> float:
        now: dict[tuple, int] = {}
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                for p in (proc, *proc.children(recursive=True)):
                    with contextlib.suppress(psutil.Error):
                        times, key = p.cpu_times(), (p.pid, p.create_time())
                        now[key] = round((times.user + times.system) * 1e9)
                        for tid, waited in run_delays(p.pid).items():
                            now[(*key, tid)] = round(waited * 1e9)
        self._ended += sum(ns for key, ns in self._alive.items() if key not in now)
        self._alive = {key: max(ns, self._alive.get(key, 0)) for key, ns in now.items()}
        return (self._ended + sum(self._alive.values())) / 1e9


def run_delays(pid: int) -> dict[int, float]:
    """Per thread, seconds it spent runnable but waiting for a CPU (/proc/PID/task/TID/schedstat, second field, in
    ns); empty where the kernel does not keep it."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    found = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                found[int(tid)] = int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return found
