"""`ddplab cost`: how long a training takes and what it costs on N rented GPUs of each type.

    ddplab cost --samples-per-sec 950 --measured-on A100 --dataset-size 1.2e6 --epochs 90
    ddplab cost --from scale.json --dataset-size 50000 --epochs 3 --gpus H100,H200 --count 1,8
    ddplab cost --samples-per-sec 950 --measured-on A100 --dataset-size 1e6 --epochs 1 --prices my_quotes.toml
"""

from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from ddplab import cliargs, report
from ddplab.errors import DdplabError


def add_parser(sub) -> None:
    p = sub.add_parser("cost", help="what a training would take in time and money on N rented GPUs")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--samples-per-sec", type=float, metavar="X",
                     help="training throughput measured on ONE device (say which with --measured-on)")
    src.add_argument("--from", dest="from_file", metavar="SCALE_JSON",
                     help="output of `ddplab scale ... --json`: measured throughput and the fitted scaling model")
    p.add_argument("--dataset-size", type=float, required=True, metavar="D", help="samples in one epoch")
    p.add_argument("--epochs", type=float, required=True, metavar="E", help="passes over the dataset")
    p.add_argument("--gpus", metavar="A,B,...", help="GPU types to price (default: every row of the price table)")
    p.add_argument("--count", default="1,2,4,8", metavar="N,...", help="GPUs per configuration (default 1,2,4,8)")
    p.add_argument("--prices", metavar="FILE", help="your own price table (JSON, or TOML on Python 3.11+); it "
                                                    "replaces the shipped one")
    p.add_argument("--measured-on", metavar="GPU", help="the GPU type the throughput was measured on")
    p.add_argument("--memory", metavar="MEMORY_JSON", help="output of `ddplab memory RECIPE ... --json`: also say "
                                                           "whether one rank's step fits each GPU, per strategy")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab.perf import cost

    dataset = _positive(args.dataset_size, "--dataset-size")
    epochs = _positive(args.epochs, "--epochs")
    counts = cliargs.counts(args.count, "--count")
    prices, peaks = dict(cost.PRICES), dict(cost.PEAKS)
    if args.prices:
        prices, file_peaks = cost.load_prices(args.prices)
        peaks.update(file_peaks)
    gpus = resolve_gpus(args.gpus, prices, args.prices)
    known = {**prices, **peaks}
    if args.from_file:
        base, measured_on, efficiency = from_scale_file(args.from_file, args.measured_on, known)
    else:
        base = _positive(args.samples_per_sec, "--samples-per-sec")
        measured_on = _measured_on(args.measured_on, gpus, known)
        efficiency = cost.ideal
    result = cost.estimate(base, measured_on, dataset, epochs, gpus, counts, prices, peaks, efficiency)
    if args.memory:
        data = cliargs.read_json(args.memory, "--memory", "ddplab memory RECIPE [flags] --json")
        try:
            result.memory = cost.memory_fits(data, gpus)
        except (KeyError, TypeError, ValueError) as e:
            raise DdplabError(f"--memory {args.memory}: not the JSON `ddplab memory --json` writes "
                              f"({type(e).__name__}: {e}): re-run ddplab memory with --json") from None
    report.emit(result, args.json, render)
    return 0


def _positive(value: float, flag: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise DdplabError(f"{flag} {value:g} must be a positive number")
    return value


def resolve_gpus(text: str | None, prices: dict, prices_file: str | None) -> list[str]:
    from ddplab.perf.cost import canonical

    if not text:
        return list(prices)
    gpus = []
    for name in (n for n in text.split(",") if n.strip()):
        key = canonical(name, prices)
        if key is None:
            where = (f"{prices_file}: add a [{name.strip()}] table with usd_per_gpu_hour" if prices_file else
                     "the shipped price table: give its price with --prices FILE")
            raise DdplabError(f"GPU {name.strip()!r} has no price in {where} (priced: {', '.join(prices)})")
        gpus.append(key)
    if not gpus:
        raise DdplabError(f"--gpus {text!r} names no GPU: e.g. --gpus A100,H100")
    return list(dict.fromkeys(gpus))


def _measured_on(name: str | None, gpus: list[str], known: dict) -> str:
    from ddplab.perf.cost import canonical

    if name is None:
        if len(gpus) == 1:
            return gpus[0]
        raise DdplabError("which GPU was --samples-per-sec measured on? add --measured-on GPU (e.g. A100); other "
                          "GPU types are then scaled by their peak BF16 throughput")
    key = canonical(name, known)
    if key is None:
        raise DdplabError(f"--measured-on {name!r} is not a GPU ddplab knows (known: {', '.join(known)}): add its "
                          "price and peak_tflops with --prices FILE")
    return key


def from_scale_file(path: str, measured_on: str | None, known: dict):
    """Base samples/s (1 rank), the GPU it stands for, and efficiency(N) measured where run, predicted elsewhere."""
    from ddplab.perf.cost import canonical, gpu_of_device
    from ddplab.perf.scaling import ScalingModel, efficiency

    data = cliargs.read_json(path, "--from", "ddplab scale RECIPE --nproc 1,2 --json")
    try:
        points = {int(pt["world_size"]): float(pt["samples_per_sec"]) for pt in data["points"]}
        device, strong = str(data["device"]), bool(data.get("strong", False))
        batch, accum = int(data["batch_per_rank"]), int(data.get("accum_steps", 1))
        model = ScalingModel.from_dict(data["model"]) if data.get("model") else None
    except (KeyError, TypeError, ValueError) as e:
        raise DdplabError(f"--from {path}: not the JSON `ddplab scale --json` writes ({type(e).__name__}: {e}): "
                          "re-run ddplab scale with --json") from None
    if 1 not in points and model is None:
        raise DdplabError(f"--from {path} has no 1-rank run to start from: run ddplab scale with --nproc 1,...")
    if measured_on is not None:
        gpu = canonical(measured_on, known)
        if gpu is None:
            raise DdplabError(f"--measured-on {measured_on!r} is not a GPU ddplab knows (known: {', '.join(known)})")
    else:
        gpu = gpu_of_device(device)
        if gpu is None:
            raise DdplabError(f"--from {path} was measured on {device!r}, and samples/s there say nothing about a "
                              "GPU (nor does the scaling: with slower compute, communication weighs less): run "
                              "`ddplab scale ... --json` on the GPU type you want to price, or price a throughput "
                              "measured on a GPU with --samples-per-sec X --measured-on GPU (--measured-on with "
                              "this file would price these figures as that GPU's)")
    base = points.get(1) or model.samples_per_sec(1, batch, accum)

    def eff(count: int) -> tuple[float, str]:
        if count in points:
            return points[count] / (count * base), "measured"
        if model is None:
            return 1.0, "assumed"
        return efficiency(model, count, batch, accum, strong), "predicted"

    return base, gpu, eff


def render(con, r) -> None:
    from ddplab.perf.cost import format_hours

    con.print(f"{r.samples:,.0f} samples to train; 1 × {r.measured_on} does {r.base_samples_per_sec:,.1f} samples/s")
    t = Table(box=None, pad_edge=False)
    for col in ("GPU", "N", "samples/s", "time", "cost", "$/GPU-h", "speed", "scaling", ""):
        t.add_column(col, justify="right" if col in ("N", "samples/s", "time", "cost", "$/GPU-h") else "left")
    for o in r.options:
        speed = {"measured": "measured", "unknown": "no peak"}.get(o.speed_basis, f"peak ×{o.speed_ratio or 0:.2f}")
        scaling = {"assumed": "ideal"}.get(o.scaling_basis, o.scaling_basis)
        marks = Text(" ").join(Text(m, style=s) for m, s, on in (("cheapest", "bold green", o.cheapest),
                                                                 ("fastest", "bold cyan", o.fastest)) if on)
        t.add_row(o.gpu, str(o.count), "—" if o.samples_per_sec is None else f"{o.samples_per_sec:,.1f}",
                  format_hours(o.hours), "—" if o.usd is None else f"${o.usd:,.2f}", f"{o.usd_per_gpu_hour:.3g}",
                  speed, scaling, marks)
    con.print(t)
    for a in r.assumptions:
        con.print(f"assumed: {a}")
    if r.memory:
        render_memory(con, r.memory)
    con.print("prices (on-demand, per GPU-hour):")
    for p in r.prices:
        via = f", read via {p.via}" if p.via else ""
        con.print(f"  {p.gpu} ${p.usd_per_gpu_hour}: {p.offer} — {p.source} ({p.date}{via})")
    if any(o.speed_basis == "assumed" for o in r.options):
        con.print("peak dense BF16 tensor TFLOPS:")
        for k in r.peaks:
            con.print(f"  {k.gpu} {k.bf16_dense_tflops}: {k.source} (checked {k.date})")


def render_memory(con, m: dict) -> None:
    strategies = list(next((row["fits"] for row in m["rows"] if row["fits"]), {}))
    con.print(f"memory ({m['model']}, batch {m['batch_size']} per rank at {m['nproc']} rank(s), from ddplab memory; "
              f"{100 * m['margin']:.0f} % margin and the CUDA context kept free): fits? (largest per-rank batch)")
    t = Table(box=None, pad_edge=False)
    for col in ("GPU", "memory", *strategies):
        t.add_column(col, justify="left" if col == "GPU" else "right")
    for row in m["rows"]:
        if row["memory_gb"] is None:
            t.add_row(row["gpu"], "unknown", *("-" for _ in strategies))
            continue
        memory = (f"{row['memory_bytes'] / 2**30:.2f} GiB" if "memory_bytes" in row  # nvidia-smi's total
                  else f"{row['memory_gb']:g} GB")  # a --memory file of an older ddplab
        t.add_row(row["gpu"], memory,
                  *(f"{'yes' if row['fits'][s] else 'no'} ({row['largest_batch'][s]})" for s in strategies))
    con.print(t)
    for gpu, source in m["sources"].items():
        con.print(f"  {gpu} memory: {source}")
