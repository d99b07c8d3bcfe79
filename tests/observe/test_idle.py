"""The idle guard (`ddplab monitor --idle-after D --then CMD`), for real on CPU, in a PID namespace of its own so
that other jobs on this machine do not count: a 2-rank torchrun job (one rank computing, one asleep as a hung rank
would be) runs for three idle periods without the guard firing; the job ends; the guard fires, not before the idle
period has passed since the last rank ended, and ends itself. Then: counted from the guard's start with no job at
all; --warn-only warns and runs nothing; bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import refused, sigint_as_ctrl_c

from ddplab.observe.idle import parse_duration

IDLE_S = 3.0

JOB = """
import os, sys, time
from pathlib import Path
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
here = Path(sys.argv[1])
(here / f"ready.{rank}").write_text(str(os.getpid()))
while not (here / "stop").exists() and time.time() < float(sys.argv[2]):
    if rank == 0:
        sum(range(100000))  # busy
    else:
        time.sleep(0.2)  # no CPU at all, as a hung rank: still not idle
(here / f"exit.{rank}").write_text(repr(time.time()))  # the last thing a rank does
"""

# Runs as PID 1 of a new PID namespace: everything it starts dies with it.
DRIVER = """
import json, os, subprocess, sys, time
from pathlib import Path

here, idle_s, scenario = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
fire = f"{sys.executable} -c 'import time; open(\\"{here}/fired\\", \\"w\\").write(repr(time.time()))'"
out = {}

def start_guard(*extra):
    out["guard_start"] = time.time()
    return subprocess.Popen([sys.executable, "-m", "ddplab", "monitor", "--idle-after", f"{idle_s}s", "--interval",
                             "0.3", "--then", fire, *extra], stdout=open(here / "guard.out", "w"),
                            stderr=open(here / "guard.err", "w"))

def wait_for(check, seconds):
    end = time.time() + seconds
    while time.time() < end and not check():
        time.sleep(0.1)
    return check()

if scenario == "job":
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                            str(here / "job.py"), str(here), str(time.time() + 240)],
                           stdout=subprocess.DEVNULL, stderr=open(here / "job.err", "w"))
    assert wait_for(lambda: all((here / f"ready.{r}").exists() for r in range(2)), 150), "the job never started"
    guard = start_guard()
    time.sleep(3 * idle_s)  # three idle periods with the job running
    out["fired_while_busy"] = (here / "fired").exists()
    (here / "stop").write_text("")
    out["job_rc"] = job.wait(timeout=60)
    out["job_end"] = max(float((here / f"exit.{r}").read_text()) for r in range(2))
elif scenario == "nothing":
    guard = start_guard()
else:  # warn-only: it warns, runs nothing, and keeps watching
    guard = start_guard("--warn-only")
    wait_for(lambda: "WARN idle" in (here / "guard.err").read_text(), 60)
    out["still_running"] = guard.poll() is None
    guard.send_signal(2)
out["guard_rc"] = guard.wait(timeout=90)
if (here / "fired").exists():
    out["fired_at"] = float((here / "fired").read_text())
(here / "result.json").write_text(json.dumps(out))
"""


def run_in_own_pid_namespace(tmp_path: Path, scenario: str) -> dict:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private PID namespace")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid is not allowed here: {probe.stderr.decode().strip()}")
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**os.environ, "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(var, None)
    done = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            str(tmp_path / "driver.py"),
            str(tmp_path),
            str(IDLE_S),
            scenario,
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        preexec_fn=sigint_as_ctrl_c,
    )
    log = (tmp_path / "guard.err").read_text() if (tmp_path / "guard.err").exists() else ""
    assert done.returncode == 0, f"{done.stderr}\n--- guard:\n{log}"
    return {**json.loads((tmp_path / "result.json").read_text()), "log": log}


def test_guard_never_fires_while_a_rank_lives_and_fires_after_the_job_ends(tmp_path, no_leftover_workers):
    r = run_in_own_pid_namespace(tmp_path, "job")
    assert r["job_rc"] == 0
    assert not r["fired_while_busy"], r["log"]  # one rank computing, one asleep: busy either way
    assert "busy: torchrun:" in r["log"] and "2 rank(s) alive" in r["log"]
    assert "fired_at" in r, f"the guard never ran the command\n{r['log']}"
    assert r["fired_at"] - r["job_end"] >= IDLE_S, r  # not before a whole idle period after the last rank
    assert r["guard_rc"] == 0  # it ran the command, which succeeded, and ended
    # a countdown: from the ranks' exit (or, on a loaded machine, from the moment the exiting ranks stopped making
    # progress: counted as stalled, seen in one CI run) to the command
    assert re.search(r"idle: (no rank alive|every job stalled); 0:03 to go", r["log"]), r["log"]
    assert "the command runs in 0:0" in r["log"], r["log"]
    assert f"running {sys.executable}" in r["log"]


def test_idle_counts_from_the_guards_start_with_no_job(tmp_path, no_leftover_workers):
    r = run_in_own_pid_namespace(tmp_path, "nothing")
    assert r["guard_rc"] == 0 and "fired_at" in r, r["log"]
    assert r["fired_at"] - r["guard_start"] >= IDLE_S, r


def test_warn_only_warns_and_runs_nothing(tmp_path, no_leftover_workers):
    r = run_in_own_pid_namespace(tmp_path, "warn")
    assert r["still_running"] and r["guard_rc"] == 0, r["log"]
    # The idle time read when it warned: the window at least, later on a loaded machine (as in test_idle_stall.py).
    warned = re.search(r"WARN idle for (\d+):(\d\d): ", r["log"])
    assert warned and IDLE_S <= int(warned[1]) * 60 + int(warned[2]) < IDLE_S + 10, r["log"]
    assert "fired_at" not in r


@pytest.mark.timeout(90)
def test_a_watched_pid_that_ends_is_a_job_that_ended(tmp_path, no_leftover_workers):
    """`ddplab train ... & ddplab monitor --idle-after D --pids $! --then CMD`: the job's end is what the guard
    waits for, not bad input (it once stopped there, exit 2, and never ran the stop command)."""
    job = subprocess.Popen([sys.executable, "-c", "print('go', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE)
    assert job.stdout.readline().strip() == b"go"
    fired = tmp_path / "fired"
    guard = subprocess.Popen(
        [sys.executable, "-m", "ddplab", "monitor", "--idle-after", "1s", "--interval", "0.3", "--pids",
         str(job.pid), "--then", f"touch {fired}"],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    try:
        lines = []
        while not (line := guard.stderr.readline()).startswith("busy: pids:"):
            assert line, "".join(lines)
            lines.append(line)
    finally:
        job.kill()
        job.wait()
    out, err = guard.communicate(timeout=60)
    log = "".join(lines) + err
    assert guard.returncode == 0 and fired.exists(), log
    assert "idle: no rank alive; 0:01 to go" in log
    assert "no process with pid" not in log


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("15m", 900), ("1h30m", 5400), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "args, words",
    [
        (["--idle-after", "soon", "--then", "true"], "not a duration"),
        (["--idle-after", "0s", "--then", "true"], "not a positive duration"),
        (["--idle-after", "5m"], "needs --then COMMAND"),
        (["--then", "true"], "add --idle-after"),
        (["--idle-after", "5m", "--then", "true", "--once"], "drop --once"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, words, capsys):
    assert words in refused(capsys, "monitor", *args)
