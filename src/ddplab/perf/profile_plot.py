"""`--profile`'s picture: one horizontal bar per rank, its step split into the parts (perf/profile.py), the
straggler marked, the top cause as the title. One page PNG (matplotlib, Agg: no display needed)."""

from __future__ import annotations

from pathlib import Path

COLOURS = {
    "data": "#8c564b",
    "forward": "#1f77b4",
    "ddp_post_forward": "#17becf",
    "backward": "#2ca02c",
    "optimizer": "#9467bd",
    "comm_exposed": "#d62728",
    "host_sync": "#ff7f0e",
    "other": "#c7c7c7",
}


def breakdown_png(profile, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ddplab.perf.profile import LABELS, PARTS

    ranks = profile.ranks
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.45 * len(ranks)), dpi=100)
    names = [f"rank {r.rank}" + (" (straggler)" if r.rank == profile.straggler else "") for r in ranks]
    left = [0.0] * len(ranks)
    for part in PARTS:
        widths = [r.parts[part] for r in ranks]
        ax.barh(names, widths, left=left, color=COLOURS[part], label=LABELS[part])
        left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (mean over the profiled steps)")
    top = profile.causes[0] if profile.causes else None
    ax.set_title(
        f"top cause: {top.title} (expected gain {100 * top.gain_share:.0f} %)"
        if top
        else "no cause worth more than 5 % of the step",
        fontsize=10,
    )
    ax.legend(ncol=4, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(ranks) < 4 else -0.15))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
