"""Planted slowdowns (tests/scripts/profile_plant.py): does `ddplab launch --profile` name the planted cause first,
and does the fix it names recover the lost speed?

    python benchmarks/profile_causes.py [--rounds 1] [--plants loader,rank,...]

For each planting, side by side in one run (interleaved, plain torchrun, 2 CPU ranks): the step time of the planted
script (slow), of the same script with the named fix applied (fixed), and of the same model and data without the
planting (clean); recovered = (slow - fixed) / (slow - clean), the share of the lost speed the fix wins back (target
>= 50 %). Where the fix is the removal of the planting, fixed and clean are the same script run twice (recovered
then measures the noise). Then one `ddplab launch --profile` of the slow script: the top cause it names.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANT = ROOT / "tests" / "scripts" / "profile_plant.py"
PLANTS = ["loader", "rank", "item", "buckets", "unused", "nosync", "threads", "stats"]
EXPECTED = {"loader": "data", "rank": "straggler", "item": "host_sync", "buckets": "buckets", "unused": "unused",
            "nosync": "no_sync", "threads": "threads",
            "stats": "own_collectives"}
STEPS, TIME_FROM = 30, 6


def step_ms(plant: str, *flags: str) -> float:
    ran = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(PLANT), plant, "--steps", str(STEPS), "--time-from", str(TIME_FROM), *flags],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    m = re.search(r"plant-step-ms ([0-9.]+)", ran.stdout)
    if ran.returncode or not m:
        raise SystemExit(f"{plant} {flags}: exit {ran.returncode}\n{ran.stderr[-2000:]}")
    return float(m.group(1))


def top_cause(plant: str) -> str:
    ran = subprocess.run([sys.executable, "-m", "ddplab", "launch", "--profile", "--no-lint", "--json", str(PLANT),
                          plant, "--steps", "14"], capture_output=True, text=True, timeout=600)
    result = json.loads(ran.stdout)
    causes = (result.get("profile") or {}).get("causes") or []
    if result.get("log_dir"):
        subprocess.run(["rm", "-rf", result["log_dir"]])
    return causes[0]["key"] if causes else "none"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--plants", default=",".join(PLANTS))
    args = ap.parse_args()
    print(f"{'planting':9} {'slow ms':>8} {'fixed ms':>9} {'clean ms':>9} {'slow/fixed':>10} {'recovered':>9}  "
          "top cause named (expected)")
    for plant in args.plants.split(","):
        slow, fixed, clean = [], [], []
        for _ in range(args.rounds):
            slow.append(step_ms(plant))
            fixed.append(step_ms(plant, "--fixed"))
            clean.append(step_ms(plant, "--clean"))
        s, f, c = (statistics.median(x) for x in (slow, fixed, clean))
        recovered = (s - f) / (s - c) if s > c else float("nan")
        named = top_cause(plant)
        mark = "right" if named == EXPECTED[plant] else "WRONG"
        print(f"{plant:9} {s:8.2f} {f:9.2f} {c:9.2f} {s / f:10.2f} {100 * recovered:8.0f}%  {named} ({mark})",
              flush=True)


if __name__ == "__main__":
    main()
