"""The caller's side of a user's script under torchrun's options (`ddplab launch`): start the agent, forward its
output as it comes (and keep a copy), watch for a hang, end every process on every path, read how the ranks ended."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ddplab import faults
from ddplab.errors import DdplabError
from ddplab.flight import reader as flight
from ddplab.launcher import agent, preempt, procs
from ddplab.launcher import budget as spending
from ddplab.launcher import notice as notices
from ddplab.launcher.files import read_json, write_atomic
from ddplab.launcher.hang import ScriptWatch
from ddplab.launcher.procs import end_tree
from ddplab.launcher.stacks import RankStack
from ddplab.stamps import stamp

AGENT_LEAVES_S = 5.0  # after the ranks have left on a notice, the most the agent is given to copy out their last lines


@dataclass
class ScriptRun:
    status: str  # ok | failed | hang | interrupted | preempted
    seconds: float
    failures: dict  # global rank -> {local_rank, pid, exitcode, time}
    launcher_error: str | None
    launcher_log: Path
    stacks: list[RankStack] | None = None  # hang: every rank's stack
    reason: str = ""  # hang: why it was declared
    dumps: dict | None = None  # each rank's Flight Recorder record: asked for on a hang, written at exit otherwise
    preempted: dict | None = None  # preempted: the signal and the grace
    note: dict | None = None  # ddplab.resume's word from rank 0: {"step", "path"} saved, {"refused": LINE} bad input
    lingering: list[RankStack] = field(default_factory=list)  # preempted: ranks still running LEAVE_S after the save


class EarlyAgent:
    """The agent started first: it imports torch (the longest part of start-up) and waits for "go"; run_script
    completes its spec just before. The caller never imports torch: the agent parses the options with torchrun's
    parser (parser()) while the caller lints and checks. Its folder holds the spec and the Flight Recorder's
    records; it is the run's log folder unless --log-dir names another.

    rank_folders: {VARIABLE: NAME} for the caller's own rank-side hooks (`--profile`'s): each rank gets VARIABLE set to
    the run's folder NAME, and NAME is kept with the run's logs; the launcher knows nothing else of the hook."""

    def __init__(self, rank_folders: dict[str, str] | None = None):
        self.folder = Path(tempfile.mkdtemp(prefix="ddplab-launch-"))
        self.rank_folders = dict(rank_folders or {})
        # Every rank records its collectives and dumps them on request (no change to the script: docs/flight.md).
        env = {
            **os.environ,
            **flight.worker_env(self.folder / "flight"),
            **{var: str(self.folder / name) for var, name in self.rank_folders.items()},
            preempt.NOTE_VAR: str(self.folder / preempt.NOTE_FILE),  # where ddplab.resume says it saved
            faults.NOTICE_PID_VAR: str(os.getpid()),
        }  # a `preempt` fault's notice comes here, as a cloud's would
        reply, reply_to = os.pipe()
        try:
            self.proc = agent.spawn(
                {"kind": "script", "torchrun": None, "reply_fd": reply_to},
                self.folder,
                env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.PIPE,
                pass_fds=(reply_to,),
            )
        finally:
            os.close(reply_to)  # the agent holds the only writing end: its exit is this end's EOF
        self.replies = os.fdopen(reply, "rb")
        # Read from the start: an agent that writes more than a pipe holds before "go" (PYTHONVERBOSE=1, a flood of
        # warnings while torch imports) would block on that write, and the launch with it, for good.
        self.relays = (_Relay(self.proc.stdout), _Relay(self.proc.stderr))

    def parser(self, build: Callable[[], argparse.ArgumentParser]) -> AgentParser:
        """build().parse_args(argv), done in the agent (see AgentParser); `build` must be importable by name."""
        return AgentParser(self, f"{build.__module__}:{build.__qualname__}", build)

    def ask(self, command: str, request: dict) -> dict | None:
        """The agent's answer to one request, or None when it died first (it said why on its stderr)."""
        try:
            self.proc.stdin.write(f"{command} {json.dumps(request)}\n".encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            return None
        line = self.replies.readline()  # no timeout: a dead agent is EOF, and Ctrl-C or SIGTERM interrupts
        return json.loads(line) if line else None

    def counts(self, ns: argparse.Namespace) -> tuple[int, int]:
        """(processes per node, the most nodes): torchrun's reading of --nproc-per-node and --nnodes, asked of the
        agent ("gpu" counts the GPUs torch sees). Values torchrun cannot read raise ValueError."""
        given = {"nproc_per_node": str(ns.nproc_per_node), "nnodes": str(ns.nnodes)}
        answer = self.ask("counts", given)
        if answer is None:  # the agent died first (the run reports it): torchrun's functions here
            from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

            return determine_local_world_size(given["nproc_per_node"]), parse_min_max_nnodes(given["nnodes"])[1]
        if "error" in answer:
            raise ValueError(answer["error"])
        return answer["nproc"], answer["max_nodes"]

    def check(self, ns: argparse.Namespace) -> None:
        """torchrun's own checks of the option values (config_from_args), asked of the agent: a refusal is bad
        input, said before anything starts. An agent that died first is reported by the run."""
        answer = self.ask("check", {"torchrun": vars(ns)})
        if answer is not None and "refused" in answer:
            raise DdplabError(f"torchrun refuses these options: {answer['refused']} (see `ddplab launch --help`)")

    def cancel(self) -> None:
        """Bad input or --help: nothing was launched, nothing is left."""
        end_tree(self.proc)
        self.replies.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def go(self, torchrun: dict, log_dir: Path, port_may_move: bool = False) -> subprocess.Popen:
        spec = {"kind": "script", "torchrun": torchrun, "run_dir": str(log_dir), "port_may_move": port_may_move}
        write_atomic(self.folder / "ddplab-spec.json", {**spec, "wait_for_go": True})
        with contextlib.suppress(BrokenPipeError):  # it died while importing torch: its outcome says so
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        self.replies.close()
        return self.proc


class AgentParser:
    """parse_args(argv) as build().parse_args(argv) gives it, asked of the agent: torchrun's parser imports torch
    (seconds), which the agent does anyway and the caller then need not. Bad input raises the DdplabError the
    parser raised there; --help prints the agent's text and exits, as argparse would. If the agent died first, the
    parser is built here (the run then reports how the agent ended)."""

    def __init__(self, early: EarlyAgent, name: str, build: Callable[[], argparse.ArgumentParser]):
        self.early, self.name, self.build = early, name, build

    def parse_args(self, argv: list[str]) -> argparse.Namespace:
        answer = self.early.ask("parse", {"parser": self.name, "argv": list(argv)})
        if answer is None:
            return self.build().parse_args(argv)
        sys.stdout.write(answer["stdout"])
        sys.stderr.write(answer["stderr"])
        if "error" in answer:
            raise DdplabError(answer["error"], exit_code=answer["exit_code"])
        if "exit" in answer:
            raise SystemExit(answer["exit"])
        return argparse.Namespace(**answer["options"])


def run_script(
    early: EarlyAgent,
    torchrun: dict,
    log_dir: Path,
    hang_timeout: float | None,
    since: float,
    output,
    grace: float = preempt.DEFAULT_GRACE_S,
    budget: spending.Budget | None = None,
    notice_source: notices.Source | None = None,
    port_may_move: bool = False,
) -> ScriptRun:
    """torchrun: its parsed options (vars of the Namespace); output: where the script's own stdout goes.
    since: when the user's command began (time.time()): start-up counts toward a hang.
    grace: after SIGTERM/SIGUSR1/SIGUSR2, how long the ranks (told by SIGTERM) may take to save before the end.
    notice_source: a metadata endpoint polled meanwhile; its notice stops the run as SIGTERM does.
    port_may_move: the rendezvous port is ddplab's choice; the agent takes another if it is gone at the start."""
    start = time.monotonic()
    flight_dir = early.folder / "flight"
    proc = early.go(torchrun, log_dir, port_may_move)
    # With per-rank log files the watch reads those (the launcher's own messages are not the script's progress);
    # without them, anything the agent forwards counts.
    redirected = torchrun.get("redirects") != "0"
    watch = ScriptWatch(proc.pid, hang_timeout, log_dir if redirected else None, since=since, flight_dir=flight_dir)
    launcher_log = log_dir / "launcher.log"
    progress = None if redirected else watch.note_output
    log = open(launcher_log, "ab")  # noqa: SIM115 - closed once both relays have ended, below
    pumps = [relay.forward(target, log, progress) for relay, target in zip(early.relays, (output, sys.stderr))]
    status, stacks, dumps, lingering = "ok", None, None, []
    # `kill` of ddplab: the ranks save, then nothing is orphaned; the ranks seen so far are told at once
    notice = preempt.Forwarder(grace, known=lambda: list(watch.seen)).__enter__()
    saved_at = None  # when rank 0 said it saved on the notice: from then on, the ranks have LEAVE_S to leave
    polling = contextlib.nullcontext()
    if notice_source is not None:
        polling = notices.Watch(
            notice_source,
            lambda text: notice.noticed(f"{notice_source.name}: {text}"),
            notices.poll_period(),
            warn=lambda line: print(f"ddplab launch: {line}", file=sys.stderr, flush=True),
        ).__enter__()
    try:
        while proc.poll() is None:
            if notice.requested:  # no hang watch in the grace: saving is silent
                workers = watch.workers()
                notice.forward(p.pid for p in workers)
                if notice.ranks_gone():
                    stamp("launch", "ranks gone")
                    _agent_leaves(proc, watch, notice)
                    stamp("launch", "agent gone" if proc.poll() is not None else "agent still there")
                    break
                if notice.expired():
                    break
                if saved_at is None and "step" in preempt.read_note(early.folder):
                    saved_at = time.monotonic()
                    stamp("launch", "read the save")
                if saved_at is not None and time.monotonic() - saved_at > preempt.LEAVE_S:
                    # The state is safe; a rank still here holds the machine's last seconds for nothing. What it
                    # is doing is said (its stack), then it is ended; the agent, its ranks all gone, then copies
                    # out their last lines and leaves by itself (_agent_leaves).
                    still = [p for p in workers if procs.alive(p)]
                    stamp("launch", "ending lingering ranks")
                    lingering = watch.stacks(still)
                    for worker in still:
                        with contextlib.suppress(psutil.Error):
                            worker.kill()
                    procs.wait_dead(still, 2)
                    _agent_leaves(proc, watch, notice)
                    break
                time.sleep(0.05)
                continue
            spending.check(budget, lambda line: print(f"ddplab launch: {line}", file=sys.stderr, flush=True))
            stacks = watch.poll()
            if stacks is not None:
                status = "hang"
                # Before anything is ended: each rank's record of what it called, while it still waits.
                dumps = flight.request_dumps(flight_dir, [s.rank for s in stacks if s.rank is not None], timeout=5)
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)  # returns as the agent exits (Python checks every 50 ms at most)
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        polling.__exit__(None, None, None)
        end_tree(proc, watch.seen.values())
        notice.__exit__()
        for pump in pumps:
            pump.join(timeout=5)
        log.close()
        if notice.requested:
            stamp("launch", "tree ended")
    outcome = read_json(log_dir / "ddplab-outcome.json", None)
    if outcome is None:
        outcome = {"failures": {}, "launcher_error": None if status != "ok" else "the launcher exited without a result"}
    preempted = None
    note = preempt.read_note(early.folder)
    if notice.requested and status == "ok":
        status = "preempted"
        preempted = {"signal": budget.reason() if budget and budget.reached_at else notice.name, "grace": grace}
    elif status == "ok" and _stopped_by_a_peer(outcome, note):
        status = "preempted"
        preempted = {"signal": "a notice to another node", "grace": grace}
    if status == "ok" and (outcome["failures"] or outcome.get("launcher_error")):
        status = "failed"
    if dumps is None and status == "failed":
        dumps = flight.read_dumps(flight_dir)  # what each rank wrote as it exited
    if early.folder != log_dir:  # the user's --log-dir keeps everything of the run; nothing stays in /tmp
        for name in ("flight", *early.rank_folders.values()):
            if not (early.folder / name).exists():
                continue
            # A --log-dir used again: this run's folder replaces the last run's (a move into an existing folder
            # would nest it there, and --profile would then read the last run's traces).
            shutil.rmtree(log_dir / name, ignore_errors=True)
            with contextlib.suppress(OSError):
                shutil.move(str(early.folder / name), str(log_dir / name))
        shutil.rmtree(early.folder, ignore_errors=True)
    return ScriptRun(
        status,
        time.monotonic() - start,
        outcome["failures"],
        outcome.get("launcher_error"),
        launcher_log,
        stacks,
        watch.reason,
        dumps,
        preempted,
        note,
        lingering,
    )


def _stopped_by_a_peer(outcome: dict, note: dict) -> bool:
    """No notice came here, but another node's did: the ranks agreed the stop with its ranks (ddplab.resume), saved,
    and every one of this node's ranks left with 4 (or was ended after the save by the agent). Said as the
    preemption it is, with exit 4, as on the node that was told."""
    codes = (failure.get("exitcode") for failure in outcome["failures"].values())
    return "step" in note and preempt.left_after_save(codes) and not outcome.get("launcher_error")


def _agent_leaves(
    proc: subprocess.Popen, watch: ScriptWatch, notice: preempt.Forwarder, timeout: float = AGENT_LEAVES_S
) -> None:
    """Every rank has exited on the notice: let the agent end by itself before the tree is ended. It copies each
    rank's output out of its log file only every 0.1 s (torch's TailLog), so a rank's last lines - the epoch's line
    printed just before it exited - are still in the file when the rank is gone; killed then, the agent drops
    them. It also writes how the ranks ended. Not waited for: an agent that starts new ranks (--max-restarts),
    since a preempted run is not restarted here."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if any(worker.pid not in notice.sent for worker in watch.workers()):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)


class _Relay:
    """One of the agent's output streams, read as it comes from the agent's start: held until forward() says where
    it goes, then forwarded to that stream with a copy in the launcher's log."""

    def __init__(self, stream):
        self.lock = threading.Lock()
        self.held: list[bytes] = []
        self.write: Callable[[bytes], None] | None = None
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            with self.lock:
                if self.write is None:
                    self.held.append(chunk)
                    continue
                write = self.write
            write(chunk)

    def forward(self, target, log, on_output) -> threading.Thread:
        """From now on (what was held first) each chunk goes to `target` and to `log`; on_output() is called for
        each. The thread ends with the stream."""

        def write(chunk: bytes) -> None:
            if on_output is not None:
                on_output()
            with contextlib.suppress(ValueError, OSError):  # the log closed after the run (a straggler's last words)
                log.write(chunk)
                log.flush()
            with contextlib.suppress(ValueError, OSError):
                target.buffer.write(chunk)
                target.flush()

        with self.lock:
            for chunk in self.held:
                write(chunk)
            self.held.clear()
            self.write = write
        return self.thread
