"""`ddplab scale`'s advice: what would raise efficiency at the largest measured world size, each piece with the
gain the fitted model predicts and, on request, the gain measured by re-running with it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddplab.errors import DdplabError
from ddplab.perf.prediction import Point

# Below this efficiency, half a device's worth of every 5 is lost to communication: worth acting on.
EFFICIENCY_TARGET = 0.8


@dataclass
class Advice:
    name: str
    why: str
    flags: list[str]
    predicted_gain: float  # samples/s with it ÷ without, at the largest measured world size
    measured_gain: float | None = None  # the same, measured (--try-advice)
    measured_samples_per_sec: float | None = None
    note: str = ""


def advise(model, at: Point, strong: bool, hook: str = "bf16") -> list[Advice]:
    """What would raise efficiency at the largest measured world size, with the model's predicted gain.
    hook: the 16-bit compression to suggest; bf16 needs NCCL, so gloo runs are told fp16."""
    from ddplab.perf.scaling import MIB, buckets

    n, b, k = at.world_size, at.batch_per_rank, at.accum_steps
    if at.efficiency >= EFFICIENCY_TARGET or n < 2:
        return []
    base = model.samples_per_sec(n, b, k)
    comm = model.comm_s(n)
    share = at.exposed_comm_ms / at.step_ms if at.step_ms else 0.0
    out = [
        Advice(
            "larger per-rank batch",
            f"exposed communication is {share:.0%} of each step and does not grow with "
            "the batch, so a batch twice as large halves its share (needs about twice the activation memory"
            + ("; with --strong it doubles the global batch too" if strong else "")
            + ")",
            ["--batch-size", str(2 * b)],
            model.samples_per_sec(n, 2 * b, k) / base,
        ),
        Advice(
            "gradient accumulation",
            "all-reduce once every 4 micro-batches instead of every one (no_sync on "
            "the others): same memory, 4× the global batch, so revisit the learning rate",
            ["--grad-accum", str(4 * k)],
            model.samples_per_sec(n, b, 4 * k) / base,
        ),
    ]
    n_buckets = buckets(model.grad_bytes, model.bucket_cap_mb)
    if n_buckets > 1:
        cap = math.ceil(model.grad_bytes / MIB) + 1
        out.append(
            Advice(
                "fewer, larger buckets",
                f"{model.grad_bytes / MIB:.1f} MiB of gradients travel in "
                f"{n_buckets} all_reduce calls, each paying the latency; one bucket of {cap} MiB pays it "
                "once (at the cost of less overlap with backward)",
                ["--bucket-cap-mb", str(cap)],
                model.samples_per_sec(n, b, k, bucket_cap_mb=cap) / base,
            )
        )
    if comm > 0 and math.isfinite(model.bus_bytes_per_s):
        bandwidth = 2 * (n - 1) / n * model.grad_bytes / model.bus_bytes_per_s
        unsplit = "not separable" in model.provenance.get("link", "")
        out.append(
            Advice(
                f"{hook} gradient compression",
                f"the bandwidth term is {bandwidth / comm:.0%} of the "
                f"all_reduce time; DDP's {hook}_compress_hook sends half the bytes (gradients are rounded "
                f"to {hook} in transit)",
                ["--comm-hook", hook],
                model.samples_per_sec(n, b, k, grad_bytes=model.grad_bytes / 2) / base,
                note="an upper bound: latency was not told apart from bandwidth" if unsplit else "",
            )
        )
    return sorted(out, key=lambda a: -a.predicted_gain)


def try_advice(advice: list[Advice], at: Point, recipe: str, base_flags: list[str]) -> None:
    """Measure each piece of advice: re-run the recipe at `at` with its flags, fill in the measured gain (or why
    it could not be measured)."""
    from ddplab.perf.experiments import to_run, train_once

    for a in advice:
        flags = [*base_flags, "--batch-size", str(at.batch_per_rank), *a.flags]  # the advice's flags win
        try:
            measured = to_run(train_once(recipe, at.world_size, flags)).samples_per_sec
        except DdplabError as e:
            a.note = "; ".join(filter(None, [a.note, f"not measured: {e}"]))
            continue
        a.measured_samples_per_sec = measured
        a.measured_gain = measured / at.samples_per_sec


def notes(device: str, advice: list[Advice], model) -> list[str]:
    """Where the model's terms came from, and what to keep in mind reading the figures."""
    out = [f"{k}: {v}" for k, v in model.provenance.items()]
    if device == "cpu":
        out.append(
            "measured on CPU processes (gloo): compute is far slower than on a GPU, so communication "
            "weighs less here than it will on GPUs; the interconnect table keeps this compute speed"
        )
    if advice and not any(a.measured_gain is not None for a in advice):
        out.append("advice gains are the model's predictions: --try-advice measures each one")
    return out
