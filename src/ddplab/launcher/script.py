"""The caller's side of a user's script under torchrun's options (`ddplab launch`): start the agent, forward its
output as it comes (and keep a copy), watch for a hang, end every process on every path, read how the ranks ended."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ddplab.diagnose import flight
from ddplab.launcher import agent
from ddplab.launcher.files import read_json
from ddplab.launcher.hang import ScriptWatch
from ddplab.launcher.procs import end_tree
from ddplab.launcher.stacks import RankStack


@dataclass
class ScriptRun:
    status: str  # ok | failed | hang | interrupted
    seconds: float
    failures: dict  # global rank -> {local_rank, pid, exitcode, time}
    launcher_error: str | None
    launcher_log: Path
    stacks: list[RankStack] | None = None  # hang: every rank's stack
    reason: str = ""  # hang: why it was declared
    dumps: dict | None = None  # each rank's Flight Recorder record: asked for on a hang, written at exit otherwise


def run_script(torchrun: dict, log_dir: Path, hang_timeout: float | None, since: float, output) -> ScriptRun:
    """torchrun: its parsed options (vars of the Namespace); output: where the script's own stdout goes.
    since: when the user's command began (time.time()): start-up counts toward a hang."""
    start = time.monotonic()
    # Every rank records its collectives and dumps them on request (no change to the script: docs/flight.md).
    flight_dir = log_dir / "flight"
    env = {**os.environ, **flight.worker_env(flight_dir)}
    proc = agent.spawn({"kind": "script", "torchrun": torchrun}, log_dir, env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    # With per-rank log files the watch reads those (the launcher's own messages are not the script's progress);
    # without them, anything the agent forwards counts.
    redirected = torchrun.get("redirects") != "0"
    watch = ScriptWatch(proc.pid, hang_timeout, log_dir if redirected else None, since=since)
    launcher_log = log_dir / "launcher.log"
    progress = None if redirected else watch.note_output
    pumps = [_pump(proc.stdout, output, launcher_log, progress),
             _pump(proc.stderr, sys.stderr, launcher_log, progress)]
    status, stacks, dumps = "ok", None, None
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` of ddplab must not orphan the workers
    try:
        while proc.poll() is None:
            stacks = watch.poll()
            if stacks is not None:
                status = "hang"
                # Before anything is ended: each rank's record of what it called, while it still waits.
                dumps = flight.request_dumps(flight_dir, [s.rank for s in stacks if s.rank is not None], timeout=5)
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        end_tree(proc, watch.seen.values())
        signal.signal(signal.SIGTERM, previous)
        for pump in pumps:
            pump.join(timeout=5)
    outcome = read_json(log_dir / "ddplab-outcome.json", None)
    if outcome is None:
        outcome = {"failures": {}, "launcher_error": None if status != "ok" else
                   "the launcher exited without a result"}
    if status == "ok" and (outcome["failures"] or outcome.get("launcher_error")):
        status = "failed"
    if dumps is None and status == "failed":
        dumps = flight.read_dumps(flight_dir)  # what each rank wrote as it exited
    return ScriptRun(status, time.monotonic() - start, outcome["failures"], outcome.get("launcher_error"),
                     launcher_log, stacks, watch.reason, dumps)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _pump(stream, target, log_path: Path, on_output) -> threading.Thread:
    """Forward the agent's output as it comes and keep a copy (launcher.log)."""
    def forward():
        with open(log_path, "ab") as log:
            for chunk in iter(lambda: stream.read1(65536), b""):
                if on_output is not None:
                    on_output()
                log.write(chunk)
                log.flush()
                with contextlib.suppress(ValueError, OSError):
                    target.buffer.write(chunk)
                    target.flush()
    thread = threading.Thread(target=forward, daemon=True)
    thread.start()
    return thread
