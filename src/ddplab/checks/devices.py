"""devices: every device computes a matmul right (against a float64 CPU reference) and at what speed;
on GPUs also an allocation of a chosen share of memory and the peer-access matrix."""

from __future__ import annotations

import time

import torch

from ddplab.launcher.progress import mark

# Relative error allowed against the float64 reference: a few units in the last place of each dtype's mantissa,
# times sqrt(K) for the accumulation over K products.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
# float32 matmuls that torch lets run in a narrower format: TF32 keeps float16's 10 mantissa bits, bfloat16 7.
REDUCED = {"tf32": TOLERANCE[torch.float16], "bf16": TOLERANCE[torch.bfloat16]}
CHECK_N = 256  # small enough for a float64 CPU reference in milliseconds
SPEED_N = {"cpu": 512, "cuda": 8192}
SPEED_SECONDS = 0.05  # ~50 ms of work is a steady figure without a cost


def float32_mode(device_type: str, allow_tf32: bool, precision: str) -> str:
    """The narrowest format torch may use for a float32 matmul here: ieee, tf32 or bf16.

    allow_tf32 is torch.backends.cuda.matmul.allow_tf32, which already folds in TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
    (NVIDIA's PyTorch containers set it) and torch.set_float32_matmul_precision (aten/src/ATen/Context.cpp,
    allowTF32CuBLAS); precision is torch.get_float32_matmul_precision(): "medium" allows bfloat16 internally.
    TF32 is a tensor-core format: on CPU only the precision setting can narrow a float32 matmul (oneDNN).
    """
    if precision == "medium":
        return "bf16"
    if precision == "high" or (device_type == "cuda" and allow_tf32):
        return "tf32"
    return "ieee"


def current_float32_mode(device: torch.device) -> str:
    return float32_mode(device.type, bool(torch.backends.cuda.matmul.allow_tf32), torch.get_float32_matmul_precision())


def tolerance(dtype: torch.dtype, float32_as: str = "ieee") -> float:
    """The relative error a matmul in `dtype` may have; float32's depends on the format torch really uses, or a
    healthy GPU with TF32 on (~1e-3) would be reported as computing wrong results."""
    if dtype == torch.float32 and float32_as in REDUCED:
        return REDUCED[float32_as]
    return TOLERANCE[dtype]


def _matmul_error(device: torch.device, dtype: torch.dtype) -> float:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(CHECK_N, CHECK_N, generator=gen, dtype=torch.float64)
    b = torch.randn(CHECK_N, CHECK_N, generator=gen, dtype=torch.float64)
    want = a @ b
    got = (a.to(device, dtype) @ b.to(device, dtype)).double().cpu()
    return ((got - want).norm() / want.norm()).item()


def timed(step, sync, budget: float = SPEED_SECONDS, most: int = 1 << 16) -> tuple[int, float]:
    """(calls, seconds) of `step` run back to back for about `budget` seconds, measured to the device's finish.

    A GPU runs a call long after the CPU queued it: a loop that watches the CPU clock queues seconds to minutes
    of work before its final sync (a false hang on a slow GPU). Here each round queues twice the calls of the
    last, then waits for them: never more is queued than twice what took under `budget`."""
    step()  # warm-up: kernel selection, allocation
    sync()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        seconds = time.perf_counter() - start
        if seconds >= budget or calls >= most:
            return calls, seconds
        calls *= 2


def _flops_per_s(device: torch.device, dtype: torch.dtype) -> float:
    n = SPEED_N[device.type]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    calls, seconds = timed(lambda: a @ b, sync)
    return 2 * n**3 * calls / seconds


def on_rank(ctx, opts: dict) -> dict:
    dev = ctx.device
    dtypes = [torch.float32, torch.bfloat16] + ([torch.float16] if dev.type == "cuda" else [])
    mode = current_float32_mode(dev)
    out = {"rank": ctx.rank, "device": str(dev), "name": _device_name(dev), "matmul": {}, "float32_as": mode}
    for dtype in dtypes:
        mark(f"devices.matmul.{str(dtype)[6:]}")
        err, limit = _matmul_error(dev, dtype), tolerance(dtype, mode)
        out["matmul"][str(dtype)[6:]] = {"rel_error": err, "tolerance": limit, "ok": err <= limit}
    speed_dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    mark("devices.speed")
    out["flops_per_s"], out["speed_dtype"] = _flops_per_s(dev, speed_dtype), str(speed_dtype)[6:]
    if dev.type == "cuda":
        mark("devices.memory")
        out["memory"] = _allocate(dev, opts.get("mem_fraction", 0.5))
        if ctx.local_rank == 0 and torch.cuda.device_count() > 1:
            n = torch.cuda.device_count()
            out["peer_access"] = [
                [i == j or torch.cuda.can_device_access_peer(i, j) for j in range(n)] for i in range(n)
            ]
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
