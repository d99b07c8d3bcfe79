"""launcher.procs.busy_seconds: what the hang watch and the idle guard read as work. A process starved of CPU on a
loaded machine must count as busy (it wants the core it does not get); one asleep in a wait must not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from ddplab.launcher.procs import busy_seconds

SPIN = "import os; os.sched_setaffinity(0, {0}); print('go', flush=True)\nwhile True: pass"


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task"), reason="needs Linux's /proc")
@pytest.mark.timeout(60)
def test_a_starved_process_counts_as_busy_and_a_sleeping_one_does_not():
    # Four spinners on one core: each gets about a quarter of it, and stands ready for the rest.
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; print('go', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for p in (*procs, sleeper):
            assert p.stdout.readline().strip() == "go"
        spinner, asleep = psutil.Process(procs[0].pid), psutil.Process(sleeper.pid)
        busy0, idle0, cpu0, t0 = busy_seconds([spinner]), busy_seconds([asleep]), spinner.cpu_times(), time.monotonic()
        time.sleep(2)  # a measuring window, not a wait for an event: the assertions are ratios over it
        span = time.monotonic() - t0
        cpu = sum(spinner.cpu_times()) - sum(cpu0)
        busy = busy_seconds([spinner]) - busy0
        assert cpu / span < 0.5  # the core is shared four ways: CPU time alone reads it as mostly idle
        assert busy / span > 0.8  # ready for a CPU the whole time
        assert (busy_seconds([asleep]) - idle0) / span < 0.05
    finally:
        for p in (*procs, sleeper):
            p.kill()
            p.wait()
