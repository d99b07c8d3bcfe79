"""What `--profile` costs outside its window: the steady step time of a plain script under `ddplab launch` with
and without `--profile`, paired rounds in one run (target: <= 3 % slower).

    python benchmarks/profile_overhead.py [--rounds 5] [--steps 60]

The window is steps 4-8 (3 warm-up steps, 5 profiled); the script's rank 0 times steps 12..end itself, so the
figure is the throughput after the window: the optimizer-step hook that stays installed, and whatever the profiler
left behind.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PLANT = Path(__file__).resolve().parent.parent / "tests" / "scripts" / "profile_plant.py"


def step_ms(profile: bool, steps: int) -> float:
    folder = tempfile.mkdtemp(prefix="ddplab-profile-overhead-")
    try:
        ran = subprocess.run([sys.executable, "-m", "ddplab", "launch", *(["--profile"] if profile else []),
                              "--no-lint", "--log-dir", folder, "--redirects", "0", str(PLANT), "none",
                              "--steps", str(steps), "--time-from", "12"], capture_output=True, text=True,
                             timeout=600)
        m = re.search(r"plant-step-ms ([0-9.]+)", ran.stdout)
        if ran.returncode or not m:
            raise SystemExit(f"exit {ran.returncode}\n{ran.stdout[-1500:]}\n{ran.stderr[-1500:]}")
        return float(m.group(1))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    ratios, plain, profiled = [], [], []
    for i in range(args.rounds):
        a, b = (step_ms(False, args.steps), step_ms(True, args.steps)) if i % 2 == 0 else \
            tuple(reversed((step_ms(True, args.steps), step_ms(False, args.steps))))
        plain.append(a)
        profiled.append(b)
        ratios.append(b / a)
        print(f"round {i + 1}: step ms without {a:.2f}, with --profile {b:.2f}, ratio {b / a:.3f}", flush=True)
    print(f"median step ms: without {statistics.median(plain):.2f}, with --profile {statistics.median(profiled):.2f};"
          f" median paired ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
