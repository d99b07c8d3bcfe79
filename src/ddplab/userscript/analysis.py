"""What a user's script run under `ddplab launch` came to: per-rank reports, the root cause of a failure with
`ddplab explain`'s diagnosis, or where every rank of a hung job is stuck, with the lint findings that explain it;
and what the sanitizer saw the ranks do in their first steps (ddplab/sanitize/)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ddplab.launcher.logs import rank_logs
from ddplab.launcher.outcome import Failed, exit_text, origin_itself, root_cause
from ddplab.launcher.script import ScriptRun
from ddplab.userscript.plan import Plan

TAIL_LINES = 12
# Lint rules that explain a hang in each kind of wait.
RELATED_RULES = {
    "rendezvous": {"sets-master-env", "sets-rank-env"},
    "collective": {"collective-in-rank-branch", "rank0-ddp-forward"},
    "ddp": {"collective-in-rank-branch", "rank0-ddp-forward"},
}
# A hang's fix by where the ranks wait (launcher.stacks' kinds), when lint has none to offer.
HANG_FIXES = {
    "collective": "every rank must call the same collectives in the same order: the lines below show where each "
    "rank waits; a collective under `if rank == 0:` (a metric, a barrier, an evaluation) is the usual cause",
    "ddp": "every rank must run the DDP model's forward and backward the same number of times: an evaluation or an "
    "extra batch on some ranks only (uneven data: DistributedSampler(drop_last=True) or the join() context)",
    "rendezvous": "the ranks never met: do not set MASTER_ADDR, MASTER_PORT, RANK or WORLD_SIZE in the script "
    "(the launcher sets them), and check that every node reaches the rendezvous endpoint",
    "teardown": "let go of the DDP model before destroy_process_group(): `del model` where it is held (a caller's "
    "variable, a global or an attribute keeps it alive), then `dist.destroy_process_group()`, which destroys the "
    "group with the GIL released (docs/teardown.md)",
}
FRAME = re.compile(r'\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<func>.+)')


@dataclass
class OwnCause:
    """A failed rank whose error reads as a consequence, yet nothing failed before it: the cause is its own line."""

    rank: int
    where: str  # "train.py:28"
    code: str  # the source line, as its traceback quotes it
    text: str  # the mechanism, one sentence


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
    log_dir: str | None  # the per-rank logs (None: the run passed and nobody asked to keep them)
    seconds: float
    notes: list[str] = field(default_factory=list)  # what preflight decided
    lint: list = field(default_factory=list)  # ddplab lint findings for the script
    ranks: list[RankReport] = field(default_factory=list)
    root_cause: int | None = None
    related_lint: list = field(default_factory=list)  # lint findings that explain the hang or the failure
    cause: OwnCause | None = None  # the root-cause rank's own line, when its error only looks like a consequence
    explanation: object = None  # ddplab explain's Explanation of the failure
    flight: object = None  # flight.reader.FlightReport: the per-collective view from PyTorch's Flight Recorder
    profile: object = None  # perf.profile.Profile: `--profile`'s per-rank step breakdown and ranked causes
    sanitize: object = None  # sanitize.readout.SanitizeReport: what the ranks did in their first steps, the mistakes
    fix: str | None = None  # a hang's fix when no lint finding gives one (from where the ranks wait)
    echoed: bool = False  # every rank's stderr went to the console as it came (torchrun's --tee 2 or 3)


def analyse(ns, plan: Plan, run: ScriptRun, hang_timeout: float | None) -> LaunchResult:
    result = LaunchResult(
        status=run.status,
        exit_code=0,
        summary="",
        command=[ns.training_script, *ns.training_script_args],
        nproc_per_node=plan.nproc,
        nnodes=ns.nnodes,
        endpoint=plan.endpoint,
        log_dir=str(plan.log_dir),
        seconds=round(run.seconds, 2),
        notes=plan.notes,
        lint=plan.lint.findings if plan.lint else [],
        echoed=str(getattr(ns, "tee", "")) in ("2", "3"),
    )
    if run.status == "hang":
        _hang(result, run, plan, hang_timeout)
    elif run.status == "interrupted":
        result.exit_code, result.summary = 130, "interrupted: every worker was ended"
    else:
        _finished(result, run, plan)
    result.sanitize = _sanitized(result, Path(plan.log_dir) / "sanitize")
    return result


def _sanitized(result: LaunchResult, folder: Path):
    """The sanitizer's findings (None when it was off); when the run failed, whether it failed on one of them."""
    from ddplab.sanitize import readout

    found = readout.read(folder)
    if found is not None and (found.findings or found.held) and result.status == "failed":
        root = next((r for r in result.ranks if r.rank == result.root_cause), None)
        readout.lead(found, "\n".join(filter(None, [root and root.traceback, root and root.error, result.summary])))
    return found


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    from ddplab.explain.matcher import clean, strip_prefixes

    try:
        text = clean(path.read_text(errors="replace"))
    except OSError:
        return ""
    return "\n".join(
        strip_prefixes(line) if line.startswith("[") else line for line in text.rstrip("\n").splitlines()[-lines:]
    )


def _finished(result: LaunchResult, run: ScriptRun, plan: Plan) -> None:
    logs = rank_logs(Path(result.log_dir))
    if run.status == "ok":
        result.summary = f"{result.nproc_per_node} rank(s) per node finished in {result.seconds:.1f}s"
        if "finished" in run.note:  # ddplab.resume found the run already at its end: the script trained nothing
            result.summary += (
                f", but trained nothing: it resumed from {run.note.get('path')}, the end of a "
                "finished run (another checkpoint folder trains again)"
            )
        result.ranks = [RankReport(rank=None, local_rank=lr, exitcode=0, log=str(p)) for lr, p in sorted(logs.items())]
        return
    from ddplab.explain.matcher import ERROR_LINE, RootCause, explain_text  # 0.3 s: only a failure needs it

    result.status, result.exit_code = "failed", 1
    ranks, failed = {}, []
    for rank_key, f in run.failures.items():
        folder = logs.get(f["local_rank"])
        tail = _tail(folder / "stderr.log") if folder else ""
        errors = [line for line in tail.splitlines() if ERROR_LINE.match(line)]
        rep = RankReport(
            rank=int(rank_key),
            local_rank=f["local_rank"],
            pid=f.get("pid"),
            exitcode=f["exitcode"],
            error=errors[-1] if errors else None,
            traceback=tail,
            log=str(folder) if folder else None,
        )
        ranks[rep.rank] = rep
        stamp = f.get("time") or 0
        if folder is not None and (folder / "stderr.log").exists():
            stamp = (folder / "stderr.log").stat().st_mtime  # when it last wrote: closer to when it failed
        failed.append(Failed(rep.rank, rep.exitcode, tail, stamp))
    result.ranks = [ranks[r] for r in sorted(ranks)]
    launcher_log = run.launcher_log
    if not ranks:
        result.summary = f"the launcher failed: {run.launcher_error}"
        result.explanation = explain_text(
            launcher_log.read_text(errors="replace") if launcher_log.exists() else "", source=str(launcher_log)
        )
        return
    root = ranks[root_cause(failed)]
    result.root_cause = root.rank
    finished = sorted(set(logs) - {f["local_rank"] for f in run.failures.values()})  # local ranks that exited 0
    text = "\n".join(_prefixed(rep) for rep in sorted(result.ranks, key=lambda r: r is not root))
    if not text.strip() and launcher_log.exists():
        summary = launcher_log.parent / "torchrun-summary.txt"  # torchrun's "Root Cause", kept apart by the agent
        text = launcher_log.read_text(errors="replace") + (summary.read_text() if summary.exists() else "")
    result.explanation = explain_text(
        text,
        source=result.log_dir,
        root=RootCause(rank=root.rank, local_rank=root.local_rank, exitcode=root.exitcode, error=root.error),
    )
    _named_parameters(result.explanation, text)
    # A rank that aborted in C++ printed no Python error line; explain reads its `what():` instead.
    root.error = root.error or result.explanation.root_cause.error
    result.flight = _flight(run, errors={r.rank: r.error for r in result.ranks if r.error})
    frame = _own_frame(Path(root.log) / "stderr.log") if root.log else None
    at = f" at {frame[0].name}:{frame[1]}" if frame else ""  # where: its own code's innermost line
    result.summary = f"rank {root.rank} failed first{at} ({exit_text(root.exitcode)})" + (
        f": {root.error}" if root.error else ""
    )
    if origin_itself(next(f for f in failed if f.rank == root.rank), bool(finished)):
        _own_cause(result, root, finished, plan)
    if not result.related_lint and plan.lint is not None:  # the warning printed at the start that foretold this
        from ddplab.userscript.predicted import predicted

        whole = (Path(root.log) / "stderr.log") if root.log else None
        text = whole.read_text(errors="replace") if whole is not None and whole.exists() else root.traceback
        rules = (
            {m.rule for m in result.explanation.matches if m.root_cause} if result.explanation is not None else set()
        )
        result.related_lint = predicted(plan.lint.findings, plan.script, text, root.error or "", rules)


def _named_parameters(explanation, text: str) -> None:
    """DDP's unused-parameter indices, named by the rank itself (sanitize/paramnames.py), in explain's diagnosis."""
    from ddplab.sanitize.paramnames import NAMED

    named = {m[1]: m[2] for m in NAMED.finditer(text)}
    if not named or explanation is None:
        return
    by_names: dict[str, list[str]] = {}
    for rank, names in sorted(named.items(), key=lambda kv: int(kv[0])):
        by_names.setdefault(names, []).append(rank)
    said = " ".join(
        f"On rank{'s' * (len(ranks) > 1)} {', '.join(ranks)} they are: {names}." for names, ranks in by_names.items()
    )
    for m in explanation.matches:
        if m.rule == "unused-parameters":
            m.cause += f" {said}"


def _own_cause(result: LaunchResult, root: RankReport, finished: list[int], plan: Plan) -> None:
    """The root-cause rank failed with an error that follows a peer's departure, and its peers had finished cleanly:
    it ran a collective they never called. Name its own line (the innermost frame of the script in its traceback),
    the collective when the Flight Recorder saw it, and lint's finding on that line."""
    frame = _own_frame(Path(root.log) / "stderr.log") if root.log else None
    if frame is None:
        return
    path, line, code = frame
    where = f"{path.name}:{line}"
    peers = (
        (f"rank {finished[0]}" if len(finished) == 1 else "ranks " + ", ".join(map(str, finished)))
        if result.nnodes in ("1", "1:1")
        else "its peers on this node"
    )
    fr = result.flight
    what = "a collective"
    if fr is not None and fr.available and fr.kind == "not_called" and root.rank in (fr.waiting or []):
        what = f"{fr.op} #{fr.seq}"
        # The first collective the peers never called may come before the one it failed in (a broadcast from rank 0
        # can complete on rank 0 alone).
        seqs = [f.last_started.seq for f in fr.ranks if f.rank in finished and f.last_started is not None]
        if seqs and min(seqs) + 1 < fr.seq:
            what += f" (and the collectives from #{min(seqs) + 1} on)"
    result.cause = OwnCause(
        root.rank,
        where,
        code,
        (
            f"rank {root.rank} ran {what} at {where} that {peers} never called: {peers} had already finished (exit code "
            f"0), so gloo found the connection closed. No rank failed first: this line runs a collective the others do "
            f"not (a rank-dependent branch such as an evaluation on rank 0, or ranks that stop early)"
        ),
    )
    result.summary = f"rank {root.rank} ran {what} at {where} that {peers} never called (finished already)" + (
        f": {root.error}" if root.error else ""
    )
    linted = plan.script is not None and path.resolve() == Path(plan.script).resolve()
    findings = plan.lint.findings if plan.lint and linted else []
    result.related_lint = [f for f in findings if f.line == line and not getattr(f, "path", None)] or [
        f for f in findings if f.rule in RELATED_RULES["collective"]
    ]
    if result.explanation is not None:
        # explain's rule for this text says "a consequence: find the rank that failed first"; here that rank is
        # this one, and the fix is its own line.
        for m in result.explanation.matches:
            if m.consequence and m.root_cause:
                m.fix = (
                    f"No rank failed before rank {root.rank}: the others had finished. Make every rank run the "
                    f"same collectives: fix {where}"
                    + (f" ({result.related_lint[0].fix})" if result.related_lint else "")
                )


def _own_frame(stderr: Path) -> tuple[Path, int, str] | None:
    """(file, line, source) of the innermost frame of the script's own code in the last traceback of a rank's
    stderr, or None."""
    from ddplab.explain.matcher import strip_prefixes
    from ddplab.launcher.stacks import own_code

    try:
        lines = [strip_prefixes(line) for line in stderr.read_text(errors="replace").splitlines()]
    except OSError:
        return None
    start = max(
        (i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=None
    )
    if start is None:
        return None
    found = None
    for i in range(start + 1, len(lines)):
        m = FRAME.match(lines[i])
        if m and own_code(m["file"]):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not FRAME.match(lines[i + 1]) else ""
            found = (Path(m["file"]), int(m["line"]), code)
    return found


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
        result.ranks.append(
            RankReport(
                rank=s.rank,
                local_rank=s.local_rank,
                pid=s.pid,
                stuck_in=s.call,
                where=s.where,
                stack=s.stack or s.error,
                log=str(folder) if folder else None,
            )
        )
    result.summary = f"{run.reason or f'no progress for {timeout:g}s'}: {describe(run.stacks or [], plan.endpoint)}"
    result.flight = _flight(run, stacks={s.rank: s.where for s in run.stacks or [] if s.rank is not None and s.where})
    kinds = {s.kind for s in run.stacks or []}
    related = set().union(*(RELATED_RULES.get(k, set()) for k in kinds)) if kinds else set()
    findings = plan.lint.findings if plan.lint else []
    result.related_lint = [f for f in findings if f.rule in related] or [f for f in findings if f.level == "error"]
    if "teardown" in kinds:  # seen in the C++ frames: no finding of lint's is a likelier cause
        result.related_lint, result.fix = [], HANG_FIXES["teardown"]
    elif not result.related_lint:
        result.fix = HANG_FIXES.get(next((k for k in ("collective", "ddp", "rendezvous") if k in kinds), ""))


def _flight(run: ScriptRun, **known):
    """The Flight Recorder's view of the ranks (which collective each last called and completed), or None when no
    rank left a record: the stacks and the tracebacks are then all there is."""
    from ddplab.flight import reader as flight

    if not run.dumps:
        return None
    return flight.analyse(run.dumps, **known)
