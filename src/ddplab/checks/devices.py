"""devices: every device computes a matmul right (against a float64 CPU reference) and at what speed;
on GPUs also an allocation of a chosen share of memory and the peer-access matrix."""

from __future__ import annotations

import time

import torch

from ddplab.checks import FAIL, PASS, StageResult
from ddplab.launcher.progress import mark

# Relative error allowed against the float64 reference: a few units in the last place of each dtype's mantissa,
# times sqrt(K) for the accumulation over K products. TF32 (on by default for cuDNN, off for matmul) would need 1e-3.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
CHECK_N = 256  # small enough for a float64 CPU reference in milliseconds
SPEED_N = {"cpu": 512, "cuda": 8192}


def _matmul_error(device: torch.device, dtype: torch.dtype) -> float:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(CHECK_N, CHECK_N, generator=gen, dtype=torch.float64)
    b = torch.randn(CHECK_N, CHECK_N, generator=gen, dtype=torch.float64)
    want = a @ b
    got = (a.to(device, dtype) @ b.to(device, dtype)).double().cpu()
    return ((got - want).norm() / want.norm()).item()


def _flops_per_s(device: torch.device, dtype: torch.dtype) -> float:
    n = SPEED_N[device.type]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a @ b  # warm-up: kernel selection, allocation
    sync()
    iters, start = 0, time.perf_counter()
    while iters < 3 or time.perf_counter() - start < 0.05:  # ~50 ms of work is a steady figure without a cost
        a @ b
        iters += 1
    sync()
    return 2 * n**3 * iters / (time.perf_counter() - start)


def on_rank(ctx, opts: dict) -> dict:
    dev = ctx.device
    dtypes = [torch.float32, torch.bfloat16] + ([torch.float16] if dev.type == "cuda" else [])
    out = {"rank": ctx.rank, "device": str(dev), "name": _device_name(dev), "matmul": {}}
    for dtype in dtypes:
        mark(f"devices.matmul.{str(dtype)[6:]}")
        err = _matmul_error(dev, dtype)
        out["matmul"][str(dtype)[6:]] = {"rel_error": err, "tolerance": TOLERANCE[dtype], "ok": err <= TOLERANCE[dtype]}
    speed_dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    mark("devices.speed")
    out["flops_per_s"], out["speed_dtype"] = _flops_per_s(dev, speed_dtype), str(speed_dtype)[6:]
    if dev.type == "cuda":
        mark("devices.memory")
        out["memory"] = _allocate(dev, opts.get("mem_fraction", 0.5))
        if ctx.local_rank == 0 and torch.cuda.device_count() > 1:
            n = torch.cuda.device_count()
            out["peer_access"] = [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(n)] for i in range(n)]
    return out


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return "cpu process"


def _allocate(dev: torch.device, fraction: float) -> dict:
    """Allocate `fraction` of the free memory, write and read it back: catches bad memory and other tenants."""
    free, total = torch.cuda.mem_get_info(dev)
    nbytes = int(free * fraction)
    block = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    block.fill_(0xA5)
    ok = bool(block.eq_(0xA5).all().item())  # in place: `block == x` would need a second block as large
    del block
    torch.cuda.empty_cache()
    return {"bytes": nbytes, "free": free, "total": total, "ok": ok}


def summarize(per_rank: list[dict], seconds: float) -> StageResult:
    bad = [(r["rank"], dt, m["rel_error"]) for r in per_rank for dt, m in r["matmul"].items() if not m["ok"]]
    bad_mem = [r["rank"] for r in per_rank if not r.get("memory", {"ok": True})["ok"]]
    speeds = [r["flops_per_s"] for r in per_rank]
    unit, scale = ("TFLOP/s", 1e12) if per_rank[0]["device"].startswith("cuda") else ("GFLOP/s", 1e9)
    figure = (f"matmul right on {len(per_rank) - len({b[0] for b in bad})}/{len(per_rank)} ranks; "
              f"{min(speeds) / scale:.1f}–{max(speeds) / scale:.1f} {unit} ({per_rank[0]['speed_dtype']}) per rank")
    peers = next((r["peer_access"] for r in per_rank if "peer_access" in r), None)
    details = {"ranks": per_rank}
    if bad or bad_mem:
        rank, dtype, err = bad[0] if bad else (bad_mem[0], "memory", 0.0)
        cause = (f"rank {rank}: {dtype} matmul is off by {err:.2e} (relative) against a float64 reference"
                 if bad else f"rank {rank}: memory written did not read back the same")
        return StageResult("devices", FAIL, seconds, figure, cause,
                           "this device computes wrong results: run nvidia-smi -q for ECC/XID errors and take the "
                           "GPU out of service (or exclude it with CUDA_VISIBLE_DEVICES)", details)
    if peers is not None:
        missing = sum(not x for row in peers for x in row)
        figure += f"; peer access {'full' if not missing else f'missing on {missing} pairs (traffic goes via host)'}"
    return StageResult("devices", PASS, seconds, figure, details=details)
