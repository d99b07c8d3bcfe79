"""Shared test helpers: run the real CLI in a subprocess with a hard deadline, and assert nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import psutil
import pytest


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    def json(self):
        return json.loads(self.out)


def cli(*args: str, env: dict | None = None, timeout: float = 120, cwd=None) -> Ran:
    """Run `python -m ddplab ARGS` for real; kill its whole session if it overstays `timeout`."""
    import time

    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ddplab", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full_env, start_new_session=True, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        raise AssertionError(f"ddplab {' '.join(args)} overstayed {timeout}s\n{err[-3000:]}")
    return Ran(proc.returncode, out, err, time.monotonic() - start)


def kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [parent, *parent.children(recursive=True)]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)


def alive(pids) -> list[int]:
    return [p for p in pids if p and psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.fixture
def no_leftover_workers(monkeypatch):
    """Fail the test if any process it started (tagged through an inherited variable) is still alive after it."""
    import time
    import uuid

    tag = uuid.uuid4().hex
    monkeypatch.setenv("DDPLAB_TEST_TAG", tag)

    def ours():
        found = set()
        for p in psutil.process_iter():
            try:
                if p.pid != os.getpid() and p.environ().get("DDPLAB_TEST_TAG") == tag:
                    if p.status() != psutil.STATUS_ZOMBIE:
                        found.add(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    yield
    deadline = time.monotonic() + 5
    while (left := ours()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


@pytest.fixture
def busy_port():
    """A port something listens on (every interface, so 127.0.0.1 too), for as long as the test runs."""
    import socket

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        yield busy.getsockname()[1]
