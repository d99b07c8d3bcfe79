"""What a training would take in time and money on rented GPUs: the arithmetic behind `ddplab cost`.

    samples/s(gpu, N) = base samples/s × speed(gpu) / speed(measured-on) × N × efficiency(N)
    hours             = dataset size × epochs / samples/s / 3600
    cost              = hours × GPUs billed (N in whole boxes) × price per GPU-hour, in the offer's currency

Every input is labelled with where it comes from: measured (you ran it), predicted (the scaling model fitted on
your runs), or assumed (a datasheet ratio: a ceiling; ideal scaling). Prices are data (ddplab/data/prices.csv: one
row per offer, its page, the day it was read and the copy it was read from); peaks (ddplab.train.peaks: MFU uses
them too) carry their source and date. Prices move weekly: `ddplab cost` says how old the oldest one used is, warns
past STALE_DAYS, and `--prices FILE` (the same CSV format) replaces the whole table with your own quotes.
"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from importlib import resources
from pathlib import Path

from ddplab.errors import DdplabError
from ddplab.train.peaks import DEVICE_NAMES, PEAKS, Peak, device_peak, gpu_of_device  # noqa: F401  the tables

TIERS = ("secure", "community", "spot", "on-demand")  # secure/community: RunPod's two clouds; spot: interruptible
STALE_DAYS = 60  # prices move weekly: past this, `ddplab cost` warns
TODAY_ENV = "DDPLAB_TODAY"  # YYYY-MM-DD: the day the price age is counted to (tests; reproducing an old output)
PRICE_FILE = "prices.csv"  # the shipped table, in ddplab/data: one row per offer, each with its source and date
COLUMNS = (
    "gpu",
    "provider",
    "tier",
    "price_per_gpu_hour",
    "currency",
    "gpus_per_box",
    "offer",
    "source",
    "date_read",
    "read_from",
    "peak_tflops",
)
REQUIRED = ("gpu", "provider", "tier", "price_per_gpu_hour", "currency", "gpus_per_box", "source", "date_read")


@dataclass(frozen=True)
class Price:
    """One offer: a GPU type rented from a provider at a price per GPU-hour, as read from a page on a date."""

    gpu: str
    price_per_gpu_hour: float
    currency: str  # ISO 4217 code: USD, EUR, CNY ...
    provider: str
    tier: str  # one of TIERS
    gpus_per_box: int  # GPUs rented together (AWS p5: 8): N GPUs are billed in whole boxes
    source: str  # the provider's page
    date_read: str  # YYYY-MM-DD
    offer: str = ""  # what exactly is rented at that price
    read_from: str = ""  # the copy the figure was read from (a dated transcription), when not the page itself
    peak_tflops: float | None = None  # a user's speed basis for a GPU without a sourced peak

    @property
    def name(self) -> str:
        return f"{self.gpu} {self.provider} {self.tier}"

    def billed(self, count: int) -> int:
        """GPUs paid for when COUNT are used: whole boxes."""
        return -(-count // self.gpus_per_box) * self.gpus_per_box


@dataclass(frozen=True)
class Memory:
    """A GPU's memory. The datasheet's "80GB" is not 80·10^9 bytes: the board shows nvidia-smi's total, in MiB
    (A100 80GB: 81920 MiB = 80 GiB exactly), and that total is what ddplab counts: `visible_mib` where a public
    nvidia-smi output gives it, else the datasheet's figure read as GiB."""

    gpu: str
    gb: float  # as the datasheet states it
    source: str
    date: str
    visible_mib: int | None = None  # nvidia-smi's "Memory-Usage" total
    visible_source: str = ""
    exact_bytes: int | None = None  # a size the user gave with its unit (`ddplab memory --gpus 24GiB`)

    @property
    def total_bytes(self) -> int:
        if self.exact_bytes:
            return self.exact_bytes
        return self.visible_mib * 2**20 if self.visible_mib else int(self.gb * 2**30)

    @property
    def basis(self) -> str:
        if self.exact_bytes:
            return self.visible_source
        return (
            f"nvidia-smi shows {self.visible_mib} MiB ({self.visible_source})"
            if self.visible_mib
            else f"{self.gb:g} GB read as {self.gb:g} GiB, as nvidia-smi shows NVIDIA's advertised GB"
        )


def memory_size(text: str) -> Memory | None:
    """A size given instead of a GPU name, its unit explicit: "24GiB" (2^30 bytes each) or "24GB" (10^9); None if
    TEXT is not a size."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(GiB|GB)\s*", text, re.IGNORECASE)
    if m is None:
        return None
    number, binary = float(m.group(1)), m.group(2).lower() == "gib"
    size = int(number * (2**30 if binary else 10**9))
    if size <= 0:
        return None
    unit = "GiB" if binary else "GB"
    return Memory(
        f"{number:g} {unit}",
        size / 1e9,
        "given with --gpus",
        "",
        exact_bytes=size,
        visible_source=f"given: {number:g} {unit} = {size:,} bytes",
    )


# Each priced GPU's memory, for `ddplab memory` and `ddplab cost --memory`: does the training fit?
MEMORY: dict[str, Memory] = {
    m.gpu: m
    for m in [
        Memory(
            "A10G",
            24,
            "AWS EC2 G5 instances page: NVIDIA A10G Tensor Core GPU, 24 GB GPU memory per GPU, "
            "https://aws.amazon.com/ec2/instance-types/g5/",
            "2026-12-03",
            23028,
            "ECC on; an A10G's nvidia-smi in https://github.com/NVIDIA/DCGM/issues/232, checked 2026-12-03",
        ),
        Memory(
            "RTX4090",
            24,
            "NVIDIA Ada GPU Architecture whitepaper v2.01, GeForce RTX 4090: 24 GB GDDR6X, "
            "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
            "2026-12-03",
            24564,
            "an RTX 4090's nvidia-smi in https://github.com/RLinf/RLinf/issues/255, checked 2026-12-03",
        ),
        Memory(
            "A100",
            80,
            "NVIDIA A100 Tensor Core GPU datasheet: A100 80GB SXM, 80GB HBM2e, "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            "2026-12-03",
            81920,
            "A100 80GB's nvidia-smi total listed in https://github.com/modal-labs/modal-client/pull/2797, "
            "checked 2026-12-03",
        ),
        Memory(
            "H100",
            80,
            "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: GPU memory 80GB, "
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            "2026-12-03",
            81559,
            "an H100 80GB HBM3's nvidia-smi in https://github.com/NVIDIA/nccl/issues/1264, checked 2026-12-03",
        ),
        Memory(
            "H200",
            141,
            "NVIDIA H200 Tensor Core GPU page, H200 SXM: GPU memory 141GB HBM3e, "
            "https://www.nvidia.com/en-us/data-center/h200/",
            "2026-12-03",
        ),
    ]
}

ALIASES = {"4090": "RTX4090", "A10": "A10G"}  # A10 → A10G only as a spelling help; they are different boards


def canonical(name: str, known) -> str | None:
    """The table key for a user-typed GPU name (case and spaces ignored), or None."""
    key = name.strip().upper().replace(" ", "").replace("-", "")
    by_upper = {k.upper().replace("-", ""): k for k in known}
    if key in by_upper:
        return by_upper[key]
    alias = ALIASES.get(key)
    return alias if alias in known else None


# ----------------------------------------------------------------------------------------------- price files


def today() -> date:
    """The day price ages are counted to: $DDPLAB_TODAY (YYYY-MM-DD) when set, else the clock's."""
    text = os.environ.get(TODAY_ENV, "").strip()
    if not text:
        return date.today()
    day = iso_date(text)
    if day is None:
        raise DdplabError(f"{TODAY_ENV}={text!r} is not a date: give YYYY-MM-DD, or unset it")
    return day


def iso_date(text: str) -> date | None:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):  # fromisoformat takes more than this on 3.11+
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def parse_prices(text: str, where: str, on: date | None = None) -> tuple[list[Price], list[str]]:
    """The offers of a price file (CSV, a header row naming COLUMNS, lines starting with # ignored) and its problems,
    one line each ("WHERE line N: ..."). ON: dates after it are refused (None: not checked)."""
    # Comment lines become blank ones (which csv skips), so the reader's line numbers stay the file's.
    lines = ["" if line.lstrip().startswith("#") else line for line in text.splitlines()]
    reader = csv.reader(lines)
    problems: list[str] = []
    header: list[str] | None = None
    offers: list[Price] = []
    seen: dict[tuple, int] = {}
    for cells in reader:
        line = reader.line_num
        cells = [c.strip() for c in cells]
        if not any(cells):
            continue
        at = f"{where} line {line}"
        if header is None:
            header = [c.lower() for c in cells]
            unknown = [c for c in header if c not in COLUMNS]
            missing = [c for c in REQUIRED if c not in header]
            twice = sorted({c for c in header if header.count(c) > 1})
            problems += [f"{at}: unknown column {c!r} (columns: {', '.join(COLUMNS)})" for c in unknown]
            problems += [f"{at}: no column {c!r} (required: {', '.join(REQUIRED)})" for c in missing]
            problems += [f"{at}: column {c!r} given twice" for c in twice]
            if missing or twice:
                return [], problems
            continue
        if len(cells) != len(header):
            problems.append(
                f"{at}: {len(cells)} cells, the header names {len(header)} (a comma inside a value "
                "needs the value in double quotes)"
            )
            continue
        row = dict(zip(header, cells))
        found = _row_problems(row, on)
        problems += [f"{at}: {p}" for p in found]
        if found:
            continue
        gpu = canonical(row["gpu"], {**PEAKS, **MEMORY}) or row["gpu"]
        price = Price(
            gpu,
            float(row["price_per_gpu_hour"]),
            row["currency"].upper(),
            row["provider"],
            row["tier"].lower(),
            int(row["gpus_per_box"]),
            row["source"],
            row["date_read"],
            row.get("offer", ""),
            row.get("read_from", ""),
            float(row["peak_tflops"]) if row.get("peak_tflops") else None,
        )
        key = (gpu, price.provider.lower(), price.tier, price.gpus_per_box, price.currency)
        if key in seen:
            problems.append(
                f"{at}: the same offer as line {seen[key]} ({price.name}, {price.gpus_per_box} per box, "
                f"{price.currency}): keep one"
            )
            continue
        seen[key] = line
        offers.append(price)
    if header is None:
        problems.append(f"{where}: no header row (the columns: {', '.join(COLUMNS)})")
    elif not offers and not problems:
        problems.append(f"{where}: a header but no offers")
    return offers, problems


def _row_problems(row: dict, on: date | None) -> list[str]:
    found = [f"{c} is empty" for c in REQUIRED if not row[c]]
    if row["tier"] and row["tier"].lower() not in TIERS:
        found.append(f"tier {row['tier']!r} is not one of {', '.join(TIERS)}")
    if row["price_per_gpu_hour"] and _positive_number(row["price_per_gpu_hour"]) is None:
        found.append(f"price_per_gpu_hour {row['price_per_gpu_hour']!r} is not a positive number")
    if row["currency"] and not re.fullmatch(r"[A-Za-z]{3}", row["currency"]):
        found.append(f"currency {row['currency']!r} is not a 3-letter code (USD, EUR, CNY ...)")
    box = row["gpus_per_box"]
    if box and not (box.isdigit() and int(box) >= 1):
        found.append(f"gpus_per_box {box!r} is not a whole number of 1 or more")
    if row["date_read"]:
        day = iso_date(row["date_read"])
        if day is None:
            found.append(f"date_read {row['date_read']!r} is not a date as YYYY-MM-DD")
        elif on is not None and day > on:
            found.append(f"date_read {row['date_read']} is in the future (today is {on.isoformat()})")
    if row.get("peak_tflops") and _positive_number(row["peak_tflops"]) is None:
        found.append(f"peak_tflops {row['peak_tflops']!r} is not a positive number")
    return found


def _positive_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


@functools.cache
def shipped() -> tuple[Price, ...]:
    """The offers in ddplab/data/prices.csv (their dates are checked by tools/check_prices.py and the tests)."""
    text = resources.files("ddplab").joinpath("data", PRICE_FILE).read_text(encoding="utf-8")
    offers, problems = parse_prices(text, f"ddplab/data/{PRICE_FILE}")
    if problems:
        raise DdplabError(
            f"the shipped price table is broken ({problems[0]}): reinstall ddplab, or give your own with --prices FILE"
        )
    return tuple(offers)


def load_prices(path: str, on: date | None = None) -> tuple[list[Price], dict[str, Peak]]:
    """A user's price file, in the shipped file's format (CSV, see PRICE_FILE); it replaces the shipped table.
    Returns its offers and the peaks its peak_tflops column gives."""
    p = Path(path)
    if p.suffix.lower() in (".json", ".toml"):
        raise DdplabError(
            f"--prices {path}: price files are CSV now, one row per offer with a date: write the header "
            f"{','.join(REQUIRED)} and a row per price (docs/scale.md shows one)"
        )
    if not p.is_file():
        raise DdplabError(f"--prices {path}: no such file: give the path of a CSV price file (docs/scale.md)")
    offers, problems = parse_prices(p.read_text(errors="replace"), f"--prices {path}", on or today())
    if problems:
        more = (
            f" (and {len(problems) - 1} more problem(s): python tools/check_prices.py {path} lists them)"
            if len(problems) > 1
            else ""
        )
        raise DdplabError(f"{problems[0]}{more}")
    peaks = {
        o.gpu: Peak(o.gpu, o.peak_tflops, f"your price file {path}", o.date_read)
        for o in offers
        if o.peak_tflops is not None
    }
    return offers, peaks


def age(offers, on: date) -> tuple[int, Price] | None:
    """Days since the oldest of these offers was read, and that offer; None when there are none."""
    dated = [(o, iso_date(o.date_read)) for o in offers]
    dated = [(o, d) for o, d in dated if d is not None]
    if not dated:
        return None
    oldest, day = min(dated, key=lambda od: od[1])
    return (on - day).days, oldest


# ----------------------------------------------------------------------------------------------- arithmetic


@dataclass
class Option:
    gpu: str
    offer: int  # index into CostResult.prices
    count: int
    billed_gpus: int  # count rounded up to whole boxes
    samples_per_sec: float | None  # None: no sourced speed for this GPU
    hours: float | None
    cost: float | None
    currency: str
    price_per_gpu_hour: float
    speed_ratio: float | None  # speed per device relative to the measured-on GPU
    speed_basis: str  # measured | assumed (peak BF16 ratio: a ceiling) | unknown (no sourced peak)
    scaling_basis: str  # measured | predicted (scaling model) | assumed (ideal)
    cheapest: bool = False  # the lowest cost in its currency (several when tied)
    fastest: bool = False
    tied_cheapest: bool = False  # another row prints the same lowest cost
    tied_fastest: bool = False


@dataclass
class CostResult:
    samples: float  # dataset size × epochs
    base_samples_per_sec: float
    measured_on: str
    options: list[Option]
    prices: list[Price]
    peaks: list[Peak]
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how to read the marks
    memory: dict | None = None  # with --memory: per GPU and strategy, whether one rank's step fits (ddplab memory)
    prices_age_days: int | None = None  # since the oldest price used was read
    prices_oldest: str = ""  # that offer, and its date
    prices_stale: bool = False  # older than STALE_DAYS


# efficiency(count) -> (efficiency, basis); basis is "measured", "predicted" (scaling model) or "assumed" (ideal)
Efficiency = Callable[[int], "tuple[float, str]"]


def ideal(count: int) -> tuple[float, str]:
    return 1.0, "assumed"


def estimate(
    base_samples_per_sec: float,
    measured_on: str,
    dataset_size: float,
    epochs: float,
    offers: list[Price],
    counts: list[int],
    peaks: dict[str, Peak],
    efficiency: Efficiency = ideal,
    on: date | None = None,
) -> CostResult:
    """Time and money of every (offer, count); cheapest (per currency) and fastest marked among those with a known
    speed, every row that prints the same figure marked alike (a tie is a tie). ON: the day prices age to."""
    samples = dataset_size * epochs
    ref_peak = peaks.get(measured_on)
    options = []
    for i, price in enumerate(offers):
        gpu = price.gpu
        if gpu == measured_on:
            ratio, speed_basis = 1.0, "measured"
        elif ref_peak and gpu in peaks:
            ratio, speed_basis = peaks[gpu].bf16_dense_tflops / ref_peak.bf16_dense_tflops, "assumed"
        else:
            ratio, speed_basis = None, "unknown"
        for count in counts:
            eff, scaling_basis = efficiency(count)
            row = Option(
                gpu,
                i,
                count,
                price.billed(count),
                None,
                None,
                None,
                price.currency,
                price.price_per_gpu_hour,
                ratio,
                speed_basis,
                scaling_basis,
            )
            if ratio is not None:
                row.samples_per_sec = base_samples_per_sec * ratio * count * eff
                row.hours = samples / row.samples_per_sec / 3600
                row.cost = row.hours * row.billed_gpus * price.price_per_gpu_hour
            options.append(row)
    _mark(options)
    result = CostResult(
        samples,
        base_samples_per_sec,
        measured_on,
        options,
        list(offers),
        [peaks[g] for g in dict.fromkeys([measured_on, *(o.gpu for o in offers)]) if g in peaks],
    )
    result.assumptions = _assumptions(result, ref_peak)
    result.notes = _notes(options)
    read = age(offers, on or today())
    if read is not None:
        result.prices_age_days, oldest = read
        result.prices_oldest = f"{oldest.name}, {oldest.date_read}"
        result.prices_stale = result.prices_age_days > STALE_DAYS
    return result


def _mark(options: list[Option]) -> None:
    """Cheapest per currency (no exchange rate is assumed), fastest over all; ties as they print."""
    known = [o for o in options if o.cost is not None]
    for currency in dict.fromkeys(o.currency for o in known):
        rows = [o for o in known if o.currency == currency]
        low = format_money(min(o.cost for o in rows), currency)
        tied = [o for o in rows if format_money(o.cost, currency) == low]
        for o in tied:
            o.cheapest, o.tied_cheapest = True, len(tied) > 1
    if known:
        low = format_hours(min(o.hours for o in known))
        tied = [o for o in known if format_hours(o.hours) == low]
        for o in tied:
            o.fastest, o.tied_fastest = True, len(tied) > 1


def _assumptions(r: CostResult, ref_peak: Peak | None) -> list[str]:
    options, measured_on = r.options, r.measured_on
    lines = [
        "cost = hours × GPUs billed × price per GPU-hour (GPUs billed: N rounded up to whole boxes where an offer "
        "rents boxes; storage, egress and idle time are not counted)"
    ]
    if any(o.speed_basis == "assumed" for o in options):
        lines.append(
            f"ceiling (speed) = speed on {measured_on} × the ratio of peak dense BF16 tensor TFLOPS, an upper "
            "bound: memory-bound models gain less; measure on the GPU you rent"
        )
    unknown = sorted({o.gpu for o in options if o.speed_basis == "unknown"})
    if unknown:
        missing = measured_on if ref_peak is None else ", ".join(unknown)
        lines.append(
            f"no sourced peak for {missing}, so no time or cost for {', '.join(unknown)}: measure on it "
            "(--measured-on), or give peak_tflops in a --prices file"
        )
    if any(o.scaling_basis == "assumed" and o.count > 1 for o in options):
        lines.append(
            "ideal (scaling) = N GPUs do N × one GPU's work, an upper bound: run `ddplab scale ... --json` "
            "on that GPU type and pass --from for measured and predicted efficiency"
        )
    return lines


def _notes(options: list[Option]) -> list[str]:
    lines = []
    if any(o.tied_cheapest or o.tied_fastest for o in options):
        lines.append(
            "(tie) = rows whose figures print the same: none of them is cheaper or faster than the others"
            + (
                "; with ideal scaling N GPUs cost what one does, so the count that is cheapest is not known: "
                "measured scaling (--from) tells them apart"
                if any(o.tied_cheapest and o.scaling_basis == "assumed" and o.count > 1 for o in options)
                else ""
            )
        )
    currencies = list(dict.fromkeys(o.currency for o in options))
    if len(currencies) > 1:
        lines.append(
            f"costs in {', '.join(currencies)}: compared within each currency (the cheapest of each is "
            "marked), no exchange rate applied"
        )
    return lines


def format_hours(hours: float | None) -> str:
    """A duration, compact and never split: 47s, 9m50s, 38m, 1.3h, 3.0d. Two different times never print the same
    below 10 minutes (95 s is "1m35s", 150 s "2m30s")."""
    if hours is None:
        return "—"
    seconds = round(hours * 3600)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    if hours < 1:
        return f"{hours * 60:.0f}m"
    if hours < 48:
        return f"{hours:.1f}h"
    return f"{hours / 24:.1f}d"


SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}  # unambiguous; every other currency prints its code after the figure


def format_money(amount: float | None, currency: str) -> str:
    """$12.40, $0.047, $1,234, €3.10, 12.40 CNY: cents below 1,000, two significant digits below 1."""
    if amount is None:
        return "—"
    if amount < 0.995:  # two significant digits: $0.37, $0.047, $0.0042
        digits = min(6, max(2, 1 - math.floor(math.log10(amount)))) if amount > 0 else 2
        figure = f"{amount:.{digits}f}"
    elif amount < 999.995:
        figure = f"{amount:,.2f}"
    else:
        figure = f"{amount:,.0f}"
    symbol = SYMBOLS.get(currency)
    return f"{symbol}{figure}" if symbol else f"{figure} {currency}"


def format_price(p: Price) -> str:
    """A price as the file states it (1.006 stays 1.006), per GPU-hour."""
    figure = (
        f"{p.price_per_gpu_hour:.2f}"
        if round(p.price_per_gpu_hour, 2) == p.price_per_gpu_hour
        else f"{p.price_per_gpu_hour:g}"
    )
    symbol = SYMBOLS.get(p.currency)
    return f"{symbol}{figure}" if symbol else f"{figure} {p.currency}"


def format_rate(samples_per_sec: float | None) -> str:
    if samples_per_sec is None:
        return "—"
    return f"{samples_per_sec:,.0f}" if samples_per_sec >= 100 else f"{samples_per_sec:.3g}"


def from_scale(data, path: str, measured_on: str | None, known: dict):
    """Base samples/s (1 rank), the GPU it stands for, and efficiency(N) measured where run, predicted elsewhere."""
    from ddplab.perf.scaling import ScalingModel, efficiency

    try:
        points = {int(pt["world_size"]): float(pt["samples_per_sec"]) for pt in data["points"]}
        device, strong = str(data["device"]), bool(data.get("strong", False))
        batch, accum = int(data["batch_per_rank"]), int(data.get("accum_steps", 1))
        model = ScalingModel.from_dict(data["model"]) if data.get("model") else None
    except (KeyError, TypeError, ValueError) as e:
        raise DdplabError(
            f"--from {path}: not the JSON `ddplab scale --json` writes ({type(e).__name__}: {e}): "
            "re-run ddplab scale with --json"
        ) from None
    if 1 not in points and model is None:
        raise DdplabError(f"--from {path} has no 1-rank run to start from: run ddplab scale with --nproc 1,...")
    if measured_on is not None:
        gpu = canonical(measured_on, known)
        if gpu is None:
            raise DdplabError(f"--measured-on {measured_on!r} is not a GPU ddplab knows (known: {', '.join(known)})")
    else:
        gpu = gpu_of_device(device)
        if gpu is None:
            raise DdplabError(
                f"--from {path} was measured on {device!r}, and samples/s there say nothing about a "
                "GPU (nor does the scaling: with slower compute, communication weighs less): run "
                "`ddplab scale ... --json` on the GPU type you want to price, or price a throughput "
                "measured on a GPU with --samples-per-sec X --measured-on GPU (--measured-on with "
                "this file would price these figures as that GPU's)"
            )
    base = points.get(1) or model.samples_per_sec(1, batch, accum)

    def eff(count: int) -> tuple[float, str]:
        if count in points:
            return points[count] / (count * base), "measured"
        if model is None:
            return 1.0, "assumed"
        return efficiency(model, count, batch, accum, strong), "predicted"

    return base, gpu, eff


def memory_fits(report: dict, gpus: list[str]) -> dict:
    """From `ddplab memory --json`: per priced GPU, whether each strategy's per-rank peak fits its memory, and the
    largest per-rank batch (the same rule as ddplab memory: memory - CUDA context - margin)."""
    from ddplab.perf.memory import largest_batch

    batch, margin, context = int(report["batch_size"]), float(report["margin"]), int(report["cuda_context_bytes"])
    rows = []
    for gpu in gpus:
        if gpu not in MEMORY:
            rows.append({"gpu": gpu, "memory_gb": None, "fits": {}, "largest_batch": {}})
            continue
        usable = int(MEMORY[gpu].total_bytes * (1 - margin)) - context
        fits = {p["strategy"]: p["peak_bytes"] <= usable for p in report["predictions"]}
        largest = {
            p["strategy"]: largest_batch(batch, p["peak_bytes"], report["per_sample_bytes"][p["strategy"]], usable)
            for p in report["predictions"]
        }
        rows.append(
            {
                "gpu": gpu,
                "memory_gb": MEMORY[gpu].gb,
                "memory_bytes": MEMORY[gpu].total_bytes,
                "fits": fits,
                "largest_batch": largest,
            }
        )
    return {
        "model": report["model"],
        "batch_size": batch,
        "nproc": int(report["nproc"]),
        "margin": margin,
        "rows": rows,
        "sources": {g: f"{MEMORY[g].source}; counted: {MEMORY[g].basis}" for g in gpus if g in MEMORY},
    }
