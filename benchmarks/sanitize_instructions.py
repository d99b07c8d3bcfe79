"""What the sanitizer's window costs a step, counted in instructions: the template's step of sanitize_inprocess.py
(a 16-feature linear model, batch 64, SGD with momentum, a DistributedSampler, DDP on a 1-rank gloo group) run
under valgrind's callgrind, plain, with every check of a CPU run, with none (the window's step hook and its
file), and with each check alone (the window's cost in it).

    python benchmarks/sanitize_instructions.py [--window 50] [--base DIR] [--jobs 2]

Timed figures on a shared 2-core VM move by more than the sanitizer costs (the same plain step measured 820 and
1,450 us of CPU within a minute: sanitize_inprocess.py); an instruction count hardly does: the plain run counted
twice differs by under 0.1 %, a sanitized one by up to 0.25 % of the plain step (its writer thread's turns). What
it cannot see is what instructions do not show (cold caches, a system call's time), so the timed benchmarks stay
the figures of record for time; this one tells whether a change cut the work, and which check costs what.
Counted: only the steps (callgrind's count is turned on at the first step's start and off after the last, by
callgrind_control; what the two calls themselves add is counted by an empty pair and taken off), every thread (the
rank's writer thread too). `--base DIR` counts another tree's sanitizer (its src/) beside this one's, in the same
run. Needs valgrind (`apt-get install valgrind`); each run takes about 40 s (torch's import under valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


def child(variant: str, steps: int) -> None:
    """In valgrind: one warm-up block, then the counted one (or an empty pair of counts, for `empty`)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000), RANK="0", WORLD_SIZE="1")
    sys.path.insert(0, HERE)
    import sanitize_inprocess as bench
    import torch
    import torch.distributed as dist

    def count() -> float:  # on at the first call, off at the second
        count.on = not getattr(count, "on", False)
        subprocess.run(["callgrind_control", "-i", "on" if count.on else "off", str(os.getpid())], check=True,
                       capture_output=True)  # fmt: skip
        return 0.0

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    checks = () if variant in ("plain", "empty", "window") else bench.CHECKS if variant == "all" else (variant,)
    sanitize = variant not in ("plain", "empty")
    bench.block(torch, sanitize, steps, checks)
    if variant == "empty":
        count(), count()
    else:
        bench.block(torch, sanitize, steps, checks, clock=count)
    dist.destroy_process_group()


def counted(variant: str, src: str, steps: int) -> int:
    """Instructions callgrind counted in one child run of `variant` against the ddplab in `src`."""
    with tempfile.TemporaryDirectory(prefix="ddplab-sanitize-instructions-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", sys.executable]
        run = subprocess.run(
            [*cmd, __file__, "--child", variant, "--window", str(steps - 1)], env=env, capture_output=True, text=True
        )
        found = re.search(r"Collected : (\d+)", run.stderr)
        if run.returncode != 0 or found is None:
            tail = run.stderr.strip().splitlines()[-3:]
            raise SystemExit(f"sanitize_instructions: the {variant} run failed: {' | '.join(tail)}")
        return int(found.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=int, default=50)
    p.add_argument("--base", help="another tree (its root): its sanitizer counted beside this one's")
    p.add_argument("--jobs", type=int, default=2, help="valgrind runs at once")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    steps = args.window + 1
    if args.child:
        child(args.child, steps)
        return 0
    if subprocess.run(["sh", "-c", "command -v valgrind callgrind_control"], capture_output=True).returncode:
        print("sanitize_instructions: needs valgrind and callgrind_control: apt-get install valgrind", file=sys.stderr)
        return 2
    sys.path.insert(0, HERE)
    from sanitize_inprocess import CHECKS

    trees = {"this tree": SRC} | ({"base": os.path.join(os.path.abspath(args.base), "src")} if args.base else {})
    jobs = [("plain", SRC), ("empty", SRC)] + [(v, src) for src in trees.values() for v in ("all", "window", *CHECKS)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        found = dict(zip(jobs, pool.map(lambda job: counted(job[0], job[1], steps), jobs)))
    toggles = found[("empty", SRC)]
    plain = (found[("plain", SRC)] - toggles) / steps
    print(f"{steps} template steps (window {args.window}) in one process, instructions counted by callgrind")
    print(f"  plain step                {plain:12,.0f} a step")
    for name, src in trees.items():
        print(f"  {name} ({src})")
        for variant in ("all", "window", *CHECKS):
            added = (found[(variant, src)] - toggles) / steps - plain
            label = {"all": "every check", "window": "the window, no check"}.get(variant, f"{variant} alone")
            print(f"    {label:22s} {added:+12,.0f} a step  {100 * added / plain:+6.2f} % of the plain step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
