"""`ddplab cost`: how long a training takes and what it costs on N rented GPUs of each type.

ddplab cost --samples-per-sec 950 --measured-on A100 --dataset-size 1.2e6 --epochs 90
ddplab cost --from scale.json --dataset-size 50000 --epochs 3 --gpus H100,H200 --count 1,8
ddplab cost --samples-per-sec 950 --measured-on A100 --dataset-size 1e6 --epochs 1 --prices my_quotes.csv
"""

from __future__ import annotations

import math

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from ddplab import cliargs, report
from ddplab.errors import DdplabError


def add_parser(sub) -> None:
    p = sub.add_parser("cost", help="what a training would take in time and money on N rented GPUs")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--samples-per-sec",
        type=float,
        metavar="X",
        help="training throughput measured on ONE device (say which with --measured-on)",
    )
    src.add_argument(
        "--from",
        dest="from_file",
        metavar="SCALE_JSON",
        help="output of `ddplab scale ... --json`: measured throughput and the fitted scaling model",
    )
    p.add_argument("--dataset-size", type=float, required=True, metavar="D", help="samples in one epoch")
    p.add_argument("--epochs", type=float, required=True, metavar="E", help="passes over the dataset")
    p.add_argument("--gpus", metavar="A,B,...", help="GPU types to price (default: every row of the price table)")
    p.add_argument("--count", default="1,2,4,8", metavar="N,...", help="GPUs per configuration (default 1,2,4,8)")
    p.add_argument(
        "--prices",
        metavar="FILE",
        help="your own price table, a CSV file in the shipped one's format "
        "(one row per offer: gpu,provider,tier,price_per_gpu_hour,currency,gpus_per_box,source,date_read; "
        "docs/scale.md); it replaces the shipped one. Costs keep each offer's currency: several currencies "
        "are shown side by side, the cheapest marked within each, never converted",
    )
    p.add_argument("--measured-on", metavar="GPU", help="the GPU type the throughput was measured on")
    p.add_argument(
        "--memory",
        metavar="MEMORY_JSON",
        help="output of `ddplab memory RECIPE ... --json`: also say "
        "whether one rank's step fits each GPU, per strategy",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab.perf import cost

    dataset = _positive(args.dataset_size, "--dataset-size")
    epochs = _positive(args.epochs, "--epochs")
    counts = cliargs.counts(args.count, "--count")
    on = cost.today()
    prices, peaks = list(cost.shipped()), dict(cost.PEAKS)
    if args.prices:
        prices, file_peaks = cost.load_prices(args.prices, on)
        peaks.update(file_peaks)
    gpus = resolve_gpus(args.gpus, [o.gpu for o in prices], args.prices)
    offers = [o for gpu in gpus for o in prices if o.gpu == gpu]
    known = {**{o.gpu: None for o in prices}, **peaks}  # --measured-on may name a GPU left out of --gpus
    if args.from_file:
        data = cliargs.read_json(args.from_file, "--from", "ddplab scale RECIPE --nproc 1,2 --json")
        base, measured_on, efficiency = cost.from_scale(data, args.from_file, args.measured_on, known)
    else:
        base = _positive(args.samples_per_sec, "--samples-per-sec")
        measured_on = _measured_on(args.measured_on, gpus, known)
        efficiency = cost.ideal
    result = cost.estimate(base, measured_on, dataset, epochs, offers, counts, peaks, efficiency, on)
    if args.memory:
        data = cliargs.read_json(args.memory, "--memory", "ddplab memory RECIPE [flags] --json")
        try:
            result.memory = cost.memory_fits(data, gpus)
        except (KeyError, TypeError, ValueError) as e:
            raise DdplabError(
                f"--memory {args.memory}: not the JSON `ddplab memory --json` writes "
                f"({type(e).__name__}: {e}): re-run ddplab memory with --json"
            ) from None
    report.emit(result, args.json, render)
    return 0


def _positive(value: float, flag: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise DdplabError(f"{flag} {value:g} must be a positive number")
    return value


def resolve_gpus(text: str | None, priced: list[str], prices_file: str | None) -> list[str]:
    from ddplab.perf.cost import canonical

    priced = list(dict.fromkeys(priced))
    if not text:
        return priced
    gpus = []
    for name in (n for n in text.split(",") if n.strip()):
        key = canonical(name, priced)
        if key is None:
            where = (
                f"{prices_file}: add a row for it"
                if prices_file
                else "the shipped price table: give its price with --prices FILE"
            )
            raise DdplabError(f"GPU {name.strip()!r} has no price in {where} (priced: {', '.join(priced)})")
        gpus.append(key)
    if not gpus:
        raise DdplabError(f"--gpus {text!r} names no GPU: e.g. --gpus A100,H100")
    return list(dict.fromkeys(gpus))


def _measured_on(name: str | None, gpus: list[str], known: dict) -> str:
    from ddplab.perf.cost import canonical

    if name is None:
        if len(gpus) == 1:
            return gpus[0]
        raise DdplabError(
            "which GPU was --samples-per-sec measured on? add --measured-on GPU (e.g. A100); other "
            "GPU types are then scaled by their peak BF16 throughput"
        )
    key = canonical(name, known)
    if key is None:
        raise DdplabError(
            f"--measured-on {name!r} is not a GPU ddplab knows (known: {', '.join(known)}): add its "
            "price and peak_tflops with --prices FILE"
        )
    return key


HEAD = ("N", "samples/s", "time", "cost", "speed", "scaling")
LEFT = ("speed", "scaling")
SPEED = {"measured": "measured", "assumed": "ceiling", "unknown": "—"}
SCALING = {"assumed": "ideal"}


def render(con, r) -> None:
    from ddplab.perf.cost import STALE_DAYS, format_price, format_rate

    con.print(
        f"{r.samples:,.0f} samples to train; 1 × {r.measured_on} does {format_rate(r.base_samples_per_sec)} samples/s"
    )
    if r.prices_age_days is not None:
        days = {0: "today", 1: "1 day ago"}.get(r.prices_age_days, f"{r.prices_age_days} days ago")
        said = f"prices read {days} (oldest used: {r.prices_oldest})"
        if r.prices_stale:
            report.finding(
                con,
                "WARN",
                f"{said}: over {STALE_DAYS} days",
                "prices move weekly: check the pages below, or give current quotes with --prices FILE",
            )
        else:
            con.print(said)
    lines, left_out = table_lines(r, con.width)
    for line in lines:
        con.print(line, soft_wrap=True)
    for mark in left_out:
        con.print(mark)
    for a in r.assumptions:
        con.print(f"assumed: {a}")
    for n in r.notes:
        con.print(f"note: {n}")
    if r.memory:
        render_memory(con, r.memory)
    con.print("prices (per GPU-hour, as read):")
    for p in r.prices:
        via = f" from {p.read_from}" if p.read_from and p.read_from != p.source else ""
        offer = f"{p.offer} — " if p.offer else ""
        con.print(f"  {p.name} {format_price(p)}: {offer}{p.source} (read {p.date_read}{via})")
    if any(o.speed_basis == "assumed" for o in r.options):
        con.print("peak dense BF16 tensor TFLOPS:")
        for k in r.peaks:
            con.print(f"  {k.gpu} {k.bf16_dense_tflops}: {k.source} (checked {k.date})")


def table_lines(r, width: int) -> tuple[list[Text], list[str]]:
    """One line per configuration under one line of its offer's facts; a value is never split. The marks column
    goes below the table as sentences when the rows would not fit WIDTH with it."""
    from ddplab.perf.cost import format_hours, format_money, format_price, format_rate

    shown = [o for o in r.options if o.samples_per_sec is not None]
    cells = {
        id(o): (
            str(o.count),
            format_rate(o.samples_per_sec),
            format_hours(o.hours),
            format_money(o.cost, o.currency),
            SPEED[o.speed_basis],
            SCALING.get(o.scaling_basis, o.scaling_basis),
        )
        for o in shown
    }
    marks = {id(o): _marks(o) for o in shown}
    widths = [max([cell_len(h), *(cell_len(c[k]) for c in cells.values())]) for k, h in enumerate(HEAD)]
    body = sum(widths) + 2 * (len(widths) - 1)
    widest_marks = max([cell_len(", ".join(m for m, _ in ms)) for ms in marks.values() if ms], default=0)
    with_marks = body + (2 + widest_marks if widest_marks else 0)
    inline = with_marks <= width  # indented when there is room: a row's count stands apart from an offer's name
    indent = 2 if (with_marks if inline else body) + 2 <= width else 0

    def row(values, styled=()) -> Text:
        parts = [
            v.ljust(w + len(v) - cell_len(v)) if h in LEFT else v.rjust(w + len(v) - cell_len(v))
            for v, w, h in zip(values, widths, HEAD)
        ]
        line = Text(" " * indent + "  ".join(parts))
        if styled:
            line.append("  ")
            line.append(Text(", ").join(Text(m, style=s) for m, s in styled))
        line.rstrip()
        return line

    lines = [row(HEAD)] if shown else []
    for i, p in enumerate(r.prices):
        rows = [o for o in r.options if o.offer == i]
        ratio = rows[0].speed_ratio if rows else None
        speed = {"measured": "speed measured", "unknown": "no sourced peak: no time or cost"}.get(
            rows[0].speed_basis if rows else "unknown", f"speed ≤ {r.measured_on} × {ratio or 0:.2f} (peak ratio)"
        )
        box = f", billed per {p.gpus_per_box}-GPU box" if p.gpus_per_box > 1 else ""
        lines += [
            Text(t, style="bold")
            for t in _wrap([p.gpu, f"{p.provider} {p.tier}", f"{format_price(p)}/GPU-h{box}", speed], width)
        ]
        lines += [row(cells[id(o)], marks[id(o)] if inline else ()) for o in rows if id(o) in cells]
    left_out = []
    if not inline:
        for label in dict.fromkeys(m for ms in marks.values() for m, _ in ms):
            which: dict[int, list[str]] = {}
            for o in shown:
                if label in (m for m, _ in marks[id(o)]):
                    which.setdefault(o.offer, []).append(f"×{o.count}")
            offers = [f"{r.prices[i].name} {', '.join(counts)}" for i, counts in which.items()]
            left_out += _wrap([f"{label}: {offers[0]}", *offers[1:]], width, "; ")
    return lines, left_out


def _marks(o) -> list[tuple[str, str]]:
    marks = []
    if o.cheapest:
        marks.append(("cheapest (tie)" if o.tied_cheapest else "cheapest", "bold green"))
    if o.fastest:
        marks.append(("fastest (tie)" if o.tied_fastest else "fastest", "bold cyan"))
    if o.billed_gpus != o.count:
        marks.append((f"billed {o.billed_gpus}", ""))
    return marks


def _wrap(pieces: list[str], width: int, sep: str = " · ") -> list[str]:
    """PIECES joined by SEP, a new line (indented) where the next would pass WIDTH; a piece is never split."""
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if cell_len(lines[-1]) + cell_len(sep) + cell_len(piece) <= width:
            lines[-1] += sep + piece
        else:
            lines.append(f"    {piece}")
    return lines


def render_memory(con, m: dict) -> None:
    strategies = list(next((row["fits"] for row in m["rows"] if row["fits"]), {}))
    con.print(
        f"memory ({m['model']}, batch {m['batch_size']} per rank at {m['nproc']} rank(s), from ddplab memory; "
        f"{100 * m['margin']:.0f} % margin and the CUDA context kept free): fits? (largest per-rank batch)"
    )
    t = Table(box=None, pad_edge=False)
    for col in ("GPU", "memory", *strategies):
        t.add_column(col, justify="left" if col == "GPU" else "right")
    for row in m["rows"]:
        if row["memory_gb"] is None:
            t.add_row(row["gpu"], "unknown", *("-" for _ in strategies))
            continue
        memory = (
            f"{row['memory_bytes'] / 2**30:.2f} GiB"
            if "memory_bytes" in row  # nvidia-smi's total
            else f"{row['memory_gb']:g} GB"
        )  # a --memory file of an older ddplab
        t.add_row(
            row["gpu"],
            memory,
            *(f"{'yes' if row['fits'][s] else 'no'} ({row['largest_batch'][s]})" for s in strategies),
        )
    con.print(t)
    for gpu, source in m["sources"].items():
        con.print(f"  {gpu} memory: {source}")
