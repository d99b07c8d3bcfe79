"""Start N local workers through PyTorch's elastic launcher, watch them, and always end them.

Three processes are involved:
- the caller (ddplab's CLI) calls `run()`, which starts
- an agent, `python -m ddplab.runner SPEC`, that calls torch.distributed.launcher.api.elastic_launch, which forks
  (or, with fresh_workers, starts as new interpreters)
- N workers, each calling the target function `module:function(payload)` with RANK, WORLD_SIZE... set.

The agent is a separate process group so that the caller can end everything on any path: a deadline, a stall,
a crash, Ctrl-C. Workers report progress by appending JSON lines to `events/rank{R}.jsonl` (`mark()`); the caller
watches those files, so a hang is detected from the outside without any cooperation from a stuck process, and
faulthandler (SIGUSR1) gives each stuck rank's Python stack on demand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from ddplab import faults
from ddplab.procs import end_tree
from ddplab.ports import free_port, port_is_free
from ddplab.errors import DdplabError

POLL_S = 0.05
# Before a worker reaches its first mark it is importing torch and meeting the others; that may be slow on a busy
# machine without being a hang.
STARTUP_GRACE_S = 60.0
TAIL_LINES = 15


# ----------------------------------------------------------------------------------------------- nodes


@dataclass
class Nodes:
    """Several machines meeting through torchrun's c10d rendezvous on HOST:PORT (served by node rank 0).

    The c10d store is unauthenticated: keep HOST:PORT on a private network, never on a public address.
    """

    count: int
    rank: int
    host: str
    port: int
    rdzv_id: str = "ddplab"
    local_addr: str = ""  # this node's address as the others reach it; found from the route to HOST when empty
    interface: str = ""
    join_timeout: int = 120  # seconds to wait for every node at a rendezvous (torchrun's default is 600)

    @classmethod
    def parse(cls, count: int, rank: int, endpoint: str, rdzv_id: str = "ddplab") -> Nodes:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DdplabError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT: use the address of node 0 and a "
                              "free port on it, e.g. 10.0.0.1:29500")
        if not 0 <= rank < count:
            raise DdplabError(f"--node-rank {rank} is outside 0..{count - 1}: number the nodes 0..--nnodes-1")
        nodes = cls(count, rank, host.strip("[]"), int(port), rdzv_id)
        nodes.local_addr, nodes.interface = route_to(nodes.host)
        if rank == 0 and not port_is_free(nodes.port, nodes.local_addr):
            raise DdplabError(f"port {nodes.port} on {nodes.local_addr} is already in use: node 0 serves the "
                              "rendezvous there; choose another port in --rdzv-endpoint on every node")
        return nodes

    def worker_env(self) -> dict[str, str]:
        env = {
            # a fresh store every rendezvous round: restart counts differ between agents (pytorch/pytorch#135712)
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):  # the interface that reaches the other nodes,
            if self.interface and var not in os.environ:          # not whatever the hostname resolves to
                env[var] = self.interface
        return env


def route_to(host: str) -> tuple[str, str]:
    """This machine's address and interface on the route to `host` (a UDP connect sends no packet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))
        except OSError as e:
            raise DdplabError(f"no route to rendezvous host {host!r} ({e.strerror}): check the address of node 0 "
                              "and this machine's network") from None
        addr = s.getsockname()[0]
    interface = next((name for name, addrs in psutil.net_if_addrs().items()
                      if any(a.address == addr for a in addrs)), "")
    return addr, interface


# ----------------------------------------------------------------------------------------------- results


@dataclass
class RankOutcome:
    rank: int
    pid: int | None = None
    exitcode: int | None = None
    error: str | None = None  # "ValueError: message", one line
    traceback: str | None = None
    phase: str | None = None  # last thing the rank said it was doing
    seq: int = 0  # how many marks it made: who is behind whom
    output_tail: str = ""
    stack: str | None = None  # Python stack when the run was declared hung
    result: Any = None
    attempts: int = 0  # how many times the elastic agent started this rank (restarts + 1)


@dataclass
class RunResult:
    status: str  # ok | failed | hang
    seconds: float
    nproc: int
    master_port: int
    ranks: list[RankOutcome]
    root_cause: int | None = None  # rank of the first failure
    stalled: list[int] = field(default_factory=list)  # ranks that never arrived where the others wait
    reason: str = ""
    run_dir: str = ""
    last_progress: float | None = None  # epoch seconds of the last mark any rank made

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def results(self) -> list[Any]:
        return [r.result for r in self.ranks]

    def rank(self, rank: int) -> RankOutcome:
        return next(r for r in self.ranks if r.rank == rank)

    def summary(self) -> str:
        """One line a user can act on."""
        if self.status == "ok":
            return f"{self.nproc} rank(s) finished in {self.seconds:.1f}s"
        if self.status == "hang":
            waiting = [r for r in self.ranks if r.rank not in self.stalled]
            if not waiting:
                return f"{self.reason}: every rank is stuck in {self.ranks[0].phase or 'start-up'}"
            late = ", ".join(f"rank {r.rank} (last in {r.phase or 'start-up'})" for r in self.ranks if r.rank in self.stalled)
            where = ", ".join(str(r.rank) for r in waiting)
            return f"{self.reason}: {late} never reached {waiting[0].phase}, where rank(s) {where} wait"
        if self.status == "failed" and self.root_cause is not None:
            r = self.rank(self.root_cause)
            return f"rank {r.rank} failed (exit code {r.exitcode}) in {r.phase or 'start-up'}: {r.error or 'no error text'}"
        return self.reason


# ----------------------------------------------------------------------------------------------- worker side

_events_file = None
_seq = 0


def mark(phase: str, **data: Any) -> None:
    """Record that this rank entered `phase` (and inject a test fault there if DDPLAB_FAULT asks for one)."""
    global _seq
    faults.hang_before(phase)
    if _events_file is not None:
        _seq += 1
        _events_file.write(json.dumps({"seq": _seq, "t": time.time(), "phase": phase, **data}) + "\n")
        _events_file.flush()
    faults.fail_in(phase)


def _die_with_parent() -> None:
    """On Linux, be killed when the parent dies, so that even `kill -9` of ddplab leaves no agent or worker behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _worker_entry(spec_path: str) -> None:
    """Runs in every worker process (forked by the elastic agent, or a fresh interpreter it started)."""
    global _events_file
    _die_with_parent()
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    # Files are per local rank: on several nodes each runner sees only its own ranks, and global ranks are
    # assigned by the rendezvous. The global rank travels in the "start" event.
    local = int(os.environ["LOCAL_RANK"])
    # After an elastic restart, what this rank wrote in an earlier attempt is not this run's outcome.
    for kind in ("results", "errors"):
        (run_dir / kind / f"local{local}.json").unlink(missing_ok=True)
    _events_file = open(run_dir / "events" / f"local{local}.jsonl", "a", buffering=1)
    stack_file = open(run_dir / "stacks" / f"local{local}.txt", "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    mark("start", pid=os.getpid(), rank=int(os.environ["RANK"]),
         attempt=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    try:
        payload = json.loads((run_dir / "payload.json").read_text())
        value = _resolve(spec["target"])(payload)
    except BaseException as e:
        text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
        # dist.session() stamps the moment it saw the error, before its shutdown made the other ranks fail too.
        failed_at = getattr(e, "ddplab_failed_at", time.time())
        _write_atomic(run_dir / "errors" / f"local{local}.json",
                      {"error": text, "traceback": traceback.format_exc(), "time": failed_at})
        raise
    mark("done")
    _write_atomic(run_dir / "results" / f"local{local}.json", value)


def _write_atomic(path: Path, value: Any) -> None:
    """The caller may read the file the moment it appears, and the agent may kill this process mid-write."""
    tmp = path.with_name(f".{path.name}")
    tmp.write_text(json.dumps(value, default=_jsonable))
    tmp.rename(path)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


# ----------------------------------------------------------------------------------------------- agent side


def _agent_main(spec_path: str) -> int:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _die_with_parent()
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    if not spec["fresh_workers"]:
        _resolve(spec["target"])  # import once here so that every forked worker inherits it
    if sys.stdin.readline().strip() != "go":  # the caller cancelled (its preflight failed)
        return 0
    common = dict(nproc_per_node=spec["nproc"], max_restarts=spec["max_restarts"], monitor_interval=0.05,
                  start_method="fork",
                  logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "logs"), redirects=Std.ALL, tee=Std.NONE))
    nodes = spec["nodes"]
    if nodes is None:  # this machine alone: a static rendezvous on loopback
        store = _loopback_store(spec["master_port"])  # noqa: F841  kept alive: torch's rendezvous reuses its server
        config = LaunchConfig(min_nodes=1, max_nodes=1, run_id=spec["run_id"], rdzv_backend="static",
                              rdzv_endpoint=f"127.0.0.1:{spec['master_port']}", rdzv_configs={"rank": 0},
                              local_addr="127.0.0.1", **common)
    else:  # several machines: torchrun's c10d rendezvous, hosted by node 0
        config = LaunchConfig(min_nodes=nodes["count"], max_nodes=nodes["count"], run_id=nodes["rdzv_id"],
                              rdzv_backend="c10d", rdzv_endpoint=f"{nodes['host']}:{nodes['port']}",
                              rdzv_configs={"is_host": nodes["rank"] == 0, "join_timeout": nodes["join_timeout"]},
                              local_addr=nodes["local_addr"], **common)
    failures = {}
    try:
        if spec["fresh_workers"]:
            elastic_launch(config, sys.executable)("-u", "-m", "ddplab.runner", "--worker", spec_path)
        else:
            elastic_launch(config, _worker_entry)(spec_path)
    except ChildFailedError as e:
        failures = {str(rank): {"exitcode": f.exitcode, "time": f.timestamp, "message": f.message}
                    for rank, f in e.failures.items()}
    _write_atomic(run_dir / "agent.json", {"failures": failures})  # the caller may end this process mid-write
    return 1 if failures else 0


def _loopback_store(port: int):
    """The rendezvous store for a single node, listening on 127.0.0.1 only.

    torch's static rendezvous creates its TCPStore with multi_tenant=True, which reuses a server this process already
    runs on that port; left to itself, that server would listen on every interface ("::"), and the store is
    unauthenticated. So the server is made here first, from a socket bound to loopback.
    """
    from torch.distributed import TCPStore

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    fd = sock.detach()
    try:
        return TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True, master_listen_fd=fd,
                        wait_for_workers=False)
    except (RuntimeError, ValueError):  # older torch: the libuv server does not take a listening socket
        return TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True, master_listen_fd=fd,
                        wait_for_workers=False, use_libuv=False)


# ----------------------------------------------------------------------------------------------- caller side


def run(target: str, payload: Any = None, *, nproc: int, master_port: int | None = None,
        stall_timeout: float | None = None, deadline: float | None = None, max_restarts: int = 0,
        env: dict[str, str] | None = None, keep_dir: bool = False,
        on_event: Callable[[int, dict], None] | None = None, nodes: Nodes | None = None) -> RunResult:
    """Run `target(payload)` on `nproc` local ranks and return what each rank did.

    stall_timeout: declare a hang when no rank has made progress (`mark`) for this many seconds.
    deadline: declare a hang when the whole run takes longer than this.
    on_event: called in this process as on_event(rank, event) for every mark a worker makes (live progress).
    """
    pending = start(target, nproc=nproc, master_port=master_port, max_restarts=max_restarts, env=env, nodes=nodes)
    return pending.run(payload, stall_timeout=stall_timeout, deadline=deadline, keep_dir=keep_dir,
                       on_event=on_event)


def start(target: str, *, nproc: int, master_port: int | None = None, max_restarts: int = 0,
          env: dict[str, str] | None = None, nodes: Nodes | None = None, fresh_workers: bool = False) -> PendingRun:
    """Start the agent now and let it import torch and the target while the caller does other work (preflight);
    nothing is launched until PendingRun.run(), and PendingRun.cancel() ends it.

    nodes: several machines meeting through torchrun's c10d rendezvous; None = this machine alone.
    fresh_workers: each worker is a new interpreter, as torchrun starts them, instead of a fork of the agent.
    Slower to start (every worker imports torch, ~2 s), but a forked worker's gloo collectives of 1-4 MiB ran
    4-6 % slower than torchrun's (docs/bench.md), so `bench`, which measures them, asks for fresh ones.
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
        raise DdplabError(f"port {master_port} on 127.0.0.1 is already in use: pass another --master-port, "
                          "or omit it and ddplab picks a free one")
    run_dir = Path(tempfile.mkdtemp(prefix="ddplab-run-"))
    for sub in ("events", "stacks", "errors", "results", "logs"):
        (run_dir / sub).mkdir()
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps({
        "target": target, "nproc": nproc, "master_port": master_port,
        "max_restarts": max_restarts, "run_dir": str(run_dir), "run_id": run_dir.name,
        "nodes": dataclasses.asdict(nodes) if nodes is not None and nodes.count > 1 else None,
        "fresh_workers": fresh_workers,
    }))
    child_env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: N ranks must not each claim every core
    # Warnings from torchelastic's own logger would only duplicate what the result object says.
    child_env.setdefault("TORCHELASTIC_LOG_LEVEL", "ERROR")
    with open(run_dir / "agent.log", "wb") as agent_log:
        agent = subprocess.Popen([sys.executable, "-m", "ddplab.runner", str(spec_path)], stdout=agent_log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.PIPE, env=child_env,
                                 start_new_session=True)
    return PendingRun(agent, run_dir, nproc, master_port)


@dataclass
class PendingRun:
    agent: subprocess.Popen
    run_dir: Path
    nproc: int
    master_port: int

    def cancel(self) -> None:
        _end_all(self.agent, self.run_dir, self.nproc)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def run(self, payload: Any = None, stall_timeout: float | None = None, deadline: float | None = None,
            keep_dir: bool = False, on_event: Callable[[int, dict], None] | None = None) -> RunResult:
        agent, run_dir, nproc = self.agent, self.run_dir, self.nproc
        (run_dir / "payload.json").write_text(json.dumps(payload))
        start, started_at = time.monotonic(), time.time()
        status, reason = "ok", ""
        follow = _EventFollower(run_dir, nproc, on_event)
        try:
            agent.stdin.write(b"go\n")
            agent.stdin.close()
            while agent.poll() is None:
                follow.poll()
                if _all_done(run_dir, nproc):
                    # Every result is on disk: waiting for the agent's orderly exit (exit barrier, interpreter
                    # teardown) would add most of a second and tell nothing more.
                    status = "done"
                    break
                quiet = _quiet_seconds(run_dir, nproc, started_at)
                if deadline is not None and time.monotonic() - start > deadline:
                    status, reason = "hang", f"the run passed its {deadline:g}s deadline"
                elif stall_timeout is not None and quiet > stall_timeout:
                    status, reason = "hang", f"no rank made progress for {stall_timeout:g}s"
                if status == "hang":
                    _dump_stacks(run_dir, nproc)
                    break
                time.sleep(POLL_S)
        except BrokenPipeError:  # the agent died before it was told to go; _collect reports its log
            pass
        finally:  # any path, Ctrl-C and SIGTERM (the CLI turns it into SystemExit) included
            _end_all(agent, run_dir, nproc)
            follow.poll()
        agent_rc = 0 if status == "done" else agent.returncode
        result = _collect(run_dir, nproc, self.master_port, "ok" if status == "done" else status, reason,
                          time.monotonic() - start, agent_rc)
        if not keep_dir and result.ok:
            shutil.rmtree(run_dir, ignore_errors=True)
        return result


class _EventFollower:
    """Hands each new event line of every rank to a callback, reading only what was appended since last time."""

    def __init__(self, run_dir: Path, nproc: int, callback: Callable[[int, dict], None] | None):
        self.paths = [run_dir / "events" / f"local{r}.jsonl" for r in range(nproc)]
        self.offsets = [0] * nproc
        self.callback = callback

    def poll(self) -> None:
        if self.callback is None:
            return
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
                self.callback(rank, json.loads(line))


def events(run_dir: Path, local: int) -> list[dict]:
    """Every mark local rank `local` made in the run kept in `run_dir` (all attempts; a line still being written
    is left out). The "start" event of each attempt carries the global rank, the pid and the attempt number."""
    try:
        lines = (run_dir / "events" / f"local{local}.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _all_done(run_dir: Path, nproc: int) -> bool:
    results = run_dir / "results"
    return all((results / f"local{local}.json").exists() for local in range(nproc))


def _quiet_seconds(run_dir: Path, nproc: int, started_at: float) -> float:
    """Seconds since any rank last made progress; a rank still starting up gets STARTUP_GRACE_S."""
    mtimes = []
    for local in range(nproc):
        with contextlib.suppress(FileNotFoundError):
            mtimes.append((run_dir / "events" / f"local{local}.jsonl").stat().st_mtime)
    newest = max(mtimes, default=started_at)
    if len(mtimes) < nproc:
        newest = max(newest, started_at + STARTUP_GRACE_S)
    return time.time() - newest


def _worker_pids(run_dir: Path, nproc: int) -> dict[int, int]:
    """Local rank -> pid of its latest attempt."""
    pids = {}
    for local in range(nproc):
        for event in events(run_dir, local):
            if event.get("pid"):
                pids[local] = event["pid"]
    return pids


def _dump_stacks(run_dir: Path, nproc: int) -> None:
    """Ask every live worker for its Python stack (faulthandler on SIGUSR1 writes it to stacks/rankR.txt)."""
    for pid in _worker_pids(run_dir, nproc).values():
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    time.sleep(0.3)  # faulthandler writes from the signal handler; give it a moment on a busy machine


def _end_all(agent: subprocess.Popen, run_dir: Path, nproc: int) -> None:
    """Kill the agent and every worker, whatever state they are in, and wait until they are gone."""
    orphans = []
    for pid in _worker_pids(run_dir, nproc).values():  # workers of an agent that already died
        with contextlib.suppress(psutil.NoSuchProcess):
            orphans.append(psutil.Process(pid))
    end_tree(agent, orphans)


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def _own_frames(path: Path) -> str | None:
    """The worker's stack without the launcher's frames below _worker_entry (faulthandler prints newest first)."""
    if not path.exists() or not path.stat().st_size:
        return None
    kept = []
    for line in path.read_text(errors="replace").splitlines():
        if "in _worker_entry" in line:
            break
        kept.append(line)
    return "\n".join(kept)


def _collect(run_dir: Path, nproc: int, master_port: int, status: str, reason: str, seconds: float,
             agent_rc: int | None) -> RunResult:
    agent_info = {}
    if (run_dir / "agent.json").exists():
        agent_info = json.loads((run_dir / "agent.json").read_text())
    failures = agent_info.get("failures", {})  # keyed by global rank
    ranks, first_error = [], None
    for local in range(nproc):
        marks = events(run_dir, local)
        starts = [e for e in marks if e["phase"] == "start"]
        out = RankOutcome(rank=starts[-1]["rank"] if starts else local)
        if marks:
            out.phase, out.seq = marks[-1]["phase"], marks[-1]["seq"]
            out.pid = starts[-1]["pid"] if starts else None
        failure = failures.get(str(out.rank))
        if failure:
            out.exitcode = failure["exitcode"]
        err_path = run_dir / "errors" / f"local{local}.json"
        if err_path.exists():
            err = json.loads(err_path.read_text())
            out.error, out.traceback = err["error"], err["traceback"]
            # The agent reports only the first process it saw fail; a Python exception exits with 1.
            out.exitcode = 1 if out.exitcode is None else out.exitcode
            if first_error is None or err["time"] < first_error[1]:
                first_error = (out.rank, err["time"])
        res_path = run_dir / "results" / f"local{local}.json"
        if res_path.exists():
            out.result = json.loads(res_path.read_text())
        logs = sorted(run_dir.glob(f"logs/**/attempt_*/{local}/"))
        if logs:
            out.output_tail = "\n".join(t for t in (_tail(logs[-1] / "stdout.log"), _tail(logs[-1] / "stderr.log")) if t)
        out.stack = _own_frames(run_dir / "stacks" / f"local{local}.txt")
        out.attempts = len(starts)
        ranks.append(out)

    result = RunResult(status, seconds, nproc, master_port, ranks, reason=reason, run_dir=str(run_dir))
    stamps = [e["t"] for local in range(nproc) for e in events(run_dir, local)[-1:]]
    result.last_progress = max(stamps, default=None)
    if status == "hang":
        top = max(r.seq for r in ranks)
        behind = [r.rank for r in ranks if r.seq < top]
        result.stalled = behind or [r.rank for r in ranks]
    elif status == "ok" and (agent_rc != 0 or failures or any(r.result is None for r in ranks)):
        result.status = "failed"
        if first_error is not None:
            result.root_cause = first_error[0]
        elif failures:
            result.root_cause = int(min(failures, key=lambda k: failures[k]["time"]))
        result.reason = result.summary() if result.root_cause is not None else (
            f"the launcher failed before the workers ran; see {run_dir / 'agent.log'}:\n{_tail(run_dir / 'agent.log')}")
    return result


if __name__ == "__main__":
    # Through the package module, not __main__: workers must share the module state that mark() writes to.
    from ddplab.runner import _agent_main, _worker_entry

    if sys.argv[1] == "--worker":  # a fresh worker (start(fresh_workers=True)), started by the elastic agent
        _worker_entry(sys.argv[2])
    else:
        sys.exit(_agent_main(sys.argv[1]))
