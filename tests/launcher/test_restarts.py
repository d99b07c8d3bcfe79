"""Elastic restarts that really work: kill -9 a worker again and again; the group comes back every time.

A plain init_process_group on torchelastic's shared store can read the previous attempt's keys and fail or hang
after a restart (pytorch/pytorch#135712); ddplab.dist namespaces the store per attempt.
"""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from ddplab.launcher import local

TESTS = str(Path(__file__).parents[1])
KILLS = 10


def _wait_for_progress(run_dir: Path, attempt: int, timeout: float = 60) -> dict[int, int]:
    """Local rank -> pid, once every rank of `attempt` has made at least two steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = {}
        for lr in range(2):
            marks = local.events(run_dir, lr)
            starts = [i for i, e in enumerate(marks) if e["phase"] == "start" and e["attempt"] == attempt]
            if starts and sum(e["phase"] == "step" for e in marks[starts[-1] :]) >= 2:
                pids[lr] = marks[starts[-1]]["pid"]
        if len(pids) == 2:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"attempt {attempt} made no progress within {timeout}s")


@pytest.mark.slow
def test_ten_kills_ten_recoveries(no_leftover_workers):
    steps = 400  # long enough that the killer always finds the run in progress
    pending = local.start("workers:steps_with_all_reduce", nproc=2, max_restarts=KILLS, env={"PYTHONPATH": TESTS})
    outcome = {}
    thread = threading.Thread(
        target=lambda: outcome.update(
            result=pending.run({"steps": steps, "sleep": 0.01}, stall_timeout=60, deadline=300)
        )
    )
    thread.start()
    try:
        for attempt in range(KILLS):
            pids = _wait_for_progress(pending.run_dir, attempt)
            os.kill(pids[attempt % 2], signal.SIGKILL)  # alternate the victim: rank 0 hosts nothing special
    finally:
        thread.join(timeout=320)
    result = outcome["result"]
    assert result.ok, result.summary()
    assert [r.attempts for r in result.ranks] == [KILLS + 1, KILLS + 1]
    for r in result.results():
        assert r["attempt"] == KILLS
        assert r["total"] == steps * 3.0  # every step of the last attempt summed 1 + 2 exactly


@pytest.mark.slow
def test_kill_9_of_a_training_worker_resumes_to_the_same_weights(tmp_path, no_leftover_workers):
    """ddplab train --max-restarts 1: a worker killed mid-run; the group restarts from the latest checkpoint and
    ends bitwise equal (CPU) to the same training left alone."""
    import json
    import subprocess
    import sys

    import psutil
    from conftest import cli, kill_tree

    # 2 epochs (about 600 steps at 2 ranks; 4 trained twice as many for the same proof): the kill comes once the
    # checkpoint of step 40 exists, hundreds of steps before the end, and the resumed group crosses an epoch's end
    flags = ["mlp", "--nproc", "2", "--epochs", "2", "--checkpoint-every", "40", "--json", "--device", "cpu"]
    alone = cli("train", *flags, "--checkpoint-dir", str(tmp_path / "alone"), timeout=240)
    assert alone.code == 0, alone.err

    ckpt = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplab", "train", *flags, "--checkpoint-dir", str(ckpt), "--max-restarts", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(ckpt.glob("*.pt")) and time.monotonic() < deadline:  # a checkpoint to resume from
            time.sleep(0.05)
        agent = next(c for c in psutil.Process(proc.pid).children() if "ddplab.launcher.agent" in " ".join(c.cmdline()))
        victim = agent.children()[1]  # a worker (rank 1's process), not the agent
        victim.kill()
        out, err = proc.communicate(timeout=240)
    finally:
        kill_tree(proc.pid)
    assert proc.returncode == 0, err[-3000:]
    killed, reference = json.loads(out), alone.json()
    assert killed["resumed_from"], "the restarted group did not resume from a checkpoint"
    assert killed["total_steps"] == reference["total_steps"] and killed["final_loss"] == reference["final_loss"]
    assert [r["digest"] for r in killed["ranks"]] == [r["digest"] for r in reference["ranks"]]
