"""Collective bandwidth and latency, measured the way nccl-tests measures them, on any torch.distributed backend.

Three parts, each usable alone:
- size planning and the bus-bandwidth arithmetic (pure Python, no torch): `plan_sizes`, `bus_factor`, `fit_ring`;
- `worker(payload)`, which runs inside every rank (started by ddplab.launcher): for each op and size it checks the
  result against exactly known values, then times `iters` back-to-back calls;
- `run_bench(...)`, which starts the ranks, averages their times and sums their wrong elements into a BenchResult.

Conventions follow NVIDIA/nccl-tests (src/common.cu, doc/PERFORMANCE.md): S is the size of the whole array
(all_gather's output, reduce_scatter's input; every rank holds S/n of it), K/M/G are powers of 1024, GB/s are 1e9
bytes per second, and the time of a size is the mean over ranks of each rank's mean time per call.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddplab import faults
from ddplab.errors import DdplabError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
# Element sizes, so that sizes are planned without importing torch. gloo refuses int16/uint16/float8 outright.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int32": 4, "int64": 8}
# A float type holds every integer 0..N exactly up to N = 2**(stored mantissa bits + 1).
EXACT_INTS = {"float16": 2048, "bfloat16": 256, "float32": 2**24, "float64": 2**53}
# torch.distributed has no out-of-place all_reduce/broadcast and no in-place all_to_all_single.
ALWAYS_IN_PLACE = {"all_reduce": True, "broadcast": True, "all_to_all": False}
TARGET = "ddplab.perf.bench:worker"  # what every rank runs
COPY_PROBE_BYTES = {"cpu": 64 << 20, "cuda": 256 << 20}  # well past the last-level cache (CPU L3, GPU L2)
GPU_REFERENCE_NOTE = (
    "on GPUs busbw is bounded by the interconnect (NVLink, PCIe, the network), not by memory: "
    "compare it with the link's datasheet bandwidth or nccl-tests on the same GPUs"
)
PAGE, PAGE_OFFSET = 4096, 64  # where every CPU buffer that bench times starts: see _Collective._buffer


# ------------------------------------------------------------------------------------------------ sizes


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'64M' -> 67108864. K/M/G are powers of 1024, as in nccl-tests' -b/-e."""
    m = _SIZE.match(str(text))
    if not m:
        raise DdplabError(f"size {text!r} is not a byte count: write it like 1024, 8K, 64M or 1G")
    number, unit = float(m.group(1)), m.group(2).upper()
    return int(number * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit])


def format_size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def plan_sizes(min_bytes: int, max_bytes: int, factor: float, dtype: str, nproc: int) -> tuple[list[int], list[str]]:
    """Sizes min, min·f, min·f², ... ≤ max, each rounded down to whole elements per rank; returns (sizes, notes)."""
    if dtype not in DTYPE_BYTES:
        raise DdplabError(f"unknown --dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    if min_bytes > max_bytes:
        raise DdplabError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}: swap them")
    if not factor >= 2:  # also catches NaN
        raise DdplabError(f"--factor {factor:g} must be at least 2 (each size is the previous one times it)")
    # Every op runs at every size, and all_gather/reduce_scatter/all_to_all split S into n equal parts.
    granule = DTYPE_BYTES[dtype] * nproc
    if min_bytes < granule:
        raise DdplabError(
            f"--min-bytes {min_bytes} is too small for {nproc} ranks of {dtype}: each rank needs at "
            f"least one element, so use --min-bytes {granule} or more"
        )
    sizes, rounded, size = [], [], float(min_bytes)
    while size <= max_bytes:
        exact = int(size)
        kept = exact - exact % granule
        if kept != exact:
            rounded.append(f"{exact}→{kept}")
        if kept not in sizes:
            sizes.append(kept)
        size *= factor
    notes = []
    if rounded:
        shown = ", ".join(rounded[:4]) + (", ..." if len(rounded) > 4 else "")
        notes.append(f"sizes rounded down to a multiple of {granule} B ({dtype} × {nproc} ranks): {shown}")
    return sizes, notes


# ------------------------------------------------------------------------------------------------ bandwidth


def bus_factor(op: str, nranks: int) -> float:
    """busbw / algbw, from NVIDIA/nccl-tests doc/PERFORMANCE.md ("Summary"): the share of S that crosses each
    rank's link, so that busbw compares with the hardware's peak whatever the number of ranks."""
    n = nranks
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"no bus factor for {op!r}")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """algbw = S / t (doc/PERFORMANCE.md), in GB/s = 1e9 B/s as nccl-tests prints it."""
    return size_bytes / seconds / 1e9


@dataclass
class RingFit:
    """t = 2(n−1)/n · S/B + 2(n−1)·α fitted to all_reduce times: α per step, B per rank's link."""

    alpha_us: float
    bandwidth_gbps: float
    points: int
    rms_rel_error: float  # how well a ring explains the times: 0.05 = the model is off by 5 % on average


def fit_ring(nranks: int, sizes: list[int], seconds: list[float]) -> RingFit | None:
    """Least squares of t = a·S + b with a = 2(n−1)/(n·B), b = 2(n−1)·α.

    Residuals are weighted by 1/t², i.e. relative errors: sizes span many decades, and a plain fit would let 1 %
    of noise at 64 MiB (hundreds of µs) swamp the whole latency term. None when n < 2, fewer than two distinct
    sizes, or the times do not grow with size (no bandwidth to speak of)."""
    points = [(float(s), float(t)) for s, t in zip(sizes, seconds) if t > 0]
    if nranks < 2 or len({s for s, _ in points}) < 2:
        return None
    w = [1 / t**2 for _, t in points]
    sw = sum(w)
    sws = sum(wi * s for wi, (s, _) in zip(w, points))
    swss = sum(wi * s * s for wi, (s, _) in zip(w, points))
    swt = sum(wi * t for wi, (_, t) in zip(w, points))
    swst = sum(wi * s * t for wi, (s, t) in zip(w, points))
    det = swss * sw - sws * sws
    if det <= 0:
        return None
    a = (swst * sw - sws * swt) / det
    b = (swss * swt - sws * swst) / det
    if a <= 0:
        return None
    steps = 2 * (nranks - 1)
    rms = math.sqrt(sum(((a * s + b) / t - 1) ** 2 for s, t in points) / len(points))
    return RingFit(
        alpha_us=b / steps * 1e6, bandwidth_gbps=steps / nranks / a / 1e9, points=len(points), rms_rel_error=rms
    )


# ------------------------------------------------------------------------------------------------ results


@dataclass
class Row:
    op: str
    size: int  # bytes of the whole array S
    count: int  # elements of S
    dtype: str
    in_place: bool
    time_us: float  # mean over ranks of the mean time per call
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int  # mismatched elements, summed over ranks


@dataclass
class Skip:
    op: str
    reason: str


@dataclass
class BenchResult:
    status: str  # PASS, or FAIL when any element was wrong
    backend: str
    device: str
    world_size: int
    dtype: str
    iters: int
    warmup: int
    in_place: bool
    rows: list[Row] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wrong: int = 0
    avg_busbw: float | None = None  # GB/s, mean over every row, as nccl-tests' "Avg bus bandwidth"
    ring_fit: RingFit | None = None
    copy_gbps: float | None = None  # the hardware reference: one rank copying memory
    copy_kind: str = ""
    peak_busbw: float | None = None
    peak_fraction: float | None = None  # peak_busbw / copy_gbps
    seconds: float = 0.0


def summarize(cfg: dict, per_rank: list[dict], seconds: float = 0.0) -> BenchResult:
    """Combine every rank's worker() output: times averaged over ranks, wrong elements summed."""
    first, n = per_rank[0], len(per_rank)
    result = BenchResult(
        status="PASS",
        backend=first["backend"],
        device=first["device"],
        world_size=n,
        dtype=cfg["dtype"],
        iters=cfg["iters"],
        warmup=cfg["warmup"],
        in_place=cfg["in_place"],
        notes=list(cfg.get("notes", [])),
        copy_gbps=first["copy_gbps"],
        copy_kind=first["copy_kind"],
        seconds=seconds,
    )
    for op in cfg["ops"]:
        if "skipped" in first["ops"][op]:
            result.skipped.append(Skip(op, first["ops"][op]["skipped"]))
            continue
        in_place = ALWAYS_IN_PLACE.get(op, cfg["in_place"])
        for i, size in enumerate(cfg["sizes"]):
            t = sum(r["ops"][op]["rows"][i][1] for r in per_rank) / n
            wrong = sum(r["ops"][op]["rows"][i][2] for r in per_rank)
            alg = algbw_gbps(size, t)
            result.rows.append(
                Row(
                    op,
                    size,
                    size // DTYPE_BYTES[cfg["dtype"]],
                    cfg["dtype"],
                    in_place,
                    t * 1e6,
                    alg,
                    alg * bus_factor(op, n),
                    wrong,
                )
            )
    if first["device"] == "cuda":
        result.notes.append(GPU_REFERENCE_NOTE)
    if cfg["in_place"] and "all_to_all" in cfg["ops"]:
        result.notes.append("all_to_all has no in-place form in torch.distributed: measured out of place")
    result.wrong = sum(r.wrong for r in result.rows)
    result.status = "FAIL" if result.wrong else "PASS"
    if result.rows:
        result.avg_busbw = sum(r.busbw for r in result.rows) / len(result.rows)
        result.peak_busbw = max(r.busbw for r in result.rows)
        if result.copy_gbps:
            result.peak_fraction = result.peak_busbw / result.copy_gbps
    ar = [r for r in result.rows if r.op == "all_reduce"]
    result.ring_fit = fit_ring(n, [r.size for r in ar], [r.time_us / 1e6 for r in ar])
    return result


def start_ranks(nproc: int, master_port: int | None = None):
    """Start the agent for TARGET (launcher.local.start). Its workers are new interpreters, as torchrun starts a script's:
    forked ones ran gloo's 1-4 MiB collectives 4-6 % slower (docs/bench.md), and bench measures exactly that."""
    from ddplab.launcher.local import start

    return start(TARGET, nproc=nproc, master_port=master_port, fresh_workers=True)


def run_bench(
    *,
    ops: list[str],
    sizes: list[int],
    dtype: str,
    nproc: int,
    iters: int = 20,
    warmup: int = 5,
    in_place: bool = False,
    backend: str | None = None,
    device: str | None = None,
    timeout: float = 120.0,
    master_port: int | None = None,
    notes: list[str] | None = None,
    on_event: Callable[[int, dict], None] | None = None,
    pending=None,
    warm_up_ends: bool = True,
):
    """Start `nproc` ranks running worker(); returns (RunResult, BenchResult or None when the run did not finish).
    `pending`: an agent the caller already started with start_ranks() (it imports torch meanwhile).
    warm_up_ends=False: no warm-up at the largest and smallest sizes first (benchmarks/bench_warmup.py compares)."""
    cfg = {
        "ops": list(ops),
        "sizes": list(sizes),
        "dtype": dtype,
        "iters": iters,
        "warmup": warmup,
        "warm_up_ends": warm_up_ends,
        "in_place": in_place,
        "backend": backend,
        "device": device,
        # The launcher declares a hang after `timeout` quiet seconds; torch's own timeout must come later,
        # or a rank stuck in a collective would end as a timeout error instead of a named hang.
        "pg_timeout": timeout + 60,
        "notes": list(notes or []),
    }
    if pending is None:
        pending = start_ranks(nproc, master_port)
    run = pending.run(cfg, stall_timeout=timeout, on_event=on_event)
    if not run.ok:
        return run, None
    return run, summarize(cfg, run.results(), run.seconds)


def per_rank_bytes(ops: list[str], largest: int) -> int:
    return largest * (3 if {"all_to_all", "all_gather"} & set(ops) else 2) + largest  # + index temporaries


def gpu_memory_problem(largest: int, per_rank: int, total: int) -> str | None:
    """The one-line refusal when a rank's buffers at the largest size do not fit its GPU, else None. A tenth of the
    GPU is left for the CUDA context, NCCL's buffers and the allocator's rounding."""
    usable = 0.9 * total
    if per_rank <= usable:
        return None
    fits = 1 << 10
    while 2 * fits * per_rank / largest <= usable:  # the largest power of two whose buffers fit
        fits *= 2
    return (
        f"--max-bytes {format_size(largest)} needs about {per_rank / 2**30:.1f} GiB on each GPU, but the "
        f"smallest has {total / 2**30:.1f} GiB: use --max-bytes {format_size(fits)} or less"
    )


# ------------------------------------------------------------------------------------------------ worker side


def worker(cfg: dict) -> dict:
    """Runs in every rank: per op a support probe, then per size check + timing; at the end the copy probe (rank 0)."""
    import torch

    from ddplab import dist as dd
    from ddplab.launcher.progress import mark

    with dd.session(backend=cfg["backend"], device=cfg["device"], timeout=cfg["pg_timeout"]) as ctx:
        dtype = getattr(torch, cfg["dtype"])
        out: dict[str, Any] = {
            "backend": ctx.backend,
            "device": ctx.device.type,
            "ops": {},
            "copy_gbps": None,
            "copy_kind": "",
        }
        for op in cfg["ops"]:
            mark(f"bench.{op}.probe")
            reason = _unsupported(op, ctx, dtype)
            if reason:
                out["ops"][op] = {"skipped": reason}
                continue
            if cfg["warmup"] and cfg.get("warm_up_ends", True):
                mark(f"bench.{op}.warmup", op=op, sizes=[max(cfg["sizes"]), min(cfg["sizes"])])
                _warm_up(op, ctx, dtype, cfg)
            rows = []
            for size in cfg["sizes"]:
                mark(f"bench.{op}.{size}", op=op, size=size)
                elements = size // torch.tensor([], dtype=dtype).element_size()
                bench = _Collective(op, ctx, dtype, elements, cfg["in_place"])
                wrong = bench.check(faults.feed(f"bench.{op}.{size}"))
                seconds = bench.time(cfg["warmup"], cfg["iters"])
                rows.append([size, seconds, wrong])
                del bench  # free this size's buffers before the next, larger one
            out["ops"][op] = {"rows": rows}
        # The hardware reference comes last: nothing a raw timing loop would not do runs before the timings (rank
        # 0's copies of a 64 MiB buffer did, and may have slowed its first collectives). One rank alone, so that
        # the copy does not share memory bandwidth with the others.
        # On CPU gloo moves every byte through host memory, so one process's memory copy is the hardware's bound.
        # On GPUs the bound is the interconnect (NVLink, PCIe, the network), a tenth or less of a device-to-device
        # copy in HBM: a fraction of that copy would read as a failing link. No reference is measured there.
        if ctx.is_main and ctx.device.type != "cuda":
            mark("bench.copy")
            out["copy_gbps"], out["copy_kind"] = copy_bandwidth(ctx.device)
        mark("bench.end")
        dd.barrier()
    return out


def _warm_up(op: str, ctx, dtype, cfg: dict) -> None:
    """`warmup` calls at the largest size, then at the smallest, before the op's first timed size: nccl-tests'
    order (src/common.cu, TimeTest: "Warm-up for large size", "Warm-up for small size"). The per-size warm-up alone
    left the first small sizes of an op slower than larger ones (docs/bench.md): what an op sets up on first use
    (gloo's pair buffers, NCCL's channels, the allocator's pages) and a processor that was idle take longer than a
    few calls of 1 KiB."""
    for size in (max(cfg["sizes"]), min(cfg["sizes"])):
        bench = _Collective(op, ctx, dtype, size // dtype.itemsize, cfg["in_place"])
        for _ in range(cfg["warmup"]):
            bench.run()
        _sync(ctx.device)
        del bench


def copy_bandwidth(device, nbytes: int | None = None, repeats: int = 5) -> tuple[float, str]:
    """Best of `repeats` copies of a buffer past the caches, in GB/s of bytes copied (each read once, written once)."""
    import torch

    nbytes = nbytes or COPY_PROBE_BYTES.get(device.type, 64 << 20)
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: page faults are not bandwidth
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    threads = torch.get_num_threads()
    kind = (
        f"device-to-device copy on {device}"
        if device.type == "cuda"
        else f"host's memory copy (one process, {threads} thread{'s' if threads > 1 else ''})"
    )
    return nbytes / best / 1e9, kind


def _sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _unsupported(op: str, ctx, dtype) -> str | None:
    """Why this backend cannot run `op` on `dtype` (None when it can). Backends refuse before any data moves, so
    trying a tiny call is the one reliable test across torch versions; the ranks then agree on the verdict."""
    import torch
    import torch.distributed as dist

    reason = None
    try:
        _Collective(op, ctx, dtype, ctx.world_size, in_place=False).run()
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        reason = f"{ctx.backend} cannot run {op} on {dtype} {ctx.device.type} tensors ({type(e).__name__}: {first})"
    ok = torch.tensor([0 if reason else 1], dtype=torch.int32, device=ctx.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if reason is None and not ok.item():
        reason = f"{ctx.backend} cannot run {op} on {dtype} on some rank (see that rank's output)"
    return reason


class _Collective:
    """One op at one size: buffers, the exact expected output, and the call itself.

    Check data are small integers, exact in every dtype (bfloat16 holds integers to 256 exactly): element k of
    rank q's array is (k + 7q) mod m. Reductions use m = 3 so that sums stay small; the others m = 101 so that a
    block from the wrong rank or offset shows. Separate output buffers start at expected + 1, so an element the collective
    never wrote counts as wrong (in-place ops write over their own input instead).
    """

    def __init__(self, op: str, ctx, dtype, count: int, in_place: bool):
        self.op, self.ctx, self.dtype, self.count = op, ctx, dtype, count
        self.n, self.rank, self.device = ctx.world_size, ctx.rank, ctx.device
        self.in_place = ALWAYS_IN_PLACE.get(op, in_place)
        self.chunk = count // self.n
        reducing = op in ("all_reduce", "reduce_scatter")
        limit = EXACT_INTS.get(str(dtype).removeprefix("torch."))
        self.m = (3 if limit is None or 2 * self.n <= limit else 2) if reducing else 101
        c, r = self.chunk, self.rank
        if op == "all_reduce":
            self.input = self.output = self._buffer(count, self._pattern(r, 0, count))
        elif op == "broadcast":  # root 0; every other rank starts from data that differs everywhere
            self.input = self.output = self._buffer(count, self._pattern(0 if r == 0 else 1, 0, count))
        elif op == "all_gather":
            self.output = self._buffer(count)
            self.input = self.output[r * c : (r + 1) * c] if self.in_place else self._buffer(c, self._pattern(r, 0, c))
        elif op == "reduce_scatter":
            self.input = self._buffer(count, self._pattern(r, 0, count))
            self.output = self.input[r * c : (r + 1) * c] if self.in_place else self._buffer(c)
        elif op == "all_to_all":
            self.input = self._buffer(count, self._pattern(r, 0, count))
            self.output = self._buffer(count)
        else:
            raise ValueError(f"unknown op {op!r}")

    def _buffer(self, count: int, data=None):
        """A new buffer of `count` elements (holding `data` when given) that starts PAGE_OFFSET bytes into a page.

        On CPU, gloo's busbw at 1-16 MiB moves by 10-30 % with nothing but the buffer's offset within its 4 KiB
        page (64 or 128 B: slow; 512 B and more: fast; docs/bench.md), and where the allocator puts a buffer
        depends on what was allocated and freed before it. A fixed offset makes the figures independent of that
        history; 64 B is where a large tensor allocated fresh starts (glibc maps it, torch aligns to 64 B), so
        ddplab measures what a plain `torch.ones(n)` in a new process gets. GPU buffers stay where torch's caching
        allocator puts them."""
        import torch

        if self.device.type != "cpu":
            buffer = torch.empty(count, dtype=self.dtype, device=self.device)
        else:
            size = self.dtype.itemsize
            block = torch.empty(count + PAGE // size, dtype=self.dtype)
            skip = (PAGE_OFFSET - block.data_ptr()) % PAGE // size  # torch aligns to 64 B: a whole element count
            buffer = block[skip : skip + count]
        if data is not None:
            buffer.copy_(data)
        return buffer

    def _pattern(self, q: int, start: int, length: int):
        import torch

        index = torch.arange(
            start, start + length, device=self.device, dtype=torch.int32 if start + length < 2**31 - 8 else torch.int64
        )
        return ((index + 7 * q) % self.m).to(self.dtype)

    def _summed(self, start: int, length: int):
        """Σ over ranks q of _pattern(q, start, length): periodic in k with period m, so one table lookup."""
        import torch

        table = torch.tensor(
            [sum((j + 7 * q) % self.m for q in range(self.n)) for j in range(self.m)],
            dtype=torch.int64,
            device=self.device,
        )
        index = torch.arange(start, start + length, device=self.device) % self.m
        return table[index].to(self.dtype)  # integer sums wrap exactly as the backend's integer sums do

    def expected(self):
        import torch

        c, r = self.chunk, self.rank
        if self.op == "all_reduce":
            return self._summed(0, self.count)
        if self.op == "broadcast":
            return self._pattern(0, 0, self.count)
        if self.op == "all_gather":
            return torch.cat([self._pattern(q, 0, c) for q in range(self.n)])
        if self.op == "reduce_scatter":
            return self._summed(r * c, c)
        return torch.cat([self._pattern(q, r * c, c) for q in range(self.n)])  # all_to_all: block r of each q

    def run(self) -> None:
        import torch.distributed as dist

        if self.op == "all_reduce":
            dist.all_reduce(self.output)
        elif self.op == "broadcast":
            dist.broadcast(self.output, src=0)
        elif self.op == "all_gather":
            _all_gather(self.output, self.input)
        elif self.op == "reduce_scatter":
            _reduce_scatter(self.output, self.input)
        else:
            dist.all_to_all_single(self.output, self.input)

    def check(self, feed: Callable = lambda tensor: tensor) -> int:
        """Run once on the check data; the number of elements of this rank's output that differ from expected.
        This rank's input passes through `feed` (a DDPLAB_FAULT=corrupt fault changes one element there)."""
        expected = self.expected()
        if self.op in ("all_gather", "all_to_all") or (self.op == "reduce_scatter" and not self.in_place):
            self.output.copy_(expected)
            self.output += 1
            if self.op == "all_gather" and self.in_place:  # the input is a block of the output: set it back
                self.input.copy_(self._pattern(self.rank, 0, self.chunk))
        feed(self.input)
        self.run()
        _sync(self.device)
        return int((self.output != expected).sum())

    def time(self, warmup: int, iters: int) -> float:
        """Mean seconds per call over `iters` back-to-back calls, started together after `warmup` calls."""
        from ddplab import dist as dd

        for _ in range(warmup):
            self.run()
        _sync(self.device)
        dd.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            self.run()
        _sync(self.device)
        return (time.perf_counter() - t0) / iters


def _all_gather(output, input) -> None:
    import torch.distributed as dist

    # torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns); torch 2.6 has only the old.
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(output, input)


def _reduce_scatter(output, input) -> None:
    import torch.distributed as dist

    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(output, input)
