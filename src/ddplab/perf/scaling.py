"""A DDP step-time model: fit it on a few runs, predict world sizes and interconnects you have not tried.

One optimizer step of DDP on N ranks, per-rank micro-batch b, k micro-steps of gradient accumulation
(gradients are all-reduced on the last micro-step only):

    step(N, b, k) = (k · (c0 + c · b) + o)           compute: fixed cost per micro-step, cost per sample,
                    · slowdown(N)                    and o per optimizer step (optimizer.step, zero_grad);
                                                     slower when N ranks share a machine's cores (measured)
                  + sync                             DDP's per-step gradient sync cost even on 1 rank (measured)
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
    Interconnect(
        "NVLink 4 (H100/H200 SXM)",
        450.0,
        "NVIDIA H100 datasheet: NVLink 900 GB/s per GPU, both directions "
        "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)",
        "2026-12-02",
    ),
    Interconnect(
        "NVLink 3 (A100 SXM)",
        300.0,
        "NVIDIA A100 datasheet: NVLink 600 GB/s per GPU, both directions "
        "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)",
        "2026-12-02",
    ),
    Interconnect(
        "PCIe 5.0 x16",
        63.0,
        "PCI-SIG PCIe 5.0 spec: 32 GT/s × 16 lanes, 128b/130b coding (https://pcisig.com/specifications)",
        "2026-12-02",
    ),
    Interconnect(
        "InfiniBand NDR 400 Gb/s",
        50.0,
        "NVIDIA ConnectX-7 / IBTA NDR: 400 Gb/s per port "
        "(https://www.nvidia.com/en-us/networking/infiniband-adapters/)",
        "2026-12-02",
    ),
    Interconnect(
        "PCIe 4.0 x16",
        31.5,
        "PCI-SIG PCIe 4.0 spec: 16 GT/s × 16 lanes, 128b/130b coding (https://pcisig.com/specifications)",
        "2026-12-02",
    ),
    Interconnect(
        "InfiniBand HDR 200 Gb/s",
        25.0,
        "NVIDIA ConnectX-6 / IBTA HDR: 200 Gb/s per port "
        "(https://www.nvidia.com/en-us/networking/infiniband-adapters/)",
        "2026-12-02",
    ),
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
    compute_fixed_s: float  # c0: per micro-step (kernel launches, Python)
    compute_per_sample_s: float  # c
    grad_bytes: float
    latency_s: float  # α: per ring step of an all_reduce
    bus_bytes_per_s: float  # B
    overlap: float  # fraction of comm DDP hid behind backward, 0..1
    bucket_cap_mb: float | None = None
    step_fixed_s: float = 0.0  # o: per optimizer step whatever the accumulation (optimizer.step, zero_grad)
    # Waiting after backward on ONE rank: DDP's hook hand-off and bucket copy-back, or the scheduler on a busy
    # machine. Paid once per optimizer step whatever N, so it is not part of comm(N).
    sync_s: float = 0.0
    # Compute on N ranks ÷ compute on 1, measured: ranks that share cores or memory bandwidth (CPU processes, or
    # GPUs fed by one busy host) compute slower. World sizes beyond the largest measured take its factor.
    slowdown: dict[int, float] = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # parameter -> where its value came from

    def slowdown_at(self, world_size: int) -> float:
        known = [n for n in self.slowdown if n <= world_size]
        return self.slowdown[max(known)] if known else 1.0

    def compute_s(self, batch_per_rank: int, accum_steps: int = 1, world_size: int = 1) -> float:
        per_micro_step = self.compute_fixed_s + self.compute_per_sample_s * batch_per_rank
        return (accum_steps * per_micro_step + self.step_fixed_s) * self.slowdown_at(world_size)

    def comm_s(
        self,
        world_size: int,
        bus_bytes_per_s: float | None = None,
        grad_bytes: float | None = None,
        bucket_cap_mb: float | None = None,
    ) -> float:
        nbytes = self.grad_bytes if grad_bytes is None else grad_bytes
        cap = self.bucket_cap_mb if bucket_cap_mb is None else bucket_cap_mb
        return allreduce_s(
            world_size, nbytes, self.latency_s, bus_bytes_per_s or self.bus_bytes_per_s, buckets(nbytes, cap)
        )

    def exposed_comm_s(self, world_size: int, **comm) -> float:
        return (1 - self.overlap) * self.comm_s(world_size, **comm)

    def step_s(self, world_size: int, batch_per_rank: int, accum_steps: int = 1, **comm) -> float:
        return (
            self.compute_s(batch_per_rank, accum_steps, world_size)
            + self.sync_s
            + self.exposed_comm_s(world_size, **comm)
        )

    def samples_per_sec(self, world_size: int, batch_per_rank: int, accum_steps: int = 1, **comm) -> float:
        return world_size * batch_per_rank * accum_steps / self.step_s(world_size, batch_per_rank, accum_steps, **comm)

    def to_dict(self) -> dict:
        data = asdict(self)
        if math.isinf(self.bus_bytes_per_s):  # JSON has no infinity: no bandwidth term measured
            data["bus_bytes_per_s"] = None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ScalingModel:
        try:
            data = {**data, "slowdown": {int(n): float(f) for n, f in data.get("slowdown", {}).items()}}
            if data.get("bus_bytes_per_s") is None:
                data["bus_bytes_per_s"] = math.inf
            return cls(**data)
        except (TypeError, ValueError, AttributeError) as e:
            raise DdplabError(
                f"the scaling model in the file is not one ddplab wrote ({e}): re-run `ddplab scale --json`"
            ) from None


@dataclass(frozen=True)
class LinkFit:
    latency_s: float
    bus_bytes_per_s: float
    source: str


# ----------------------------------------------------------------------------------------------- fitting


def fit(runs: list[Run], link: LinkFit | None = None) -> ScalingModel:
    """Fit the model's parameters on measured runs (see the module docstring for the equations).

    c0, c, o:  1-rank compute (no communication there) on k, k·b and 1, through the first 1-rank run exactly
               and least squares on the others: c0 needs two batch sizes, o two accumulation settings (each is
               folded into the other terms when not separable);
    sync:      the 1-rank runs' wait after backward (step − compute), when they measured compute apart.
    slowdown:  per world size, measured compute ÷ the 1-rank line, when the runs measured compute apart.
    α, B:      `link` if given (`ddplab bench`), else least squares of all_reduce time on the two ring terms, from
               measured comm time, or else from exposed comm (step − compute) with overlap taken as 0. Telling
               latency from bandwidth needs two world sizes above 1.
    overlap:   1 − exposed / total comm over the N > 1 runs, when total comm is known (measured or from `link`).
    """
    if not runs:
        raise DdplabError("no runs to fit the scaling model on: run at least world size 1 and one larger size")
    model = ScalingModel(0.0, 0.0, max(r.grad_bytes for r in runs), 0.0, math.inf, 0.0, _common_cap(runs))
    prov = model.provenance
    model.compute_fixed_s, model.compute_per_sample_s, model.step_fixed_s, prov["compute"] = _fit_compute(runs)
    model.sync_s, prov["sync"] = _fit_sync(runs)
    multi = [r for r in runs if r.world_size > 1]
    model.slowdown, prov["slowdown"] = _fit_slowdown(model, multi)
    exposed = [replace(r, comm_s=max(0.0, r.step_s - _compute_of(model, r) - model.sync_s)) for r in multi]
    if link is not None:
        model.latency_s, model.bus_bytes_per_s, prov["link"] = link.latency_s, link.bus_bytes_per_s, link.source
        model.overlap, prov["overlap"] = _fit_overlap(model, exposed)
    elif any(r.comm_s is not None for r in multi):
        measured = [r for r in multi if r.comm_s is not None]
        model.latency_s, model.bus_bytes_per_s, prov["link"] = _fit_link(measured, "measured all_reduce time")
        model.overlap, prov["overlap"] = _fit_overlap(model, exposed)
    elif multi:
        model.latency_s, model.bus_bytes_per_s, prov["link"] = _fit_link(exposed, "exposed comm (step − compute)")
        prov["overlap"] = (
            "0 by construction: only exposed comm was measured, so α and B describe what DDP did "
            "not hide (give --bench for the link's own α and B)"
        )
    else:
        prov["link"] = "not measured: every run had one rank"
    return model


def _compute_of(model: ScalingModel | None, run: Run) -> float:
    """Measured compute, else the model's (else, for a 1-rank run, its whole step: nothing else happens there)."""
    if run.compute_s is not None:
        return run.compute_s
    if model is None:
        return run.step_s
    return model.compute_s(run.batch_per_rank, run.accum_steps, run.world_size)


def _fit_sync(runs: list[Run]) -> tuple[float, str]:
    waits = [r.step_s - r.compute_s for r in runs if r.world_size == 1 and r.compute_s is not None]
    if not waits:
        return 0.0, "not measured (1-rank runs did not time compute apart): taken as 0"
    return max(0.0, sum(waits) / len(waits)), f"mean wait after backward of {len(waits)} 1-rank run(s)"


def _common_cap(runs: list[Run]) -> float | None:
    caps = {r.bucket_cap_mb for r in runs}
    return caps.pop() if len(caps) == 1 else None


def _fit_compute(runs: list[Run]) -> tuple[float, float, float, str]:
    """c0, c, o from the 1-rank runs: compute per step = k·c0 + k·b·c + o, keeping the terms the runs can tell
    apart (a single batch size cannot split c0 from c; a single accumulation setting cannot split o from c0).

    The line passes exactly through the first 1-rank run, the baseline every speedup is measured against, and
    the other 1-rank runs split its cost into the terms by least squares under that constraint. Non-negative
    terms can always do that (c alone can), so noise in the probes, which may ask for a negative c0 or o, only
    moves cost between the terms instead of leaving the baseline unexplained."""
    ones = [r for r in runs if r.world_size == 1]
    if not ones:
        raise DdplabError("cannot fit compute time: include world size 1 in --nproc (it has no communication)")
    points = [(r.accum_steps, r.batch_per_rank, _compute_of(None, r)) for r in ones]
    sizes = sorted({b for _, b, _ in points})
    accums = sorted({k for k, _, _ in points})
    where = f"1-rank runs at batch size(s) {sizes}, accumulation {accums}"
    base = points[0][:2]
    at_base = [y for k, b, y in points if (k, b) == base]
    anchor = (*base, sum(at_base) / len(at_base))
    others = [p for p in points if p[:2] != base]
    two_sizes, two_accums = len(sizes) >= 2, len(accums) >= 2
    candidates = [  # (features of (k, b), the terms they fit, whether the runs can tell them apart, the caveat)
        (lambda k, b: [k, k * b, 1.0], "c0 c o", two_sizes and two_accums, ""),
        (lambda k, b: [k * b, 1.0], "c o", two_accums, "fixed cost per micro-step not separable (0)"),
        (lambda k, b: [k, k * b], "c0 c", two_sizes, "per-step cost not separable (counted per micro-step)"),
        (lambda k, b: [k * b], "c", True, "fixed costs not separable (taken as 0)"),
    ]
    for features, names, separable, caveat in candidates:
        if not separable:
            continue
        names = names.split()
        solved = _solve_through(features, anchor, others, names.index("c"))
        if solved and min(solved) >= 0 and solved[names.index("c")] > 0:
            fitted = dict(zip(names, solved))
            return (
                fitted.get("c0", 0.0),
                fitted["c"],
                fitted.get("o", 0.0),
                f"{where}: {', '.join(names)} fitted" + (f"; {caveat}" if caveat else ""),
            )
    kb = [(k * b, y) for k, b, y in points]  # a baseline without compute time (0 ms): nothing to pass through
    return 0.0, sum(x * y for x, y in kb) / sum(x * x for x, _ in kb), 0.0, f"{where}: cost per sample only"


def _solve_through(
    features, anchor: tuple[int, int, float], others: list[tuple[int, int, float]], pivot: int
) -> list[float] | None:
    """Least squares of `others` on features(k, b) subject to matching `anchor` exactly: the anchor's equation
    gives the `pivot` term from the rest, which are then fitted on the other points. None when not determined."""
    k0, b0, y0 = anchor
    a0 = features(k0, b0)
    rest = [j for j in range(len(a0)) if j != pivot]
    solved = {}
    if rest:
        rows, ys = [], []
        for k, b, y in others:
            f = features(k, b)
            rows.append([f[j] - f[pivot] * a0[j] / a0[pivot] for j in rest])
            ys.append(y - f[pivot] * y0 / a0[pivot])
        fitted = _solve(rows, ys) if rows else None
        if fitted is None:
            return None
        solved = dict(zip(rest, fitted))
    solved[pivot] = (y0 - sum(a0[j] * x for j, x in solved.items())) / a0[pivot]
    return [solved[j] for j in range(len(a0))]


def _solve(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    """Least squares by the normal equations (a handful of unknowns); None when they are singular."""
    m = len(rows[0])
    a = [
        [sum(r[i] * r[j] for r in rows) for j in range(m)] + [sum(r[i] * y for r, y in zip(rows, ys))] for i in range(m)
    ]
    for col in range(m):
        pivot = max(range(col, m), key=lambda i: abs(a[i][col]))
        if abs(a[pivot][col]) < 1e-12 * max(1.0, max(abs(v) for v in a[pivot][:m])):
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for i in range(m):
            if i != col:
                f = a[i][col] / a[col][col]
                a[i] = [v - f * w for v, w in zip(a[i], a[col])]
    return [a[i][m] / a[i][i] for i in range(m)]


def _fit_slowdown(model: ScalingModel, multi: list[Run]) -> tuple[dict[int, float], str]:
    factors = {}
    for n in sorted({r.world_size for r in multi}):
        pairs = [
            (r.compute_s, model.compute_s(r.batch_per_rank, r.accum_steps))
            for r in multi
            if r.world_size == n and r.compute_s is not None
        ]
        if pairs:
            factors[n] = sum(m * p for m, p in pairs) / sum(p * p for _, p in pairs)
    if not factors:
        return {}, "not measured (compute on N ranks taken equal to 1 rank)"
    return factors, "measured compute on N ranks ÷ the 1-rank line, least squares per world size"


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
    # One configuration gives the sum, not its split. Counting it all as bandwidth is the optimistic choice for
    # larger N (that term saturates at 2·bytes/B, latency keeps growing), so the provenance says so.
    inv_bus = sum(t * b for _, b, t in rows) / sum(b * b for _, b, _ in rows)
    return (
        0.0,
        (1 / inv_bus if inv_bus > 0 else math.inf),
        (
            f"{what} at one world size: latency and bandwidth not separable, all of it counted as bandwidth, which "
            "flatters larger world sizes (run a third world size, or give --bench, to split them)"
        ),
    )


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


def _fit_overlap(model: ScalingModel, exposed: list[Run]) -> tuple[float, str]:
    pairs = [
        (r.comm_s, model.comm_s(r.world_size, grad_bytes=r.grad_bytes, bucket_cap_mb=r.bucket_cap_mb)) for r in exposed
    ]
    denom = sum(t * t for _, t in pairs)
    if denom == 0:
        return 0.0, "not measurable: no communication in these runs"
    hidden = 1 - sum(e * t for e, t in pairs) / denom
    return min(1.0, max(0.0, hidden)), f"1 − exposed/total comm over {len(pairs)} run(s) with N > 1"


def link_from_bench(data: dict, source: str = "ddplab bench") -> LinkFit:
    """α and B from `ddplab bench --json` output: its ring fit of all_reduce times over message sizes."""
    from ddplab.perf.bench import fit_ring

    try:
        ring = data.get("ring_fit")
        if not ring:  # an older file, or one edited by hand: fit its all_reduce rows the way bench does
            rows = [r for r in data["rows"] if r["op"] == "all_reduce"]
            fitted = fit_ring(int(data["world_size"]), [r["size"] for r in rows], [r["time_us"] / 1e6 for r in rows])
            ring = fitted and {"alpha_us": fitted.alpha_us, "bandwidth_gbps": fitted.bandwidth_gbps}
        if not ring:
            raise DdplabError(
                f"{source} has no all_reduce timings at two or more message sizes on 2+ ranks: run "
                "`ddplab bench all_reduce --nproc 2 --json` (its default sizes will do)"
            )
        return LinkFit(
            float(ring["alpha_us"]) / 1e6,
            float(ring["bandwidth_gbps"]) * 1e9,
            f"{source}: ring fit of all_reduce on {data.get('world_size', '?')} ranks",
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DdplabError(
            f"{source} is not the JSON `ddplab bench --json` writes ({type(e).__name__}: {e}): "
            "re-run ddplab bench with --json"
        ) from None


def efficiency(
    model: ScalingModel, world_size: int, batch_per_rank: int, accum_steps: int = 1, strong: bool = False, **comm
) -> float:
    """samples/s on N ranks ÷ (N × samples/s on 1 rank); strong scaling splits the 1-rank batch over N ranks."""
    per_rank = max(1, round(batch_per_rank / world_size)) if strong else batch_per_rank
    one = model.samples_per_sec(1, batch_per_rank, accum_steps)
    return model.samples_per_sec(world_size, per_rank, accum_steps, **comm) / (world_size * one)
