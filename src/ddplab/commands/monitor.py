"""`ddplab monitor`: a live per-rank view of a running DDP job, like `watch -n 1 nvidia-smi` but per rank, with a
verdict. It finds the job by itself (see ddplab/observe/monitor.py), or watches the ranks or launchers given with --pids.

Exit codes: --once gives 0 when nothing is flagged and 1 when something is (an idle or behind rank, an idle GPU);
no job found is 1 too (nothing to watch is a finding, not a usage error); a pid that does not exist is 2.
The live view ends by itself, with 0, when the job it watches has ended, or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import time

from rich.console import Group
from rich.live import Live
from rich.text import Text

from ddplab import cliargs, report
from ddplab.errors import DdplabError


def _pids(text: str) -> list[int]:
    try:
        pids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id: give numbers, e.g. --pids 4121 4122") from None
    if not pids or min(pids) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id: give positive numbers")
    return pids


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds, e.g. --interval 1")
    return value


COLUMNS = """columns of the ranks table:
  job       torchrun:PID (the launcher's pid) or ddplab:RUN
  rank      the global rank; local: the rank on this machine; pid: its process
  state     the process's state (running, sleeping, ...)
  CPU %     CPU use over the last interval; 100 = one whole core
  CPU s     CPU time used since the rank started
  RSS MiB   resident memory of the rank's process
  GPU       the rank's GPU ('?': assumed from its local rank, not seen among the GPU's processes);
            GPU %: that GPU's utilisation; GPU MiB: the rank's memory on it
  marks     progress marks made so far (ddplab's own runs); phase: the last one
  flags     idle: under 10 % of a core (or of its GPU); behind: far fewer marks than the leader, the straggler;
            waiting: far less CPU time than the busiest rank, which it likely waits for; quiet: no progress mark
            for 60 s or more (a long step, a checkpoint, or a hang: a GPU waiting in NCCL still reads busy); exited
the GPU table: util % (nvidia-smi's), memory MiB used/total, power W used/limit, and the processes as pid:rank"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "monitor",
        help="live per-rank device utilisation of a running job",
        epilog=COLUMNS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--interval", type=_interval, default=1.0, metavar="S", help="seconds between samples (default 1)")
    p.add_argument(
        "--pids",
        type=_pids,
        nargs="+",
        metavar="PID",
        help="ranks or launchers (torchrun, ddplab) to watch; default: find running jobs by themselves (with "
        "--idle-after: only these jobs count, once ended or stalled, and no GPU but theirs)",
    )
    p.add_argument(
        "--once", action="store_true", help="one sample over --interval, then exit (1 if anything is flagged)"
    )
    p.add_argument(
        "--json", action="store_true", help="JSON on stdout: one object with --once, else one line per sample"
    )
    guard = p.add_argument_group(
        "idle guard", "act once this machine has done nothing for a while (ddplab.observe.idle)"
    )
    guard.add_argument(
        "--idle-after",
        type=_duration,
        metavar="DURATION",
        help="idle this long (90s, 15m, 1h30m), counted from now: no torchrun/ddplab rank alive, or only "
        "stalled ones (no step mark, CPU ranks under 0.1 core), and every other GPU quiet; then --then runs with "
        "the reason in DDPLAB_IDLE_REASON",
    )
    guard.add_argument("--then", metavar="COMMAND", help="shell command to run once, e.g. 'sudo shutdown -h now'")
    guard.add_argument("--warn-only", action="store_true", help="only warn when idle that long; keep watching")
    cliargs.add_budget(guard, "this machine: --then runs")
    guard.add_argument(
        "--since",
        metavar="WHEN",
        help="--budget counts from: 'boot' (the machine's start), a time (2026-12-05T09:00, 09:00 today), or a "
        "duration ago (90m); default: now",
    )
    p.set_defaults(run=run)


def _duration(text: str) -> float:
    from ddplab.observe.idle import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run(args) -> int:
    from ddplab.observe import monitor

    if args.idle_after is not None or args.then or args.warn_only or args.budget is not None:
        return _idle_guard(args)
    if args.price is not None or args.gpu or args.provider or args.tier or args.since:
        from ddplab.perf import spend

        spend.rate(args)  # says which flag wants --budget
        raise DdplabError("--since is where --budget counts from: add --budget AMOUNT")

    pids = [pid for group in args.pids for pid in group] if args.pids else None
    if args.once:
        snap = monitor.snapshot_once(pids, args.interval)
        report.emit(snap, args.json, render)
        return 0 if snap.ok else 1
    return _live(monitor, pids, args.interval, args.json)


def _idle_guard(args) -> int:
    from ddplab.observe import idle
    from ddplab.perf import spend

    if args.idle_after is None and args.budget is None:
        raise DdplabError(
            "--then and --warn-only belong to the idle guard: add --idle-after DURATION, e.g. 30m (or --budget AMOUNT)"
        )
    if not args.then and not args.warn_only:
        first = "--idle-after" if args.idle_after is not None else "--budget"
        raise DdplabError(f"{first} needs --then COMMAND (what to run), or --warn-only")
    if args.once:
        raise DdplabError("the idle guard watches until it acts: drop --once")
    pids = [pid for group in args.pids for pid in group] if args.pids else None
    if pids:
        from ddplab.observe.monitor import require_running

        require_running(pids)
    if args.since is not None and args.budget is None:
        raise DdplabError("--since is where --budget counts from: add --budget AMOUNT")
    since = None if args.since is None else spend.since(args.since)
    budget = spend.budget(args, spend.gpus_here(), since)
    result = idle.guard(args.idle_after, args.then, args.warn_only, args.interval, report.log, budget, pids)
    report.emit(result, args.json, _render_guard)
    return 0 if result.exit_code in (None, 0) else 1


def _render_guard(con, r) -> None:
    if r.exit_code is not None:
        # The reason was logged as the command ran (and is in --json): once is enough on a terminal.
        con.print(f"guard: ran: {r.command}  (exit status {r.exit_code})", markup=False)
    else:
        con.print(f"idle guard: stopped after {r.watched_s:.0f}s" + (", having warned" if r.fired else ""))


def _live(monitor, pids: list[int] | None, interval: float, as_json: bool) -> int:
    jobs = monitor.require_jobs(pids)
    watched = {job.id for job in jobs}  # jobs started later (someone else's) do not join this view
    con = report.console()
    sampler = monitor.Sampler()
    live = Live(console=con, auto_refresh=False) if con.is_terminal and not as_json else None
    try:
        if live:
            live.start()
        while jobs:
            sampler.track(jobs)
            time.sleep(interval)
            snap = sampler.sample(jobs)
            if all("exited" in r.flags for job in snap.jobs for r in job.ranks):
                break  # the job ended during this interval: nothing left worth a last table
            if as_json:
                print(json.dumps(report.to_jsonable(snap)), flush=True)
            elif live:
                live.update(_view(snap, con.width), refresh=True)
            else:  # a log file or a pipe: one table after another
                con.print(_view(snap, con.width))
            jobs = [job for job in monitor.find_jobs(pids) if job.id in watched]
    except KeyboardInterrupt:
        return 0
    finally:
        if live:
            live.stop()
        sampler.close()
    report.log("the job ended: no rank left to watch")
    return 0


def render(con, snap) -> None:
    con.print(_view(snap, con.width))


def _view(snap, width: int = 80) -> Group:
    """The whole screen: a table of ranks, one of GPUs when there are GPUs, then the verdict. Tables fit WIDTH
    without cutting an id or a number: narrower columns wrap, optional ones go (and a note says which)."""
    parts = [
        Text(
            f"ddplab monitor  {time.strftime('%H:%M:%S', time.localtime(snap.time))}  "
            f"sampled over {snap.interval_s:.1f}s  {'' if snap.nvml == 'ok' else snap.nvml}",
            style="dim",
        )
    ]
    if len(snap.jobs) == 1:  # said once above the rows, not in a column of its own (the table fits 80 columns whole)
        job = snap.jobs[0]
        parts.append(Text(f"job {job.id}", no_wrap=True))
    ranks, left_out = _ranks_table(snap, width)
    parts.append(ranks)
    if snap.gpus:
        gpus, gone = _gpus_table(snap, width)
        parts.append(gpus)
        left_out += gone
    for problem in snap.problems:
        parts.append(report.text(report.styled("WARN"), " ", problem))
    for note in snap.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    parts.append(Text("note: the columns and flags are explained in `ddplab monitor --help`", style="dim"))
    if left_out:
        parts.append(
            Text(
                f"note: left out for a {width}-column output: {', '.join(left_out)} (set COLUMNS wider, or use --json)",
                style="dim",
            )
        )
    parts.append(
        report.text(
            "verdict: ",
            report.text(report.styled("OK"), " ", snap.verdict) if snap.ok else Text(snap.verdict, style="yellow"),
        )
    )
    return Group(*parts)


def _flags(flags: list[str]) -> Text:
    return Text(" ".join(flags), style="bold yellow") if flags else Text("ok", style="green")


def _num(value, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _ranks_table(snap, width: int):
    Column = report.Column
    has_gpu = any(r.gpu is not None for job in snap.jobs for r in job.ranks)
    has_progress = any(r.progress is not None for job in snap.jobs for r in job.ranks)
    # drop: what goes first when the output is narrow (the GPU table names each rank's GPU; CPU s is a total)
    one_job = len(snap.jobs) == 1  # then its id is the line above the table
    columns = [
        *([] if one_job else [Column("job", justify="left", fold_last=True)]),
        Column("rank"),
        Column("local"),
        Column("pid"),
        Column("state", "text", justify="left"),
        Column("CPU %"),
        Column("CPU s", drop=4),
        Column("RSS MiB", drop=2),
    ]
    if has_gpu:
        columns += [Column("GPU", drop=3), Column("GPU %"), Column("GPU MiB")]
    if has_progress:
        columns += [Column("marks"), Column("phase", "text", drop=1, justify="left")]
    columns.append(Column("flags", "text", justify="left"))
    rows = []
    for job in snap.jobs:
        for i, r in enumerate(job.ranks):
            row = [
                *([] if one_job else [job.id if i == 0 else ""]),
                _num(r.rank, "{}"),
                _num(r.local_rank, "{}"),
                str(r.pid),
                r.status,
                f"{r.cpu_percent:.0f}",
                f"{r.cpu_seconds:.1f}",
                f"{r.rss_mib:.0f}",
            ]
            if has_gpu:
                gpu = "-" if r.gpu is None else f"{r.gpu}" + ("" if r.gpu_from == "nvml" else "?")
                row += [gpu, _num(r.gpu_util_percent), _num(r.gpu_memory_mib)]
            if has_progress:
                row += [_num(r.progress, "{}"), r.phase or "-"]
            rows.append([*row, _flags(r.flags)])
    return report.fit_table(width, columns, rows)


def _gpus_table(snap, width: int):
    Column = report.Column
    columns = [
        Column("GPU"),
        Column("name", "text", drop=3, justify="left"),
        Column("util %"),
        Column("memory MiB"),
        Column("power W", drop=2),
        Column("temp C", drop=1),
        Column("processes (pid:rank)", "text", justify="left"),
        Column("flags", "text", justify="left"),
    ]
    rows = []
    for g in snap.gpus:
        procs = " ".join(f"{p.pid}:{p.rank if p.rank is not None else (p.name or '?')}" for p in g.processes) or "-"
        power = "-" if g.power_w is None else f"{g.power_w:.0f}/{_num(g.power_limit_w)}"
        rows.append(
            [
                str(g.index),
                g.name,
                _num(g.util_percent),
                f"{g.memory_used_mib:.0f}/{g.memory_total_mib:.0f}",
                power,
                _num(g.temperature_c, "{}"),
                procs,
                _flags(g.flags),
            ]
        )
    return report.fit_table(width, columns, rows)
