"""The one agent: `python -m ddplab.launcher.agent SPEC` runs torch's elastic_launch for a run and records how its
workers ended. It is the only place in ddplab that calls elastic_launch.

A run's SPEC (JSON, in its run folder) says what to start: ddplab's own `module:function` target ("function") or a
user's script with torchrun's options ("script"). What that means for torch, `launcher.plan.plan(spec)` decides
without side effects; the agent does the rest: it serves a single node's loopback rendezvous store, sets the
variables torchrun would set for the ranks (OMP_NUM_THREADS), and launches.

The agent runs in a session of its own (the caller ends the whole group on any path) and dies with its caller.
The outcome (`ddplab-outcome.json`) maps each failed global rank to its local rank, pid, exit code and time.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path

from ddplab.flight import rankdump
from ddplab.flight import reader as flight
from ddplab.launcher import preempt
from ddplab.launcher.files import write_atomic
from ddplab.launcher.launchplan import BOOTSTRAP, Refused, plan, plan_script
from ddplab.launcher.lifeline import PARENT_VAR, die_with_parent
from ddplab.ports import free_port
from ddplab.stamps import stamp


def spawn(
    spec: dict, run_dir: Path, env: dict[str, str], *, stdout, stderr, stdin=None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
    """Start the agent for `spec` (caller side). With stdin=PIPE it waits for "go" before launching anything, and
    answers the caller's requests meanwhile on the spec's reply_fd (one of pass_fds; see _until_go)."""
    spec_path = run_dir / "ddplab-spec.json"
    spec_path.write_text(json.dumps({**spec, "run_dir": str(run_dir), "wait_for_go": stdin is not None}))
    env = {**env, PARENT_VAR: str(os.getpid())}  # the agent dies with this process, even if it dies first
    return subprocess.Popen(
        [sys.executable, "-m", "ddplab.launcher.agent", str(spec_path)],
        stdout=stdout,
        stderr=stderr,
        stdin=stdin,
        env=env,
        start_new_session=True,
        pass_fds=pass_fds,
    )


def spec_path_of(cmdline: list[str]) -> str | None:
    """SPEC in an agent's command line `python -m ddplab.launcher.agent SPEC` (monitor finds runs by it)."""
    for i, arg in enumerate(cmdline[:-1]):
        if arg == "ddplab.launcher.agent" or arg.endswith("/ddplab/launcher/agent.py"):
            return cmdline[i + 1]
    return None


def main(spec_path: str) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    die_with_parent()
    # A scheduler that signals every process of a job step (Slurm's scancel --signal, its --signal) reaches this
    # agent too: the stop is the launcher's to pass on (SIGTERM to the ranks), and USR1/USR2's default action would
    # end the agent and its ranks before they save. A handler, not SIG_IGN: the ranks must not inherit it.
    for name in ("SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), lambda signum, frame: None)
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    if spec["kind"] == "function" and not spec["fresh_workers"]:
        # Imported once here, so that every forked worker inherits them: the target, and torch._dynamo, which DDP's
        # constructor and the optimizer's first call import lazily (~1.3 CPU s per rank otherwise).
        import torch._dynamo  # noqa: F401

        from ddplab.launcher.worker import resolve

        for name in (spec["target"], *spec["hooks"]):
            resolve(name)
    if spec["wait_for_go"] and not _until_go(spec.get("reply_fd")):  # the caller cancelled (its preflight failed)
        return 0
    if spec["kind"] == "script" and spec["wait_for_go"]:  # launch started this agent first and completed it by "go"
        spec = json.loads(Path(spec_path).read_text())
        run_dir = Path(spec["run_dir"])
    try:
        launch = plan(spec, spec_path)
        # Kept alive until the launch ends: torch's static rendezvous reuses the server this process runs.
        store = None if launch.loopback_port is None else _loopback_store(launch.loopback_port)  # noqa: F841
    except Exception as e:
        write_atomic(run_dir / "ddplab-outcome.json", {"failures": {}, "launcher_error": _one_line(e)})
        traceback.print_exc()
        return 1
    os.environ.update(launch.env)  # where torchrun sets them: every rank inherits the agent's environment
    failures, launcher_error = {}, None
    if os.environ.get(rankdump.DIR_ENV):
        _records_before_the_end(os.environ[rankdump.DIR_ENV])
    if spec["kind"] == "script":
        _quiet_about_saved_preemptions()
    try:
        _launch_moving_a_taken_port(spec, spec_path, launch, elastic_launch)
    except ChildFailedError as e:
        failures = {
            str(rank): {
                "local_rank": f.local_rank,
                "pid": f.pid,
                "exitcode": f.exitcode,
                "time": f.timestamp,
                "message": f.message,
            }
            for rank, f in e.failures.items()
        }
        if spec["kind"] == "script":  # torchrun names the first argument, bootstrap.py: say the user's script
            e = ChildFailedError(_user_entry(launch.args), e.failures)
        if spec["kind"] == "script":
            # torchrun's own summary ("Root Cause (first observed failure)") goes to the log folder: ddplab launch's
            # report says the same, first, and the console shows each thing once (issue 42 point 4).
            (run_dir / "torchrun-summary.txt").write_text(f"{e}\n")
        elif not _saved_on_notice(f.exitcode for f in e.failures.values()):
            print(e, file=sys.stderr)  # torchrun's own summary, "Root Cause (first observed failure)" included
    except Exception as e:  # a rendezvous that never completed, a bad option torch found late
        launcher_error = _one_line(e)
        traceback.print_exc()
    write_atomic(run_dir / "ddplab-outcome.json", {"failures": failures, "launcher_error": launcher_error})
    stamp("agent", "ranks ended")
    if not (failures or launcher_error):  # a fork's answer may come after the ranks' results: the caller waits
        _wait_for_forks()  # for it (bounded), and ends this agent then; after a failure nobody asks for it
    return 1 if failures or launcher_error else 0


PORT_TRIES = 3


def _launch_moving_a_taken_port(spec: dict, spec_path: str, launch, elastic_launch) -> None:
    """elastic_launch; when the static rendezvous port is ddplab's choice (spec's port_may_move) and another process
    took it between the caller's check and this bind (two launches at once both found 29500 free), the rendezvous
    fails before any rank starts: the launch moves to a port the system just gave, and says so."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    for attempt in range(PORT_TRIES):
        try:
            elastic_launch(launch.config, launch.entrypoint)(*launch.args)
            return
        except ChildFailedError:  # the ranks ran: whatever they said is theirs
            raise
        except Exception as e:
            taken = "EADDRINUSE" in str(e) or "Address already in use" in str(e)  # c10d's socket error, or older
            if not (spec.get("port_may_move") and taken) or attempt == PORT_TRIES - 1:
                raise
            old, spec["torchrun"]["master_port"] = spec["torchrun"]["master_port"], free_port()
            print(
                f"ddplab launch: port {old} was taken as the run started: using {spec['torchrun']['master_port']}",
                file=sys.stderr,
                flush=True,
            )
            launch = plan(spec, spec_path)


def _records_before_the_end(flight_dir: str) -> None:
    """When one rank fails, elastic ends the others at once (SIGTERM, in PContext.close called with no signal from
    its poll); a rank ended so writes no Flight Recorder record, and the report would lack the very ranks that
    waited for the failed one. Before that close, each survivor is asked for its record and given a moment to fail
    by itself (flight.settle). elastic has no hook for this, so the one method is wrapped, in this agent process
    only; a close with a signal (a shutdown, a restart) is left as it was."""
    from torch.distributed.elastic.multiprocessing.api import PContext

    close = PContext.close

    def close_after_records(self, death_sig=None, timeout=30):
        if death_sig is None and not _note_says_saved():  # ranks leaving on the notice: no failure to record
            try:
                flight.settle(
                    flight_dir, {int(self.envs[local_rank]["RANK"]): pid for local_rank, pid in self.pids().items()}
                )
            except Exception as e:  # noqa: BLE001 - a diagnostic must never stop the agent from ending the ranks
                print(f"ddplab: no Flight Recorder records before the end: {_one_line(e)}", file=sys.stderr)
        close(self, death_sig, timeout)

    PContext.close = close_after_records


def _saved_on_notice(exit_codes) -> bool:
    """Every rank left after ddplab.resume saved on the machine's notice: a preemption the launcher reports in its
    own line ("preempted (SIGTERM), state saved at step N"), not a failure to print a banner for."""
    return preempt.left_after_save(exit_codes) and _note_says_saved()


def _note_says_saved() -> bool:
    """ddplab.resume's note (rank 0 writes it) names the step it saved on the notice."""
    note_file = os.environ.get(preempt.NOTE_VAR)
    return bool(note_file) and "step" in preempt.read_note(Path(note_file).parent)


def _quiet_about_saved_preemptions() -> None:
    """When the ranks leave on a notice after saving, elastic logs "failed (exitcode: 4) ..." as an error, and
    "Sending process N closing signal SIGTERM" for a rank still on its way out: neither is news to the user."""
    import logging

    def keep(record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("failed (exitcode: %s)") and record.args:
            return not _saved_on_notice([record.args[0]])
        if message.startswith("Sending process %s closing signal"):
            return not _note_says_saved()
        return True

    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(keep)


def _until_go(reply_fd: int | None) -> bool:
    """Serve the caller's requests until it says "go" (True) or leaves (False). Each request is one line, `parse
    {...}`, `counts {...}` or `check {...}`, answered by one JSON line on reply_fd: the work on torchrun's options
    that needs torch, done here, where torch is imported anyway (the caller of `ddplab launch` never imports it);
    or `fork {...}`, answered in a file (_fork_call)."""
    reply = os.fdopen(reply_fd, "w") if reply_fd is not None else None
    try:
        for line in iter(sys.stdin.readline, ""):
            command, _, request = line.strip().partition(" ")
            if command == "go":
                return True
            if command == "fork":  # answered in a file of its own, later: the caller does not wait for it here
                _fork_call(json.loads(request))
            elif command in REQUESTS and reply is not None:
                reply.write(json.dumps(REQUESTS[command](json.loads(request))) + "\n")
                reply.flush()
        return False
    finally:
        if reply is not None:
            reply.close()


def _parse(request: dict) -> dict:
    """request: {"parser": "module:function" that builds the parser, "argv": [...]}. The answer:
    {"options": vars(namespace)}, or {"error", "exit_code"} for bad input, or {"exit"} when the parser ended the
    command itself (--help); with what it printed. Any other exception is a bug and propagates."""
    from ddplab.launcher.worker import resolve

    return _captured(lambda: vars(resolve(request["parser"])().parse_args(request["argv"])), "options")


def _captured(call, key: str) -> dict:
    """call() with what it prints captured: {key: its value}, {"error", "exit_code"} for a DdplabError (bad input),
    or {"exit": code} when it ended the command itself (argparse: --help, a bad flag); "stdout" and "stderr" with
    each, for the caller to print as if it had run there."""
    from ddplab.errors import DdplabError

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            answer = {key: call()}
    except DdplabError as e:
        answer = {"error": str(e), "exit_code": e.exit_code}
    except SystemExit as e:
        answer = {"exit": e.code}
    return {**answer, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _check(request: dict) -> dict:
    """request: {"torchrun": vars of the options as they will run}. torchrun's own checks of the values
    (config_from_args): {"refused": why} or {}."""
    import logging

    logger = logging.getLogger("torch.distributed.run")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its notices (OMP_NUM_THREADS) come once, from the launch itself
    try:
        checked = plan_script(request["torchrun"])
    except Refused as e:
        return {"refused": str(e)}
    finally:
        logger.setLevel(level)
    # Set here, as torchrun's config_from_args did when this check ran it: the launch then finds them set and
    # repeats no notice (ddplab's preflight says its own word on OMP_NUM_THREADS).
    os.environ.update(checked.env)
    return {}


def _counts(request: dict) -> dict:
    """request: {"nproc_per_node", "nnodes"} as given. torchrun's reading of them: {"nproc", "max_nodes"}, or
    {"error": why} ("gpu" counts the GPUs torch sees here; "two" is no count)."""
    from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

    try:
        return {
            "nproc": determine_local_world_size(request["nproc_per_node"]),
            "max_nodes": parse_min_max_nnodes(request["nnodes"])[1],
        }
    except (ValueError, RuntimeError) as e:
        return {"error": str(e)}


REQUESTS = {"parse": _parse, "counts": _counts, "check": _check}

FORKED: list[int] = []  # the forks _fork_call made that have not ended (reaped as they end; waited for at the end)


def _fork_call(request: dict) -> None:
    """request: {"target": "module:function", "payload": ..., "folder": PATH, "background": bool}. The target runs on
    the payload in a fork of this agent (in the background: at the lowest CPU priority, beside the ranks): for the
    caller's work that needs torch (`ddplab train`'s flags and memory prediction, `ddplab check`'s settling), which
    this agent has imported already, with torch._dynamo and the target's modules for forked workers, so that
    neither the caller nor a new interpreter imports them again (~3 CPU s). A fork, not this process: what the target does (CUDA's driver initialised by counting the GPUs) must not
    reach the ranks forked later. The fork's pid goes to FOLDER/pid, its answer (_captured's, or {"error": one line}
    for a bug) to FOLDER/answer.json. Asked before "go", as a worker is forked: no thread of elastic's runs yet. The
    fork dies with this agent (its caller ends both)."""
    folder = Path(request["folder"])
    sys.stdout.flush()
    sys.stderr.flush()
    if not FORKED:  # a fork that answered is reaped at once: no zombie among the agent's children (ranks come next)
        signal.signal(signal.SIGCHLD, _reap_forks_of(os.getpid()))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # a fork that ends at once is in FORKED first
    pid = os.fork()
    if pid:
        FORKED.append(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        write_atomic(folder / "pid", pid)
        return
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        die_with_parent()
        if request.get("background"):
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, 0, 19)  # only the CPU time the ranks leave
        from ddplab.launcher.worker import resolve

        try:
            answer = _captured(lambda: resolve(request["target"])(request["payload"]), "value")
        except Exception as e:  # noqa: BLE001 - the caller says it in one line; the log keeps the traceback
            traceback.print_exc()
            answer = {"error": _one_line(e)}
        write_atomic(folder / "answer.json", answer)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # not the agent's atexit handlers, not its teardown


def _reap_forks_of(agent_pid: int):
    """A SIGCHLD handler that reaps the agent's forks that ended, and only them: elastic waits for its ranks by pid
    itself. A rank forked from the agent inherits the handler: there it does nothing."""

    def reap(signum, frame) -> None:
        if os.getpid() != agent_pid:
            return
        for pid in list(FORKED):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    continue
            FORKED.remove(pid)

    return reap


def _wait_for_forks() -> None:
    for pid in list(FORKED):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _user_entry(args) -> str:
    """What the user asked to run, from a rank's command `-u BOOTSTRAP [-m MODULE | --exec PROGRAM | SCRIPT] ...`."""
    rest = list(args[list(args).index(BOOTSTRAP) + 1 :])
    return rest[1] if rest[:1] in (["-m"], ["--exec"]) and len(rest) > 1 else (rest[0] if rest else BOOTSTRAP)


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


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
        return TCPStore(
            "127.0.0.1", port, is_master=True, multi_tenant=True, master_listen_fd=fd, wait_for_workers=False
        )
    except (RuntimeError, ValueError):  # older torch: the libuv server does not take a listening socket
        return TCPStore(
            "127.0.0.1",
            port,
            is_master=True,
            multi_tenant=True,
            master_listen_fd=fd,
            wait_for_workers=False,
            use_libuv=False,
        )


if __name__ == "__main__":
    from ddplab.launcher.agent import main as _main  # through the package: workers forked from here share its modules

    code = _main(sys.argv[1])
    # Everything the caller reads is written (the outcome, the ranks' logs) and the workers are gone: the
    # interpreter's own teardown with torch loaded (atexit handlers, freeing every module) took 0.6-0.7 s here,
    # which `ddplab launch` would wait for before it can answer.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
