"""The runs behind `ddplab scale`: one real `ddplab train RECIPE` per world size, read as a scaling.Run.

Each run goes through the launcher (train.ranks.start_ranks) and the shared training loop, exactly as `ddplab train` does; its metrics.jsonl
gives the steady-state step and communication-wait times the scaling model is fitted on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

from ddplab import report
from ddplab.errors import DdplabError

# Steps per run when the recipe flags do not say: on CPU a few seconds, next to ~5 s of process start-up.
DEFAULT_MAX_STEPS = 800
WINDOWS = 9  # logging windows per run; the first (warm-up) is left out, the fastest of the others kept
STALL_S = 120.0  # no rank progressing for this long is a hang, not a slow machine


def has_flag(flags: list[str], name: str) -> bool:
    return any(f == name or f.startswith(name + "=") for f in flags)


def machine_limit(recipe_flags: list[str]) -> tuple[int, str]:
    """How many ranks this machine can run side by side: one per GPU, or one per CPU core on CPU."""
    wants_cpu = any(f in ("--device=cpu",) for f in recipe_flags) or any(
        a == "--device" and b == "cpu" for a, b in zip(recipe_flags, recipe_flags[1:])
    )
    if not wants_cpu:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count(), f"{torch.cuda.device_count()} visible GPU(s)"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores, f"{cores} CPU core(s), one rank per core"


def split_batch(global_batch: int, n: int) -> int:
    """The per-rank batch of a global batch split over n ranks (strong scaling)."""
    if global_batch % n:
        raise DdplabError(
            f"--strong: the global batch {global_batch} does not split evenly over {n} ranks: pick "
            f"a --batch-size divisible by every world size in --nproc"
        )
    return global_batch // n


class _RecipeFlags(argparse.ArgumentParser):
    def error(self, message: str):
        raise DdplabError(f"{self.prog}: {message} (see `ddplab train {self.prog.split()[-1]} --help`)")


def recipe_config(name: str, flags: list[str]):
    """The recipe and its config from recipe flags, checked as `ddplab train` checks them."""
    from ddplab.recipes import names
    from ddplab.train.config import from_arguments, parser
    from ddplab.train.loop import load_recipe, preflight

    if name not in names():
        raise DdplabError(f"unknown recipe {name!r}: use one of {', '.join(names())}")
    recipe = load_recipe(name)
    ns = parser(recipe.config, f"recipe {name}", kind=_RecipeFlags, add_help=False).parse_args(flags)
    cfg = from_arguments(recipe.config, ns)
    if cfg.resume:
        raise DdplabError("scale runs the recipe once per world size, from scratch: drop --resume")
    preflight(cfg)
    return recipe, cfg


def train_once(name: str, nproc: int, flags: list[str]) -> dict:
    """One real training of the recipe on `nproc` ranks (the launcher + the shared loop): its TrainResult dict,
    plus `steady`: step and comm-wait times per rank from metrics.jsonl, without the first logging window (it
    holds the warm-up: allocations, DDP's bucket rebuild after the first step)."""
    import tempfile

    from ddplab.train.ranks import start_ranks

    with tempfile.TemporaryDirectory(prefix="ddplab-scale-") as tmp:
        recipe, cfg = recipe_config(name, [*flags, "--checkpoint-dir", tmp])
        steps = plan_steps(recipe, cfg, nproc, flags)
        if not has_flag(flags, "--log-every"):
            cfg.log_every = max(1, steps // WINDOWS)
        what = f"{name} on {nproc} rank(s) {' '.join(flags)}"
        report.log(f"scale: {what}")
        start = time.monotonic()
        res = start_ranks(nproc).run({"recipe": name, "config": cfg.to_dict()}, stall_timeout=STALL_S)
        if not res.ok:
            kept = f" (every rank's whole output kept in {res.run_dir})" if res.run_dir else ""
            raise DdplabError(
                f"the {nproc}-rank run of {name} {res.status}: {res.summary()}{kept}",
                exit_code=3 if res.status == "hang" else 1,
            )
        result = next(r.result for r in res.ranks if isinstance(r.result, dict) and "ranks" in r.result)
        result["steady"] = steady(Path(tmp) / "metrics.jsonl")
        report.log(
            f"scale: {nproc} rank(s) done in {time.monotonic() - start:.1f}s, start-up included: "
            f"{result['samples_per_sec']:,.0f} samples/s"
        )
    result["bucket_cap_mb"], result["comm_hook"] = cfg.bucket_cap_mb, cfg.comm_hook  # "parameters": the loop's own
    return result


def plan_steps(recipe, cfg, nproc: int, flags: list[str]) -> int:
    """Steps the run will take. Unless --epochs was given, enough epochs to reach --max-steps: throughput is
    measured, not convergence, and a small dataset would otherwise end the run after a few windows."""
    samples = len(recipe.data(cfg))
    per_epoch = (samples // nproc) // (cfg.batch_size * cfg.grad_accum)
    if per_epoch < 1:
        raise DdplabError(
            f"the {recipe.name} dataset ({samples} samples) is too small for {nproc} rank(s) x "
            f"{cfg.batch_size} x {cfg.grad_accum} micro-batches: lower --batch-size"
        )
    if cfg.max_steps and not has_flag(flags, "--epochs"):
        cfg.epochs = max(cfg.epochs, math.ceil(cfg.max_steps / per_epoch))
    planned = cfg.epochs * per_epoch
    return min(planned, cfg.max_steps) if cfg.max_steps else planned


def steady(path: Path) -> dict | None:
    """The fastest logging window after the first (which holds the warm-up). Other processes only ever slow a
    window down, so on a shared machine the fastest window is the closest to what the hardware does."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return None
    rows = [r for r in (rows[1:] if len(rows) > 1 else rows) if r.get("rank_step_ms")]
    if not rows:
        return None
    step_ms, wait_ms = min(
        (sum(r["rank_step_ms"]) / len(r["rank_step_ms"]), sum(r["rank_comm_wait_ms"]) / len(r["rank_comm_wait_ms"]))
        for r in rows
    )
    return {"step_ms": step_ms, "comm_wait_ms": wait_ms, "windows": len(rows)}


def to_run(result: dict):
    """A training result as a scaling.Run: per optimizer step, averaged over ranks, steady state when known."""
    from ddplab.perf.scaling import Run

    steady_state = result.get("steady")
    if steady_state:
        step_ms, wait_ms = steady_state["step_ms"], steady_state["comm_wait_ms"]
    else:
        ranks = result["ranks"]
        step_ms = sum(r["step_ms"] for r in ranks) / len(ranks)
        wait_ms = sum(r["comm_wait_ms"] for r in ranks) / len(ranks)
    return Run(
        world_size=result["world_size"],
        batch_per_rank=result["batch_size"],
        step_s=step_ms / 1000,
        accum_steps=result["grad_accum"],
        grad_bytes=grad_bytes(result),
        bucket_cap_mb=result.get("bucket_cap_mb"),
        compute_s=max(step_ms - wait_ms, 0.0) / 1000,
    )


def grad_bytes(result: dict) -> int:
    """Bytes DDP all-reduces per step: one fp32 gradient element per parameter, 2 bytes with a 16-bit hook."""
    return int(result["parameters"]) * (2 if result.get("comm_hook") in ("fp16", "bf16") else 4)
