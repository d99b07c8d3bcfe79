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
from rich.table import Table
from rich.text import Text

from ddplab import report


def _pids(text: str) -> list[int]:
    try:
        pids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id: give numbers, e.g. --pids 4121 4122")
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


def add_parser(sub) -> None:
    p = sub.add_parser("monitor", help="live per-rank device utilisation of a running job")
    p.add_argument("--interval", type=_interval, default=1.0, metavar="S", help="seconds between samples (default 1)")
    p.add_argument("--pids", type=_pids, nargs="+", metavar="PID",
                   help="ranks or launchers (torchrun, ddplab) to watch; default: find running jobs by themselves")
    p.add_argument("--once", action="store_true",
                   help="one sample over --interval, then exit (1 if anything is flagged)")
    p.add_argument("--json", action="store_true",
                   help="JSON on stdout: one object with --once, else one line per sample")
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab.observe import monitor

    pids = [pid for group in args.pids for pid in group] if args.pids else None
    if args.once:
        snap = monitor.snapshot_once(pids, args.interval)
        report.emit(snap, args.json, render)
        return 0 if snap.ok else 1
    return _live(monitor, pids, args.interval, args.json)


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
                live.update(_view(snap), refresh=True)
            else:  # a log file or a pipe: one table after another
                con.print(_view(snap))
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
    con.print(_view(snap))


def _view(snap) -> Group:
    """The whole screen: a table of ranks, one of GPUs when there are GPUs, then the verdict."""
    parts = [Text(f"ddplab monitor  {time.strftime('%H:%M:%S', time.localtime(snap.time))}  "
                  f"sampled over {snap.interval_s:.1f}s  {'' if snap.nvml == 'ok' else snap.nvml}", style="dim")]
    parts.append(_ranks_table(snap))
    if snap.gpus:
        parts.append(_gpus_table(snap))
    for problem in snap.problems:
        parts.append(Text.from_markup(f"{report.styled('WARN')} ") + Text(problem))
    for note in snap.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    parts.append(Text("verdict: ") + (Text.from_markup(report.styled("OK") + " ") + Text(snap.verdict) if snap.ok
                                      else Text(snap.verdict, style="yellow")))
    return Group(*parts)


def _flags(flags: list[str]) -> Text:
    return Text(" ".join(flags), style="bold yellow") if flags else Text("ok", style="green")


def _num(value, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _ranks_table(snap) -> Table:
    has_gpu = any(r.gpu is not None for job in snap.jobs for r in job.ranks)
    has_progress = any(r.progress is not None for job in snap.jobs for r in job.ranks)
    t = Table(pad_edge=False)
    for name in ["job", "rank", "local", "pid", "state", "CPU %", "CPU s", "RSS MiB"]:
        t.add_column(name, justify="left" if name in ("job", "state") else "right", no_wrap=name in ("job", "state"))
    if has_gpu:
        for name in ["GPU", "GPU %", "GPU MiB"]:
            t.add_column(name, justify="right")
    if has_progress:
        t.add_column("marks", justify="right")
        t.add_column("phase")
    t.add_column("flags")
    for job in snap.jobs:
        for i, r in enumerate(job.ranks):
            row = [job.id if i == 0 else "", _num(r.rank, "{}"), _num(r.local_rank, "{}"), str(r.pid), r.status,
                   f"{r.cpu_percent:.0f}", f"{r.cpu_seconds:.1f}", f"{r.rss_mib:.0f}"]
            if has_gpu:
                gpu = "-" if r.gpu is None else f"{r.gpu}" + ("" if r.gpu_from == "nvml" else "?")
                row += [gpu, _num(r.gpu_util_percent), _num(r.gpu_memory_mib)]
            if has_progress:
                row += [_num(r.progress, "{}"), r.phase or "-"]
            t.add_row(*row, _flags(r.flags))
    return t


def _gpus_table(snap) -> Table:
    t = Table(pad_edge=False)
    for name in ["GPU", "name", "util %", "memory MiB", "power W", "temp C", "processes (pid:rank)", "flags"]:
        t.add_column(name, justify="left" if name in ("name", "processes (pid:rank)", "flags") else "right")
    for g in snap.gpus:
        procs = " ".join(f"{p.pid}:{p.rank if p.rank is not None else (p.name or '?')}" for p in g.processes) or "-"
        power = "-" if g.power_w is None else f"{g.power_w:.0f}/{_num(g.power_limit_w)}"
        t.add_row(str(g.index), g.name, _num(g.util_percent), f"{g.memory_used_mib:.0f}/{g.memory_total_mib:.0f}",
                  power, _num(g.temperature_c, "{}"), procs, _flags(g.flags))
    return t
