"""The caller's side of a user's script under torchrun's options (`ddplab launch`): start the agent, forward its
output as it comes (and keep a copy), watch for a hang, end every process on every path, read how the ranks ended."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ddplab.diagnose import flight, profhook
from ddplab.launcher import agent
from ddplab.launcher.files import read_json, write_atomic
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


class EarlyAgent:
    """The agent started first, before the caller imports torch and parses torchrun's options: it imports torch
    meanwhile (the longest part of start-up) and waits for "go"; run_script completes its spec just before.
    Its folder holds the spec and the Flight Recorder's records; it is the run's log folder unless --log-dir names
    another."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="ddplab-launch-"))
        # Every rank records its collectives and dumps them on request (no change to the script: docs/flight.md).
        env = {**os.environ, **flight.worker_env(self.folder / "flight"),
               profhook.DIR_ENV: str(self.folder / "profile")}  # read by the ranks only if --profile wrote its config
        self.proc = agent.spawn({"kind": "script", "torchrun": None}, self.folder, env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.PIPE)

    def cancel(self) -> None:
        """Bad input or --help: nothing was launched, nothing is left."""
        end_tree(self.proc)
        shutil.rmtree(self.folder, ignore_errors=True)

    def go(self, torchrun: dict, log_dir: Path) -> subprocess.Popen:
        write_atomic(self.folder / "ddplab-spec.json", {"kind": "script", "torchrun": torchrun,
                                                         "run_dir": str(log_dir), "wait_for_go": True})
        with contextlib.suppress(BrokenPipeError):  # it died while importing torch: its outcome says so
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        return self.proc


def run_script(early: EarlyAgent, torchrun: dict, log_dir: Path, hang_timeout: float | None, since: float,
               output) -> ScriptRun:
    """torchrun: its parsed options (vars of the Namespace); output: where the script's own stdout goes.
    since: when the user's command began (time.time()): start-up counts toward a hang."""
    start = time.monotonic()
    flight_dir = early.folder / "flight"
    proc = early.go(torchrun, log_dir)
    # With per-rank log files the watch reads those (the launcher's own messages are not the script's progress);
    # without them, anything the agent forwards counts.
    redirected = torchrun.get("redirects") != "0"
    watch = ScriptWatch(proc.pid, hang_timeout, log_dir if redirected else None, since=since, flight_dir=flight_dir)
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
    if early.folder != log_dir:  # the user's --log-dir keeps everything of the run; nothing stays in /tmp
        for name in ("flight", "profile"):
            with contextlib.suppress(OSError):
                shutil.move(str(early.folder / name), str(log_dir / name))
        shutil.rmtree(early.folder, ignore_errors=True)
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
