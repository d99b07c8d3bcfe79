"""What `ddplab scale` reports from the fitted model: the measured points beside the model's reading of them, and
the predictions for larger world sizes and for other interconnects."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass
class Point:
    world_size: int
    batch_per_rank: int
    accum_steps: int
    samples_per_sec: float  # global batch / mean step time
    speedup: float  # vs the 1-rank run
    efficiency: float  # speedup / world size
    step_ms: float
    compute_ms: float
    exposed_comm_ms: float  # waiting for all_reduce (and for slower ranks)
    model_samples_per_sec: float  # what the fitted model says here: how well it explains the run
    run_samples_per_sec: float  # `ddplab train`'s whole-run figure (includes start-up and epoch ends)
    flags: list[str] = field(default_factory=list)


@dataclass
class Prediction:
    world_size: int
    batch_per_rank: int
    samples_per_sec: float
    speedup: float
    efficiency: float
    measured: bool


@dataclass
class LinkPrediction:
    name: str
    bus_gb_per_s: float
    source: str
    date: str
    predictions: list[Prediction]


def points(runs, results, model) -> list[Point]:
    """The measured runs (scaling.Run) and their `ddplab train` results as table rows, speedup against the first."""
    one = runs[0].samples_per_sec
    out = []
    for run, res in zip(runs, results):
        sps = run.samples_per_sec
        out.append(
            Point(
                run.world_size,
                run.batch_per_rank,
                run.accum_steps,
                sps,
                sps / one,
                sps / one / run.world_size,
                run.step_s * 1e3,
                run.compute_s * 1e3,
                max(run.step_s - run.compute_s, 0.0) * 1e3,
                model.samples_per_sec(run.world_size, run.batch_per_rank, run.accum_steps),
                res["samples_per_sec"],
            )
        )
    return out


def predict(model, sizes, b: int, k: int, strong: bool, measured, **comm) -> list[Prediction]:
    """The model at each world size: per-rank batch b (with strong scaling, b is the global batch, split)."""
    one = model.samples_per_sec(1, b, k, **comm)
    out = []
    for n in sizes:
        per_rank = b // n if strong else b
        if per_rank < 1:
            continue  # a global batch smaller than the world size leaves ranks idle
        sps = model.samples_per_sec(n, per_rank, k, **comm)
        out.append(Prediction(n, per_rank, sps, sps / one, sps / one / n, n in measured))
    return out


def interconnects(model, sizes, b: int, k: int, strong: bool) -> list[LinkPrediction]:
    """The fitted compute with each table interconnect's bandwidth, one device per rank (no shared-core slowdown);
    latency stays as measured."""
    from ddplab.perf.scaling import INTERCONNECTS

    alone = replace(model, slowdown={})
    return [
        LinkPrediction(
            i.name,
            i.bus_gb_per_s,
            i.source,
            i.date,
            predict(alone, sizes, b, k, strong, (), bus_bytes_per_s=i.bus_gb_per_s * 1e9),
        )
        for i in INTERCONNECTS
    ]
