"""What `--profile` costs outside its window: the steady step time of a plain script under `ddplab launch` with
and without `--profile`, paired rounds in one run (target: <= 3 % slower).

    python benchmarks/profile_overhead.py [--rounds 5] [--steps 60]
    python benchmarks/profile_overhead.py --in-run     # within one 2-rank run: blocks with and without the hook

The window is steps 4-8 (3 warm-up steps, 5 profiled); the script's rank 0 times steps 12..end itself, so the
figure is the throughput after the window: the optimizer-step hook that stays installed, and whatever the profiler
left behind.

--in-run: whole runs differ by more than 3 % on a shared machine, so 2 ranks under torchrun (the mlp recipe's model,
data and AdamW, profhook armed as `--profile` arms it) go through the profiled window (steps 4-8, trace written),
then alternate 30 pairs of 20-step blocks with the hook left installed and with torch's global optimizer hooks
emptied; printed: the median ratio of the blocks' median steps, and the hook's own time per call (timed directly)
as a share of a step.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_raw import median_interval  # noqa: E402
from inrun import MLP_STEPS, run_ranks  # noqa: E402

PLANT = Path(__file__).resolve().parent.parent / "tests" / "scripts" / "profile_plant.py"

IN_RUN = r"""
from ddplab.perf import profhook
profhook.install()  # before torch: as the ranks' sitecustomize does it
""" + MLP_STEPS + r"""
import torch.optim.optimizer as optimizer_module

hooks = optimizer_module._global_optimizer_post_hooks  # torch's own registry of global step hooks
installed = dict(hooks)
steps(50)  # the window (steps 4-8) and its trace, then steady steps
assert os.path.exists(os.path.join(os.environ[profhook.DIR_ENV], f"rank{dist.get_rank()}.trace.json"))
pairs = []
for block in range(30):
    got = {}
    for hooked in ((True, False) if block % 2 == 0 else (False, True)):
        hooks.clear()
        hooks.update(installed if hooked else {})
        got[hooked] = statistics.median(steps(20))
    pairs.append(got[True] / got[False])
hooks.update(installed)
step_ms = statistics.median([statistics.median(steps(20)) for _ in range(3)])
start = time.perf_counter()
for _ in range(10000):
    profhook._after_step(opt, (), {})
hook_us = (time.perf_counter() - start) / 10000 * 1e6
dist.barrier()
if dist.get_rank() == 0:
    print(json.dumps({"pairs": pairs, "hook_us": hook_us, "step_ms": step_ms}))
dist.destroy_process_group()
"""


def in_run() -> None:
    with tempfile.TemporaryDirectory(prefix="ddplab-profile-overhead-") as folder:
        Path(folder, "config.json").write_text(json.dumps({"steps": 5, "skip": 3}))
        got = run_ranks(IN_RUN, 2, {"DDPLAB_PROFILE_DIR": folder})
    median, low, high = median_interval(got["pairs"])
    print(f"after the window, 30 pairs of 20-step blocks in one 2-rank run: median step with the hook / without "
          f"{median:.4f} (95 % {low:.4f}..{high:.4f}); the hook itself {got['hook_us']:.2f} us per step = "
          f"{100 * got['hook_us'] / 1e3 / got['step_ms']:.3f} % of a {got['step_ms']:.2f} ms step")


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
    ap.add_argument("--in-run", action="store_true", help="blocks with and without the hook in one run (see above)")
    args = ap.parse_args()
    if args.in_run:
        in_run()
        return
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
