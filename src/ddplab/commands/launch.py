"""`ddplab launch [--hang-timeout S] [--no-lint] [--json] [torchrun options] SCRIPT [script args]`: torchrun with a
safety net. A drop-in swap: every torchrun option means what it means to torchrun, because torchrun's own parser
(torch.distributed.run.get_args_parser) reads them and torchrun's own launch path (torch.distributed.run.run)
starts the workers; `-m module` works too.

Around torchrun it adds:
- before starting: `ddplab lint` on the script (warnings only) and preflight checks: a busy port on a single node
  is swapped for a free one (and said so); nccl hard-coded with more processes than GPUs stops here, exit 2;
- per-rank logs (torchrun's --log-dir/--redirects/--tee) always kept, in a directory it names;
- when a rank fails: the first failure (rank, exit code, traceback tail), then `ddplab explain`'s diagnosis, exit 1;
- --hang-timeout S: no progress for S seconds -> every rank's Python stack (py-spy), where each one is stuck,
  related lint findings, every worker ended, exit 3.

The agent (torchrun) runs in a process group of its own, so that every worker can always be ended.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddplab import report
from ddplab.errors import DdplabError

DEFAULT_MASTER_PORT = 29500  # torchrun's, for a static rendezvous
TAIL_LINES = 12
# Lint rules that explain a hang in each kind of wait.
RELATED_RULES = {
    "rendezvous": {"sets-master-env", "sets-rank-env"},
    "collective": {"collective-in-rank-branch"},
    "ddp": {"collective-in-rank-branch"},
}


@dataclass
class RankReport:
    rank: int | None
    local_rank: int | None
    pid: int | None = None
    exitcode: int | None = None
    error: str | None = None  # the last error line of its output
    traceback: str = ""  # the tail of its stderr
    stuck_in: str | None = None  # hang: the distributed call it waits in
    where: str | None = None  # hang: its script's line
    stack: str | None = None
    log: str | None = None  # the folder holding its stdout.log / stderr.log


@dataclass
class LaunchResult:
    status: str  # ok | failed | hang | interrupted
    exit_code: int
    summary: str  # one line
    command: list[str]
    nproc_per_node: int
    nnodes: str
    endpoint: str | None  # where the launcher serves the rendezvous
    log_dir: str
    seconds: float
    notes: list[str] = field(default_factory=list)  # what preflight decided
    lint: list = field(default_factory=list)  # ddplab lint findings for the script
    ranks: list[RankReport] = field(default_factory=list)
    root_cause: int | None = None
    related_lint: list = field(default_factory=list)  # lint findings that explain the hang
    explanation: object = None  # ddplab explain's Explanation of the failure


def add_parser(sub) -> None:
    # torchrun's parser reads the arguments inside run(): importing it costs a torch import that `ddplab --help`
    # must not pay. A NUL prefix char means argparse sees no option here and hands every argument over untouched.
    p = sub.add_parser("launch", help="run any script under torchrun with preflight checks and a hang watchdog",
                       add_help=False, prefix_chars="\0",
                       usage="ddplab launch [--hang-timeout S] [--no-lint] [--json] [torchrun options] SCRIPT [args]")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(run=run)


def build_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "ddplab launch"
    parser.description = ("torchrun with a safety net: lint and preflight before, per-rank logs, root cause and "
                          "diagnosis after a failure, stacks of every rank on a hang. Takes torchrun's options.")

    def error(message: str):
        raise DdplabError(f"{message} (see `ddplab launch --help`)")

    parser.error = error
    group = parser.add_argument_group("ddplab")
    group.add_argument("--hang-timeout", type=float, default=None, metavar="S",
                       help="no output for S seconds and idle CPU (or every rank waiting in a rendezvous or "
                            "collective): dump every rank's stack, end all workers, exit 3")
    group.add_argument("--no-lint", action="store_true", help="skip `ddplab lint` on the script before starting")
    group.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout "
                                                           "(the script's own output goes to stderr)")
    parser.add_argument("--nproc", dest="nproc_per_node", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


# ----------------------------------------------------------------------------------------------- preflight


@dataclass
class Plan:
    script: Path | None  # the file to lint, when there is one
    nproc: int
    endpoint: str | None
    log_dir: Path
    notes: list[str]
    lint: object  # LintResult | None


def _script_file(ns) -> Path | None:
    if ns.no_python:
        return None
    if ns.module:
        found = _module_file(ns.training_script)
        if found is None:
            raise DdplabError(f"-m {ns.training_script}: no such module on the Python path (run from the folder "
                              "that holds it, or install it)")
        return found if found.suffix == ".py" else None
    path = Path(ns.training_script)
    if not path.is_file():
        raise DdplabError(f"{ns.training_script}: no such file: pass the training script's path")
    return path if path.suffix == ".py" else None


def _validate(ns) -> None:
    """torchrun's own checks of the option values, here, so that a bad value is bad input (exit 2) not a failed run."""
    import logging

    from torch.distributed.run import config_from_args

    logger = logging.getLogger("torch.distributed.run")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its notices (OMP_NUM_THREADS) come once, from the real launch
    try:
        config_from_args(argparse.Namespace(**vars(ns)))
    except (ValueError, AssertionError, RuntimeError) as e:
        raise DdplabError(f"torchrun refuses these options: {str(e).splitlines()[0] if str(e) else type(e).__name__} "
                          "(see `ddplab launch --help`)") from None
    finally:
        logger.setLevel(level)


def _environment_findings(nproc: int, backend: str, device: str) -> list:
    """The environment checks `ddplab check` runs in its preflight stage (shared memory, CUDA_VISIBLE_DEVICES,
    OMP_NUM_THREADS, launcher variables left in the shell, cores), minus the ones that passed."""
    from ddplab.checks.preflight import environment_findings

    # On GPUs launch judges ranks vs GPUs itself, before this, knowing the script's own backend.
    found = environment_findings(nproc, device, backend, ranks_vs_devices=device == "cpu")
    return [f for f in found if f.level != "ok"]


def _module_file(name: str) -> Path | None:
    """The file `python -m name` would run from the current folder, found without importing anything."""
    sys.path.insert(0, os.getcwd())  # where the workers' `python -m` looks first
    try:
        top, *rest = name.split(".")
        spec = importlib.util.find_spec(top)  # every finder (editable installs too); a top-level name runs nothing
        for part in rest:
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    finally:
        sys.path.remove(os.getcwd())
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package: -m runs its __main__
        main = [Path(p) / "__main__.py" for p in spec.submodule_search_locations]
        return next((m for m in main if m.exists()), None)
    return Path(spec.origin) if spec.origin else None


def _given(argv: list[str], *flags: str) -> bool:
    return any(a in flags or a.split("=", 1)[0] in flags for a in argv)


def preflight(ns, argv: list[str], lint: bool) -> Plan:
    import torch
    from rich.markup import escape
    from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

    from ddplab.ports import free_port, port_is_free

    notes = []
    try:
        nproc = determine_local_world_size(ns.nproc_per_node)
        _, max_nodes = parse_min_max_nnodes(ns.nnodes)
    except (ValueError, RuntimeError) as e:
        raise DdplabError(f"--nproc-per-node {ns.nproc_per_node} / --nnodes {ns.nnodes}: {e}: give a number of "
                          "processes per node, e.g. --nproc-per-node 2") from None
    if nproc < 1:
        raise DdplabError(f"--nproc-per-node {nproc}: need at least 1 process")
    script = _script_file(ns)
    lint_result = None
    if script is not None and lint:
        from ddplab.diagnose.lint import lint_file

        lint_result = lint_file(script)
        for f in lint_result.findings:
            report.log(escape(f"lint {f.level}: {script.name}:{f.line} [{f.rule}] {f.message}\n      fix: {f.fix}"))
    if lint_result is not None and lint_result.backend == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if nproc > gpus:
            raise DdplabError(
                f"{script.name}:{lint_result.backend_line} hard-codes backend 'nccl', which needs one GPU per "
                f"process, but --nproc-per-node is {nproc} and {gpus} GPU(s) are visible: start at most {gpus} "
                "processes per node" + ("" if gpus else ", or use backend 'gloo' on CPU"))

    backend = lint_result.backend if lint_result is not None and lint_result.backend else None
    on_gpu = backend == "nccl" or (backend is None and torch.cuda.is_available())
    if on_gpu and backend is None and nproc > torch.cuda.device_count():
        notes.append(f"{nproc} processes per node but {torch.cuda.device_count()} GPU(s): if the script uses nccl, "
                     "two ranks will share a GPU (NCCL: 'Duplicate GPU detected')")
    for finding in _environment_findings(nproc, backend or ("nccl" if on_gpu else "gloo"), "cuda" if on_gpu else "cpu"):
        if finding.level == "fail":
            raise DdplabError(f"{finding.what}: {finding.fix}")
        notes.append(f"{finding.what} (fix: {finding.fix})")

    endpoint = None
    if ns.standalone:
        notes.append("--standalone: torchrun serves the rendezvous on a free port of its choosing")
    elif ns.rdzv_backend == "static" and not ns.rdzv_endpoint:
        # Explicit even when torchrun would pick a default: the same behaviour on every torch version, and the
        # hang report can name the address the ranks should have reached.
        port = ns.master_port if ns.master_port is not None else DEFAULT_MASTER_PORT
        if max_nodes == 1 and not port_is_free(port, ""):
            new = free_port()
            notes.append(f"port {port} is busy on this machine: using {new} instead")
            port = new
        ns.master_port = port
        endpoint = f"{ns.master_addr}:{port}"
    else:
        endpoint = ns.rdzv_endpoint

    if not _given(argv, "-r", "--redirects"):
        ns.redirects = "3"  # every rank's stdout and stderr into its own files ...
    if not _given(argv, "-t", "--tee"):
        ns.tee = "3"  # ... and on the console too, as plain torchrun shows them
    ours = ns.log_dir is None
    if ours:
        ns.log_dir = tempfile.mkdtemp(prefix="ddplab-launch-")
    Path(ns.log_dir).mkdir(parents=True, exist_ok=True)
    try:
        _validate(ns)  # given a log folder: torchrun would otherwise make one of its own for the check
    except DdplabError:
        if ours:
            shutil.rmtree(ns.log_dir, ignore_errors=True)
        raise
    return Plan(script, nproc, endpoint, Path(ns.log_dir), notes, lint_result)


# ----------------------------------------------------------------------------------------------- running


def run(args) -> int:
    started = time.monotonic()  # the hang clock includes start-up: nothing printed since launch counts
    argv = list(args.argv)
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help(sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    ns = parser.parse_args(argv)
    hang_timeout, lint, as_json = ns.hang_timeout, not ns.no_lint, ns.json
    for name in ("hang_timeout", "no_lint", "json"):
        delattr(ns, name)
    if hang_timeout is not None and hang_timeout <= 0:
        raise DdplabError(f"--hang-timeout {hang_timeout:g}: give a positive number of seconds")
    script_pos = argv.index(ns.training_script) if ns.training_script in argv else len(argv)
    plan = preflight(ns, argv[:script_pos], lint)
    for note in plan.notes:
        report.log(f"ddplab launch: {note}")
    report.log(f"ddplab launch: per-rank logs in {plan.log_dir}")
    result = execute(ns, plan, hang_timeout, as_json, started)
    report.emit(result, as_json, render)
    return result.exit_code


def execute(ns, plan: Plan, hang_timeout: float | None, as_json: bool, started: float) -> LaunchResult:
    from ddplab.diagnose.watchdog import Watchdog

    spec = plan.log_dir / "ddplab-launch.json"
    outcome = plan.log_dir / "ddplab-outcome.json"
    spec.write_text(json.dumps({"torchrun": vars(ns), "outcome": str(outcome)}))
    start = time.monotonic()
    agent = subprocess.Popen([sys.executable, "-m", "ddplab.commands.launch", str(spec)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    # With per-rank log files the watchdog watches those (the launcher's own messages are not the script's
    # progress); without them, anything the agent forwards counts.
    redirected = ns.redirects != "0"
    watchdog = Watchdog(agent.pid, hang_timeout, plan.log_dir if redirected else None, since=started)
    launcher_log = plan.log_dir / "launcher.log"
    progress = None if redirected else watchdog.note_output
    pumps = [_pump(agent.stdout, sys.stderr if as_json else sys.stdout, launcher_log, progress),
             _pump(agent.stderr, sys.stderr, launcher_log, progress)]
    status, stacks = "ok", None
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` of ddplab must not orphan the workers
    try:
        while agent.poll() is None:
            stacks = watchdog.poll()
            if stacks is not None:
                status = "hang"
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        watchdog.end_all(agent)
        signal.signal(signal.SIGTERM, previous)
        for pump in pumps:
            pump.join(timeout=5)
    seconds = time.monotonic() - start
    result = LaunchResult(status=status, exit_code=0, summary="", command=[ns.training_script, *ns.training_script_args],
                          nproc_per_node=plan.nproc, nnodes=ns.nnodes, endpoint=plan.endpoint,
                          log_dir=str(plan.log_dir), seconds=round(seconds, 2), notes=plan.notes,
                          lint=plan.lint.findings if plan.lint else [])
    if status == "hang":
        _hang(result, stacks, watchdog, plan, hang_timeout)
    elif status == "interrupted":
        result.exit_code, result.summary = 130, "interrupted: every worker was ended"
    else:
        _finished(result, outcome, launcher_log)
    return result


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


def _rank_logs(log_dir: Path) -> dict[int, Path]:
    """local rank -> its newest attempt's log folder (torchrun: LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/)."""
    found: dict[int, Path] = {}
    for folder in sorted(log_dir.glob("*/attempt_*/*"), key=lambda p: int(p.parent.name.split("_")[-1])):
        if folder.is_dir() and folder.name.isdigit():
            found[int(folder.name)] = folder
    return found


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    from ddplab.diagnose.explain import clean, strip_prefixes

    try:
        text = clean(path.read_text(errors="replace"))
    except OSError:
        return ""
    return "\n".join(strip_prefixes(line) if line.startswith("[") else line
                     for line in text.rstrip("\n").splitlines()[-lines:])


def _finished(result: LaunchResult, outcome_path: Path, launcher_log: Path) -> None:
    from ddplab.diagnose.explain import ERROR_LINE, RootCause, explain_text
    from ddplab.diagnose.rules import RULES

    try:
        outcome = json.loads(outcome_path.read_text())
    except (OSError, json.JSONDecodeError):
        outcome = {"launcher_error": "the launcher exited without a result"}
    failures = outcome.get("failures", {})
    logs = _rank_logs(Path(result.log_dir))
    if not failures and not outcome.get("launcher_error"):
        result.summary = f"{result.nproc_per_node} rank(s) per node finished in {result.seconds:.1f}s"
        result.ranks = [RankReport(rank=None, local_rank=lr, exitcode=0, log=str(p)) for lr, p in sorted(logs.items())]
        return
    result.status, result.exit_code = "failed", 1
    ranks = {}
    for rank_key, f in failures.items():
        folder = logs.get(f["local_rank"])
        tail = _tail(folder / "stderr.log") if folder else ""
        errors = [line for line in tail.splitlines() if ERROR_LINE.match(line)]
        ranks[int(rank_key)] = RankReport(rank=int(rank_key), local_rank=f["local_rank"], pid=f.get("pid"),
                                          exitcode=f["exitcode"], error=errors[-1] if errors else None,
                                          traceback=tail, log=str(folder) if folder else None)
    result.ranks = [ranks[r] for r in sorted(ranks)]
    if not ranks:
        result.summary = f"the launcher failed: {outcome.get('launcher_error')}"
        result.explanation = explain_text(launcher_log.read_text(errors="replace") if launcher_log.exists() else "",
                                          source=str(launcher_log))
        return
    consequences = [r for r in RULES if r.consequence]

    def order(rep: RankReport):
        # torchrun ends the others (SIGTERM, -15) once one fails; an error caused by another rank's failure
        # ("Connection closed by peer") is not a root cause either; then the earliest last write wins.
        ended = rep.exitcode == -signal.SIGTERM
        follows = any(re.search(p, rep.traceback) for r in consequences for p in r.patterns)
        stamp = failures[str(rep.rank)].get("time", 0)
        with contextlib.suppress(OSError, TypeError):
            stamp = (Path(rep.log) / "stderr.log").stat().st_mtime
        return ended, follows, stamp

    root = min(result.ranks, key=order)
    result.root_cause = root.rank
    code = f"exit code {root.exitcode}" + (f" ({signal.Signals(-root.exitcode).name})"
                                           if root.exitcode < 0 and -root.exitcode in signal.valid_signals() else "")
    result.summary = f"rank {root.rank} failed first ({code})" + (f": {root.error}" if root.error else "")
    text = "\n".join(_prefixed(rep) for rep in sorted(result.ranks, key=lambda r: r is not root))
    if not text.strip() and launcher_log.exists():
        text = launcher_log.read_text(errors="replace")
    result.explanation = explain_text(text, source=result.log_dir,
                                      root=RootCause(rank=root.rank, local_rank=root.local_rank,
                                                     exitcode=root.exitcode, error=root.error))


def _prefixed(rep: RankReport) -> str:
    """A rank's whole stderr with torch's `[rankN]:` prefix on every line, so that explain knows whose it is."""
    if not rep.log:
        return ""
    path = Path(rep.log) / "stderr.log"
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    tag = f"[rank{rep.rank}]:"
    return "\n".join(line if line.startswith(tag) else f"{tag} {line}" for line in lines)


def _hang(result: LaunchResult, stacks, watchdog, plan: Plan, timeout: float) -> None:
    from ddplab.diagnose.watchdog import describe

    result.status, result.exit_code = "hang", 3
    logs = _rank_logs(plan.log_dir)
    for s in stacks:
        folder = logs.get(s.local_rank) if s.local_rank is not None else None
        result.ranks.append(RankReport(rank=s.rank, local_rank=s.local_rank, pid=s.pid, stuck_in=s.call,
                                       where=s.where, stack=s.stack or s.error, log=str(folder) if folder else None))
    result.summary = f"{watchdog.reason or f'no progress for {timeout:g}s'}: {describe(stacks, plan.endpoint)}"
    kinds = {s.kind for s in stacks}
    related = set().union(*(RELATED_RULES.get(k, set()) for k in kinds)) if kinds else set()
    findings = plan.lint.findings if plan.lint else []
    result.related_lint = [f for f in findings if f.rule in related] or [f for f in findings if f.level == "error"]


# ----------------------------------------------------------------------------------------------- rendering


def render(con, r: LaunchResult) -> None:
    from rich.markup import escape

    from ddplab.diagnose.explain import render as render_explanation

    status = {"ok": "PASS", "failed": "FAIL", "hang": "TIMEOUT", "interrupted": "WARN"}[r.status]
    con.print(f"ddplab launch: {report.styled(status)} {escape(r.summary)}")
    if r.status == "hang":
        for rank in r.ranks:
            who = f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"
            con.print(f"  {who} (pid {rank.pid}): " + escape(f"in {rank.stuck_in or 'no distributed call'} at "
                                                            f"{rank.where or '?'}"))
            if rank.stack:
                con.print(_brief(rank.stack), markup=False)
        for f in r.related_lint:
            con.print(escape(f"  likely cause — line {f.line}: {f.message}"))
            con.print(escape(f"      fix: {f.fix}"))
        con.print(f"  every worker was ended; per-rank logs: {escape(r.log_dir)}")
    elif r.status == "failed":
        root = next((rank for rank in r.ranks if rank.rank == r.root_cause), None)
        if root is not None and root.traceback:
            con.print(f"  rank {root.rank}'s last lines ({escape(root.log or '')}/stderr.log):")
            con.print("\n".join(f"    {line}" for line in root.traceback.splitlines()), markup=False)
        for rank in r.ranks:
            if rank is not root:
                con.print(escape(f"  rank {rank.rank}: exit code {rank.exitcode}"
                                 + (f": {rank.error}" if rank.error else "")))
        if r.explanation is not None:
            con.print("[bold]diagnosis[/] (ddplab explain):")
            render_explanation(con, r.explanation, show_root=False)
        con.print(f"  per-rank logs: {escape(r.log_dir)}")
    else:
        con.print(f"  per-rank logs: {escape(r.log_dir)}")


def _brief(stack: str) -> str:
    """The script's own frames as they are; torch's frames below them folded into one line of names."""
    out, inside = [], []
    for line in stack.splitlines():
        m = re.match(r'\s*File "(.*)", line \d+, in (.*)', line)
        if m and f"{os.sep}torch{os.sep}" in m.group(1):
            name = m.group(2).rsplit(".", 1)[-1]
            if name != "wrapper":  # torch's logging decorators
                inside.append(name)
            continue
        if inside:
            out.append(f"      in torch: {' > '.join(inside)}")
            inside = []
        out.append(f"    {line.strip()}")
    if inside:
        out.append(f"      in torch: {' > '.join(inside)}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------- the agent


def _agent_main(spec_path: str) -> int:
    """Runs torchrun's own launch path with the parsed arguments; records its failures for the caller."""
    import traceback

    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    spec = json.loads(Path(spec_path).read_text())
    outcome = Path(spec["outcome"])
    try:
        torchrun.run(argparse.Namespace(**spec["torchrun"]))
    except ChildFailedError as e:
        outcome.write_text(json.dumps({"failures": {
            str(rank): {"local_rank": f.local_rank, "pid": f.pid, "exitcode": f.exitcode, "time": f.timestamp,
                        "error_file": f.error_file} for rank, f in e.failures.items()}}))
        print(e, file=sys.stderr)  # torchrun's own summary, "Root Cause (first observed failure)" included
        return 1
    except Exception as e:
        outcome.write_text(json.dumps({"launcher_error": f"{type(e).__name__}: {e}".splitlines()[0]}))
        traceback.print_exc()
        return 1
    outcome.write_text(json.dumps({"failures": {}}))
    return 0


if __name__ == "__main__":
    sys.exit(_agent_main(sys.argv[1]))
