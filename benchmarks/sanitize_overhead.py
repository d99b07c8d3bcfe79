"""What the sanitizer costs: `ddplab new`'s template under `ddplab launch` (or a `ddplab train` recipe), with the
sanitizer (the default window, --sanitize-steps 50) and without it (--sanitize-steps 0), paired rounds in one run,
the order alternated.

    python benchmarks/sanitize_overhead.py [--rounds 6] [--epochs 10] [--nproc 2] [--workload template|linear|mlp|gpt]
                                           [--src DIR]

--src: the ddplab source tree the runs use (default: this checkout's src/), to measure another commit's sanitizer
with the same benchmark (a `git worktree` of it). --base DIR: another source tree (a `git worktree` of an earlier
commit's) whose sanitized run joins each round too, its own code per step printed beside this one's with their
ratio: a change's effect measured side by side in one run. The template runs unchanged. Each rank's step times come from an optimizer step hook of the benchmark's own (a
sitecustomize.py on the ranks' PYTHONPATH, which ddplab's bootstrap runs after its own), the same in both variants.
Printed, per round and then as the median of the per-round ratios sanitized/plain with a 95 % sign-test interval:
  window  the time from the end of step 1 to the end of step N+1 (rank 0): N steps with everything the sanitizer
          does in them (each batch's fingerprints, the parameter digests at steps 1, 2 and N, the observation
          files, the hooks' removal); step 1 and its warm-up left out
  after   the median step after the window (from step N+10 to the end): what stays is the audit hook's one test per
          event, nothing per step
  wall    the whole `ddplab launch --json` run (start-up, the script, the findings read after it)
Whole runs on a shared machine differ by more than the sanitizer costs, so the same hook also times the sanitizer's
own code directly in the sanitized runs (every entry point it runs in the script's thread: the step hook with the
checks' step work and the files, the DataLoader/DistributedSampler/DDP hooks, the write hook's recording; an inner
call inside an outer one counted once): printed as microseconds per step of the window and as a share of the plain
runs' median step in the window, less the timer's own reads of the clock (a system call of about 2 us on a VM,
measured in each rank: one in each timed call's figure, two more for each timed call inside it; the figure with
them left in, as this benchmark printed it before, is printed too). That time is the thread's CPU time
(time.thread_time), not the clock's: on a
shared machine a clock also counts the moments another process held the core, the CPU time does not. The plain
step it is set against is measured both ways (the clock's median step, and the main thread's CPU time per step).
What this does not see: the forward hooks' cost inside PyTorch's module call (a module with hooks leaves its fast
path), measured in one process by benchmarks/sanitize_inprocess.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_raw import median_interval  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")
TIMER = r'''
import atexit, json, os, time

# A rank of `ddplab launch` is a new interpreter, where this file runs (LOCAL_RANK set). A rank of `ddplab train` is
# a fork of ddplab's agent, where this file ran once before the fork: the hooks it installs there (the step timer once
# torch.optim is imported, the sanitizer's entry points timed) the forks inherit, each with figures of its own; a fork
# ends with os._exit(), so it writes them from multiprocessing's finalizers (registered at its first step: a fork's
# bootstrap clears those registered before it runs), a new interpreter at exit.
if os.environ.get("BENCH_STEP_TIMES"):
    _first_pid = os.getpid()
    _times, _cpu = [], []

    def _forked():  # figures of its own: a fork that never steps (a DataLoader worker) writes nothing
        _times.clear()
        _cpu.clear()
        _own.update(s=0.0, calls=0, inner=0, depth=0, start_s=0.0, by={})

    def _attach(module):
        def _stamp(opt, args, kwargs):
            _times.append(time.perf_counter())
            _cpu.append(time.thread_time())
            if len(_times) == 1 and os.getpid() != _first_pid:  # a forked rank's first step: it runs no atexit
                from multiprocessing import util

                util.Finalize(None, _write, exitpriority=10)

        module.register_optimizer_step_post_hook(_stamp)

    def _write():
        if not _times:
            return
        with open(os.path.join(os.environ["BENCH_STEP_TIMES"], f"rank{os.environ['RANK']}.json"), "w") as f:
            json.dump({"clock": _times, "cpu": _cpu}, f)
        if rankside._window is not None:
            with open(os.path.join(os.environ["BENCH_STEP_TIMES"], f"own{os.environ['RANK']}.json"), "w") as f:
                json.dump(_own, f)

    def _before_destroy(dist):
        # written again as the rank leaves its group: elastic may end a forked rank whose function has returned
        # before its finalizers run
        destroy = dist.destroy_process_group

        def destroy_process_group(*args, **kwargs):
            _write()
            return destroy(*args, **kwargs)

        dist.destroy_process_group = destroy_process_group

    from ddplab import afterimport

    afterimport.when_imported("torch.optim.optimizer", _attach, "benchmark step timer")
    afterimport.when_imported("torch.distributed", _before_destroy, "benchmark step timer's write")
    atexit.register(_write)
    os.register_at_fork(after_in_child=_forked)

    # The sanitizer's own time, when it runs: its entry points wrapped before torch is imported (they are bound
    # when the script imports torch and builds its DDP), the outermost call timed.
    from ddplab.sanitize import paramsync, rankside, sameprint, sharedwrite

    _own = {"s": 0.0, "calls": 0, "inner": 0, "depth": 0, "start_s": 0.0, "by": {}}
    # what one read of the clock itself costs (a system call: about 2 us on a VM): each timed call's figure holds
    # one, and one more pair for each timed call inside it
    _reads = []
    for _ in range(201):
        _a = time.thread_time()
        _reads.append(time.thread_time() - _a)
    _own["clock_s"] = sorted(_reads)[100]

    def _timed(function, label):
        def timed(*args, **kwargs):
            _own["depth"] += 1
            if _own["depth"] > 1 and rankside._window.step:
                _own["inner"] += 1
            start = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                _own["depth"] -= 1
                if _own["depth"] == 0:
                    spent = time.thread_time() - start
                    if rankside._window.step == 0 and label != "_after_step":  # start-up: imports' opens
                        _own["start_s"] += spent
                    else:
                        _own["s"] += spent
                        _own["calls"] += 1
                        _own["by"][label] = _own["by"].get(label, 0.0) + spent
        return timed

    for owner, name in ((rankside.Window, "_after_step"), (rankside.Observer, "guarded"),
                        (paramsync.Observer, "_enter"), (paramsync.Observer, "_leave"),
                        (sharedwrite.Observer, "_opened"), (sameprint.Observer, "_printed"),
                        (sameprint.Observer, "_logged")):
        setattr(owner, name, _timed(getattr(owner, name), name))
'''


def one_run(folder: Path, steps: int, epochs: int, nproc: int, window: int, workload: str, src: str) -> dict:
    times = Path(tempfile.mkdtemp(dir=folder, prefix="times-"))
    env = {**os.environ, "NO_COLOR": "1", "OMP_NUM_THREADS": "1", "BENCH_STEP_TIMES": str(times),
           "PYTHONPATH": os.pathsep.join([src, str(folder / "timer")])}
    if workload == "template":
        command = ["launch", "--json", "--no-lint", "--nproc", str(nproc), "--sanitize-steps", str(steps), "train.py",
                   "--epochs", str(epochs), "--checkpoint-dir", str(tempfile.mkdtemp(dir=folder, prefix="ckpt-"))]
    else:
        command = ["train", workload, "--json", "--nproc", str(nproc), "--sanitize-steps", str(steps),
                   "--epochs", str(epochs)]
    ran = subprocess.run([sys.executable, "-m", "ddplab", *command], cwd=folder, env=env, capture_output=True,
                         text=True, timeout=600)
    if ran.returncode != 0:
        raise SystemExit(f"ddplab {' '.join(command)} failed ({ran.returncode}):\n{ran.stderr[-3000:]}")
    result = json.loads(ran.stdout)
    if steps and (result["sanitize"] is None or result["sanitize"]["findings"]):
        raise SystemExit(f"{workload} is not clean under the sanitizer: {result['sanitize']}")
    stamps = json.loads((times / "rank0.json").read_text())
    t, cpu = stamps["clock"], stamps["cpu"]
    if len(t) < window + 12:
        raise SystemExit(f"{workload}: {len(t)} steps, fewer than the window and 12 more: give more --epochs")
    gaps = [b - a for a, b in zip(t, t[1:])]
    own = json.loads((times / "own0.json").read_text()) if steps else {"s": 0.0, "calls": 0}
    # the timer's own reads of the clock, not the sanitizer's: one per timed call, two per timed call inside one
    clocks = own.get("clock_s", 0.0) * (own["calls"] + 2 * own.get("inner", 0))
    return {"window_s": t[window] - t[0], "after_ms": 1e3 * statistics.median(gaps[window + 10:]),
            "wall_s": result["seconds"], "steps": len(t), "window_step_ms": 1e3 * statistics.median(gaps[:window]),
            "window_cpu_ms": 1e3 * (cpu[window] - cpu[0]) / window,
            "own_s": own["s"] - clocks, "own_raw_s": own["s"], "own_calls": own["calls"],
            "own_start_s": own.get("start_s", 0.0), "own_by": own.get("by", {}),
            "clock_us": 1e6 * own.get("clock_s", 0)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--epochs", type=int, default=10,
                   help="epochs (the template: 32 steps each at 2 ranks; linear: 64; mlp: 32; gpt: see its --help)")
    p.add_argument("--workload", default="template", choices=["template", "linear", "mlp", "gpt"],
                   help="`ddplab new`'s template under `ddplab launch`, or a `ddplab train` recipe")
    p.add_argument("--src", default=SRC, help="the ddplab source tree to run (default: this checkout's)")
    p.add_argument("--base", help="another source tree (an earlier commit's) to run sanitized in each round too")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--window", type=int, default=50, help="--sanitize-steps of the sanitized runs")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddplab-sanitize-overhead-") as tmp:
        folder = Path(tmp)
        (folder / "timer").mkdir()
        (folder / "timer" / "sitecustomize.py").write_text(TIMER)
        made = subprocess.run([sys.executable, "-m", "ddplab", "new", "train.py"], cwd=folder, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(Path(args.src).resolve())})
        if made.returncode != 0:
            raise SystemExit(made.stderr)
        ratios: dict[str, list[float]] = {"window_s": [], "after_ms": [], "wall_s": []}
        own_us, share, share_cpu, base_us, raw_us, base_raw_us = [], [], [], [], [], []
        src = str(Path(args.src).resolve())
        for r in range(args.rounds):
            got = {}
            runs = [(args.window, src), (0, src)] + ([(args.window, str(Path(args.base).resolve()))] if args.base else [])
            for steps, tree in runs if r % 2 == 0 else reversed(runs):
                key = "base" if tree != src else steps
                got[key] = one_run(folder, steps, args.epochs, args.nproc, args.window, args.workload, tree)
            on, off = got[args.window], got[0]
            if args.base:
                base_us.append(1e6 * got["base"]["own_s"] / args.window)
                base_raw_us.append(1e6 * got["base"]["own_raw_s"] / args.window)
                print(f"round {r + 1}: own code {1e6 * on['own_s'] / args.window:.1f} us per step, the base's "
                      f"{base_us[-1]:.1f} (with the timer's reads of the clock: "
                      f"{1e6 * on['own_raw_s'] / args.window:.1f} and {base_raw_us[-1]:.1f}; the base by entry point, ms: "
                      f"{', '.join(f'{k} {v * 1e3:.1f}' for k, v in got['base']['own_by'].items())})", flush=True)
            for key in ratios:
                ratios[key].append(on[key] / off[key])
            own_us.append(1e6 * on["own_s"] / args.window)
            raw_us.append(1e6 * on["own_raw_s"] / args.window)
            share.append(own_us[-1] / 1e3 / off["window_step_ms"])
            share_cpu.append(own_us[-1] / 1e3 / off["window_cpu_ms"])
            print(f"round {r + 1}: window {on['window_s'] * 1e3:.1f} vs {off['window_s'] * 1e3:.1f} ms, after "
                  f"{on['after_ms']:.3f} vs {off['after_ms']:.3f} ms/step, wall {on['wall_s']:.2f} vs "
                  f"{off['wall_s']:.2f} s ({on['steps']} steps); the sanitizer's own code {on['own_s'] * 1e3:.2f} ms "
                  f"in {on['own_calls']} calls from the first step on (by entry point, ms: "
                  f"{', '.join(f'{k} {v * 1e3:.1f}' for k, v in on['own_by'].items())}), "
                  f"{on['own_start_s'] * 1e3:.1f} ms before it; the timer's clock read {on['clock_us']:.2f} us, "
                  f"taken out; the plain step {off['window_step_ms']:.3f} ms "
                  f"(clock), {off['window_cpu_ms']:.3f} ms (CPU)", flush=True)
    print(f"{args.workload} at {args.src}: sanitized / plain, median of {args.rounds} paired rounds (95 % sign-test "
          f"interval), {args.nproc} ranks, window {args.window} steps:")
    for key, label in (("window_s", "the window's steps"), ("after_ms", "a step after the window"),
                       ("wall_s", "the whole launch")):
        median, low, high = median_interval(ratios[key])
        print(f"  {label:<24} {median:.3f}  ({low:.3f}..{high:.3f})")
    median, low, high = median_interval(own_us)
    print(f"the sanitizer's own code in the window (CPU time): {median:.1f} us per step ({low:.1f}..{high:.1f}), "
          f"{100 * statistics.median(share):.2f} % of a plain step in the window by the clock "
          f"({100 * min(share):.2f}..{100 * max(share):.2f} % over the rounds), {100 * statistics.median(share_cpu):.2f} "
          f"% of its CPU time ({100 * min(share_cpu):.2f}..{100 * max(share_cpu):.2f} %); with the timer's own reads "
          f"of the clock left in, as measured before they were taken out: {statistics.median(raw_us):.1f} us per step")
    if args.base:
        median, low, high = median_interval([a / b for a, b in zip(own_us, base_us)])
        print(f"the same, this tree / the base ({args.base}, {statistics.median(base_us):.1f} us per step, "
              f"{statistics.median(base_raw_us):.1f} with the clock's reads): {median:.3f} ({low:.3f}..{high:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
