"""`ddplab bench`: how fast are the collectives — nccl-tests' columns, from Python, on any backend.

    ddplab bench                                   # every op, 1K..64M, 2 gloo ranks on CPU (or every GPU)
    ddplab bench all_reduce -b 1M -e 1G -n 50      # nccl-tests' short flags work too
    ddplab bench --json --csv bench.csv --plot bench.png

Every size is first checked against exactly known values (#wrong counts mismatched elements over all ranks;
any wrong element exits 1), then timed. busbw follows NVIDIA/nccl-tests doc/PERFORMANCE.md; see docs/bench.md.
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from ddplab import cliargs, envinfo, report
from ddplab.errors import DdplabError
from ddplab.perf.bench import (
    DTYPE_BYTES,
    OPS,
    BenchResult,
    format_size,
    gpu_memory_problem,
    parse_size,
    per_rank_bytes,
    plan_sizes,
    run_bench,
    start_ranks,
)


def _whole(minimum: int):
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ≥ {minimum}")
        return int(text)

    return parse


def _factor(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number, e.g. 2") from None


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="how fast are the collectives (nccl-tests columns)",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("ops", nargs="*", metavar="OP", help=f"any of {', '.join(OPS)} (default: all)")
    p.add_argument(
        "--nproc-per-node",
        "--nproc",
        dest="nproc",
        type=_whole(1),
        help="ranks to start (default: the number of GPUs, or 2 simulated ranks on CPU)",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when a GPU is visible, else cpu")
    p.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl on GPUs, gloo on CPU")
    p.add_argument("-b", "--min-bytes", default="1K", help="smallest size S, with K/M/G suffixes (default %(default)s)")
    p.add_argument("-e", "--max-bytes", default="64M", help="largest size S (default %(default)s)")
    p.add_argument("-f", "--factor", type=_factor, default=2.0, help="each size is the previous × this (default 2)")
    p.add_argument("-d", "--dtype", default="float32", help=f"one of {', '.join(DTYPE_BYTES)} (default %(default)s)")
    p.add_argument("-n", "--iters", type=_whole(1), default=20, help="timed calls per size (default %(default)s)")
    p.add_argument("-w", "--warmup", type=_whole(0), default=5, help="untimed calls first (default %(default)s)")
    p.add_argument(
        "--in-place",
        action="store_true",
        help="all_gather/reduce_scatter work inside one buffer (all_reduce, broadcast always do)",
    )
    cliargs.add_hang_timeout(p, "bench", "--timeout", dest="timeout")
    p.add_argument("--master-port", type=cliargs.port, help="rendezvous port on 127.0.0.1 (default: a free one)")
    p.add_argument("--json", action="store_true", help="print one JSON object with every row on stdout")
    p.add_argument("--csv", metavar="FILE", help="also write the rows as CSV")
    p.add_argument("--plot", metavar="FILE.png", help="also draw busbw against size, one line per op")
    p.set_defaults(run=run)


def run(args) -> int:
    ops = args.ops or list(OPS)
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise DdplabError(f"unknown op {', '.join(unknown)}: choose from {', '.join(OPS)}")
    ops = list(dict.fromkeys(ops))
    for path, suffix in ((args.csv, None), (args.plot, ".png")):
        _check_output(path, suffix)
    min_bytes, max_bytes = parse_size(args.min_bytes), parse_size(args.max_bytes)
    # Bad sizes fail here, before torch is imported; the rank count (GPUs?) is settled below.
    plan_sizes(min_bytes, max_bytes, args.factor, args.dtype, args.nproc or 1)

    # The agent imports torch (~2 s) while this process does the same and checks the rest, as check and train do.
    # A wrong guess of the rank count is cancelled and started again.
    from ddplab.launcher import startup

    guess = envinfo.early_nproc(args.nproc, args.device)
    with startup.early(lambda n: start_ranks(n, args.master_port), guess) as ranks:
        import torch

        from ddplab import dist as ddist

        if args.device is None and (unusable := envinfo.unusable_gpus(torch)):  # not a silent fallback to CPU
            raise DdplabError(f"{unusable.problem}: {unusable.fix}")
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        backend = ddist.choose_backend(ddist.choose_device(0, device), args.backend)  # a bad combination exits 2
        nproc = args.nproc or (torch.cuda.device_count() if device == "cuda" else 2)
        if device == "cuda" and nproc > torch.cuda.device_count():
            raise DdplabError(
                f"--nproc {nproc} but only {torch.cuda.device_count()} GPU(s) are visible: start one rank per GPU"
            )
        sizes, notes = plan_sizes(min_bytes, max_bytes, args.factor, args.dtype, nproc)
        _check_memory(device, ops, sizes[-1], nproc)
        pending = ranks.get(nproc)
        for note in notes:
            report.log(f"note: {note}")

        with report.console(stderr=True).status(f"starting {nproc} rank(s)…") as status:

            def on_event(rank: int, event: dict) -> None:
                if rank == 0 and "size" in event:
                    status.update(f"{event['op']} {format_size(event['size'])}B")

            run_result, result = run_bench(
                ops=ops,
                sizes=sizes,
                dtype=args.dtype,
                nproc=nproc,
                iters=args.iters,
                warmup=args.warmup,
                in_place=args.in_place,
                backend=backend,
                device=device,
                timeout=args.timeout,
                master_port=args.master_port,
                notes=notes,
                on_event=on_event,
                pending=pending,
            )
    if result is None:
        return _run_failed(run_result)
    if args.csv:
        write_csv(result, args.csv)
    if args.plot:
        write_plot(result, args.plot)
    report.emit(result, args.json, render)
    return 1 if result.wrong else 0


def _check_output(path: str | None, suffix: str | None) -> None:
    if path is None:
        return
    target = Path(path)
    if suffix and target.suffix.lower() != suffix:
        raise DdplabError(f"{path}: the plot is a PNG, so give a path ending in {suffix}")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise DdplabError(f"{path}: folder {parent} does not exist or is not writable: create it or pick another")


def _check_memory(device: str, ops: list[str], largest: int, nproc: int) -> None:
    """Each rank holds input, output and the expected result at the largest size: refuse before swapping (CPU) or
    before every rank dies in a CUDA out-of-memory error (GPU)."""
    per_rank = per_rank_bytes(ops, largest)
    if device == "cuda":
        import torch

        # The total from the device's properties: no CUDA context here, which would hold memory on GPU 0 all run.
        problem = gpu_memory_problem(
            largest, per_rank, min(torch.cuda.get_device_properties(i).total_memory for i in range(nproc))
        )
        if problem:
            raise DdplabError(problem)
        return
    if device != "cpu":
        return
    import psutil

    need, free = per_rank * nproc, psutil.virtual_memory().available
    if need > 0.8 * free:
        raise DdplabError(
            f"--max-bytes {format_size(largest)} needs about {need / 2**30:.1f} GiB over {nproc} ranks "
            f"but {free / 2**30:.1f} GiB is free: lower --max-bytes"
        )


def _run_failed(run) -> int:
    err = report.console(stderr=True)
    status = report.styled("TIMEOUT" if run.status == "hang" else "FAIL")
    err.print(report.text("ddplab bench: ", status, f" {run.summary()}"), soft_wrap=True)
    for r in run.ranks:
        if run.status == "hang" and r.rank in run.stalled and r.stack:
            err.print(f"rank {r.rank} stack (last phase {r.phase}):\n{r.stack}", markup=False, soft_wrap=True)
        elif run.root_cause == r.rank and (r.traceback or r.output_tail):
            err.print(f"rank {r.rank} traceback:\n{r.traceback or r.output_tail}", markup=False, soft_wrap=True)
    if run.run_dir:
        err.print(f"kept: every rank's whole output in {run.run_dir} (delete it when done)", soft_wrap=True)
    return 3 if run.status == "hang" else 130 if run.status == "interrupted" else 1


# ------------------------------------------------------------------------------------------------ outputs

CSV_COLUMNS = ["op", "size", "count", "dtype", "in_place", "time_us", "algbw", "busbw", "wrong"]


def write_csv(result: BenchResult, path: str) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(CSV_COLUMNS)
        for row in result.rows:
            out.writerow([getattr(row, c) for c in CSV_COLUMNS])


def write_plot(result: BenchResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display needed, and none is wanted on a cluster node
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(8, 5))
    for op in dict.fromkeys(r.op for r in result.rows):
        rows = [r for r in result.rows if r.op == op]
        ax.plot([r.size for r in rows], [r.busbw for r in rows], marker="o", label=op)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(int(x))))
    ax.set_xlabel("size S (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"ddplab bench: {result.world_size} ranks, {result.backend} on {result.device}, {result.dtype}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def render(con, r: BenchResult) -> None:
    # --in-place chooses only for the ops torch.distributed has both ways; each op's section says which it ran.
    place = "in place" if r.in_place else "out of place"
    con.print(
        f"# ddplab bench: {r.world_size} rank(s), {r.backend} on {r.device}, {r.dtype}, "
        f"{r.iters} timed calls after {r.warmup} warm-up; all_gather and reduce_scatter {place}, "
        "all_reduce and broadcast always in place, all_to_all never",
        markup=False,
        soft_wrap=True,
    )
    head = f"#{'size':>11} {'count':>12} {'type':>9} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}"
    unit = f"#{'(B)':>11} {'(elements)':>12} {'':>9} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}"
    for op in dict.fromkeys(row.op for row in r.rows):
        rows = [row for row in r.rows if row.op == op]
        place = "in place" if rows[0].in_place else "out of place"
        con.print(f"#\n# {op} ({place})\n{head}\n{unit}", markup=False, soft_wrap=True)
        for row in rows:
            con.print(
                f"{row.size:>12} {row.count:>12} {row.dtype:>9} {row.time_us:>10.1f} {row.algbw:>8.3f} "
                f"{row.busbw:>8.3f} {row.wrong:>7}",
                markup=False,
                soft_wrap=True,
                style="bold red" if row.wrong else None,
            )
    con.print("#", markup=False, soft_wrap=True)
    for s in r.skipped:
        con.print(report.text("# ", report.styled("SKIP"), f" {s.op}: {s.reason}"))
    for note in r.notes:
        con.print(f"# note: {note}", markup=False, soft_wrap=True)
    if r.avg_busbw is not None:
        con.print(f"# Avg bus bandwidth    : {r.avg_busbw:.3f} GB/s", markup=False, soft_wrap=True)
    fit = r.ring_fit
    if fit is not None:
        latency = (
            f"α = {fit.alpha_us:.1f} µs per step"
            if fit.alpha_us >= 0
            else "α not resolved (add smaller sizes with --min-bytes)"
        )
        con.print(
            f"# Ring fit (all_reduce): {latency}, B = {fit.bandwidth_gbps:.3f} GB/s per link "
            f"(t = 2(n-1)/n·S/B + 2(n-1)·α over {fit.points} sizes, off by {fit.rms_rel_error:.0%} rms)",
            markup=False,
            soft_wrap=True,
        )
    elif any(row.op == "all_reduce" for row in r.rows):
        con.print(
            "# Ring fit (all_reduce): needs 2+ ranks and 2+ sizes whose times grow with size",
            markup=False,
            soft_wrap=True,
        )
    if r.peak_fraction is not None:
        con.print(
            f"# Peak busbw {r.peak_busbw:.3f} GB/s = {r.peak_fraction:.1%} of the {r.copy_kind} "
            f"({r.copy_gbps:.2f} GB/s)",
            markup=False,
            soft_wrap=True,
        )
    if r.status == "FAIL":
        verdict = report.text(report.styled("FAIL"), f" {r.wrong} wrong element(s) — the collectives return wrong data")
    else:
        verdict = (
            report.text(report.styled("PASS"), " every element correct")
            if r.rows
            else report.text(report.styled("SKIP"), " nothing measured: this backend runs none of the ops asked for")
        )
    con.print(report.text("# Result: ", verdict, f" ({r.seconds:.1f}s)"))
