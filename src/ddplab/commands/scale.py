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
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ddplab import cliargs, recipes, report
from ddplab.errors import DdplabError

# Below this efficiency, half a device's worth of every 5 is lost to communication: worth acting on.
EFFICIENCY_TARGET = 0.8
PREDICT = (1, 2, 4, 8, 16, 32, 64)
# Steps per run when the recipe flags do not say: on CPU a few seconds, next to ~5 s of process start-up.
DEFAULT_MAX_STEPS = 800
WINDOWS = 9  # logging windows per run; the first (warm-up) is left out, the fastest of the others kept
STALL_S = 120.0  # no rank progressing for this long is a hang, not a slow machine


@dataclass
class Point:
    world_size: int
    batch_per_rank: int
    accum_steps: int
    samples_per_sec: float  # global batch / mean step time
    speedup: float  # vs the 1-rank run
    efficiency: float  # speedup / world size
    step_ms: float
    compute_ms: float
    exposed_comm_ms: float  # waiting for all_reduce (and for slower ranks)
    model_samples_per_sec: float  # what the fitted model says here: how well it explains the run
    run_samples_per_sec: float  # `ddplab train`'s whole-run figure (includes start-up and epoch ends)
    flags: list[str] = field(default_factory=list)


@dataclass
class Prediction:
    world_size: int
    batch_per_rank: int
    samples_per_sec: float
    speedup: float
    efficiency: float
    measured: bool


@dataclass
class LinkPrediction:
    name: str
    bus_gb_per_s: float
    source: str
    date: str
    predictions: list[Prediction]


@dataclass
class Advice:
    name: str
    why: str
    flags: list[str]
    predicted_gain: float  # samples/s with it ÷ without, at the largest measured world size
    measured_gain: float | None = None  # the same, measured (--try-advice)
    measured_samples_per_sec: float | None = None
    note: str = ""


@dataclass
class ScaleResult:
    recipe: str
    device: str
    backend: str
    strong: bool
    batch_per_rank: int  # at world size 1 (with --strong: the global batch)
    accum_steps: int
    grad_bytes: int
    recipe_flags: list[str]
    points: list[Point]
    model: dict
    predictions: list[Prediction]
    interconnects: list[LinkPrediction]
    advice: list[Advice]
    plot: str | None = None
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------- flags


def _own_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc-per-node", "--nproc", dest="nproc", metavar="N,N,...",
                   help="world sizes to run, e.g. 1,2 (include 1: it is the baseline)")
    p.add_argument("--strong", action="store_true", help="keep the global batch fixed (default: the per-rank batch)")
    p.add_argument("--try-advice", action="store_true", help="re-run with each piece of advice and measure its gain")
    p.add_argument("--predict", default=",".join(map(str, PREDICT)), metavar="N,...",
                   help="world sizes to predict (default %(default)s)")
    p.add_argument("--bench", metavar="BENCH_JSON", help="`ddplab bench all_reduce --json` output: the link's "
                                                         "own latency and bandwidth, so overlap can be measured")
    p.add_argument("--plot", metavar="FILE.png", help="write measured points, predicted curve and ideal line")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_parser(sub) -> None:
    p = sub.add_parser("scale", help="measure how a recipe scales over world sizes, predict more, advise",
                       description="Runs `ddplab train RECIPE` at each world size; flags scale does not know are "
                                   "passed to the recipe (e.g. --batch-size 64 --max-steps 100).")
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


def machine_limit(recipe_flags: list[str]) -> tuple[int, str]:
    """How many ranks this machine can run side by side: one per GPU, or one per CPU core on CPU."""
    wants_cpu = any(f in ("--device=cpu",) for f in recipe_flags) or any(
        a == "--device" and b == "cpu" for a, b in zip(recipe_flags, recipe_flags[1:]))
    if not wants_cpu:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count(), f"{torch.cuda.device_count()} visible GPU(s)"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores, f"{cores} CPU core(s), one rank per core"


# ----------------------------------------------------------------------------------------------- running


class _RecipeFlags(argparse.ArgumentParser):
    def error(self, message: str):
        raise DdplabError(f"{self.prog}: {message} (see `ddplab train {self.prog.split()[-1]} --help`)")


def recipe_config(name: str, flags: list[str]):
    """The recipe and its config from recipe flags, checked as `ddplab train` checks them."""
    from ddplab.recipes import names
    from ddplab.train.config import add_arguments, from_arguments
    from ddplab.train.loop import load_recipe, preflight

    if name not in names():
        raise DdplabError(f"unknown recipe {name!r}: use one of {', '.join(names())}")
    recipe = load_recipe(name)
    parser = _RecipeFlags(prog=f"recipe {name}", add_help=False)
    add_arguments(parser, recipe.config)
    cfg = from_arguments(recipe.config, parser.parse_args(flags))
    if cfg.resume:
        raise DdplabError("scale runs the recipe once per world size, from scratch: drop --resume")
    preflight(cfg)
    return recipe, cfg


def train_once(name: str, nproc: int, flags: list[str]) -> dict:
    """One real training of the recipe on `nproc` ranks (ddplab.runner + the shared loop): its TrainResult dict,
    plus `steady`: step and comm-wait times per rank from metrics.jsonl, without the first logging window (it
    holds the warm-up: allocations, DDP's bucket rebuild after the first step)."""
    import tempfile

    from ddplab import runner

    with tempfile.TemporaryDirectory(prefix="ddplab-scale-") as tmp:
        recipe, cfg = recipe_config(name, [*flags, "--checkpoint-dir", tmp])
        steps = _plan_steps(recipe, cfg, nproc, flags)
        if not _has(flags, "--log-every"):
            cfg.log_every = max(1, steps // WINDOWS)
        report.log(f"scale: {name} on {nproc} rank(s) {' '.join(flags)}")
        res = runner.run("ddplab.train.loop:run_worker", {"recipe": name, "config": cfg.to_dict()}, nproc=nproc,
                         stall_timeout=STALL_S)
        if not res.ok:
            raise DdplabError(f"the {nproc}-rank run of {name} {res.status}: {res.summary()}",
                              exit_code=3 if res.status == "hang" else 1)
        result = next(r.result for r in res.ranks if isinstance(r.result, dict) and "ranks" in r.result)
        result["steady"] = _steady(Path(tmp) / "metrics.jsonl")
    result["bucket_cap_mb"], result["comm_hook"] = cfg.bucket_cap_mb, cfg.comm_hook  # "parameters": the loop's own
    return result


def _plan_steps(recipe, cfg, nproc: int, flags: list[str]) -> int:
    """Steps the run will take. Unless --epochs was given, enough epochs to reach --max-steps: throughput is
    measured, not convergence, and a small dataset would otherwise end the run after a few windows."""
    samples = len(recipe.data(cfg))
    per_epoch = (samples // nproc) // (cfg.batch_size * cfg.grad_accum)
    if per_epoch < 1:
        raise DdplabError(f"the {recipe.name} dataset ({samples} samples) is too small for {nproc} rank(s) x "
                          f"{cfg.batch_size} x {cfg.grad_accum} micro-batches: lower --batch-size")
    if cfg.max_steps and not _has(flags, "--epochs"):
        cfg.epochs = max(cfg.epochs, math.ceil(cfg.max_steps / per_epoch))
    planned = cfg.epochs * per_epoch
    return min(planned, cfg.max_steps) if cfg.max_steps else planned


def _steady(path: Path) -> dict | None:
    """The fastest logging window after the first (which holds the warm-up). Other processes only ever slow a
    window down, so on a shared machine the fastest window is the closest to what the hardware does."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return None
    rows = [r for r in (rows[1:] if len(rows) > 1 else rows) if r.get("rank_step_ms")]
    if not rows:
        return None
    step_ms, wait_ms = min((sum(r["rank_step_ms"]) / len(r["rank_step_ms"]),
                            sum(r["rank_comm_wait_ms"]) / len(r["rank_comm_wait_ms"])) for r in rows)
    return {"step_ms": step_ms, "comm_wait_ms": wait_ms, "windows": len(rows)}


def to_run(result: dict):
    """A training result as a scaling.Run: per optimizer step, averaged over ranks, steady state when known."""
    from ddplab.perf.scaling import Run

    steady = result.get("steady")
    if steady:
        step_ms, wait_ms = steady["step_ms"], steady["comm_wait_ms"]
    else:
        ranks = result["ranks"]
        step_ms = sum(r["step_ms"] for r in ranks) / len(ranks)
        wait_ms = sum(r["comm_wait_ms"] for r in ranks) / len(ranks)
    return Run(world_size=result["world_size"], batch_per_rank=result["batch_size"], step_s=step_ms / 1000,
               accum_steps=result["grad_accum"], grad_bytes=grad_bytes(result),
               bucket_cap_mb=result.get("bucket_cap_mb"), compute_s=max(step_ms - wait_ms, 0.0) / 1000)


def grad_bytes(result: dict) -> int:
    """Bytes DDP all-reduces per step: one fp32 gradient element per parameter, 2 bytes with a 16-bit hook."""
    return int(result["parameters"]) * (2 if result.get("comm_hook") in ("fp16", "bf16") else 4)


# ----------------------------------------------------------------------------------------------- the command


def run(args) -> int:
    from ddplab.perf import scaling

    own, recipe_flags = split_flags(args)
    sizes = parse_sizes(own.nproc, "--nproc")
    predict = parse_sizes(own.predict, "--predict")
    base_flags = recipe_flags if _has(recipe_flags, "--max-steps") else [*recipe_flags, "--max-steps",
                                                                          str(DEFAULT_MAX_STEPS)]
    if _has(recipe_flags, "--checkpoint-dir") or _has(recipe_flags, "--resume"):
        raise DdplabError("scale trains from scratch at each world size and keeps the runs' metrics in a temporary "
                          "directory: drop --checkpoint-dir/--resume")
    if sizes[0] != 1:
        raise DdplabError(f"--nproc {own.nproc}: include 1, the baseline every speedup is measured against "
                          f"(e.g. --nproc 1,{','.join(map(str, sizes))})")
    if len(sizes) < 2:
        raise DdplabError(f"--nproc {own.nproc}: give at least two world sizes, e.g. --nproc 1,2")
    limit, what = machine_limit(recipe_flags)
    if sizes[-1] > limit:
        fits = sorted({n for n in sizes if n <= limit} | {limit})
        raise DdplabError(f"world size {sizes[-1]} is more than this machine can run ({what}): measure what fits "
                          f"(--nproc {','.join(map(str, fits))}) and read the prediction for {sizes[-1]} "
                          f"(--predict {sizes[-1]})")
    if own.plot:
        _check_writable(own.plot)
    link = _read_bench(own.bench) if own.bench else None
    _, cfg = recipe_config(args.recipe, base_flags)  # bad recipe flags fail now, before any run
    per_rank = {n: _split_batch(cfg.batch_size, n) if own.strong else cfg.batch_size for n in sizes}

    results = [train_once(args.recipe, n, [*base_flags, "--batch-size", str(per_rank[n])]) for n in sizes]
    # Two more 1-rank runs tell the fixed cost per micro-step from the cost per sample (a doubled batch) and from
    # the cost per optimizer step (doubled accumulation): without them, batch and accumulation advice is a guess.
    probes = [train_once(args.recipe, 1, [*base_flags, "--batch-size", str(2 * per_rank[1])]),
              train_once(args.recipe, 1, [*base_flags, "--batch-size", str(per_rank[1]), "--grad-accum",
                                          str(2 * cfg.grad_accum)])]
    runs = [to_run(r) for r in results]
    model = scaling.fit(runs + [to_run(r) for r in probes], link)
    first = results[0]
    b, k = first["batch_size"], first["grad_accum"]
    points = _points(runs, results, model)
    result = ScaleResult(
        recipe=args.recipe, device=first["device"], backend=first["backend"], strong=own.strong, batch_per_rank=b,
        accum_steps=k, grad_bytes=int(model.grad_bytes), recipe_flags=recipe_flags, points=points,
        model=model.to_dict(), predictions=_predict(model, predict, b, k, own.strong, sizes),
        interconnects=interconnects(model, predict, b, k, own.strong),
        advice=advise(model, points[-1], own.strong, hook="bf16" if first["backend"] == "nccl" else "fp16"))
    if own.try_advice:
        _try_advice(result, args.recipe, base_flags)
    result.notes = _notes(result, model)
    if own.plot:
        result.plot = plot(result, model, own.plot)
    report.emit(result, own.json, render)
    return 0


def _has(flags: list[str], name: str) -> bool:
    return any(f == name or f.startswith(name + "=") for f in flags)


def _split_batch(global_batch: int, n: int) -> int:
    if global_batch % n:
        raise DdplabError(f"--strong: the global batch {global_batch} does not split evenly over {n} ranks: pick "
                          f"a --batch-size divisible by every world size in --nproc")
    return global_batch // n


def _check_writable(path: str) -> None:
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise DdplabError(f"--plot {path}: the plot is a PNG image: name the file *.png")
    if not p.parent.exists():
        raise DdplabError(f"--plot {path}: directory {p.parent} does not exist: create it or pick another path")


def _read_bench(path: str):
    from ddplab.perf.scaling import link_from_bench

    data = cliargs.read_json(path, "--bench", "ddplab bench all_reduce --nproc 2 --json")
    return link_from_bench(data, f"--bench {path}")


def _points(runs, results, model) -> list[Point]:
    one = runs[0].samples_per_sec
    points = []
    for run, res in zip(runs, results):
        sps = run.samples_per_sec
        points.append(Point(run.world_size, run.batch_per_rank, run.accum_steps, sps, sps / one,
                            sps / one / run.world_size, run.step_s * 1e3, run.compute_s * 1e3,
                            max(run.step_s - run.compute_s, 0.0) * 1e3,
                            model.samples_per_sec(run.world_size, run.batch_per_rank, run.accum_steps),
                            res["samples_per_sec"]))
    return points


def _predict(model, sizes, b: int, k: int, strong: bool, measured, **comm) -> list[Prediction]:
    one = model.samples_per_sec(1, b, k, **comm)
    out = []
    for n in sizes:
        per_rank = b // n if strong else b
        if per_rank < 1:
            continue  # a global batch smaller than the world size leaves ranks idle
        sps = model.samples_per_sec(n, per_rank, k, **comm)
        out.append(Prediction(n, per_rank, sps, sps / one, sps / one / n, n in measured))
    return out


def interconnects(model, sizes, b: int, k: int, strong: bool) -> list[LinkPrediction]:
    """The fitted compute with each table interconnect's bandwidth, one device per rank (no shared-core slowdown);
    latency stays as measured."""
    from dataclasses import replace

    from ddplab.perf.scaling import INTERCONNECTS

    alone = replace(model, slowdown={})
    return [LinkPrediction(i.name, i.bus_gb_per_s, i.source, i.date,
                           _predict(alone, sizes, b, k, strong, (), bus_bytes_per_s=i.bus_gb_per_s * 1e9))
            for i in INTERCONNECTS]


# ----------------------------------------------------------------------------------------------- advice


def advise(model, at: Point, strong: bool, hook: str = "bf16") -> list[Advice]:
    """What would raise efficiency at the largest measured world size, with the model's predicted gain.
    hook: the 16-bit compression to suggest; bf16 needs NCCL, so gloo runs are told fp16."""
    from ddplab.perf.scaling import MIB, buckets

    n, b, k = at.world_size, at.batch_per_rank, at.accum_steps
    if at.efficiency >= EFFICIENCY_TARGET or n < 2:
        return []
    base = model.samples_per_sec(n, b, k)
    comm = model.comm_s(n)
    share = at.exposed_comm_ms / at.step_ms if at.step_ms else 0.0
    out = [
        Advice("larger per-rank batch", f"exposed communication is {share:.0%} of each step and does not grow with "
               "the batch, so a batch twice as large halves its share (needs about twice the activation memory"
               + ("; with --strong it doubles the global batch too" if strong else "") + ")",
               ["--batch-size", str(2 * b)], model.samples_per_sec(n, 2 * b, k) / base),
        Advice("gradient accumulation", "all-reduce once every 4 micro-batches instead of every one (no_sync on "
               "the others): same memory, 4× the global batch, so revisit the learning rate",
               ["--grad-accum", str(4 * k)], model.samples_per_sec(n, b, 4 * k) / base),
    ]
    n_buckets = buckets(model.grad_bytes, model.bucket_cap_mb)
    if n_buckets > 1:
        cap = math.ceil(model.grad_bytes / MIB) + 1
        out.append(Advice("fewer, larger buckets", f"{model.grad_bytes / MIB:.1f} MiB of gradients travel in "
                          f"{n_buckets} all_reduce calls, each paying the latency; one bucket of {cap} MiB pays it "
                          "once (at the cost of less overlap with backward)", ["--bucket-cap-mb", str(cap)],
                          model.samples_per_sec(n, b, k, bucket_cap_mb=cap) / base))
    if comm > 0 and math.isfinite(model.bus_bytes_per_s):
        bandwidth = 2 * (n - 1) / n * model.grad_bytes / model.bus_bytes_per_s
        unsplit = "not separable" in model.provenance.get("link", "")
        out.append(Advice(f"{hook} gradient compression", f"the bandwidth term is {bandwidth / comm:.0%} of the "
                          f"all_reduce time; DDP's {hook}_compress_hook sends half the bytes (gradients are rounded "
                          f"to {hook} in transit)", ["--comm-hook", hook],
                          model.samples_per_sec(n, b, k, grad_bytes=model.grad_bytes / 2) / base,
                          note="an upper bound: latency was not told apart from bandwidth" if unsplit else ""))
    return sorted(out, key=lambda a: -a.predicted_gain)


def _try_advice(result: ScaleResult, recipe: str, base_flags: list[str]) -> None:
    at = result.points[-1]
    for a in result.advice:
        flags = [*base_flags, "--batch-size", str(at.batch_per_rank), *a.flags]  # the advice's flags win
        try:
            measured = to_run(train_once(recipe, at.world_size, flags)).samples_per_sec
        except DdplabError as e:
            a.note = "; ".join(filter(None, [a.note, f"not measured: {e}"]))
            continue
        a.measured_samples_per_sec = measured
        a.measured_gain = measured / at.samples_per_sec


def _notes(result: ScaleResult, model) -> list[str]:
    notes = [f"{k}: {v}" for k, v in model.provenance.items()]
    if result.device == "cpu":
        notes.append("measured on CPU processes (gloo): compute is far slower than on a GPU, so communication "
                     "weighs less here than it will on GPUs; the interconnect table keeps this compute speed")
    if result.advice and not any(a.measured_gain is not None for a in result.advice):
        notes.append("advice gains are the model's predictions: --try-advice measures each one")
    return notes


# ----------------------------------------------------------------------------------------------- output


def plot(result: ScaleResult, model, path: str) -> str:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    one = result.points[0].samples_per_sec
    top = max([p.world_size for p in result.predictions] + [p.world_size for p in result.points])
    sizes = [n for n in range(1, top + 1)]
    b, k = result.batch_per_rank, result.accum_steps
    curve = [(n, model.samples_per_sec(n, b // n if result.strong else b, k)) for n in sizes
             if (b // n if result.strong else b) >= 1]
    ax.plot(sizes, [n * one for n in sizes], "--", color="grey", label="ideal (N × 1 rank)")
    ax.plot([n for n, _ in curve], [s for _, s in curve], "-", color="tab:blue", label="predicted (fitted model)")
    ax.plot([p.world_size for p in result.points], [p.samples_per_sec for p in result.points], "o",
            color="tab:red", label="measured")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_yscale("log")
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("samples/s")
    ax.set_title(f"{result.recipe}: {'strong' if result.strong else 'weak'} scaling on {result.device}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise DdplabError(f"--plot {path}: cannot write it ({e.strerror}): pick another path") from None
    finally:
        plt.close(fig)
    return path


def render(con, r: ScaleResult) -> None:
    mode = f"strong scaling, global batch {r.batch_per_rank}" if r.strong else \
        f"weak scaling, {r.batch_per_rank} samples per rank"
    con.print(f"[bold]{r.recipe}[/] on {r.device} ({r.backend}): {mode}, {r.grad_bytes / 2**20:.2f} MiB of "
              "gradients per step")
    t = Table(box=None, pad_edge=False)
    for col in ("N", "batch/rank", "samples/s", "speedup", "efficiency", "step ms", "compute ms", "exposed comm ms",
                "model samples/s"):
        t.add_column(col, justify="right")
    for p in r.points:
        eff = f"{p.efficiency:.0%}"
        t.add_row(str(p.world_size), str(p.batch_per_rank), f"{p.samples_per_sec:,.0f}", f"{p.speedup:.2f}x",
                  eff if p.efficiency >= EFFICIENCY_TARGET else f"[yellow]{eff}[/]", f"{p.step_ms:.2f}",
                  f"{p.compute_ms:.2f}", f"{p.exposed_comm_ms:.2f}", f"{p.model_samples_per_sec:,.0f}")
    con.print(t)
    m = r.model
    bus = m["bus_bytes_per_s"]
    con.print(f"model: compute {1e3 * m['compute_fixed_s']:.3f} ms + {1e6 * m['compute_per_sample_s']:.2f} µs/sample"
              f" per micro-step + {1e3 * m['step_fixed_s']:.3f} ms per step; all_reduce α {1e6 * m['latency_s']:.1f} µs, B "
              + ("∞" if bus is None else f"{bus / 1e9:.2f} GB/s") + f"; overlap {m['overlap']:.0%}")
    con.print("predicted: " + ", ".join(f"N={p.world_size} {p.samples_per_sec:,.0f}/s ({p.efficiency:.0%})"
                                        for p in r.predictions if not p.measured))
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
        con.print(f"advice (efficiency {r.points[-1].efficiency:.0%} at N={r.points[-1].world_size}, "
                  f"below {EFFICIENCY_TARGET:.0%}):")
        for a in r.advice:
            gain = f"predicted {a.predicted_gain:.2f}x"
            if a.measured_gain is not None:
                gain += f", measured {a.measured_gain:.2f}x"
            con.print(escape(f"  {a.name} ({' '.join(a.flags)}): {gain} — {a.why}" + (f" ({a.note})" if a.note
                                                                                        else "")))
    for note in r.notes:
        con.print(escape(f"note: {note}"))
    if r.plot:
        con.print(f"plot: {r.plot}")
