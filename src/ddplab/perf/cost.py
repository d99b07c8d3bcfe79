"""What a training would take in time and money on rented GPUs: the arithmetic behind `ddplab cost`.

    samples/s(gpu, N) = base samples/s × speed(gpu) / speed(measured-on) × N × efficiency(N)
    hours             = dataset size × epochs / samples/s / 3600
    dollars           = hours × N × price per GPU-hour

Every input is labelled with where it comes from: measured (you ran it), predicted (the scaling model fitted on
your runs), or assumed (a datasheet ratio, ideal scaling). Prices below and peaks (ddplab.train.peaks: MFU uses
them too) carry their source and the date they were read; prices move weekly, so `--prices FILE` replaces the
whole table with your own quotes.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ddplab.errors import DdplabError
from ddplab.train.peaks import DEVICE_NAMES, PEAKS, Peak, device_peak, gpu_of_device  # noqa: F401  the tables


@dataclass(frozen=True)
class Price:
    gpu: str
    usd_per_gpu_hour: float
    offer: str  # what exactly is rented at that price
    source: str  # the provider's page
    date: str  # when the price was read
    via: str = ""  # the public transcription it was read from, when not the page itself


# On-demand prices per GPU-hour, no commitment. One provider per GPU where possible (RunPod Secure Cloud bills
# per GPU, so N GPUs cost N × the price); the A10G exists only on AWS.
_RUNPOD_VIA = "https://github.com/tgarg01/silybench-data/blob/main/derived/csv/gpu_prices.csv (checked_at column)"
PRICES: dict[str, Price] = {p.gpu: p for p in [
    Price("A10G", 1.006, "AWS g5.xlarge (1 GPU, 4 vCPU), us-east-1, Linux on-demand",
          "https://aws.amazon.com/ec2/pricing/on-demand/", "2026-06-17",
          "https://www.factualminds.com/blog/amazon-ec2-on-demand-pricing-instance-families-2026/"),
    Price("RTX4090", 0.74, "RTX 4090 24GB, RunPod Secure Cloud, on-demand",
          "https://www.runpod.io/pricing", "2026-09-25", _RUNPOD_VIA),
    Price("A100", 1.59, "A100 SXM 80GB, RunPod Secure Cloud, on-demand",
          "https://www.runpod.io/pricing", "2026-09-25", _RUNPOD_VIA),
    Price("H100", 3.49, "H100 SXM 80GB, RunPod Secure Cloud, on-demand",
          "https://www.runpod.io/pricing", "2026-09-25", _RUNPOD_VIA),
    Price("H200", 4.59, "H200 141GB, RunPod Secure Cloud, on-demand",
          "https://www.runpod.io/pricing", "2026-09-25", _RUNPOD_VIA),
]}


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
        return (f"nvidia-smi shows {self.visible_mib} MiB ({self.visible_source})" if self.visible_mib
                else f"{self.gb:g} GB read as {self.gb:g} GiB, as nvidia-smi shows NVIDIA's advertised GB")


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
    return Memory(f"{number:g} {unit}", size / 1e9, "given with --gpus", "", exact_bytes=size,
                  visible_source=f"given: {number:g} {unit} = {size:,} bytes")


# Each priced GPU's memory, for `ddplab memory` and `ddplab cost --memory`: does the training fit?
MEMORY: dict[str, Memory] = {m.gpu: m for m in [
    Memory("A10G", 24, "AWS EC2 G5 instances page: NVIDIA A10G Tensor Core GPU, 24 GB GPU memory per GPU, "
           "https://aws.amazon.com/ec2/instance-types/g5/", "2026-12-03",
           23028, "ECC on; an A10G's nvidia-smi in https://github.com/NVIDIA/DCGM/issues/232, checked 2026-12-03"),
    Memory("RTX4090", 24, "NVIDIA Ada GPU Architecture whitepaper v2.01, GeForce RTX 4090: 24 GB GDDR6X, "
           "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf", "2026-12-03",
           24564, "an RTX 4090's nvidia-smi in https://github.com/RLinf/RLinf/issues/255, checked 2026-12-03"),
    Memory("A100", 80, "NVIDIA A100 Tensor Core GPU datasheet: A100 80GB SXM, 80GB HBM2e, "
           "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
           "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf", "2026-12-03",
           81920, "A100 80GB's nvidia-smi total listed in https://github.com/modal-labs/modal-client/pull/2797, "
                  "checked 2026-12-03"),
    Memory("H100", 80, "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: GPU memory 80GB, "
           "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet", "2026-12-03",
           81559, "an H100 80GB HBM3's nvidia-smi in https://github.com/NVIDIA/nccl/issues/1264, checked 2026-12-03"),
    Memory("H200", 141, "NVIDIA H200 Tensor Core GPU page, H200 SXM: GPU memory 141GB HBM3e, "
           "https://www.nvidia.com/en-us/data-center/h200/", "2026-12-03"),
]}

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


def load_prices(path: str) -> tuple[dict[str, Price], dict[str, Peak]]:
    """Read a user's price file (JSON, or TOML on Python 3.11+); it replaces the shipped table.

    Shape (TOML shown; JSON is the same object):   [H100]
                                                    usd_per_gpu_hour = 2.49
                                                    source = "quote from ..."   # optional
                                                    date = "2026-12-01"         # optional
                                                    peak_tflops = 989.4         # optional, the speed basis
    """
    p = Path(path)
    if not p.is_file():
        raise DdplabError(f"--prices {path}: no such file: give the path of a JSON or TOML price file")
    text = p.read_text(errors="replace")
    if p.suffix.lower() == ".toml":
        data = _parse_toml(path, text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DdplabError(f"--prices {path}: not valid JSON (line {e.lineno}: {e.msg}): fix the file, or name "
                              "it .toml if it is TOML") from None
    if not isinstance(data, dict) or not data:
        raise DdplabError(f"--prices {path}: expected a table of GPUs, e.g. {{\"H100\": {{\"usd_per_gpu_hour\": 2.49}}}}")
    prices, peaks = {}, {}
    for gpu, row in data.items():
        if not isinstance(row, dict):
            raise DdplabError(f"--prices {path}: entry {gpu!r} must be a table with usd_per_gpu_hour, got {row!r}")
        usd = _positive(row.get("usd_per_gpu_hour"), f"--prices {path}: {gpu}.usd_per_gpu_hour")
        name = canonical(gpu, PEAKS) or canonical(gpu, PRICES) or gpu
        prices[name] = Price(name, usd, str(row.get("offer", "your price file")), str(row.get("source", path)),
                             str(row.get("date", "not given")))
        if "peak_tflops" in row:
            peaks[name] = Peak(name, _positive(row["peak_tflops"], f"--prices {path}: {gpu}.peak_tflops"),
                               f"your price file {path}", str(row.get("date", "not given")))
    return prices, peaks


def _parse_toml(path: str, text: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise DdplabError(f"--prices {path}: reading TOML needs Python 3.11+ (this is "
                              f"{sys.version_info.major}.{sys.version_info.minor}): write the same table as JSON, "
                              "or pip install tomli") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise DdplabError(f"--prices {path}: not valid TOML ({e}): fix the file") from None


def _positive(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise DdplabError(f"{what} must be a positive number, got {value!r}")
    return float(value)


# ----------------------------------------------------------------------------------------------- arithmetic


@dataclass
class Option:
    gpu: str
    count: int
    samples_per_sec: float | None  # None: no sourced speed for this GPU
    hours: float | None
    usd: float | None
    usd_per_gpu_hour: float
    speed_ratio: float | None  # speed per device relative to the measured-on GPU
    speed_basis: str  # measured | assumed (peak BF16 ratio) | unknown (no sourced peak)
    scaling_basis: str  # measured | predicted (scaling model) | assumed (ideal)
    cheapest: bool = False
    fastest: bool = False


@dataclass
class CostResult:
    samples: float  # dataset size × epochs
    base_samples_per_sec: float
    measured_on: str
    options: list[Option]
    prices: list[Price]
    peaks: list[Peak]
    assumptions: list[str] = field(default_factory=list)
    memory: dict | None = None  # with --memory: per GPU and strategy, whether one rank's step fits (ddplab memory)


# efficiency(count) -> (efficiency, basis); basis is "measured", "predicted" (scaling model) or "assumed" (ideal)
Efficiency = Callable[[int], "tuple[float, str]"]


def ideal(count: int) -> tuple[float, str]:
    return 1.0, "assumed"


def estimate(base_samples_per_sec: float, measured_on: str, dataset_size: float, epochs: float, gpus: list[str],
             counts: list[int], prices: dict[str, Price], peaks: dict[str, Peak],
             efficiency: Efficiency = ideal) -> CostResult:
    """Time and money of every (GPU, count) option; cheapest and fastest marked among those with a known speed."""
    samples = dataset_size * epochs
    ref_peak = peaks.get(measured_on)
    options = []
    for gpu in gpus:
        price = prices[gpu]
        if gpu == measured_on:
            ratio, speed_basis = 1.0, "measured"
        elif ref_peak and gpu in peaks:
            ratio, speed_basis = peaks[gpu].bf16_dense_tflops / ref_peak.bf16_dense_tflops, "assumed"
        else:
            ratio, speed_basis = None, "unknown"
        for count in counts:
            eff, scaling_basis = efficiency(count)
            if ratio is None:
                options.append(Option(gpu, count, None, None, None, price.usd_per_gpu_hour, None, speed_basis,
                                      scaling_basis))
                continue
            sps = base_samples_per_sec * ratio * count * eff
            hours = samples / sps / 3600
            options.append(Option(gpu, count, sps, hours, hours * count * price.usd_per_gpu_hour,
                                  price.usd_per_gpu_hour, ratio, speed_basis, scaling_basis))
    known = [o for o in options if o.usd is not None]
    if known:
        min(known, key=lambda o: (o.usd, o.hours)).cheapest = True
        min(known, key=lambda o: (o.hours, o.usd)).fastest = True
    assumptions = ["cost = hours × GPUs × price per GPU-hour (per-GPU billing; storage, egress and idle time "
                   "are not counted)"]
    if any(o.speed_basis == "assumed" for o in options):
        assumptions.append(f"speed of other GPU types = speed on {measured_on} × ratio of peak dense BF16 tensor "
                           "TFLOPS: a ceiling, memory-bound models gain less; measure on the GPU you rent")
    unknown = sorted({o.gpu for o in options if o.speed_basis == "unknown"})
    if unknown:
        missing = measured_on if ref_peak is None else ", ".join(unknown)
        assumptions.append(f"no sourced peak for {missing}, so no time or cost for {', '.join(unknown)}: measure "
                           "on it (--measured-on), or give peak_tflops in a --prices file")
    if any(o.scaling_basis == "assumed" and o.count > 1 for o in options):
        assumptions.append("N GPUs = N × one GPU (ideal scaling, an upper bound): run `ddplab scale ... --json` "
                           "on that GPU type and pass --from for measured and predicted efficiency")
    used_peaks = [peaks[g] for g in dict.fromkeys([measured_on, *gpus]) if g in peaks]
    return CostResult(samples, base_samples_per_sec, measured_on, options, [prices[g] for g in gpus], used_peaks,
                      assumptions)


def format_hours(hours: float | None) -> str:
    """A duration as people read it; two different times never print the same below 10 minutes (95 s is
    "1 min 35 s", 150 s "2 min 30 s", not both "2 min")."""
    if hours is None:
        return "—"
    seconds = round(hours * 3600)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    if hours < 1:
        return f"{hours * 60:.0f} min"
    if hours < 48:
        return f"{hours:.1f} h"
    return f"{hours / 24:.1f} d"


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
        largest = {p["strategy"]: largest_batch(batch, p["peak_bytes"], report["per_sample_bytes"][p["strategy"]],
                                                usable) for p in report["predictions"]}
        rows.append({"gpu": gpu, "memory_gb": MEMORY[gpu].gb, "memory_bytes": MEMORY[gpu].total_bytes, "fits": fits,
                     "largest_batch": largest})
    return {"model": report["model"], "batch_size": batch, "nproc": int(report["nproc"]), "margin": margin,
            "rows": rows, "sources": {g: f"{MEMORY[g].source}; counted: {MEMORY[g].basis}" for g in gpus
                                      if g in MEMORY}}
