"""The idle guard on a job that is alive but does nothing, for real on CPU, in a PID namespace of its own so that
other jobs on this machine do not count. One 2-rank gloo job under `ddplab launch` (its ranks record their
collectives: the Flight Recorder names the last one) plays both parts in turn:
- a long step (rank 0 computes for more than two windows while rank 1 waits for it in all_reduce): not idle;
- then rank 1 hangs before a collective (DDPLAB_FAULT=hang:1:step.3) and rank 0 waits in it forever: the guard
  runs --then within the window plus a sample, and the command gets the reason (which job, since when, where).
The guard on a finished machine is tests/observe/test_idle.py's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import refused, sigint_as_ctrl_c

IDLE_S = 3.0
INTERVAL_S = 0.3

JOB = """
import sys, time
from pathlib import Path
import torch
import torch.distributed as dist
from ddplab.launcher.progress import mark

dist.init_process_group("gloo")
rank = dist.get_rank()
here = Path(sys.argv[1])
t = torch.ones(4)
for step in range(1000):
    if step == 2:  # the long step: rank 0 computes until told, rank 1 waits for it in the all_reduce below
        (here / f"busy.{rank}").write_text(repr(time.time()))
        while rank == 0 and not (here / "end-busy").exists():
            sum(range(20000))
    if step == 3:
        (here / f"hang.{rank}").write_text(repr(time.time()))
    mark(f"step.{step}")  # rank 1 hangs here at step.3 (DDPLAB_FAULT), rank 0 then waits in all_reduce
    dist.all_reduce(t)
"""

# --then: writes when it ran and the reason it was given
FIRE = """
import json, os, sys, time
open(sys.argv[1], "w").write(json.dumps([time.time(), os.environ["DDPLAB_IDLE_REASON"]]))
"""

# Runs as PID 1 of a new PID namespace: everything it starts dies with it.
DRIVER = """
import json, os, subprocess, sys, time
from pathlib import Path

here, idle_s, interval = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
fire = f"{sys.executable} {here / 'fire.py'} {here / 'fired'}"
out = {}

def wait_for(check, seconds):
    end = time.time() + seconds
    while time.time() < end and not check():
        time.sleep(0.1)
    return check()

def log():
    return (here / "guard.err").read_text() if (here / "guard.err").exists() else ""

job = subprocess.Popen([sys.executable, "-m", "ddplab", "launch", "--nproc", "2", "--no-lint", "--hang-timeout", "0",
                        "--sanitize-steps", "0", str(here / "job.py"), str(here)],
                       env={**os.environ, "DDPLAB_FAULT": "hang:1:step.3"},
                       stdout=subprocess.DEVNULL, stderr=open(here / "job.err", "w"))
assert wait_for(lambda: (here / "busy.0").exists(), 150), "the job never reached its long step"
guard = subprocess.Popen([sys.executable, "-m", "ddplab", "monitor", "--idle-after", f"{idle_s}s", "--interval",
                          interval, "--then", fire], stdout=open(here / "guard.out", "w"),
                         stderr=open(here / "guard.err", "w"))
assert wait_for(lambda: "2 rank(s) alive, progressing" in log(), 60), "the guard never saw the job"
seen = time.time()
wait_for(lambda: guard.poll() is not None, 2.5 * float(idle_s))  # the long step outlasts two windows, watched
out["long_step_watched_s"] = time.time() - seen
out["fired_in_long_step"] = (here / "fired").exists()
(here / "end-busy").write_text("")
assert wait_for(lambda: all((here / f"hang.{r}").exists() for r in range(2)), 60), "the job never reached step 3"
out["hang_at"] = max(float((here / f"hang.{r}").read_text()) for r in range(2))
out["guard_rc"] = guard.wait(timeout=90)
if (here / "fired").exists():
    out["fired_at"], out["reason"] = json.loads((here / "fired").read_text())
out["job_alive"] = job.poll() is None  # the stop command is the user's: the guard ends nothing itself
(here / "result.json").write_text(json.dumps(out))
"""


@pytest.fixture(scope="module")
def stalled_run(tmp_path_factory) -> dict:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private PID namespace")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid is not allowed here: {probe.stderr.decode().strip()}")
    here = tmp_path_factory.mktemp("stall")
    (here / "job.py").write_text(JOB)
    (here / "driver.py").write_text(DRIVER)
    (here / "fire.py").write_text(FIRE)
    env = {**os.environ, "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(var, None)
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(here / "driver.py"), str(here)]
        + [str(IDLE_S), str(INTERVAL_S)],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        preexec_fn=sigint_as_ctrl_c,
    )
    log = (here / "guard.err").read_text() if (here / "guard.err").exists() else ""
    assert done.returncode == 0, f"{done.stderr}\n--- guard:\n{log}"
    return {**json.loads((here / "result.json").read_text()), "log": log}


def test_a_long_busy_step_is_not_idle(stalled_run):
    r = stalled_run
    assert r["long_step_watched_s"] >= 2 * IDLE_S and not r["fired_in_long_step"], r["log"]
    assert "progressing (CPU" in r["log"] or "progressing (just seen" in r["log"], r["log"]


def test_a_job_hung_in_a_collective_fires_the_guard_with_the_reason(stalled_run):
    r = stalled_run
    assert "fired_at" in r and r["guard_rc"] == 0, r["log"]
    assert r["job_alive"]  # the ranks were alive, hung, the whole time
    # The window from the last progress, plus a sample to see it stop and one to see the window full, plus the
    # reading of the ranks' stacks; the slack is for a loaded machine, not for the mechanism.
    late = r["fired_at"] - r["hang_at"]
    assert IDLE_S <= late < IDLE_S + 10, (late, r["log"])
    assert "stalled, counts as idle: " in r["log"]
    reason = r["reason"]
    # The idle time the guard read when it fired: the window at least, later on a loaded machine (0:04 once, with
    # the suite beside two busy loops), within the same slack.
    idle = re.match(r"idle for (\d+):(\d\d): ", reason)
    assert idle and IDLE_S <= int(idle[1]) * 60 + int(idle[2]) < IDLE_S + 10, reason
    assert " stalled since " in reason, reason
    assert "2 rank(s) alive, no step mark, CPU 0.0" in reason, reason
    # Steps 0-2 all-reduced: each rank's newest collective is its third; rank 0 started a fourth, which waits.
    assert "last: collectives (Flight Recorder) rank 0 all_reduce #4, rank 1 all_reduce #3" in reason, reason
    assert "all_reduce" in reason and "job.py:" in reason, reason  # where the ranks are: py-spy, as launch says


@pytest.mark.e2e  # --then runs a shell
def test_monitor_budget_warns_at_80_percent_then_runs_the_command_with_the_reason(tmp_path, capsys):
    """1 USD a second on a machine without GPUs (priced as one): the cap of 2 falls 2 s after the start."""
    from ddplab.cli import main

    out = tmp_path / "reason"
    code = main(
        [
            "monitor",
            "--budget",
            "2",
            "--price",
            "3600",
            "--interval",
            "0.2",
            "--then",
            f'echo "$DDPLAB_IDLE_REASON" >{out}',
        ]
    )
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert code == 0, err
    assert re.search(r"WARN budget: 1\.\d\d USD spent of 2\.00 USD \((8|9)\d %\); the cap is reached in", err), err
    reason = out.read_text()
    assert reason.startswith("budget reached: 2.") and "of 2.00 USD since" in reason, reason
    assert "3600 USD/GPU-hour (--price) x 1 GPU(s)" in reason, reason


@pytest.mark.parametrize(
    "args, words",
    [
        (["--budget", "20", "--then", "true"], "--budget needs a price"),
        (["--budget", "20", "--price", "3", "--gpu", "H100", "--then", "true"], "not both"),
        (["--budget", "20", "--gpu", "Z80", "--then", "true"], "not in ddplab's price table"),
        (["--budget", "20", "--gpu", "H100", "--provider", "Nowhere", "--then", "true"], "no offer matches"),
        (["--budget", "20", "--price", "3", "--provider", "AWS", "--then", "true"], "goes with --gpu"),
        (["--price", "3", "--then", "true"], "add --idle-after"),
        (["--price", "3"], "--price prices a --budget"),
        (["--budget", "20", "--price", "3"], "--budget needs --then COMMAND"),
        (["--budget", "20", "--price", "3", "--since", "25:99", "--then", "true"], "is not a time"),
        (["--budget", "20", "--price", "3", "--since", "2999-01-01T00:00", "--then", "true"], "in the future"),
        (["--budget", "-1", "--price", "3", "--then", "true"], "not a positive number"),
        (["--since", "boot"], "add --budget AMOUNT"),
    ],
)
def test_budget_bad_input_is_one_line_exit_2(args, words, capsys):
    assert words in refused(capsys, "monitor", *args)
