"""The summary half of each worker stage of `ddplab check`: the per-rank dicts that the stage's on_rank returned
(checks/devices.py, collectives.py, ddp.py) turned into one StageResult, in the CLI process. No torch here: the CLI
never imports it (the ranks' agent checks the flags that need it, commands/check._settled)."""

from __future__ import annotations

from ddplab.checks import FAIL, PASS, SKIP, StageResult

DDP_TOLERANCE = 1e-5  # DDP against one process on the same batches (checks/ddp.py)


def summarize(stage: str, per_rank: list[dict], seconds: float) -> StageResult:
    return SUMMARIES[stage](per_rank, seconds)


def devices(per_rank: list[dict], seconds: float) -> StageResult:
    bad = [
        (r["rank"], dt, m["rel_error"], m["tolerance"])
        for r in per_rank
        for dt, m in r["matmul"].items()
        if not m["ok"]
    ]
    bad_mem = [r["rank"] for r in per_rank if not r.get("memory", {"ok": True})["ok"]]
    speeds = [r["flops_per_s"] for r in per_rank]
    unit, scale = ("TFLOP/s", 1e12) if per_rank[0]["device"].startswith("cuda") else ("GFLOP/s", 1e9)
    figure = (
        f"matmul right on {len(per_rank) - len({b[0] for b in bad})}/{len(per_rank)} ranks; "
        f"{min(speeds) / scale:.1f}–{max(speeds) / scale:.1f} {unit} ({per_rank[0]['speed_dtype']}) per rank"
    )
    modes = sorted({r.get("float32_as", "ieee") for r in per_rank} - {"ieee"})
    if modes:  # said, so that a float32 figure or a wider tolerance is never a surprise
        figure += f"; float32 matmul allowed as {'/'.join(m.upper() for m in modes)}"
    peers = next((r["peer_access"] for r in per_rank if "peer_access" in r), None)
    details = {"ranks": per_rank}
    if bad or bad_mem:
        rank, dtype, err, limit = bad[0] if bad else (bad_mem[0], "memory", 0.0, 0.0)
        cause = (
            f"rank {rank}: {dtype} matmul is off by {err:.2e} (relative, tolerance {limit:.0e}) against a "
            "float64 reference"
            if bad
            else f"rank {rank}: memory written did not read back the same"
        )
        return StageResult(
            "devices",
            FAIL,
            seconds,
            figure,
            cause,
            "this device computes wrong results: run nvidia-smi -q for ECC/XID errors and take the "
            "GPU out of service (or exclude it with CUDA_VISIBLE_DEVICES)",
            details,
        )
    if peers is not None:
        missing = sum(not x for row in peers for x in row)
        figure += f"; peer access {'full' if not missing else f'missing on {missing} pairs (traffic goes via host)'}"
    return StageResult("devices", PASS, seconds, figure, details=details)


def collectives(per_rank: list[dict], seconds: float) -> StageResult:
    names = list(per_rank[0]["ops"])
    wrong = {name: sum(r["ops"][name].get("wrong", 0) for r in per_rank) for name in names}
    skipped = {name: per_rank[0]["ops"][name]["skipped"] for name in names if "skipped" in per_rank[0]["ops"][name]}
    ran = [n for n in names if n not in skipped]
    total_wrong = sum(wrong[n] for n in ran)
    figure = f"{len(ran)} ops on {len(per_rank)} ranks, {total_wrong} wrong elements"
    if skipped:
        figure += f"; skipped: {', '.join(skipped)}"
    details = {"wrong": {n: wrong[n] for n in ran}, "skipped": skipped, "elements": per_rank[0]["count"]}
    if total_wrong:
        bad = ", ".join(f"{n} ({wrong[n]})" for n in ran if wrong[n])
        return StageResult(
            "collectives",
            FAIL,
            seconds,
            figure,
            f"wrong results from {bad}",
            "results differ between ranks: check NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1 to isolate a "
            "broken transport, and the driver/NCCL versions in `ddplab env`",
            details,
        )
    if not ran:
        return StageResult("collectives", SKIP, seconds, figure, "the backend ran none of the collectives", "", details)
    return StageResult("collectives", PASS, seconds, figure, details=details)


def ddp(per_rank: list[dict], seconds: float) -> StageResult:
    r0 = per_rank[0]
    spread = max(r["spread"] for r in per_rank)
    vs_single = max(r["vs_single"] for r in per_rank)
    first, last = r0["loss_before"], r0["loss_after"]
    figure = (
        f"params equal on all ranks (max |Δ| {spread:.0e}); vs 1 process {vs_single:.1e}; "
        f"dataset loss {first:.3f} → {last:.3f} in {len(r0['losses'])} steps"
    )
    details = {
        "spread": spread,
        "vs_single": vs_single,
        "losses": r0["losses"],
        "loss_before": first,
        "loss_after": last,
        "tolerance": DDP_TOLERANCE,
    }
    problems = []
    if spread != 0:
        problems.append(
            (
                f"parameters differ between ranks by {spread:.2e} after training",
                "ranks must start from the same weights (DDP broadcasts rank 0's at wrap) and see the same "
                "number of steps; look for rank-dependent model code or a second optimizer",
            )
        )
    if vs_single > DDP_TOLERANCE:
        problems.append(
            (
                f"DDP result is {vs_single:.2e} away from one process on the same batches (> {DDP_TOLERANCE})",
                "gradients are not averaged right: check for no_sync misuse, a custom comm hook, or unused parameters",
            )
        )
    if not (r0["shards_disjoint"] and r0["shards_cover"]):
        problems.append(
            (
                "DistributedSampler shards overlap or miss samples",
                "give DistributedSampler the same dataset length and seed on every rank",
            )
        )
    if not last < first:
        problems.append((f"loss did not go down ({first:.4f} → {last:.4f})", "check the learning rate and data"))
    if problems:
        cause, fix = problems[0]
        return StageResult("ddp", FAIL, seconds, figure, cause, fix, details)
    return StageResult("ddp", PASS, seconds, figure, details=details)


SUMMARIES = {"devices": devices, "collectives": collectives, "ddp": ddp}
