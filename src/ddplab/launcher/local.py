"""The caller's side of a run of ddplab's own workers (check, train, bench, scale): start the agent, watch the ranks'
progress marks, end everything on any path, and collect what each rank did.

Three processes are involved: the caller (ddplab's CLI) calls `start()` then `PendingRun.run()`; the agent
(`agent.py`) calls elastic_launch; N workers (`worker.py`) each call the target `module:function(payload)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ddplab.errors import DdplabError
from ddplab.flight import reader as flight_recorder
from ddplab.launcher import agent, preempt
from ddplab.launcher.files import read_json, write_atomic
from ddplab.launcher.forked import Forked
from ddplab.launcher.hang import HangDetector
from ddplab.launcher.logs import tail
from ddplab.launcher.nodes import Nodes
from ddplab.launcher.outcome import Failed, RankOutcome, RunResult, root_cause
from ddplab.launcher.procs import end_tree
from ddplab.launcher.progress import read_events
from ddplab.ports import free_port, port_is_free
from ddplab.stamps import stamp

POLL_S = 0.05
TORCH_DUMP_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
TORCH_DUMP_PREFIX = "torch_trace_rank_"  # torch appends the rank
# Until a rank marks past "start" the ranks import torch and meet each other; that may be slow on a busy
# machine without being a hang.
STARTUP_GRACE_S = 60.0


def run(
    target: str,
    payload: Any = None,
    *,
    nproc: int,
    master_port: int | None = None,
    stall_timeout: float | None = None,
    deadline: float | None = None,
    max_restarts: int = 0,
    env: dict[str, str] | None = None,
    keep_dir: bool = False,
    on_event: Callable[[int, dict], None] | None = None,
    nodes: Nodes | None = None,
    fresh_workers: bool = False,
    flight: bool = False,
) -> RunResult:
    """Run `target(payload)` on `nproc` local ranks and return what each rank did.

    stall_timeout: declare a hang when no rank has made progress (`mark`) for this many seconds.
    deadline: declare a hang when the whole run takes longer than this.
    on_event: called in this process as on_event(rank, event) for every mark a worker makes (live progress).
    """
    pending = start(
        target,
        nproc=nproc,
        master_port=master_port,
        max_restarts=max_restarts,
        env=env,
        nodes=nodes,
        fresh_workers=fresh_workers,
        flight=flight,
    )
    return pending.run(payload, stall_timeout=stall_timeout, deadline=deadline, keep_dir=keep_dir, on_event=on_event)


def start(
    target: str,
    *,
    nproc: int,
    master_port: int | None = None,
    max_restarts: int = 0,
    env: dict[str, str] | None = None,
    nodes: Nodes | None = None,
    fresh_workers: bool = False,
    flight: bool = False,
    hooks: tuple[str, ...] = (),
) -> PendingRun:
    """Start the agent now and let it import torch and the target while the caller does other work (preflight);
    nothing is launched until PendingRun.run(), and PendingRun.cancel() ends it.

    nodes: several machines meeting through torchrun's c10d rendezvous; None = this machine alone.
    hooks: `module:function`s each rank calls before the target (installers that read the environment).
    fresh_workers: each worker is a new interpreter, as torchrun starts them, instead of a fork of the agent.
    Slower to start (every worker imports torch and torch._dynamo, ~3 CPU s), but `bench` asks for them: its
    collectives timed 4-6 % slower in forked workers (docs/bench.md).
    """
    if nproc < 1:
        raise DdplabError(f"--nproc {nproc}: need at least 1 process")
    child_env = {**os.environ, **(env or {})}
    if nodes is not None and nodes.count > 1:
        master_port = nodes.port
        child_env.update(nodes.worker_env())
    elif master_port is None:
        master_port = free_port()
    elif not port_is_free(master_port):
        raise DdplabError(
            f"port {master_port} on 127.0.0.1 is already in use: pass another --master-port, "
            "or omit it and ddplab picks a free one"
        )
    run_dir = Path(tempfile.mkdtemp(prefix="ddplab-run-"))
    for sub in ("events", "stacks", "errors", "results", "logs"):
        (run_dir / sub).mkdir()
    if flight:
        child_env.update(flight_recorder.worker_env(run_dir / "flight", child_env))
        # Where torch itself dumps the Flight Recorder (NCCL, on a collective's timeout): into this run's folder,
        # where collect() reads it, instead of /tmp/nccl_trace_rank_N. torch 2.13 reads the first name, older
        # releases the second (torch/csrc/distributed/c10d/FlightRecorder.cpp, DebugInfoWriter::getWriter).
        for name in TORCH_DUMP_VARS:
            child_env.setdefault(name, str(run_dir / "flight" / TORCH_DUMP_PREFIX))
    child_env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: N ranks must not each claim every core
    # Warnings from torchelastic's own logger would only duplicate what the result object says.
    child_env.setdefault("TORCHELASTIC_LOG_LEVEL", "ERROR")
    spec = {
        "kind": "function",
        "target": target,
        "nproc": nproc,
        "master_port": master_port,
        "max_restarts": max_restarts,
        "run_id": run_dir.name,
        "fresh_workers": fresh_workers,
        "hooks": list(hooks),
        "nodes": dataclasses.asdict(nodes) if nodes is not None and nodes.count > 1 else None,
    }
    with open(run_dir / "agent.log", "wb") as agent_log:
        proc = agent.spawn(spec, run_dir, child_env, stdout=agent_log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE)
    return PendingRun(proc, run_dir, nproc, master_port)


@dataclass
class PendingRun:
    agent: subprocess.Popen
    run_dir: Path
    nproc: int
    master_port: int
    launched: bool = False  # run() was called: it ends the agent itself, on every path
    forks: list[Forked] = dataclasses.field(default_factory=list)

    def cancel(self) -> None:
        end_all(self.agent, self.run_dir, self.nproc, self.forks)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def fork(
        self,
        target: str,
        payload: Any,
        wait_s: float = 0.0,
        on_wait: Callable[[], None] | None = None,
        background: bool = False,
    ) -> Forked:
        """Run `module:function`(payload) in a fork of the agent (agent._fork_call): work that needs torch, in a
        process that has imported it already. Before run(). background: at the lowest CPU priority, beside the
        ranks; once they are done, run() keeps the agent up to wait_s for the answer (calling on_wait if it has to
        wait); any other end ends the fork too. The caller reads the answer with Forked.result() and removes it with
        Forked.cancel()."""
        alive = self.agent.poll
        forked = Forked(Path(tempfile.mkdtemp(prefix="ddplab-fork-")), wait_s, on_wait, lambda: alive() is None)
        request = {"target": target, "payload": payload, "folder": str(forked.folder), "background": background}
        try:
            self.agent.stdin.write(f"fork {json.dumps(request)}\n".encode())
            self.agent.stdin.flush()
        except BrokenPipeError:  # the agent is gone (run() reports why): the fork's result() is NoAnswer
            pass
        self.forks.append(forked)
        return forked

    def run(
        self,
        payload: Any = None,
        stall_timeout: float | None = None,
        deadline: float | None = None,
        keep_dir: bool = False,
        on_event: Callable[[int, dict], None] | None = None,
        grace: float | None = None,
    ) -> RunResult:
        """grace: on SIGTERM/SIGUSR1/SIGUSR2 every rank is sent SIGTERM and has this long to save and return its
        result (launcher.preempt); None: SIGTERM ends everything at once (the CLI's SystemExit)."""
        proc, run_dir, nproc = self.agent, self.run_dir, self.nproc
        self.launched = True
        write_atomic(run_dir / "payload.json", payload)
        start, started_at = time.monotonic(), time.time()
        detector = HangDetector(stall_timeout, since=started_at)
        status, reason = "ok", ""
        follow = _EventFollower(run_dir, nproc, on_event)
        notice = preempt.Forwarder(grace if grace is not None else 0.0)
        try:
            if grace is not None:
                notice.__enter__()
            proc.stdin.write(b"go\n")
            proc.stdin.close()
            while proc.poll() is None:
                follow.poll()
                if _all_done(run_dir, nproc):
                    # Every result is on disk: waiting for the agent's orderly exit (exit barrier, interpreter
                    # teardown) would add most of a second and tell nothing more.
                    status = "done"
                    if notice.requested:
                        stamp("launch", "results read")
                    break
                if notice.requested:  # the ranks save, then return their results; no hang watch meanwhile
                    notice.forward(_worker_pids(run_dir, nproc).values())
                    if notice.expired() or notice.ranks_gone():
                        status, reason = (
                            "interrupted",
                            (
                                f"preempted ({notice.name}): the ranks did not finish "
                                f"within the {notice.grace:g} s grace"
                            ),
                        )
                        break
                    time.sleep(POLL_S)
                    continue
                _note_progress(detector, run_dir, nproc, started_at, follow)
                if deadline is not None and time.monotonic() - start > deadline:
                    status, reason = "hang", f"the run passed its {deadline:g}s deadline"
                elif detector.hung():
                    status, reason = "hang", detector.reason
                if status == "hang":
                    _dump_stacks(run_dir, nproc)
                    if (run_dir / "flight").is_dir():  # each rank's record, while it still waits
                        flight_recorder.request_dumps(run_dir / "flight", _global_ranks(run_dir, nproc), timeout=5)
                    break
                time.sleep(POLL_S)
            if status == "done":
                self._wait_for_forks()
        except BrokenPipeError:  # the agent died before it was told to go; collect() reports its log
            pass
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM (the CLI turns it into SystemExit)
            status = "interrupted"
            raise
        finally:  # any path
            if grace is not None:
                notice.__exit__()
            end_all(proc, run_dir, nproc, self.forks)
            if notice.requested:
                stamp("launch", "tree ended")
            follow.poll()
            if status == "interrupted" and not keep_dir:
                # The user stopped a run that had not failed: nothing of it stays in /tmp (a hang or a failure
                # keeps the ranks' logs and says where).
                shutil.rmtree(run_dir, ignore_errors=True)
        agent_rc = 0 if status == "done" else proc.returncode
        result = collect(
            run_dir,
            nproc,
            self.master_port,
            "ok" if status == "done" else status,
            reason,
            time.monotonic() - start,
            agent_rc,
        )
        if not keep_dir and result.ok:
            shutil.rmtree(run_dir, ignore_errors=True)
            result.run_dir = ""  # nothing kept
        elif not keep_dir:
            result.run_dir = _keep_for_user(run_dir)
        return result

    def _wait_for_forks(self) -> None:
        for forked in self.forks:
            if not forked.done():
                if forked.on_wait is not None:
                    forked.on_wait()
                forked.wait(forked.wait_s)


def _keep_for_user(run_dir: Path) -> str:
    """After a failure, what the user may still need from the run's folder: every rank's whole output (logs/; the
    result quotes only its tail) and the agent's log when it says something. The rest is this run's own bookkeeping
    (events, payload, results, stacks and Flight Recorder records, already read): removed. Returns the folder, or
    "" when nothing was worth keeping."""
    logs = [p for p in run_dir.glob("logs/**/*") if p.is_file()]
    for empty in [p for p in logs if p.stat().st_size == 0]:
        empty.unlink()
    ranks_said_something = any(p.stat().st_size for p in logs if p.exists())
    for entry in run_dir.iterdir():
        # The agent's log repeats a worker's failure in torchelastic's words; alone it matters, when the launcher
        # failed before any worker wrote a line.
        keep = entry.name == "logs" if ranks_said_something else entry.name == "agent.log" and entry.stat().st_size
        if not keep:
            (shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True))
    if not any(p.is_file() for p in run_dir.rglob("*")):
        shutil.rmtree(run_dir, ignore_errors=True)
        return ""
    return str(run_dir)


class _EventFollower:
    """Reads each rank's new event lines (only what was appended since last time), hands them to a callback, and
    keeps each rank's latest phase: whether the ranks are still starting up."""

    def __init__(self, run_dir: Path, nproc: int, callback: Callable[[int, dict], None] | None):
        self.paths = [run_dir / "events" / f"local{r}.jsonl" for r in range(nproc)]
        self.offsets = [0] * nproc
        self.callback = callback
        self.phases: list[str | None] = [None] * nproc  # each rank's latest mark; "start" again after a restart
        self.last_start = 0.0  # when the newest attempt's first rank marked "start"

    def poll(self) -> None:
        for rank, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[rank])
                    chunk = f.read()
            except FileNotFoundError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next poll
            self.offsets[rank] += len(complete)
            for line in complete.splitlines():
                event = json.loads(line)
                self.phases[rank] = event["phase"]
                if event["phase"] == "start":
                    self.last_start = max(self.last_start, event["t"])
                if self.callback is not None:
                    self.callback(rank, event)

    def starting(self) -> bool:
        """No rank has marked a phase past "start" in its present attempt. Until one has, the ranks import, fork
        and form the group (a rank's first mark comes after its init_process_group): work whose length is the
        machine's, not the job's, and which a short hang timeout must not cut (STARTUP_GRACE_S bounds it). Once one
        rank marks, the group exists and the others' time counts: a rank that hangs at its first mark is named."""
        return all(phase in (None, "start") for phase in self.phases)


def events(run_dir: Path, local: int) -> list[dict]:
    """Every mark local rank `local` made in the run kept in `run_dir` (all attempts). The "start" event of each
    attempt carries the global rank, the pid and the attempt number."""
    return read_events(Path(run_dir) / "events" / f"local{local}.jsonl")


def _all_done(run_dir: Path, nproc: int) -> bool:
    results = run_dir / "results"
    return all((results / f"local{local}.json").exists() for local in range(nproc))


def _note_progress(
    detector: HangDetector, run_dir: Path, nproc: int, started_at: float, follow: _EventFollower
) -> None:
    """A rank's progress is its events file growing; while the ranks start up they have STARTUP_GRACE_S."""
    mtimes = []
    for local in range(nproc):
        with contextlib.suppress(FileNotFoundError):
            mtimes.append((run_dir / "events" / f"local{local}.jsonl").stat().st_mtime)
    newest = max(mtimes, default=started_at)
    if follow.starting():
        newest = max(newest, max(started_at, follow.last_start) + STARTUP_GRACE_S)
    detector.progressed(newest)


def _latest_starts(run_dir: Path, nproc: int) -> dict[int, dict]:
    """Local rank -> the "start" event of its latest attempt (global rank, pid), for the ranks that started."""
    starts = {}
    for local in range(nproc):
        for event in events(run_dir, local):
            if event["phase"] == "start":
                starts[local] = event
    return starts


def _worker_pids(run_dir: Path, nproc: int) -> dict[int, int]:
    """Local rank -> pid of its latest attempt."""
    return {local: start["pid"] for local, start in _latest_starts(run_dir, nproc).items() if start.get("pid")}


def _global_ranks(run_dir: Path, nproc: int) -> list[int]:
    return [start["rank"] for start in _latest_starts(run_dir, nproc).values()]


def _dump_stacks(run_dir: Path, nproc: int) -> None:
    """Ask every live worker for its Python stack (faulthandler on SIGUSR1 writes it to stacks/localR.txt)."""
    for pid in _worker_pids(run_dir, nproc).values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
    time.sleep(0.3)  # faulthandler writes from the signal handler; give it a moment on a busy machine


def end_all(proc: subprocess.Popen, run_dir: Path, nproc: int, forks: list[Forked] = ()) -> None:
    """Kill the agent, every worker and the agent's forks, whatever state they are in, and wait until they are
    gone."""
    orphans = []
    pids = [*_worker_pids(run_dir, nproc).values(), *(f.pid() for f in forks)]
    for pid in filter(None, pids):  # workers and forks of an agent that already died (a fork not yet made: None)
        with contextlib.suppress(psutil.NoSuchProcess):
            orphans.append(psutil.Process(pid))
    end_tree(proc, orphans)


def _own_frames(path: Path) -> str | None:
    """The worker's stack without the launcher's frames below the worker entry (faulthandler: newest first)."""
    if not path.exists() or not path.stat().st_size:
        return None
    kept, lines = [], path.read_text(errors="replace").splitlines()
    # The thread that was running the target; the others (the Flight Recorder's dump thread...) are not its story.
    current = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), 0)
    for line in lines[current:]:
        if "ddplab/launcher/worker.py" in line:
            break
        kept.append(line)
    return "\n".join(kept)


def collect(
    run_dir: Path, nproc: int, master_port: int, status: str, reason: str, seconds: float, agent_rc: int | None
) -> RunResult:
    outcome = read_json(run_dir / "ddplab-outcome.json", {})
    failures = outcome.get("failures", {})  # keyed by global rank
    ranks, failed, stamps = [], [], []
    for local in range(nproc):
        marks = events(run_dir, local)
        starts = [e for e in marks if e["phase"] == "start"]
        out = RankOutcome(rank=starts[-1]["rank"] if starts else local)
        if marks:
            out.phase, out.seq = marks[-1]["phase"], marks[-1]["seq"]
            out.pid = starts[-1]["pid"] if starts else None
            stamps.append(marks[-1]["t"])
        failure = failures.get(str(out.rank))
        if failure:
            out.exitcode = failure["exitcode"]
        err = read_json(run_dir / "errors" / f"local{local}.json")
        if err:
            out.error, out.traceback = err["error"], err["traceback"]
            # The agent reports only the first process it saw fail; a Python exception exits with 1.
            out.exitcode = 1 if out.exitcode is None else out.exitcode
        out.result = read_json(run_dir / "results" / f"local{local}.json")
        logs = sorted(run_dir.glob(f"logs/**/attempt_*/{local}/"))
        if logs:
            out.output_tail = "\n".join(t for t in (tail(logs[-1] / "stdout.log"), tail(logs[-1] / "stderr.log")) if t)
        out.stack = _own_frames(run_dir / "stacks" / f"local{local}.txt")
        out.attempts = len(starts)
        ranks.append(out)
        if err or failure:
            failed.append(
                Failed(
                    out.rank, out.exitcode, (err or {}).get("traceback") or out.output_tail, (err or failure)["time"]
                )
            )

    result = RunResult(status, seconds, nproc, master_port, ranks, reason=reason, run_dir=str(run_dir))

    result.last_progress = max(stamps, default=None)
    if status == "hang":
        top = max(r.seq for r in ranks)
        behind = [r.rank for r in ranks if r.seq < top]
        result.stalled = behind or [r.rank for r in ranks]
    elif status == "ok" and (agent_rc != 0 or failures or any(r.result is None for r in ranks)):
        result.status = "failed"
        result.root_cause = root_cause(failed)
        result.reason = (
            result.summary()
            if result.root_cause is not None
            else (
                f"the launcher failed before the workers ran; see {run_dir / 'agent.log'}:\n{tail(run_dir / 'agent.log')}"
            )
        )
    if result.status != "ok" and (dumps := _flight_dumps(run_dir / "flight")):
        result.flight = flight_recorder.analyse(
            dumps,
            stacks={r.rank: f"phase {r.phase}" for r in ranks if r.phase},
            errors={r.rank: r.error for r in ranks if r.error},
        )
    return result


def _flight_dumps(flight_dir: Path) -> dict[int, dict]:
    """Each rank's Flight Recorder record: ddplab's own (asked for on a hang, written at exit), else the one torch
    wrote by itself (NCCL's dump on a collective's timeout, in the pickle format of torch's flight_recorder tools)."""
    dumps = flight_recorder.read_dumps(flight_dir)
    for path in flight_dir.glob(f"{TORCH_DUMP_PREFIX}*"):
        rank = path.name[len(TORCH_DUMP_PREFIX) :]
        if not rank.isdigit() or int(rank) in dumps:
            continue
        try:
            with open(path, "rb") as f:
                trace = _PlainUnpickler(f).load()
            trace = json.loads(json.dumps(trace))  # tuples as lists: the shape of torch's JSON dump
        except Exception:  # noqa: BLE001 - half written by a rank that died, or not torch's: no record then
            continue
        dumps[int(rank)] = {
            "rank": int(rank),
            "trigger": "torch",
            "time": path.stat().st_mtime,
            "why": None,
            "traces": {"_dump_nccl_trace_json": trace},
        }
    return dict(sorted(dumps.items()))


class _PlainUnpickler(pickle.Unpickler):
    """Dicts, lists, strings and numbers only (what torch's dump holds): a file that names any class or function
    is refused, so reading a dump can never run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")
