"""What the per-step stop check (ddplab.resume.StopFlag: a small all-reduce every N steps, in the background)
costs a training: `ddplab train mlp --nproc 2` with the check (as shipped) against the same run without it
(DDPLAB_NO_STOP_CHECK=1), back to back, order alternated per round.

    python benchmarks/stop_check_cost.py                 # 7 rounds
    python benchmarks/stop_check_cost.py --rounds 15 --nproc 3
    python benchmarks/stop_check_cost.py --in-run        # within one run: blocks of steps with and without

--in-run: whole runs differ by more than 1 % on a shared machine (other load comes and goes between them), so the
same 2 ranks (under torchrun) train the mlp recipe's model, data and optimizer and alternate blocks of 20 steps with
the check and 20 without, 30 blocks each; the ratio is the median step with the check (the check included) over the
median step without, per pair of neighbouring blocks, and the check's own time (every call timed, the steps
without a collective included) is reported as a share of the time of the steps it ran in.

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
from inrun import MLP_STEPS, SRC, run_ranks  # noqa: E402


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


IN_RUN = MLP_STEPS + r"""
from ddplab import resume

flag = resume.StopFlag()
check_ms = []

def check():
    start = time.perf_counter()
    flag.agreed()
    check_ms.append((time.perf_counter() - start) * 1e3)

checked_ms, pairs = steps(50, check), []  # warm-up
for block in range(30):
    got = {}
    for checked in ((True, False) if block % 2 == 0 else (False, True)):
        times = steps(20, check if checked else None)
        checked_ms += times if checked else []
        got[checked] = statistics.median(times)
    pairs.append(got[True] / got[False])
step_ms = statistics.median([statistics.median(steps(20)) for _ in range(3)])  # every rank: DDP steps are collectives
flag.close()
if dist.get_rank() == 0:
    print(json.dumps({"pairs": pairs, "check_share": sum(check_ms) / sum(checked_ms),
                      "check_us": 1e3 * statistics.mean(check_ms), "step_ms": step_ms}))
dist.destroy_process_group()
"""


def in_run(nproc: int) -> int:
    got = run_ranks(IN_RUN, nproc)
    median, low, high = median_interval(got["pairs"])
    print(f"mlp recipe at {nproc} ranks, 30 pairs of 20-step blocks in one run: median step with the check / "
          f"without {median:.4f} (95 % {low:.4f}..{high:.4f}); the check itself: {got['check_us']:.0f} us per "
          f"step on average, {100 * got['check_share']:.2f} % of the steps' time (median step "
          f"{got['step_ms']:.2f} ms)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--in-run", action="store_true", help="blocks with and without the check in one run (see above)")
    p.add_argument("extra", nargs="*", help="recipe flags, e.g. --epochs 2")
    args = p.parse_args()
    if args.in_run:
        return in_run(args.nproc)
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
