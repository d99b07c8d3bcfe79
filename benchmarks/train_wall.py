"""How long does `ddplab train RECIPE` take from the command to the answer, against the same recipe under plain
torchrun? End to end, wall clock: start-up, training, the memory prediction, the result.

    python benchmarks/train_wall.py                                  # linear, 2 ranks, 7 rounds
    python benchmarks/train_wall.py --recipe mlp --rounds 9
    python benchmarks/train_wall.py --baseline-src /tmp/old/src      # also an older ddplab, side by side

Per round, back to back with the order rotated:
  ddplab    `ddplab train RECIPE --nproc N`
  torchrun  `python -m torch.distributed.run --standalone --nproc-per-node N -m ddplab.recipes.RECIPE`
  baseline  (with --baseline-src) `ddplab train` of another checkout, e.g. the commit before a change
Printed: the median seconds of each and the median of the per-round ratios to torchrun with a 95 % sign-test
interval. Target (issue #32): ddplab <= 1.5x torchrun for `train linear --nproc 2`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_raw import median_interval  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")


def wall_seconds(argv: list[str], src: str, cwd: str | None = None, timeout: float = 600) -> float:
    """Wall time of `python ARGV` with `src` on PYTHONPATH; with `cwd`, run there with its temporary files there too."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": src, "OMP_NUM_THREADS": "1", **({"TMPDIR": cwd} if cwd else {})}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="linear")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--flags", default="", help="recipe flags for every run")
    p.add_argument("--baseline-src", help="the src/ folder of another ddplab checkout to run beside this one")
    args = p.parse_args()
    flags, n = args.flags.split(), str(args.nproc)
    variants = {
        "ddplab": (["-m", "ddplab", "train", args.recipe, "--nproc", n, *flags], SRC),
        "torchrun": (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", n, "-m",
                      f"ddplab.recipes.{args.recipe}", *flags], SRC),
    }
    if args.baseline_src:
        variants["baseline"] = (variants["ddplab"][0], args.baseline_src)
    got: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # each variant goes first in turn
        for name in order:
            got[name].append(wall_seconds(*variants[name]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in got.items()), file=sys.stderr,
              flush=True)
    print(f"\n{args.recipe} --nproc {n} {args.flags}, {args.rounds} rounds, end-to-end seconds (median): " +
          ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in got.items()))
    for other in [k for k in got if k != "torchrun"]:
        med, lo, hi = median_interval([a / b for a, b in zip(got[other], got["torchrun"])])
        print(f"  {other}/torchrun: median {med:.2f}x (95 % {lo:.2f}..{hi:.2f})")
    if "baseline" in got:
        med, lo, hi = median_interval([a / b for a, b in zip(got["ddplab"], got["baseline"])])
        print(f"  ddplab/baseline: median {med:.2f}x (95 % {lo:.2f}..{hi:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
