"""What does `ddplab launch` add to plain torchrun's wall time, start to exit, for a trivial 2-rank script?

    python benchmarks/launch_vs_torchrun.py                              # 9 rounds
    python benchmarks/launch_vs_torchrun.py --baseline-src ../old/src    # also an older ddplab, side by side

Per round, back to back with the order alternated, the same options for both:
  torchrun  `python -m torch.distributed.run --standalone --nproc-per-node 2 trivial.py`
  ddplab    `python -m ddplab launch --standalone --nproc-per-node 2 trivial.py` (lint, preflight, watchdog on)
  baseline  (with --baseline-src) `ddplab launch` of another checkout, e.g. the commit before a start-up change
trivial.py joins a gloo group, all-reduces once and leaves. Printed: the median of the per-round ratios
ddplab/torchrun (and baseline/torchrun, ddplab/baseline) with a 95 % sign-test interval, and the machine's load
average before and after (issue 31 point 4: target <= 1.1x; 1.51x before the agent started first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_raw import median_interval  # noqa: E402
from train_wall import wall_seconds  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")
TRIVIAL = """import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
dist.destroy_process_group()
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--baseline-src", help="the src/ folder of another ddplab checkout to run beside this one")
    args = p.parse_args()
    options = ["--standalone", "--nproc-per-node", "2", "trivial.py"]
    variants = {"torchrun": (["-m", "torch.distributed.run", *options], SRC),
                "ddplab": (["-m", "ddplab", "launch", *options], SRC)}
    if args.baseline_src:
        variants["baseline"] = (variants["ddplab"][0], str(Path(args.baseline_src).resolve()))
    got: dict[str, list[float]] = {name: [] for name in variants}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="launch-bench-") as folder:
        Path(folder, "trivial.py").write_text(TRIVIAL)
        wall_seconds(variants["torchrun"][0], SRC, folder)  # warm the page cache for both
        for r in range(args.rounds):
            for name in (list(variants) if r % 2 == 0 else list(reversed(variants))):
                got[name].append(wall_seconds(*variants[name], folder))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in got.items()), file=sys.stderr,
                  flush=True)
    print(f"\ntrivial 2-rank script, {args.rounds} rounds, wall seconds (median): " +
          ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in got.items()) +
          f"; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    pairs = [(other, "torchrun") for other in got if other != "torchrun"]
    for a, b in pairs + ([("ddplab", "baseline")] if "baseline" in got else []):
        med, lo, hi = median_interval([x / y for x, y in zip(got[a], got[b])])
        print(f"  {a}/{b}: median {med:.2f}x (95 % {lo:.2f}..{hi:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
