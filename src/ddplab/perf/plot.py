"""`ddplab scale --plot`: measured samples/s, the fitted model's curve and the ideal line, as a PNG."""

from __future__ import annotations

from pathlib import Path

from ddplab.errors import DdplabError


def check_path(path: str) -> None:
    """Fail before any run when the plot could not be written."""
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise DdplabError(f"--plot {path}: the plot is a PNG image: name the file *.png")
    if not p.parent.exists():
        raise DdplabError(f"--plot {path}: directory {p.parent} does not exist: create it or pick another path")


def plot(result, model, path: str) -> str:
    """result: a perf.study.ScaleResult; model: the scaling.ScalingModel fitted on its runs."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    one = result.points[0].samples_per_sec
    top = max([p.world_size for p in result.predictions] + [p.world_size for p in result.points])
    sizes = [n for n in range(1, top + 1)]
    b, k = result.batch_per_rank, result.accum_steps
    curve = [
        (n, model.samples_per_sec(n, b // n if result.strong else b, k))
        for n in sizes
        if (b // n if result.strong else b) >= 1
    ]
    ax.plot(sizes, [n * one for n in sizes], "--", color="grey", label="ideal (N × 1 rank)")
    ax.plot([n for n, _ in curve], [s for _, s in curve], "-", color="tab:blue", label="predicted (fitted model)")
    ax.plot(
        [p.world_size for p in result.points],
        [p.samples_per_sec for p in result.points],
        "o",
        color="tab:red",
        label="measured",
    )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_yscale("log")
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("samples/s")
    ax.set_title(f"{result.recipe}: {'strong' if result.strong else 'weak'} scaling on {result.device}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise DdplabError(f"--plot {path}: cannot write it ({e.strerror}): pick another path") from None
    finally:
        plt.close(fig)
    return path
