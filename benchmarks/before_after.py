"""Did a change to ddplab cost speed? This checkout against another one (e.g. the commit before a redesign), side by
side: `ddplab check` wall time and `ddplab train RECIPE` samples/s.

    git worktree add ../ddplab-before <commit>
    python benchmarks/before_after.py --baseline-src ../ddplab-before/src
    python benchmarks/before_after.py --baseline-src ../ddplab-before/src --rounds 11 --nproc 2

Per round, back to back with the order alternated: `python -m ddplab check` (wall time, start to verdict, as a
user waits for it) and `python -m ddplab train RECIPE --nproc N --json` (the recipe's own steady samples/s), once
with this checkout's src/ and once with the baseline's on PYTHONPATH. Printed: the median of the per-round ratios
(this / baseline) with a 95 % sign-test interval. Issue #18: unchanged or better.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_raw import median_interval  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")


def run(argv: list[str], src: str) -> tuple[float, str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": src}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ddplab", *argv], capture_output=True, text=True, env=env,
                         timeout=600)
    seconds = time.monotonic() - start
    if out.returncode != 0:
        raise SystemExit(f"ddplab {' '.join(argv)} with {src} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return seconds, out.stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline-src", required=True, help="the src/ folder of the checkout to compare with")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--recipe", default="mlp")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--flags", default="--epochs 2", help="recipe flags (default %(default)s)")
    args = p.parse_args()
    sources = {"this": SRC, "baseline": str(Path(args.baseline_src).resolve())}
    train = ["train", args.recipe, "--nproc", str(args.nproc), "--json", *args.flags.split()]
    check_s: dict[str, list[float]] = {k: [] for k in sources}
    train_sps: dict[str, list[float]] = {k: [] for k in sources}
    for r in range(args.rounds):
        for name in (list(sources) if r % 2 == 0 else list(reversed(sources))):
            check_s[name].append(run(["check"], sources[name])[0])
            train_sps[name].append(json.loads(run(train, sources[name])[1])["samples_per_sec"])
        print(f"round {r + 1}: check " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in check_s.items()) +
              "; train " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in train_sps.items()), file=sys.stderr, flush=True)
    for what, got, unit, better in (("ddplab check wall time", check_s, "s", "lower"),
                                    (f"ddplab train {args.recipe} --nproc {args.nproc} samples/s", train_sps, "/s",
                                     "higher")):
        med, lo, hi = median_interval([a / b for a, b in zip(got["this"], got["baseline"])])
        print(f"{what} ({better} is better), {args.rounds} rounds: this {statistics.median(got['this']):,.2f}{unit}, "
              f"baseline {statistics.median(got['baseline']):,.2f}{unit}; this/baseline median {med:.3f} "
              f"(95 % {lo:.3f}..{hi:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
