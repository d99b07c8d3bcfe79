"""Does `ddplab bench` distort what it measures? Its all_reduce busbw against a minimal raw torch.distributed loop.

    python benchmarks/bench_vs_raw.py                 # 2 gloo ranks, 64K..64M, 7 rounds (about 2 minutes)
    python benchmarks/bench_vs_raw.py --rounds 3 --nproc 3
    python benchmarks/bench_vs_raw.py --rounds 30 --iters 100 --min-bytes 1M  # to settle the target (~15 min)
    python benchmarks/bench_vs_raw.py --self-test ...   # the raw loop against itself: the noise floor

Each round runs both sweeps at the same sizes, alternating which goes first (the machine is shared and noisy);
per size the two runs of each round are paired. Shown: the geometric mean of the per-round ratios with a Student-t
95 % interval, and their median with a distribution-free 95 % interval (sign test). The verdict uses the median:
on a small shared VM the noise is heavy-tailed — a burst of interference makes one round 2-3x off, which widens a
mean's interval for every size — and the median's interval assumes nothing about the noise's shape.
Target: ddplab within 5 % of raw at sizes >= 1 MiB; the script says UNCLEAR when noise hides the answer.
The raw loop is this file run under torchrun (`--raw-worker`): ones, warm-up, barrier, N timed all_reduce calls,
time averaged over ranks, busbw = S/t · 2(n−1)/n — what every hand-written benchmark does.
"""

from __future__ import annotations

import argparse
import json
import math
from math import comb
import os
import socket
import statistics
import subprocess
import sys
import time


def raw_worker(sizes: list[int], iters: int, warmup: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    n = dist.get_world_size()
    busbw = {}
    for size in sizes:
        x = torch.ones(size // 4)
        for _ in range(warmup):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(t)
        busbw[size] = size / (t.item() / n) / 1e9 * 2 * (n - 1) / n
    if dist.get_rank() == 0:
        print(json.dumps(busbw), flush=True)
    dist.destroy_process_group()


# Student's t, two-sided 95 %, by degrees of freedom (rounds − 1): few rounds deserve wider intervals.
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20,
       12: 2.18}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_raw(args, sizes) -> dict[int, float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
           f"--master-port={free_port()}", __file__, "--raw-worker", ",".join(map(str, sizes)),
           str(args.iters), str(args.warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                         timeout=600).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("{")][-1]
    return {int(k): v for k, v in json.loads(line).items()}


def run_ddplab(args) -> dict[int, float]:
    cmd = [sys.executable, "-m", "ddplab", "bench", "all_reduce", "--nproc", str(args.nproc), "-b", args.min_bytes,
           "-e", args.max_bytes, "-f", "4", "-n", str(args.iters), "-w", str(args.warmup), "--json"]
    data = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout)
    return {row["size"]: row["busbw"] for row in data["rows"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--min-bytes", default="64K")
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--self-test", action="store_true",
                   help="run the raw loop in place of ddplab too: the intervals then show the machine's own noise, "
                        "the narrowest any comparison here can give")
    args = p.parse_args()

    from ddplab.perf.bench import format_size, parse_size, plan_sizes

    sizes, _ = plan_sizes(parse_size(args.min_bytes), parse_size(args.max_bytes), 4, "float32", args.nproc)
    seen = {"ddplab": {s: [] for s in sizes}, "raw": {s: [] for s in sizes}}
    for round_ in range(args.rounds):
        order = ["ddplab", "raw"] if round_ % 2 == 0 else ["raw", "ddplab"]
        for who in order:
            got = run_ddplab(args) if who == "ddplab" and not args.self_test else run_raw(args, sizes)
            for s in sizes:
                seen[who][s].append(got[s])
        print(f"round {round_ + 1}/{args.rounds} (load {os.getloadavg()[0]:.1f}) ddplab/raw: " + ", ".join(
            f"{format_size(s)} {seen['ddplab'][s][-1]:.3f}/{seen['raw'][s][-1]:.3f}" for s in sizes), file=sys.stderr)

    load = os.getloadavg()
    print(f"all_reduce, {args.nproc} gloo ranks, {args.iters} calls after {args.warmup} warm-up, {args.rounds} "
          f"alternating rounds; load average {load[0]:.2f} now, {load[2]:.2f} over 15 min")
    if args.self_test:
        print("SELF-TEST: the 'ddplab' column is the raw loop too (the machine's noise floor)")
    print("busbw GB/s: median over rounds; ratio: each round's ddplab/raw, as a geometric mean (t interval) and as a "
          "median (sign-test interval); both intervals 95 %")
    print(f"{'size':>6} {'ddplab':>8} {'raw':>8}  {'gmean':>6}  {'interval':<12}  {'median':>6}  interval")
    verdicts = []
    for s in sizes:
        ratio, low_t, high_t = paired_ratio(seen["ddplab"][s], seen["raw"][s])
        median, low, high = median_interval([a / b for a, b in zip(seen["ddplab"][s], seen["raw"][s])])
        print(f"{format_size(s):>6} {statistics.median(seen['ddplab'][s]):8.3f} {statistics.median(seen['raw'][s]):8.3f}"
              f"  {ratio:6.3f}  {low_t:.3f}..{high_t:.3f}  {median:6.3f}  {low:.3f}..{high:.3f}")
        if s >= 1 << 20:
            verdicts.append("within" if 0.95 <= low and high <= 1.05 else
                            "outside" if high < 0.95 or low > 1.05 else "unclear")
    verdict = "outside" if "outside" in verdicts else "unclear" if "unclear" in verdicts else "within"
    print(f"sizes >= 1M: {verdict.upper()}" + {
        "within": ": ddplab's busbw is within 5 % of the raw loop's",
        "outside": ": ddplab's busbw differs from the raw loop's by more than 5 %",
        "unclear": ": the interval is wider than ±5 % — the machine is too noisy to tell; rerun it when quieter "
                   "or with more --rounds"}[verdict])
    return 0 if verdict == "within" else 1


def median_interval(ratios: list[float]) -> tuple[float, float, float]:
    """Median of the ratios with a distribution-free 95 % interval: the k-th smallest and k-th largest, k the
    largest count such that a binomial(n, 1/2) falls below k with probability <= 2.5 % (the sign test's interval).
    Needs 6 rounds or more; fewer give no 95 % interval (reported as 0..inf)."""
    ordered, n = sorted(ratios), len(ratios)
    k, tail = 0, 0.0
    while tail + comb(n, k) / 2 ** n <= 0.025:
        tail += comb(n, k) / 2 ** n
        k += 1
    if k == 0:
        return statistics.median(ordered), 0.0, math.inf
    return statistics.median(ordered), ordered[k - 1], ordered[n - k]


def paired_ratio(ours: list[float], raw: list[float]) -> tuple[float, float, float]:
    """Geometric mean of the per-round ratios with a 95 % interval. Pairing the two runs of a round cancels slow
    drifts of the machine's load; logs make 0.5× and 2× symmetric."""
    logs = [math.log(a / b) for a, b in zip(ours, raw)]
    mean = statistics.fmean(logs)
    df = len(logs) - 1
    t95 = T95.get(df, 2.1 if df < 30 else 2.0)
    half = t95 * statistics.stdev(logs) / math.sqrt(len(logs)) if df else math.inf
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--raw-worker":
        raw_worker([int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(main())
