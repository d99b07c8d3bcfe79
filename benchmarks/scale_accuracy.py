"""How well does `ddplab scale`'s model predict configurations it was not fitted on?

Fits ddplab.perf.scaling on real CPU runs of a recipe at world sizes 1 and 2 with two per-rank batch sizes (plus,
as `ddplab scale` does, one 1-rank run with accumulation 2), then predicts held-out configurations: another batch
size, and accumulation 4 at both world sizes. Target: every prediction within
15 % of the measured samples/s. Runs are interleaved round-robin and repeated; each configuration's fastest run is
kept, because other processes share the machine and only ever slow a run down (the load average is printed).

    python benchmarks/scale_accuracy.py                      # mlp, fit b=32,128, held out b=64 and 32 x accum 4
    python benchmarks/scale_accuracy.py --rounds 5 --max-steps 600
    python benchmarks/scale_accuracy.py --recipe-flags "--hidden 1024"

"samples/s" here is what scale reports: global batch ÷ the steady-state step time (logging windows after
the first, the fastest kept), the quantity the model describes.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from ddplab.perf.experiments import to_run, train_once
from ddplab.perf import scaling

TARGET = 0.15


def measure(recipe: str, configs: list[tuple[int, int, int]], rounds: int, flags: list[str]) -> dict:
    """Fastest scaling.Run per (world size, batch, accumulation), runs interleaved round-robin: other processes
    only ever slow a run down."""
    runs: dict[tuple, list] = {c: [] for c in configs}
    for r in range(rounds):
        for n, b, k in configs:
            result = train_once(recipe, n, [*flags, "--batch-size", str(b), "--grad-accum", str(k)])
            runs[n, b, k].append(to_run(result))
        print(f"round {r + 1}/{rounds} done, load average {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    return {c: min(rs, key=lambda run: run.step_s) for c, rs in runs.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="mlp")
    p.add_argument("--fit-batches", default="32,128")
    p.add_argument("--held-out-batch", type=int, default=64)
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--recipe-flags", default="", help="extra flags for every run, e.g. \"--hidden 1024\"")
    args = p.parse_args()

    b1, b2 = (int(b) for b in args.fit_batches.split(","))
    # As `ddplab scale` does, one more 1-rank run with accumulation 2 tells per-step from per-micro-step costs.
    fit_on = [(n, b, 1) for n in (1, 2) for b in (b1, b2)] + [(1, b1, 2)]
    held_out = [(n, args.held_out_batch, 1) for n in (1, 2)] + [(n, b1, args.accum) for n in (1, 2)]
    flags = [*shlex.split(args.recipe_flags), "--max-steps", str(args.max_steps)]

    load_before = os.getloadavg()
    start = time.monotonic()
    print(f"{args.recipe} {' '.join(flags)}: {os.cpu_count()} CPU(s), load average {load_before[0]:.2f} "
          f"(1 min) {load_before[1]:.2f} (5 min) before", flush=True)
    fastest = measure(args.recipe, fit_on + held_out, args.rounds, flags)
    model = scaling.fit([fastest[c] for c in fit_on])
    load_after = os.getloadavg()

    print(f"\nfitted on N in (1, 2) x batch in ({b1}, {b2}) + (N=1, batch {b1}, accum 2); {args.rounds} interleaved "
          "rounds, fastest per config")
    print(f"model: c0 {model.compute_fixed_s * 1e3:.3f} ms, c {model.compute_per_sample_s * 1e6:.2f} us/sample, "
          f"o {model.step_fixed_s * 1e3:.3f} ms, sync {model.sync_s * 1e3:.3f} ms, slowdown {model.slowdown}, alpha {model.latency_s * 1e6:.1f} us, "
          f"B {model.bus_bytes_per_s / 1e9:.3f} GB/s")
    print(f"{'set':9} {'N':>2} {'batch':>5} {'accum':>5} {'measured/s':>11} {'predicted/s':>11} {'error':>7}")
    worst = 0.0
    for label, configs in (("fit", fit_on), ("held-out", held_out)):
        for n, b, k in configs:
            measured = fastest[n, b, k].samples_per_sec
            predicted = model.samples_per_sec(n, b, k)
            error = predicted / measured - 1
            if label == "held-out":
                worst = max(worst, abs(error))
            print(f"{label:9} {n:>2} {b:>5} {k:>5} {measured:>11,.0f} {predicted:>11,.0f} {error:>+7.1%}")
    print(f"\nworst held-out error {worst:.1%} (target {TARGET:.0%}): {'PASS' if worst <= TARGET else 'MISS'}")
    print(f"load average {load_after[0]:.2f} (1 min) {load_after[1]:.2f} (5 min) after; "
          f"{time.monotonic() - start:.0f} s in all")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
