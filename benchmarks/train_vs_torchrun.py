"""Does ddplab's launcher cost training speed? `ddplab train RECIPE` against the same recipe under plain torchrun.

    python benchmarks/train_vs_torchrun.py                          # mlp, 1 and 2 ranks, 15 rounds
    python benchmarks/train_vs_torchrun.py --rounds 21 --nproc 2
    python benchmarks/train_vs_torchrun.py --baseline-src ../old/src  # also an older ddplab, side by side

Per round and world size, back to back with the order alternated:
  ddplab    `ddplab train RECIPE --nproc N --json`
  torchrun  `python -m torch.distributed.run --standalone --nproc-per-node N -m ddplab.recipes.RECIPE --json`
  baseline  (with --baseline-src) `ddplab train` of another checkout, e.g. the commit before a launcher change
Each prints the recipe's own samples/s (steady steps, after the warm-up). Printed: the median of the per-round
ratios ddplab/torchrun with a 95 % sign-test interval. Target (issue #18): >= 0.99x at 1 and 2 ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_raw import median_interval  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")


def samples_per_sec(argv: list[str], src: str, timeout: float = 600) -> float:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    start = out.stdout.index("{")  # torchrun prints the rank-0 result; anything before it is not JSON
    return json.loads(out.stdout[start:])["samples_per_sec"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="mlp")
    p.add_argument("--nproc", default="1,2", help="world sizes, e.g. 1,2")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--flags", default="--epochs 2", help="recipe flags for every run (default %(default)s)")
    p.add_argument("--baseline-src", help="the src/ folder of another ddplab checkout to run beside this one")
    args = p.parse_args()
    flags = args.flags.split()
    for n in [int(x) for x in args.nproc.split(",")]:
        variants = {
            "ddplab": (["-m", "ddplab", "train", args.recipe, "--nproc", str(n), "--json", *flags], SRC),
            "torchrun": (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), "-m",
                          f"ddplab.recipes.{args.recipe}", "--json", *flags], SRC),
        }
        if args.baseline_src:
            variants["baseline"] = (variants["ddplab"][0], args.baseline_src)
        got: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.rounds):
            names = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in names:
                got[name].append(samples_per_sec(*variants[name]))
            print(f"{n} rank(s) round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in got.items()),
                  file=sys.stderr, flush=True)
        print(f"\n{args.recipe}, {n} rank(s), {args.rounds} rounds, samples/s (median): " +
              ", ".join(f"{k} {statistics.median(v):,.0f}" for k, v in got.items()))
        for other in [k for k in got if k != "torchrun"]:
            ratios = [a / b for a, b in zip(got[other], got["torchrun"])]
            med, lo, hi = median_interval(ratios)
            below = sum(x < 1 for x in ratios)
            print(f"  {other}/torchrun: median {med:.3f} (95 % {lo:.3f}..{hi:.3f}), {below} of {len(ratios)} "
                  "rounds below 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
