"""A scaling study, what `ddplab scale` runs: the recipe at each world size, two 1-rank probes, the scaling model
fitted on them, its predictions and advice, and optionally the advice measured and a plot."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddplab import report
from ddplab.perf import experiments, prediction
from ddplab.perf.advice import Advice, advise, notes, try_advice
from ddplab.perf.prediction import LinkPrediction, Point, Prediction


@dataclass
class ScaleResult:
    recipe: str
    device: str
    backend: str
    strong: bool
    batch_per_rank: int  # at world size 1 (with --strong: the global batch)
    accum_steps: int
    grad_bytes: int
    recipe_flags: list[str]
    points: list[Point]
    model: dict
    predictions: list[Prediction]
    interconnects: list[LinkPrediction]
    advice: list[Advice]
    plot: str | None = None
    notes: list[str] = field(default_factory=list)


def study(
    recipe: str,
    sizes: list[int],
    predict: list[int],
    *,
    strong: bool,
    base_flags: list[str],
    recipe_flags: list[str],
    link=None,
    measure_advice: bool = False,
    plot_path: str | None = None,
) -> ScaleResult:
    """sizes: world sizes to run, starting at 1; base_flags: the recipe flags of every run (recipe_flags: those the
    user gave, for the record); link: a scaling.LinkFit from `ddplab bench`, or None to fit it from the runs."""
    from ddplab.perf import scaling
    from ddplab.perf.experiments import to_run, train_once

    _, cfg = experiments.recipe_config(recipe, base_flags)  # bad recipe flags fail now, before any run
    per_rank = {n: experiments.split_batch(cfg.batch_size, n) if strong else cfg.batch_size for n in sizes}

    report.log(
        f"scale: {len(sizes) + 2} runs of {recipe}, each its own start of the ranks: world sizes "
        f"{','.join(map(str, sizes))}, then two 1-rank probes (twice the batch, twice the accumulation)"
    )
    results = [train_once(recipe, n, [*base_flags, "--batch-size", str(per_rank[n])]) for n in sizes]
    # Two more 1-rank runs tell the fixed cost per micro-step from the cost per sample (a doubled batch) and from
    # the cost per optimizer step (doubled accumulation): without them, batch and accumulation advice is a guess.
    probes = [
        train_once(recipe, 1, [*base_flags, "--batch-size", str(2 * per_rank[1])]),
        train_once(recipe, 1, [*base_flags, "--batch-size", str(per_rank[1]), "--grad-accum", str(2 * cfg.grad_accum)]),
    ]
    runs = [to_run(r) for r in results]
    model = scaling.fit(runs + [to_run(r) for r in probes], link)
    first = results[0]
    b, k = first["batch_size"], first["grad_accum"]
    points = prediction.points(runs, results, model)
    result = ScaleResult(
        recipe=recipe,
        device=first["device"],
        backend=first["backend"],
        strong=strong,
        batch_per_rank=b,
        accum_steps=k,
        grad_bytes=int(model.grad_bytes),
        recipe_flags=recipe_flags,
        points=points,
        model=model.to_dict(),
        predictions=prediction.predict(model, predict, b, k, strong, sizes),
        interconnects=prediction.interconnects(model, predict, b, k, strong),
        advice=advise(model, points[-1], strong, hook="bf16" if first["backend"] == "nccl" else "fp16"),
    )
    if measure_advice:
        try_advice(result.advice, points[-1], recipe, base_flags)
    result.notes = notes(result.device, result.advice, model)
    if plot_path:
        from ddplab.perf.plot import plot

        result.plot = plot(result, model, plot_path)
    return result
