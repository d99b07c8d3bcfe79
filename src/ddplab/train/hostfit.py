"""On CPU every rank's memory comes out of this machine's RAM: ranks that need more together are killed by the
kernel's OOM killer minutes in (issue 42 point 3: `ddplab train gpt --nproc 2 --size small`, 2 x 20 GiB on a 23.5 GiB
machine, killed after 1 min 39 s). `ddplab train` refuses such a run before any rank starts.

The figure is a floor, by arithmetic on the recipe's shapes (the recipe module's memory_floor): parameters, DDP's
gradient buckets and Adam's two moments (16 bytes a parameter in fp32; ZeRO-1 and FSDP share theirs among the
ranks), plus the activations of one step. `ddplab memory`'s trace on fake tensors is the exact figure, but it costs
seconds before every CPU run (an earlier attempt added 2.7 s to each); the floor costs microseconds and stays under
the trace (tests/train/test_hostfit.py), so a run it refuses cannot fit."""

from __future__ import annotations

import importlib

from ddplab.errors import DdplabError

GiB = 2**30


def floor_bytes(recipe: str, cfg) -> int | None:
    """One rank's least memory for a training step, or None when the recipe gives no memory_floor (its models are
    small) or the run is not plain fp32 DDP, ZeRO-1 or FSDP arithmetic covers."""
    floor = getattr(importlib.import_module(f"ddplab.recipes.{recipe}"), "memory_floor", None)
    if floor is None:
        return None
    params, activations = floor(cfg)
    if cfg.amp != "none":  # autocast keeps half-width copies of what it saves: half the activations at least
        activations //= 2
    return params * 4 + params * 12 + activations  # weights; DDP's buckets (the gradients) and Adam's moments


def require_fits(recipe: str, cfg, nproc: int, ram: int | None = None) -> None:
    """DdplabError (exit 2, one line) when nproc ranks of this run need more than the machine's RAM."""
    per_rank = floor_bytes(recipe, cfg)
    if per_rank is None:
        return
    if ram is None:
        import psutil

        ram = int(psutil.virtual_memory().total)
    if nproc * per_rank <= ram:
        return
    most = ram // per_rank
    fix = f"--nproc {most}" if most >= 1 else "a smaller model"
    raise DdplabError(
        f"ddplab train {recipe}: {nproc} rank(s) x at least {per_rank / GiB:.1f} GiB each = "
        f"{nproc * per_rank / GiB:.1f} GiB, more than this machine's {ram / GiB:.1f} GiB of RAM (on CPU every rank's "
        f"memory comes from it): use {fix}, a smaller --batch-size or --size; `ddplab memory {recipe}` with the "
        "same flags shows the exact figure and the largest batch that fits"
    )
