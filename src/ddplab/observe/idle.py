"""The idle guard: run a command (a cloud's stop command, `shutdown -h now`) once this machine has been idle for a
while, so that rented GPUs are not paid for after the work is done.

    ddplab monitor --idle-after 30m --then 'sudo shutdown -h now'
    ddplab monitor --idle-after 15m --warn-only

Idle means, at every sample: no rank of a torchrun or ddplab job alive on this machine (found as `ddplab monitor`
finds them) and, where NVML sees GPUs, every GPU under IDLE_GPU_PERCENT utilisation and IDLE_GPU_MEMORY_MIB memory.
A hung job is not idle: its ranks are alive (catching hangs is `ddplab launch`'s watchdog's job). The idle time is
counted from the guard's start and starts again from zero whenever anything is busy; the command runs once, then
the guard ends with its exit status (0 when it succeeded, 1 otherwise). --warn-only says so instead, once per idle
stretch, and keeps watching until Ctrl-C.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ddplab.launcher.procs import pid_alive

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


def what_is_busy(read_gpus: Callable[[], list]) -> list[str]:
    """Why this machine is not idle now, one reason per busy job or GPU; empty when idle."""
    from ddplab.observe.monitor import find_jobs

    reasons = []
    for job in find_jobs():
        alive = [m.pid for m in job.members if pid_alive(m.pid)]
        if alive:
            reasons.append(f"{job.id}: {len(alive)} rank(s) alive")
    for g in read_gpus():
        util = g.util_percent or 0.0
        if util >= IDLE_GPU_PERCENT or g.memory_used_mib >= IDLE_GPU_MEMORY_MIB:
            reasons.append(f"GPU {g.index}: {util:.0f} % busy, {g.memory_used_mib:.0f} MiB used")
    return reasons


def _keys(reasons: list[str]) -> set[str]:
    return {r.split(":")[0] if r.startswith("GPU") else r.rsplit(":", 1)[0] for r in reasons}


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


def guard(
    idle_after: float, command: str | None, warn_only: bool, interval: float, log: Callable[[str], None]
) -> GuardResult:
    """Watch until the machine has been idle for `idle_after` seconds, then run `command` (or warn)."""
    from ddplab.observe.monitor import Sampler

    sampler = Sampler()  # for its NVML reader: no GPU, no driver -> no GPUs, and jobs alone decide
    gpus, nvml = sampler.nvml.read()
    result = GuardResult(idle_after, command, warn_only, f"{len(gpus)} GPU(s) watched" if nvml == "ok" else nvml)
    step = max(interval, idle_after / 10, 1.0)  # countdown lines: about ten per idle period, one a second at most
    action = "then warn (--warn-only)" if warn_only else f"then run: {command}"
    log(
        "idle guard: idle = no torchrun/ddplab rank alive"
        + (f", every GPU under {IDLE_GPU_PERCENT:g} % and {IDLE_GPU_MEMORY_MIB:g} MiB" if gpus else "")
        + f" ({result.gpus}); after {clock(idle_after)} idle, counted from now, {action}"
    )
    start = time.monotonic()
    idle_since: float | None = start
    next_tick = start
    warned = False
    try:
        while True:
            reasons = what_is_busy(lambda: sampler.nvml.read()[0])
            now = time.monotonic()
            result.watched_s = now - start
            if reasons:
                if idle_since is not None or _keys(reasons) != _keys(result.last_busy):  # a change, not a count
                    log(f"busy: {'; '.join(reasons)}")
                idle_since, warned, result.last_busy = None, False, reasons
            else:
                if idle_since is None:
                    idle_since, next_tick = now, now + step
                    log("idle: no rank alive" + (", every GPU quiet" if gpus else "") + f"; {clock(idle_after)} to go")
                result.idle_s = now - idle_since
                if result.idle_s >= idle_after and not warned:
                    result.fired = True
                    if warn_only:
                        log(
                            f"WARN idle for {clock(result.idle_s)}: this machine does nothing"
                            + (f" (would run: {command})" if command else "")
                            + "; stop it if you pay for it"
                        )
                        warned = True
                    else:
                        log(f"idle for {clock(result.idle_s)}: running {command}")
                        result.exit_code = subprocess.run(command, shell=True).returncode
                        return result
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
