"""Are the first timed sizes of `ddplab bench` slowed by a cold start? With and without the warm-up at the largest
and smallest sizes that runs before each op's first timed size (nccl-tests' order).

    python benchmarks/bench_warmup.py                    # 2 gloo ranks, 1K..256K, all_reduce + all_gather, 5 rounds
    python benchmarks/bench_warmup.py --rounds 9 --ops all_reduce all_gather reduce_scatter

Per op and round, the "first-size excess" is time(smallest size) / median time of the next three sizes: at sizes
this small a collective's time is nearly all latency, so a warm start reads about 1, a cold start well above.
Each round runs both variants, alternating which goes first (the machine is shared and noisy); shown: the median
excess over rounds and ops per variant, and how often the first size was the slowest of the first four.
"""

from __future__ import annotations

import argparse
import statistics

from ddplab.perf.bench import run_bench


def excess(result) -> list[tuple[float, bool]]:
    out = []
    for op in dict.fromkeys(r.op for r in result.rows):
        times = [r.time_us for r in result.rows if r.op == op][:4]
        out.append((times[0] / statistics.median(times[1:]), times[0] == max(times)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--ops", nargs="+", default=["all_reduce", "all_gather"])
    args = p.parse_args()
    sizes = [1024 << i for i in range(9)]  # 1K..256K
    seen = {True: [], False: []}
    for rnd in range(args.rounds):
        for ends in ((True, False) if rnd % 2 == 0 else (False, True)):
            run, result = run_bench(ops=args.ops, sizes=sizes, dtype="float32", nproc=args.nproc,
                                    warm_up_ends=ends)
            if result is None:
                raise SystemExit(f"bench failed: {run.summary()}")
            seen[ends] += excess(result)
            print(f"round {rnd + 1}, {'with' if ends else 'without'} the warm-up at both ends: "
                  + ", ".join(f"{x:.2f}" for x, _ in excess(result)), flush=True)
    for ends, label in ((False, "per-size warm-up only"), (True, "+ warm-up at largest, smallest size")):
        xs = seen[ends]
        print(f"{label:38}: median first-size excess {statistics.median(x for x, _ in xs):.2f}, first size the "
              f"slowest of four in {sum(s for _, s in xs)}/{len(xs)} op-runs")


if __name__ == "__main__":
    main()
