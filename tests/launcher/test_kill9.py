"""`kill -9` of any ddplab process that started ranks leaves no process of its run behind: the agent dies with its
caller and every rank with its agent (PR_SET_PDEATHSIG), whether ddplab owns the worker or runs a user's script."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import alive, kill_tree

SCRIPTS = Path(__file__).parent.parent / "scripts"
HANG = {"DDPLAB_FAULT": "hang:0:"}  # rank 0 hangs at its first mark; the others wait for it

COMMANDS = {
    "check": (["check", "--timeout", "300"], HANG),
    "train": (["train", "mlp", "--nproc", "2", "--stall-timeout", "300"], HANG),
    "bench": (["bench", "all_reduce", "--timeout", "300"], HANG),
    "scale": (["scale", "mlp", "--nproc", "1,2", "--max-steps", "20"], HANG),
    "launch": (["launch", "--nproc-per-node", "2", "--no-lint", str(SCRIPTS / "wait_forever.py")], {}),
}


def _ranks_running(pid: int, want: int, tmp: Path) -> list[psutil.Process]:
    """The caller's descendants once `want` ranks exist. Each of ddplab's own ranks opens its events file in the
    run's folder first (the agent's other children, its forks for the flags and the memory prediction, are no ranks);
    a script's ranks are the children of its agent."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if list(tmp.glob("ddplab-run-*")):
            started = len(list(tmp.glob("ddplab-run-*/events/local*.jsonl")))
        else:
            started = sum(len(agent.children()) for agent in _agents(pid))
        if started >= want:  # a rank that exists has armed its parent-death signal, or exits by itself
            return psutil.Process(pid).children(recursive=True)
        time.sleep(0.2)
    raise AssertionError("the ranks never started")


def _agents(pid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):  # ended meanwhile
            if "ddplab.launcher.agent" in " ".join(proc.cmdline()):
                found.append(proc)
    return found


@pytest.mark.parametrize("command", list(COMMANDS))
def test_kill_9_of_ddplab_leaves_no_process_of_its_run(command, no_leftover_workers, tmp_path):
    args, env = COMMANDS[command]
    family: list[psutil.Process] = []
    # A killed run cannot remove its temporary folder: TMPDIR keeps it in the test's own.
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplab", *args],
        env={**os.environ, "NO_COLOR": "1", "TMPDIR": str(tmp_path), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        family = _ranks_running(proc.pid, 1 if command == "scale" else 2, tmp_path)
        proc.send_signal(signal.SIGKILL)  # only ddplab itself: nothing else is told
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while alive(p.pid for p in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(p.pid for p in family), f"left behind after kill -9 of ddplab {command}"
    finally:  # a failed test must not leave its orphans running either
        kill_tree(proc.pid)
        for p in family:
            if alive([p.pid]):
                p.kill()
