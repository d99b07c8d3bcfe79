"""launcher.procs.CpuMeter: what the hang watch and the idle guard read as work. A process starved of CPU on a
loaded machine must count as busy (it wants the core it does not get); one asleep in a wait must not; and a child
that ends does not take the CPU it used out of its job's total (a busy job once read as one using less than none)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from ddplab.launcher.procs import CpuMeter, run_delays

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
        busy_seconds, idle_seconds = CpuMeter().read, CpuMeter().read
        busy0, idle0, cpu0, t0 = busy_seconds([spinner]), idle_seconds([asleep]), spinner.cpu_times(), time.monotonic()
        time.sleep(2)  # a measuring window, not a wait for an event: the assertions are ratios over it
        span = time.monotonic() - t0
        cpu = sum(spinner.cpu_times()) - sum(cpu0)
        busy = busy_seconds([spinner]) - busy0
        assert cpu / span < 0.5  # the core is shared four ways: CPU time alone reads it as mostly idle
        assert busy / span > 0.8  # ready for a CPU the whole time
        assert (idle_seconds([asleep]) - idle0) / span < 0.05
    finally:
        for p in (*procs, sleeper):
            p.kill()
            p.wait()


BURN = """
import sys, time
while time.process_time() < 0.5:
    pass
print("burnt", flush=True)
sys.stdin.readline()
"""


@pytest.mark.timeout(60)
def test_a_child_that_ends_keeps_its_cpu_in_the_total():
    # sh waits for the burning child, then becomes `sleep` (same process): the job lives on without the child.
    job = subprocess.Popen(
        ["sh", "-c", f"\"{sys.executable}\" -c '{BURN}'; echo reaped; exec sleep 60"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout.readline().strip() == "burnt"
        meter, top = CpuMeter(), psutil.Process(job.pid)
        before = meter.read([top])
        assert before >= 0.45  # the child is counted under its parent (/proc counts CPU time in 10 ms ticks)
        job.stdin.write("exit\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "reaped"
        after = meter.read([top])
        assert after >= before
        assert CpuMeter().read([top]) < 0.5  # what a plain sum over the living reads now: the fall it guards against
    finally:
        job.kill()
        job.wait()


THREAD = """
import os, sys, threading, time
os.sched_setaffinity(0, {0})
stop = threading.Event()
def spin():
    while not stop.is_set():
        pass
t = threading.Thread(target=spin)
t.start()
print(t.native_id, flush=True)
sys.stdin.readline()
stop.set()
t.join()
print("joined", flush=True)
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < 0.1:  # the main thread's own work, after the thread's end
    pass
print("worked", flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task"), reason="needs Linux's /proc")
@pytest.mark.timeout(60)
def test_a_thread_that_ends_keeps_its_wait_for_a_cpu_in_the_total():
    # A thread starved beside four spinners on one core waits for it; its wait is in its own /proc entry only.
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    job = subprocess.Popen([sys.executable, "-c", THREAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for p in spinners:
            assert p.stdout.readline().strip() == "go"
        tid = int(job.stdout.readline())
        while run_delays(job.pid).get(tid, 0.0) < 1.0:  # an amount reached, not a time waited
            time.sleep(0.05)
        meter, top = CpuMeter(), psutil.Process(job.pid)
        before = meter.read([top])
        job.stdin.write("end\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "joined"
        assert tid not in run_delays(job.pid)  # the thread's wait left /proc with it
        assert meter.read([top]) >= before
        job.stdin.write("work\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "worked"
        assert meter.read([top]) >= before + 0.05  # what the process did next shows, not hidden under the lost wait
    finally:
        for p in (*spinners, job):
            p.kill()
            p.wait()
