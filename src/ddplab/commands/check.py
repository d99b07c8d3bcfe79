"""`ddplab check`: does distributed training work here, stage by stage, and if not, why.

Stages: preflight (before any worker), then on N ranks started by the elastic launcher: devices, collectives, ddp.
A rank that crashes fails its stage by name; a rank that makes no progress for --hang-timeout seconds is a hang: the
stuck ranks are named with the operation and their Python stacks, every worker is ended, and the exit code is 3.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from ddplab import cliargs, report
from ddplab.checks import FAIL, PASS, SKIP, STAGES, TIMEOUT, WORKER_STAGES, StageResult, verdicts

TARGET = "ddplab.checks.worker:run_stages"


@dataclass
class CheckResult:
    ok: bool
    verdict: str
    nproc: int
    device: str
    backend: str
    seconds: float
    stages: list[StageResult]
    problems: list[dict] = field(default_factory=list)  # per failing rank: traceback or stack, for people to read
    nnodes: int = 1
    ranks: list[int] = field(default_factory=list)  # the global ranks that ran on this node
    flight: object = None  # a hung or failed run: which collective each rank last called (flight.reader)
    nodes: list[dict] = field(default_factory=list)  # several nodes: each one's facts and verdict (crossnode)
    kept: str = ""  # a failed or hung run: the folder that keeps every rank's whole output
    sanitize: object = None  # sanitize.readout.SanitizeReport of the ddp stage's steps: ddplab's own code, clean


def _fraction(text: str) -> float:
    value = cliargs.positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction of memory between 0 and 1, e.g. 0.5")
    return value


def _stages(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in STAGES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown stage {', '.join(unknown) or text!r}: choose from {', '.join(STAGES)}"
        )
    return names


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="does distributed training work here, stage by stage, and if not, why",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--nproc-per-node",
        "--nproc",
        dest="nproc",
        type=cliargs.positive_int,
        help="ranks to start (default: the number of GPUs, or 2 simulated ranks on CPU)",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when a GPU is visible, else cpu")
    p.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl on GPUs, gloo on CPU")
    p.add_argument(
        "--stages",
        type=_stages,
        default=list(STAGES),
        help=f"comma-separated subset of {','.join(STAGES)} (preflight always runs)",
    )
    cliargs.add_hang_timeout(p, "check", "--timeout", dest="timeout")
    p.add_argument("--master-port", type=cliargs.port, help="rendezvous port on 127.0.0.1 (default: a free one)")
    p.add_argument(
        "--mem-fraction",
        type=_fraction,
        default=0.5,
        help="share of free GPU memory the devices stage allocates (default %(default)g)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cliargs.add_nodes(p)
    p.set_defaults(run=run)


def run(args) -> int:
    # The sanitizer's folder goes whatever happens: a check ended by SIGTERM (the CLI's SystemExit) or Ctrl-C too.
    sanitize_dir = Path(tempfile.mkdtemp(prefix="ddplab-sanitize-"))
    try:
        return _run_check(args, sanitize_dir)
    finally:
        shutil.rmtree(sanitize_dir, ignore_errors=True)


def _run_check(args, sanitize_dir: Path) -> int:
    from ddplab import envinfo
    from ddplab.checks import preflight
    from ddplab.launcher import local, startup
    from ddplab.sanitize import readout as sanitizer

    worker_stages = [s for s in WORKER_STAGES if s in args.stages]
    nodes = cliargs.nodes_from(args)
    port_finding, port = preflight.port_finding(args.master_port, nodes)
    # Start the agent first: it imports torch while this process does too (for preflight), so start-up is paid
    # once in wall time, not twice. Without a GPU driver the default is 2 CPU ranks, known before torch is loaded.
    guess = envinfo.early_nproc(args.nproc, args.device) if worker_stages and port is not None else None
    # The sanitizer watches the ddp stage's optimizer steps as it would a user's script's: check's own DDP code
    # must come out clean (a finding there is ddplab's bug, said but not the machine's verdict).
    sanitizer.request(sanitize_dir, sanitizer.DEFAULT_STEPS)
    env = {sanitizer.DIR_ENV: str(sanitize_dir)}
    with startup.early(
        lambda n: local.start(TARGET, nproc=n, master_port=port, nodes=nodes, flight=True, env=env), guess
    ) as ranks:
        device, backend, nproc = _settled(args, ranks.pending)  # a bad combination: exit 2
        pre = preflight.run(nproc, device, backend, port_finding, cross=_cross(nodes, backend, nproc))
        stages, problems, seconds, run_ranks, flight, kept = [pre], [], pre.seconds, [], None, ""
        if pre.status == FAIL:
            stages += [StageResult(s, SKIP, cause="not run: preflight failed") for s in worker_stages]
        elif worker_stages:
            payload = {
                "stages": worker_stages,
                "device": device,
                "backend": backend,
                "mem_fraction": args.mem_fraction,
                # the group's own timeout must not fire before ddplab's hang detection names the stuck rank
                "pg_timeout": args.timeout + 30,
            }
            workers, problems, seconds, run_ranks, flight, kept = _run_workers(args, ranks.get(nproc), payload)
            stages += workers
    result = CheckResult(
        ok=all(s.status in (PASS, SKIP) for s in stages) and pre.status == PASS,
        verdict="",
        nproc=nproc,
        device=device,
        backend=backend,
        seconds=seconds,
        stages=stages,
        problems=problems,
        nnodes=args.nnodes,
        ranks=run_ranks,
        flight=flight,
        kept=kept,
        nodes=pre.details.get("nodes", []),
    )
    result.verdict = _verdict(result)
    result.sanitize = sanitizer.read(sanitize_dir)
    report.emit(result, args.json, render)
    if any(s.status == TIMEOUT for s in stages):
        return 3
    return 0 if result.ok else 1


def _settled(args, agent) -> tuple[str, str, int]:
    """preflight.settle(), in a fork of the early agent when one runs (it has imported torch; this process never
    does), else here."""
    from ddplab.launcher.forked import in_fork_or_here

    request = {"device": args.device, "backend": args.backend, "nproc": args.nproc}
    return tuple(in_fork_or_here(agent, "ddplab.checks.preflight:settle", request))


def _cross(nodes, backend: str, nproc: int):
    """Several nodes: the cross-node preflight (ddplab's ranks get the route's interface; node 0 hosts the store)."""
    if nodes is None:
        return None
    from ddplab.checks import crossnode

    return lambda findings: crossnode.run(crossnode.own_ranks(nodes, backend, nproc), findings, say=report.log)


def _run_workers(args, pending, payload):
    names, nproc = payload["stages"], pending.nproc
    done: dict[str, dict[int, dict]] = {n: {} for n in names}

    with report.console(stderr=True).status(f"checking {nproc} rank(s)…") as status:

        def on_event(rank: int, event: dict) -> None:
            if "stage" in event:  # a stage finished on this rank: keep its result
                done[event["stage"]][rank] = event
            status.update(f"rank {rank}: {event['phase']}")

        run = pending.run(payload, stall_timeout=args.timeout, on_event=on_event)

    stages, problems, blamed = [], [], False
    for name in names:
        if len(done[name]) == nproc:
            per_rank = [done[name][r]["result"] for r in range(nproc)]
            stages.append(verdicts.summarize(name, per_rank, max(e["seconds"] for e in done[name].values())))
        elif not blamed and not run.ok:
            stages.append(_blame(name, run))
            problems = _problems(run)
            blamed = True
        else:
            cause = "not run: an earlier stage did not pass" if blamed else "no result (see the problems below)"
            stages.append(StageResult(name, SKIP if blamed else FAIL, cause=cause))
    return stages, problems, run.seconds, [r.rank for r in run.ranks], run.flight, run.run_dir


def _blame(stage: str, run) -> StageResult:
    """The stage in which the run crashed or hung, with the rank and operation named."""
    if run.status == "hang":
        stuck = [r for r in run.ranks if r.rank in run.stalled]
        return StageResult(
            stage,
            TIMEOUT,
            run.seconds,
            cause=run.summary(),
            fix="every rank must call the same collectives in the same order: the stack of the rank "
            "that never arrived shows where it went instead",
            details={
                "stalled": run.stalled,
                "phases": {r.rank: r.phase for r in run.ranks},
                "stacks": {r.rank: r.stack for r in stuck},
                "last_progress": run.last_progress,
            },
        )
    if run.status == "failed" and run.root_cause is not None:
        r = run.rank(run.root_cause)
        return StageResult(
            stage,
            FAIL,
            run.seconds,
            cause=run.summary(),
            fix=f"read rank {r.rank}'s traceback below; the other ranks failed because it left",
            details={"rank": r.rank, "exitcode": r.exitcode, "phase": r.phase, "error": r.error},
        )
    return StageResult(stage, FAIL, run.seconds, cause=run.summary(), fix="see the launcher's log named above")


def _problems(run) -> list[dict]:
    if run.status == "hang":
        return [{"rank": r.rank, "phase": r.phase, "stack": r.stack} for r in run.ranks]
    if run.root_cause is not None:
        r = run.rank(run.root_cause)
        return [{"rank": r.rank, "phase": r.phase, "traceback": r.traceback or r.output_tail}]
    return []


def _verdict(result: CheckResult) -> str:
    where = f"{result.nproc} rank(s), {result.backend} on {result.device}"
    if result.nnodes > 1:
        ranks = f" ({', '.join(map(str, result.ranks))})" if result.ranks else ""
        where = f"{result.nproc} rank(s) here{ranks} of {result.nnodes} nodes, {result.backend} on {result.device}"
    if result.ok:
        sim = " (simulated devices: CPU processes)" if result.device == "cpu" else ""
        return f"READY: distributed training works here with {where}{sim}"
    first = next(s for s in result.stages if s.status in (FAIL, TIMEOUT))
    verb = "timed out" if first.status == TIMEOUT else "failed"
    if result.nnodes > 1 and first.name == "preflight":  # the node and the fact, then the fix
        return f"NOT READY ({where}): {first.cause} — fix: {first.fix}"
    return f"NOT READY ({where}): {first.name} {verb} — fix first: {first.fix or first.cause}"


def render(con, r: CheckResult) -> None:
    nodes = f" on each of {r.nnodes} nodes" if r.nnodes > 1 else ""
    con.print(report.text(report.bold("ddplab check"), f" — {r.nproc} rank(s){nodes}, {r.backend} on {r.device}"))
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("stage", "status", "time", "result"):
        table.add_column(col, overflow="fold")
    for s in r.stages:
        table.add_row(s.name, report.styled(s.status), f"{s.seconds:.1f}s" if s.seconds else "", s.figure or s.cause)
    con.print(table)
    if r.nodes:
        nodes = Table(box=None, pad_edge=False, show_edge=False)
        for col in ("node", "interface", "torch", "verdict"):
            nodes.add_column(col, overflow="fold")
        for n in r.nodes:
            nodes.add_row(
                n["node"] + (" (this one)" if n["this_node"] else ""),
                n["interface"],
                str(n["versions"].get("torch")),
                report.styled("PASS" if n["verdict"] == "READY" else "FAIL"),
            )
        con.print(nodes)
    for s in r.stages:
        findings = [f for f in s.details.get("findings", []) if f["level"] != "ok"]
        if findings:  # every warning and failure counted in the table, each with its fix
            for f in findings:
                report.finding(con, "FAIL" if f["level"] == "fail" else "WARN", f"{s.name}: {f['what']}", f["fix"])
            continue
        if s.status in (FAIL, TIMEOUT) and s.figure:  # the table showed the figure; say why here
            con.print(report.text(report.styled(s.status), f" {s.name}: {s.cause}"), soft_wrap=True)
        if s.status in (FAIL, TIMEOUT) and s.fix:
            con.print(f"  fix: {s.fix}", soft_wrap=True)
    for p in r.problems:
        text = p.get("stack") or p.get("traceback")
        if text:
            kind = "stack" if "stack" in p else "traceback"
            con.print(report.text("\n", report.bold(f"rank {p['rank']} {kind}"), f" (last phase: {p['phase']}):"))
            con.print(text, soft_wrap=True)
    if r.flight is not None and r.flight.available:
        from ddplab.flight.reader import render as render_flight

        con.print("\n" + render_flight(r.flight))
    from ddplab.sanitize.readout import render as render_sanitize

    if text := render_sanitize(r.sanitize):
        con.print(text, markup=False, highlight=False, soft_wrap=True)
    if r.kept:
        con.print(f"\nkept: every rank's whole output in {r.kept} (delete it when done)", soft_wrap=True)
    con.print(f"\nverdict: {r.verdict}", style="bold green" if r.ok else "bold red", soft_wrap=True)
