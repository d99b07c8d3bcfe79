"""`ddplab scale RECIPE --nproc 1,2[,4...]`: how much faster N devices are, measured, then predicted beyond.

    ddplab scale mlp --nproc 1,2                          weak scaling: the same batch per rank at every size
    ddplab scale mlp --nproc 1,2 --strong --batch-size 64 strong scaling: a global batch of 64 split over N
    ddplab scale gpt --nproc 1,2 --try-advice --plot gpt.png --json > scale.json
    ddplab cost --from scale.json --measured-on H100 --dataset-size 1e6 --epochs 3

Each world size is one real `ddplab train RECIPE --json` run; any flag scale does not know goes to the recipe.
The runs fit ddplab.perf.scaling's model (compute per sample, all_reduce α and B, DDP's overlap), which then
predicts larger world sizes and other interconnects. Advice comes with the gain the model predicts, and with
--try-advice also the gain measured by re-running with it.
"""

from __future__ import annotations

import argparse

from rich.table import Table
from rich.text import Text

from ddplab import cliargs, recipes, report
from ddplab.errors import DdplabError
from ddplab.perf import experiments
from ddplab.perf.advice import EFFICIENCY_TARGET
from ddplab.perf.plot import check_path
from ddplab.perf.study import study

PREDICT = (1, 2, 4, 8, 16, 32, 64)


def _own_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nproc-per-node",
        "--nproc",
        dest="nproc",
        metavar="N,N,...",
        help="world sizes to run, e.g. 1,2 (include 1: it is the baseline)",
    )
    p.add_argument("--strong", action="store_true", help="keep the global batch fixed (default: the per-rank batch)")
    p.add_argument("--try-advice", action="store_true", help="re-run with each piece of advice and measure its gain")
    p.add_argument(
        "--predict",
        default=",".join(map(str, PREDICT)),
        metavar="N,...",
        help="world sizes to predict (default %(default)s)",
    )
    p.add_argument(
        "--bench",
        metavar="BENCH_JSON",
        help="`ddplab bench all_reduce --json` output: the link's "
        "own latency and bandwidth, so overlap can be measured",
    )
    p.add_argument("--plot", metavar="FILE.png", help="write measured points, predicted curve and ideal line")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "scale",
        help="measure how a recipe scales over world sizes, predict more, advise",
        description="Runs `ddplab train RECIPE` at each world size; flags scale does not know are "
        "passed to the recipe (e.g. --batch-size 64 --max-steps 100).",
    )
    *others, last = recipes.names()
    p.add_argument("recipe", help=f"a training recipe: {', '.join(others)} or {last}")
    _own_flags(p)
    p.add_argument("recipe_flags", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def split_flags(args) -> tuple[argparse.Namespace, list[str]]:
    """Scale's own flags may come after RECIPE, mixed with the recipe's: take them out of the remainder."""
    own = argparse.ArgumentParser(add_help=False)
    _own_flags(own)
    defaults = {k: getattr(args, k) for k in ("nproc", "strong", "try_advice", "predict", "bench", "plot", "json")}
    own.set_defaults(**defaults)
    parsed, rest = own.parse_known_args(args.recipe_flags)
    return parsed, rest


def parse_sizes(text: str | None, flag: str) -> list[int]:
    if not text:
        raise DdplabError(f"{flag} is required: the world sizes to run, e.g. {flag} 1,2")
    return sorted(cliargs.counts(text, flag))


def run(args) -> int:
    own, recipe_flags = split_flags(args)
    sizes = parse_sizes(own.nproc, "--nproc")
    predict = parse_sizes(own.predict, "--predict")
    base_flags = recipe_flags
    if not experiments.has_flag(recipe_flags, "--max-steps"):
        base_flags = [*recipe_flags, "--max-steps", str(experiments.DEFAULT_MAX_STEPS)]
    if any(experiments.has_flag(recipe_flags, f) for f in ("--checkpoint-dir", "--resume")):
        raise DdplabError(
            "scale trains from scratch at each world size and keeps the runs' metrics in a temporary "
            "directory: drop --checkpoint-dir/--resume"
        )
    if sizes[0] != 1:
        raise DdplabError(
            f"--nproc {own.nproc}: include 1, the baseline every speedup is measured against "
            f"(e.g. --nproc 1,{','.join(map(str, sizes))})"
        )
    if len(sizes) < 2:
        raise DdplabError(f"--nproc {own.nproc}: give at least two world sizes, e.g. --nproc 1,2")
    limit, what = experiments.machine_limit(recipe_flags)
    if sizes[-1] > limit:
        fits = sorted({n for n in sizes if n <= limit} | {limit})
        raise DdplabError(
            f"world size {sizes[-1]} is more than this machine can run ({what}): measure what fits "
            f"(--nproc {','.join(map(str, fits))}) and read the prediction for {sizes[-1]} "
            f"(--predict {sizes[-1]})"
        )
    if own.plot:
        check_path(own.plot)
    link = _read_bench(own.bench) if own.bench else None
    result = study(
        args.recipe,
        sizes,
        predict,
        strong=own.strong,
        base_flags=base_flags,
        recipe_flags=recipe_flags,
        link=link,
        measure_advice=own.try_advice,
        plot_path=own.plot,
    )
    report.emit(result, own.json, render)
    return 0


def _read_bench(path: str):
    from ddplab.perf.scaling import link_from_bench

    data = cliargs.read_json(path, "--bench", "ddplab bench all_reduce --nproc 2 --json")
    return link_from_bench(data, f"--bench {path}")


def render(con, r) -> None:

    mode = (
        f"strong scaling, global batch {r.batch_per_rank}"
        if r.strong
        else f"weak scaling, {r.batch_per_rank} samples per rank"
    )
    con.print(
        report.text(
            report.bold(r.recipe),
            f" on {r.device} ({r.backend}): {mode}, {r.grad_bytes / 2**20:.2f} MiB of gradients per step",
        )
    )
    # Whole at 80 columns, piped or not (issue 42 point 9): two-line headers, and the batch per rank, when every row
    # has the same, said once in the line above (weak scaling) instead of in a column.
    t = Table(box=None, pad_edge=False)
    same_batch = len({p.batch_per_rank for p in r.points}) == 1 and not r.strong
    for col in (
        "N",
        *([] if same_batch else ["batch/\nrank"]),
        "samples/s",
        "speedup",
        "effi-\nciency",
        "step\nms",
        "compute\nms",
        "exposed\ncomm ms",
        "model\nsamples/s",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    for p in r.points:
        eff = f"{p.efficiency:.0%}"
        t.add_row(
            str(p.world_size),
            *([] if same_batch else [str(p.batch_per_rank)]),
            f"{p.samples_per_sec:,.0f}",
            f"{p.speedup:.2f}x",
            eff if p.efficiency >= EFFICIENCY_TARGET else Text(eff, style="yellow"),
            f"{p.step_ms:.2f}",
            f"{p.compute_ms:.2f}",
            f"{p.exposed_comm_ms:.2f}",
            f"{p.model_samples_per_sec:,.0f}",
        )
    con.print(t)
    m = r.model
    bus = m["bus_bytes_per_s"]
    con.print(
        f"model: compute {1e3 * m['compute_fixed_s']:.3f} ms + {1e6 * m['compute_per_sample_s']:.2f} µs/sample"
        f" per micro-step + {1e3 * m['step_fixed_s']:.3f} ms per step; all_reduce α {1e6 * m['latency_s']:.1f} µs, B "
        + ("∞" if bus is None else f"{bus / 1e9:.2f} GB/s")
        + f"; overlap {m['overlap']:.0%}"
    )
    con.print(
        "predicted: "
        + ", ".join(
            f"N={p.world_size} {p.samples_per_sec:,.0f}/s ({p.efficiency:.0%})" for p in r.predictions if not p.measured
        )
    )
    shown = [n for n in (8, 64) if any(p.world_size == n for p in r.predictions)]
    if shown:
        it = Table(box=None, pad_edge=False)
        it.add_column("interconnect")
        it.add_column("GB/s", justify="right")
        for n in shown:
            it.add_column(f"efficiency N={n}", justify="right")
        for link in r.interconnects:
            by = {p.world_size: p for p in link.predictions}
            it.add_row(link.name, f"{link.bus_gb_per_s:g}", *(f"{by[n].efficiency:.0%}" for n in shown))
        con.print(it)
    if r.advice:
        con.print(
            f"advice (efficiency {r.points[-1].efficiency:.0%} at N={r.points[-1].world_size}, "
            f"below {EFFICIENCY_TARGET:.0%}):"
        )
        for a in r.advice:
            gain = f"predicted {a.predicted_gain:.2f}x"
            if a.measured_gain is not None:
                gain += f", measured {a.measured_gain:.2f}x"
            con.print(f"  {a.name} ({' '.join(a.flags)}): {gain} — {a.why}" + (f" ({a.note})" if a.note else ""))
    for note in r.notes:
        con.print(f"note: {note}")
    if r.plot:
        con.print(f"plot: {r.plot}")
