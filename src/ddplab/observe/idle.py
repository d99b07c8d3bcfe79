"""The idle guard: run a command (a cloud's stop command, `shutdown -h now`) once this machine has been idle for a
while, so that rented GPUs are not paid for after the work is done.

    ddplab monitor --idle-after 30m --then 'sudo shutdown -h now'
    ddplab monitor --idle-after 15m --warn-only

Idle means, at every sample: no rank of a torchrun or ddplab job (found as `ddplab monitor` finds them) alive on
this machine and making progress, and, where NVML sees GPUs, every GPU that no stalled job holds under
IDLE_GPU_PERCENT utilisation and IDLE_GPU_MEMORY_MIB memory. A job whose ranks live but show no progress - no new
step mark, and on CPU ranks under a tenth of a core of CPU time - is stalled and counts as idle (observe.stall says
how a long step is told from a hang): a rank hung in a collective is the most expensive kind of nothing. The idle
time is counted from the guard's start and starts again from zero whenever anything is busy; the command runs once,
with the reason in DDPLAB_IDLE_REASON (which job stalled since when, where its ranks are), then the guard ends with
its exit status (0 when it succeeded, 1 otherwise). --warn-only says so instead, once per idle stretch, and keeps
watching until Ctrl-C.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ddplab.launcher.budget import Budget
from ddplab.observe import stall
from ddplab.observe.stall import IDLE_CORES, Look, StallWatch

# A GPU at work shows far more: nvidia-smi's utilisation is the share of time a kernel ran, and an idle GPU
# reads 0 % between the driver's own short tasks.
IDLE_GPU_PERCENT = 5.0
# A CUDA context alone holds a few hundred MiB; more than this means a process still keeps a model or data there,
# and stopping the machine would lose it.
IDLE_GPU_MEMORY_MIB = 1024.0
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhd])+|\d+(?:\.\d+)?")
PART = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


def parse_duration(text: str) -> float:
    """Seconds in "90" (seconds), "90s", "15m", "1.5h", "1h30m"; ValueError otherwise."""
    text = text.strip().lower()
    if not DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration: use e.g. 90s, 15m, 1h30m")
    seconds = sum(float(n) * UNITS[u] for n, u in PART.findall(text))
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration: use e.g. 90s, 15m, 1h30m")
    return seconds


def clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def what_is_busy(sampler, watch: StallWatch, pids: list[int] | None = None) -> tuple[list[str], list[Look]]:
    """Why this machine is not idle now, one reason per busy job or GPU (empty when idle), and the jobs whose ranks
    are alive but stalled (observe.stall): they count as idle, and so do the GPUs only they use. pids: only the jobs
    of these processes count (and only their GPUs)."""
    from ddplab.observe.monitor import find_jobs

    jobs = find_jobs(pids)
    sampler.track(jobs)
    snap = sampler.sample(jobs)
    reasons, stalled = [], []
    for job, view in zip(jobs, snap.jobs):
        look = watch.look(job, view)
        if look is None:
            continue
        if look.moving:
            reasons.append(
                f"{job.id}: {look.ranks} rank(s) alive, progressing ({look.how}"
                + (
                    "; GPU utilisation alone, which cannot tell a rank hung in NCCL from work)"
                    if look.cannot_tell
                    else ")"
                )
            )
        else:
            stalled.append(look)
    theirs = {g for look in stalled for g in look.gpus}
    stuck = {look.job for look in stalled}
    others = {r.gpu for view in snap.jobs if view.id not in stuck for r in view.ranks}
    for g in [] if pids else snap.gpus:
        if g.index in theirs and g.index not in others:
            continue  # held by a stalled job: busy-looking, paid for nothing
        util = g.util_percent or 0.0
        if util >= IDLE_GPU_PERCENT or g.memory_used_mib >= IDLE_GPU_MEMORY_MIB:
            reasons.append(f"GPU {g.index}: {util:.0f} % busy, {g.memory_used_mib:.0f} MiB used")
    return reasons, stalled


def stalled_text(stalled: list[Look]) -> str:
    return "; ".join(
        f"{s.job} stalled since {time.strftime('%H:%M:%S', time.localtime(s.since))} "
        f"({s.ranks} rank(s) alive, {s.how}; last: {s.last})"
        for s in stalled
    )


def _keys(reasons: list[str]) -> set[str]:
    return {r.split(":")[0] if r.startswith("GPU") else r.rsplit(":", 1)[0] for r in reasons}


REASON_VAR = "DDPLAB_IDLE_REASON"  # what --then's command is told: why the machine counts as idle


@dataclass
class GuardResult:
    idle_after_s: float
    command: str | None
    warn_only: bool
    gpus: str  # "N GPU(s) watched" or why none are
    fired: bool = False  # the command ran (or, with --warn-only, the warning was given)
    exit_code: int | None = None  # the command's
    watched_s: float = 0.0
    idle_s: float = 0.0  # how long the machine had been idle when the guard acted or ended
    last_busy: list[str] = field(default_factory=list)
    reason: str = ""  # why it acted: nothing alive, or which job stalled since when, doing what


def guard(
    idle_after: float | None,
    command: str | None,
    warn_only: bool,
    interval: float,
    log: Callable[[str], None],
    budget: Budget | None = None,
    pids: list[int] | None = None,
) -> GuardResult:
    """Watch until the machine has been idle for `idle_after` seconds, or `budget` is spent, then run `command` (or
    warn). idle_after None: the budget alone."""
    from ddplab.observe.monitor import Sampler

    sampler = Sampler()  # for its NVML reader: no GPU, no driver -> no GPUs, and jobs alone decide
    watch = StallWatch(idle_after or 60.0)
    gpus, nvml = sampler.nvml.read()
    result = GuardResult(idle_after, command, warn_only, f"{len(gpus)} GPU(s) watched" if nvml == "ok" else nvml)
    action = "then warn (--warn-only)" if warn_only else f"then run: {command}"
    if budget is not None:
        log(
            f"budget guard: {budget.money(budget.cap)} at {budget.priced} = {budget.money(budget.per_hour)}/hour, "
            f"counted from {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(budget.started))} "
            f"({budget.money(budget.spent())} spent so far); a warning at 80 %, {action} at the cap"
        )
    if idle_after is None:
        return _budget_only(result, budget, interval, log, sampler)
    step = max(interval, idle_after / 10, 1.0)  # countdown lines: about ten per idle period, one a second at most
    log(
        "idle guard: idle = no torchrun/ddplab rank alive, or none that progresses (no new step mark, and on CPU "
        f"ranks under {IDLE_CORES:g} core of CPU time)"
        + (
            f"; every GPU under {IDLE_GPU_PERCENT:g} % and {IDLE_GPU_MEMORY_MIB:g} MiB but a stalled job's"
            if gpus
            else ""
        )
        + (f" ({result.gpus})" if not pids else f"; only the job(s) of pid {', '.join(map(str, pids))}")
        + f"; after {clock(idle_after)} idle, counted from now, {action}"
    )
    start = time.monotonic()
    idle_since: float | None = start
    next_tick = start
    warned = False
    stalled_before: set[str] = set()
    over_budget = False
    try:
        while True:
            if budget is not None and not over_budget and budget.poll(log):
                over_budget = True  # --warn-only: said once
                if _act(result, budget.reason(), log):
                    return result
            reasons, stalled = what_is_busy(sampler, watch, pids)
            now = time.monotonic()
            result.watched_s = now - start
            if {s.job for s in stalled} - stalled_before:
                log(f"stalled, counts as idle: {stalled_text(stalled)}")
            stalled_before = {s.job for s in stalled}
            if reasons:
                if idle_since is not None or _keys(reasons) != _keys(result.last_busy):  # a change, not a count
                    log(f"busy: {'; '.join(reasons)}")
                idle_since, warned, result.last_busy = None, False, reasons
            else:
                if idle_since is None:
                    idle_since, next_tick = now, now + step
                    what = "every job stalled" if stalled else "no rank alive"
                    log(f"idle: {what}" + (", every GPU quiet" if gpus else "") + f"; {clock(idle_after)} to go")
                result.idle_s = now - idle_since
                if result.idle_s >= idle_after and not warned:
                    if _act(result, _reason(result.idle_s, stalled, bool(gpus)), log):
                        return result
                    warned = True
                elif now >= next_tick and not warned:
                    log(
                        f"idle {clock(result.idle_s)} of {clock(idle_after)}: "
                        f"{'warning' if warn_only else 'the command runs'} in {clock(idle_after - result.idle_s)}"
                    )
                    next_tick = now + step
            time.sleep(interval)
    except KeyboardInterrupt:  # the usual end of --warn-only
        return result
    finally:
        sampler.close()


def _act(result: GuardResult, reason: str, log: Callable[[str], None]) -> bool:
    """Run the command with the reason in REASON_VAR (True: the guard ends), or, with --warn-only, warn (False)."""
    result.fired, result.reason = True, reason
    if result.warn_only:
        log(
            f"WARN {reason}: stop this machine if you pay for it"
            + (f" (would run: {result.command})" if result.command else "")
        )
        return False
    log(f"running {result.command}")
    log(f"reason ({REASON_VAR}): {reason}")
    env = {**os.environ, REASON_VAR: reason}
    result.exit_code = subprocess.run(result.command, shell=True, env=env).returncode
    return True


def _budget_only(result: GuardResult, budget: Budget, interval: float, log, sampler) -> GuardResult:
    start = time.monotonic()
    try:
        while not budget.poll(log):
            time.sleep(min(interval, max(budget.seconds_left(), 0.05)))
        result.watched_s = time.monotonic() - start
        if not _act(result, budget.reason(), log):
            while True:  # --warn-only: warned once; keep the command running until Ctrl-C, as the idle guard does
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        sampler.close()
    return result


def _reason(idle_s: float, stalled: list[Look], gpus: bool) -> str:
    """One line for a person and a stop command's log: nothing alive, or each stalled job with where its ranks are."""
    if not stalled:
        return f"idle for {clock(idle_s)}: no torchrun/ddplab rank alive" + (", every GPU quiet" if gpus else "")
    parts = []
    for s in stalled:
        now = stall.last_words(s)
        parts.append(
            f"{s.job} stalled since {time.strftime('%H:%M:%S', time.localtime(s.since))}: {s.ranks} rank(s) alive, "
            f"{s.how}; last: {s.last}; now: {now}"
            + ("; judged by GPU utilisation alone, which cannot tell a hang from work" if s.cannot_tell else "")
        )
    return f"idle for {clock(idle_s)}: " + "; ".join(parts)
