"""What a user's script run under `ddplab launch` came to: per-rank reports, the root cause of a failure with
`ddplab explain`'s diagnosis, or where every rank of a hung job is stuck, with the lint findings that explain it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddplab.launcher.logs import rank_logs
from ddplab.launcher.outcome import Failed, exit_text, root_cause
from ddplab.launcher.script import ScriptRun
from ddplab.userscript.plan import Plan

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
    flight: object = None  # diagnose.flight.FlightReport: the per-collective view from PyTorch's Flight Recorder


def analyse(ns, plan: Plan, run: ScriptRun, hang_timeout: float | None) -> LaunchResult:
    result = LaunchResult(status=run.status, exit_code=0, summary="",
                          command=[ns.training_script, *ns.training_script_args], nproc_per_node=plan.nproc,
                          nnodes=ns.nnodes, endpoint=plan.endpoint, log_dir=str(plan.log_dir),
                          seconds=round(run.seconds, 2), notes=plan.notes,
                          lint=plan.lint.findings if plan.lint else [])
    if run.status == "hang":
        _hang(result, run, plan, hang_timeout)
    elif run.status == "interrupted":
        result.exit_code, result.summary = 130, "interrupted: every worker was ended"
    else:
        _finished(result, run)
    return result


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    from ddplab.diagnose.explain import clean, strip_prefixes

    try:
        text = clean(path.read_text(errors="replace"))
    except OSError:
        return ""
    return "\n".join(strip_prefixes(line) if line.startswith("[") else line
                     for line in text.rstrip("\n").splitlines()[-lines:])


def _finished(result: LaunchResult, run: ScriptRun) -> None:
    from ddplab.diagnose.explain import ERROR_LINE, RootCause, explain_text

    logs = rank_logs(Path(result.log_dir))
    if run.status == "ok":
        result.summary = f"{result.nproc_per_node} rank(s) per node finished in {result.seconds:.1f}s"
        result.ranks = [RankReport(rank=None, local_rank=lr, exitcode=0, log=str(p)) for lr, p in sorted(logs.items())]
        return
    result.status, result.exit_code = "failed", 1
    ranks, failed = {}, []
    for rank_key, f in run.failures.items():
        folder = logs.get(f["local_rank"])
        tail = _tail(folder / "stderr.log") if folder else ""
        errors = [line for line in tail.splitlines() if ERROR_LINE.match(line)]
        rep = RankReport(rank=int(rank_key), local_rank=f["local_rank"], pid=f.get("pid"), exitcode=f["exitcode"],
                         error=errors[-1] if errors else None, traceback=tail, log=str(folder) if folder else None)
        ranks[rep.rank] = rep
        stamp = f.get("time") or 0
        if folder is not None and (folder / "stderr.log").exists():
            stamp = (folder / "stderr.log").stat().st_mtime  # when it last wrote: closer to when it failed
        failed.append(Failed(rep.rank, rep.exitcode, tail, stamp))
    result.ranks = [ranks[r] for r in sorted(ranks)]
    launcher_log = run.launcher_log
    if not ranks:
        result.summary = f"the launcher failed: {run.launcher_error}"
        result.explanation = explain_text(launcher_log.read_text(errors="replace") if launcher_log.exists() else "",
                                          source=str(launcher_log))
        return
    root = ranks[root_cause(failed)]
    result.root_cause = root.rank
    text = "\n".join(_prefixed(rep) for rep in sorted(result.ranks, key=lambda r: r is not root))
    if not text.strip() and launcher_log.exists():
        text = launcher_log.read_text(errors="replace")
    result.explanation = explain_text(text, source=result.log_dir,
                                      root=RootCause(rank=root.rank, local_rank=root.local_rank,
                                                     exitcode=root.exitcode, error=root.error))
    # A rank that aborted in C++ printed no Python error line; explain reads its `what():` instead.
    root.error = root.error or result.explanation.root_cause.error
    result.flight = _flight(run, errors={r.rank: r.error for r in result.ranks if r.error})
    result.summary = f"rank {root.rank} failed first ({exit_text(root.exitcode)})" + (
        f": {root.error}" if root.error else "")


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


def _hang(result: LaunchResult, run: ScriptRun, plan: Plan, timeout: float | None) -> None:
    from ddplab.launcher.stacks import describe

    result.status, result.exit_code = "hang", 3
    logs = rank_logs(plan.log_dir)
    for s in run.stacks or []:
        folder = logs.get(s.local_rank) if s.local_rank is not None else None
        result.ranks.append(RankReport(rank=s.rank, local_rank=s.local_rank, pid=s.pid, stuck_in=s.call,
                                       where=s.where, stack=s.stack or s.error, log=str(folder) if folder else None))
    result.summary = f"{run.reason or f'no progress for {timeout:g}s'}: {describe(run.stacks or [], plan.endpoint)}"
    result.flight = _flight(run, stacks={s.rank: s.where for s in run.stacks or [] if s.rank is not None and s.where})
    kinds = {s.kind for s in run.stacks or []}
    related = set().union(*(RELATED_RULES.get(k, set()) for k in kinds)) if kinds else set()
    findings = plan.lint.findings if plan.lint else []
    result.related_lint = [f for f in findings if f.rule in related] or [f for f in findings if f.level == "error"]


def _flight(run: ScriptRun, **known):
    """The Flight Recorder's view of the ranks (which collective each last called and completed), or None when no
    rank left a record: the stacks and the tracebacks are then all there is."""
    from ddplab.diagnose import flight

    if not run.dumps:
        return None
    return flight.analyse(run.dumps, **known)
