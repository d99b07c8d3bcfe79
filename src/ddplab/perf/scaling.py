"""A DDP step-time model: fit it on a few runs, predict world sizes and interconnects you have not tried.

One optimizer step of DDP on N ranks, per-rank micro-batch b, k micro-steps of gradient accumulation
(gradients are all-reduced on the last micro-step only):

    step(N, b, k) = k · (c0 + c · b)                 compute: fixed cost per micro-step + cost per sample
                  + (1 − overlap) · comm(N)          the all_reduce time DDP could not hide behind backward
    comm(N)       = buckets · 2(N−1) · α             ring all_reduce (nccl-tests doc/PERFORMANCE.md): 2(N−1)
                  + 2(N−1)/N · grad_bytes / B        latency-bound steps per bucket, and the bus-bandwidth term
    samples/s     = N · b · k / step

grad_bytes is the model's parameter count × bytes per gradient element (4 for fp32, 2 with the bf16 compression
hook); DDP packs gradients into buckets of bucket_cap_mb (default 25 MiB, the first one 1 MiB).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from ddplab.errors import DdplabError

MIB = 1024 * 1024
DEFAULT_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.DistributedDataParallel's default
DEFAULT_FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, used with the default cap


@dataclass(frozen=True)
class Interconnect:
    name: str
    bus_gb_per_s: float  # GB/s one way per device: the ceiling for nccl-tests' "busbw"
    source: str
    date: str  # when the figure was checked


# Link rates one way, an upper bound for all_reduce bus bandwidth (NCCL typically reaches 70–90 % of them).
INTERCONNECTS = [
    Interconnect("NVLink 4 (H100/H200 SXM)", 450.0, "NVIDIA H100 datasheet: NVLink 900 GB/s per GPU, both directions "
                 "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)", "2026-12-02"),
    Interconnect("NVLink 3 (A100 SXM)", 300.0, "NVIDIA A100 datasheet: NVLink 600 GB/s per GPU, both directions "
                 "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                 "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)", "2026-12-02"),
    Interconnect("PCIe 5.0 x16", 63.0, "PCI-SIG PCIe 5.0 spec: 32 GT/s × 16 lanes, 128b/130b coding "
                 "(https://pcisig.com/specifications)", "2026-12-02"),
    Interconnect("InfiniBand NDR 400 Gb/s", 50.0, "NVIDIA ConnectX-7 / IBTA NDR: 400 Gb/s per port "
                 "(https://www.nvidia.com/en-us/networking/infiniband-adapters/)", "2026-12-02"),
    Interconnect("PCIe 4.0 x16", 31.5, "PCI-SIG PCIe 4.0 spec: 16 GT/s × 16 lanes, 128b/130b coding "
                 "(https://pcisig.com/specifications)", "2026-12-02"),
    Interconnect("InfiniBand HDR 200 Gb/s", 25.0, "NVIDIA ConnectX-6 / IBTA HDR: 200 Gb/s per port "
                 "(https://www.nvidia.com/en-us/networking/infiniband-adapters/)", "2026-12-02"),
    Interconnect("100 GbE", 12.5, "IEEE 802.3 line rate 100 Gb/s (https://www.ieee802.org/3/)", "2026-12-02"),
    Interconnect("25 GbE", 3.125, "IEEE 802.3by line rate 25 Gb/s (https://www.ieee802.org/3/)", "2026-12-02"),
    Interconnect("10 GbE", 1.25, "IEEE 802.3ae line rate 10 Gb/s (https://www.ieee802.org/3/)", "2026-12-02"),
]


def buckets(grad_bytes: float, bucket_cap_mb: float | None = None) -> int:
    """How many all_reduce calls DDP makes per step (it fills buckets up to the cap; the default's first is 1 MiB)."""
    if grad_bytes <= 0:
        return 0
    cap = (bucket_cap_mb or DEFAULT_BUCKET_CAP_MB) * MIB
    first = DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap
    return 1 + math.ceil(max(0.0, grad_bytes - first) / cap)


def allreduce_s(world_size: int, nbytes: float, latency_s: float, bus_bytes_per_s: float, calls: int = 1) -> float:
    """Ring all_reduce of `nbytes` split over `calls` collectives."""
    if world_size <= 1 or nbytes <= 0:
        return 0.0
    n = world_size
    return calls * 2 * (n - 1) * latency_s + 2 * (n - 1) / n * nbytes / bus_bytes_per_s


# ----------------------------------------------------------------------------------------------- measurements


@dataclass
class Run:
    """One measured training configuration (times are per optimizer step, the slowest rank's)."""

    world_size: int
    batch_per_rank: int
    step_s: float
    accum_steps: int = 1
    grad_bytes: float = 0.0
    bucket_cap_mb: float | None = None
    compute_s: float | None = None  # forward+backward+optimizer without waiting for communication, if measured
    comm_s: float | None = None  # total all_reduce time (hidden or not), if measured

    @property
    def samples_per_sec(self) -> float:
        return self.world_size * self.batch_per_rank * self.accum_steps / self.step_s


@dataclass
class ScalingModel:
    compute_fixed_s: float  # c0: per micro-step (kernel launches, Python, optimizer)
    compute_per_sample_s: float  # c
    grad_bytes: float
    latency_s: float  # α: per ring step of an all_reduce
    bus_bytes_per_s: float  # B
    overlap: float  # fraction of comm DDP hid behind backward, 0..1
    bucket_cap_mb: float | None = None
    provenance: dict = field(default_factory=dict)  # parameter -> where its value came from

    def compute_s(self, batch_per_rank: int, accum_steps: int = 1) -> float:
        return accum_steps * (self.compute_fixed_s + self.compute_per_sample_s * batch_per_rank)

    def comm_s(self, world_size: int, bus_bytes_per_s: float | None = None, grad_bytes: float | None = None,
               bucket_cap_mb: float | None = None) -> float:
        nbytes = self.grad_bytes if grad_bytes is None else grad_bytes
        cap = self.bucket_cap_mb if bucket_cap_mb is None else bucket_cap_mb
        return allreduce_s(world_size, nbytes, self.latency_s, bus_bytes_per_s or self.bus_bytes_per_s,
                           buckets(nbytes, cap))

    def exposed_comm_s(self, world_size: int, **comm) -> float:
        return (1 - self.overlap) * self.comm_s(world_size, **comm)

    def step_s(self, world_size: int, batch_per_rank: int, accum_steps: int = 1, **comm) -> float:
        return self.compute_s(batch_per_rank, accum_steps) + self.exposed_comm_s(world_size, **comm)

    def samples_per_sec(self, world_size: int, batch_per_rank: int, accum_steps: int = 1, **comm) -> float:
        return world_size * batch_per_rank * accum_steps / self.step_s(world_size, batch_per_rank, accum_steps,
                                                                        **comm)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ScalingModel:
        try:
            return cls(**data)
        except TypeError as e:
            raise DdplabError(f"scaling model in the file is not one ddplab wrote ({e}): re-run `ddplab scale "
                              "--json`") from None


@dataclass(frozen=True)
class LinkFit:
    latency_s: float
    bus_bytes_per_s: float
    source: str


# ----------------------------------------------------------------------------------------------- fitting


def fit(runs: list[Run], link: LinkFit | None = None) -> ScalingModel:
    """Fit the model's parameters on measured runs (see the module docstring for the equations).

    compute c0, c:  least squares of per-micro-step compute time on batch size, from runs that measured compute
                    time, or else from the 1-rank runs (which have no communication).
    α, B:           `link` if given (from `ddplab bench`), else least squares of measured all_reduce time on the
                    two ring terms; that needs two world sizes above 1 to tell latency from bandwidth.
    overlap:        1 − exposed / total comm, where exposed = step − compute, in least squares over N > 1 runs.
    """
    if not runs:
        raise DdplabError("no runs to fit the scaling model on: run at least world size 1 and one larger size")
    grad_bytes = max(r.grad_bytes for r in runs)
    prov = {}
    c0, c, prov["compute"] = _fit_compute(runs)
    multi = [r for r in runs if r.world_size > 1]
    if link is not None:
        alpha, bus, prov["link"] = link.latency_s, link.bus_bytes_per_s, link.source
    elif any(r.comm_s is not None for r in multi):
        alpha, bus, prov["link"] = _fit_link([r for r in multi if r.comm_s is not None], "measured all_reduce time")
    elif multi:
        exposed_runs = [replace(r, comm_s=max(0.0, r.step_s - _compute_of(r, c0, c))) for r in multi]
        alpha, bus, how = _fit_link(exposed_runs, "exposed comm (step − compute), overlap assumed 0")
        prov["link"] = how
        prov["overlap"] = "assumed 0: no comm time was measured apart from the step time"
        return ScalingModel(c0, c, grad_bytes, alpha, bus, 0.0, _common_cap(runs), prov)
    else:
        alpha, bus = 0.0, math.inf
        prov["link"] = "not measured: every run had one rank"
    model = ScalingModel(c0, c, grad_bytes, alpha, bus, 0.0, _common_cap(runs), prov)
    model.overlap, prov["overlap"] = _fit_overlap(model, multi)
    return model


def _compute_of(run: Run, c0: float, c: float) -> float:
    return run.compute_s if run.compute_s is not None else run.accum_steps * (c0 + c * run.batch_per_rank)


def _common_cap(runs: list[Run]) -> float | None:
    caps = {r.bucket_cap_mb for r in runs}
    return caps.pop() if len(caps) == 1 else None


def _fit_compute(runs: list[Run]) -> tuple[float, float, str]:
    measured = [r for r in runs if r.compute_s is not None]
    points = [(r.batch_per_rank, r.compute_s / r.accum_steps) for r in measured] or \
             [(r.batch_per_rank, r.step_s / r.accum_steps) for r in runs if r.world_size == 1]
    how = "measured compute time" if measured else "1-rank step time"
    if not points:
        raise DdplabError("cannot fit compute time: include world size 1 in --nproc (it has no communication)")
    sizes = {b for b, _ in points}
    if len(sizes) >= 2:
        c0, c = _line(points)
        if c0 >= 0 and c > 0:
            return c0, c, f"{how}, fitted over batch sizes {sorted(sizes)}"
    c = sum(t for _, t in points) / sum(b for b, _ in points)  # through the origin
    return 0.0, c, f"{how} at batch size(s) {sorted(sizes)}, fixed cost not separable (assumed 0)"


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def _fit_link(runs: list[Run], what: str) -> tuple[float, float, str]:
    """α and B from comm times: t = α · calls·2(N−1) + (1/B) · 2(N−1)/N·bytes, non-negative least squares."""
    rows = []
    for r in runs:
        n, calls = r.world_size, buckets(r.grad_bytes, r.bucket_cap_mb)
        rows.append((calls * 2 * (n - 1), 2 * (n - 1) / n * r.grad_bytes, r.comm_s))
    distinct = {(round(a, 9), round(b, 3)) for a, b, _ in rows}
    if len(distinct) >= 2:
        alpha, inv_bus = _nnls2(rows)
        if inv_bus > 0:
            return alpha, 1 / inv_bus, f"{what}, latency and bandwidth fitted over {len(distinct)} configurations"
        return alpha, math.inf, f"{what}: latency-bound (no bandwidth term measurable)"
    # One configuration: the sum is known, its split is not; bandwidth-only extrapolates more optimistically in N,
    # so say so rather than guess a split.
    inv_bus = sum(t * b for _, b, t in rows) / sum(b * b for _, b, _ in rows)
    return 0.0, (1 / inv_bus if inv_bus > 0 else math.inf), (
        f"{what} at one world size: latency and bandwidth not separable, all of it counted as bandwidth "
        "(run a third world size, or give --bench, to split them)")


def _nnls2(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least squares y ≈ p·a + q·b with p, q ≥ 0 (two unknowns: try the free solution, else each edge)."""
    saa = sum(a * a for a, _, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    sab = sum(a * b for a, b, _ in rows)
    say = sum(a * y for a, _, y in rows)
    sby = sum(b * y for _, b, y in rows)
    det = saa * sbb - sab * sab
    if det > 0:
        p, q = (say * sbb - sby * sab) / det, (sby * saa - say * sab) / det
        if p >= 0 and q >= 0:
            return p, q
    candidates = [(max(0.0, say / saa) if saa else 0.0, 0.0), (0.0, max(0.0, sby / sbb) if sbb else 0.0)]
    return min(candidates, key=lambda pq: sum((y - pq[0] * a - pq[1] * b) ** 2 for a, b, y in rows))


def _fit_overlap(model: ScalingModel, multi: list[Run]) -> tuple[float, str]:
    pairs = []
    for r in multi:
        compute = _compute_of(r, model.compute_fixed_s, model.compute_per_sample_s)
        total = model.comm_s(r.world_size, grad_bytes=r.grad_bytes, bucket_cap_mb=r.bucket_cap_mb)
        pairs.append((max(0.0, r.step_s - compute), total))
    denom = sum(t * t for _, t in pairs)
    if not pairs or denom == 0:
        return 0.0, "not measurable: no communication in these runs"
    hidden = 1 - sum(e * t for e, t in pairs) / denom
    return min(1.0, max(0.0, hidden)), f"1 − exposed/total comm over {len(pairs)} run(s) with N > 1"


def link_from_bench(rows: list[dict]) -> LinkFit:
    """α and B from all_reduce timings at several message sizes: rows of {world_size, bytes, seconds}."""
    usable = [r for r in rows if r["world_size"] > 1 and r["bytes"] > 0 and r["seconds"] > 0]
    sizes = {r["bytes"] for r in usable}
    if len(sizes) < 2:
        raise DdplabError("the bench file has all_reduce timings at fewer than two message sizes: run `ddplab bench "
                          "--op all_reduce --json` over a range of sizes")
    runs = [Run(r["world_size"], 1, 1.0, grad_bytes=r["bytes"], bucket_cap_mb=r["bytes"] / MIB, comm_s=r["seconds"])
            for r in usable]
    alpha, bus, _ = _fit_link(runs, "bench")
    return LinkFit(alpha, bus, f"ddplab bench: all_reduce at {len(sizes)} message sizes")


def efficiency(model: ScalingModel, world_size: int, batch_per_rank: int, accum_steps: int = 1,
               strong: bool = False, **comm) -> float:
    """samples/s on N ranks ÷ (N × samples/s on 1 rank); strong scaling splits the 1-rank batch over N ranks."""
    per_rank = max(1, round(batch_per_rank / world_size)) if strong else batch_per_rank
    one = model.samples_per_sec(1, batch_per_rank, accum_steps)
    return model.samples_per_sec(world_size, per_rank, accum_steps, **comm) / (world_size * one)
