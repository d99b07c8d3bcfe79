"""What the per-step stop check (ddplab.resume.StopFlag: one all-reduce of one integer per step, in the background)
costs a training: `ddplab train mlp --nproc 2` with the check (as shipped) against the same run without it
(DDPLAB_NO_STOP_CHECK=1), back to back, order alternated per round.

    python benchmarks/stop_check_cost.py                 # 7 rounds
    python benchmarks/stop_check_cost.py --rounds 15 --nproc 3

Printed per round: each run's steady samples/s and step ms (the recipe's own figures); then the median of the
per-round ratios with/without and a 95 % sign-test interval. Target (issue #29): the check costs <= 1 % of a step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_raw import median_interval  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")


def run(nproc: int, check: bool, extra: list[str]) -> dict:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": SRC}
    if not check:
        env["DDPLAB_NO_STOP_CHECK"] = "1"
    out = subprocess.run([sys.executable, "-m", "ddplab", "train", "mlp", "--nproc", str(nproc), "--json", *extra],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"train failed ({out.returncode}):\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout)
    return {"sps": result["samples_per_sec"], "step_ms": max(r["step_ms"] for r in result["ranks"])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("extra", nargs="*", help="recipe flags, e.g. --epochs 2")
    args = p.parse_args()
    ratios = []
    print(f"train mlp --nproc {args.nproc}: samples/s and slowest rank's step ms, with the stop check / without")
    for i in range(args.rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {check: run(args.nproc, check, args.extra) for check in order}
        ratio = got[True]["sps"] / got[False]["sps"]
        ratios.append(ratio)
        print(f"round {i + 1}: with {got[True]['sps']:,.0f}/s {got[True]['step_ms']:.3f} ms | without "
              f"{got[False]['sps']:,.0f}/s {got[False]['step_ms']:.3f} ms | with/without {ratio:.3f}", flush=True)
    median, low, high = median_interval(ratios)
    print(f"median with/without samples/s: {median:.3f} (95 % {low:.3f}..{high:.3f}; "
          f"{args.rounds} rounds; 1.000 = free, 0.990 = 1 % of a step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
