"""Does every run end cleanly? N short runs of the `ddplab new` script and of each recipe under plain torchrun,
with competing CPU load, counting how each one ended (issue #21; the mechanism is in docs/teardown.md).

    python benchmarks/teardown_stress.py                                   # 100 template runs, 50 per recipe
    python benchmarks/teardown_stress.py --template-runs 20 --recipe-runs 10 --recipes linear --parallel 2
    python benchmarks/teardown_stress.py --script /tmp/old_train.py --recipe-runs 0    # any script, e.g. an old one

Every run: `python -m torch.distributed.run --standalone --nproc-per-node 2 ...` (plain torchrun, no ddplab
launcher), OMP_NUM_THREADS=1, tiny flags (one short epoch), a core-file limit of 0, while --load processes spin
`while True: pass`. --parallel K runs K of them at once (more load still). Each run is counted as:
  ok      exit code 0 and no "terminate called" on its output
  abort   a rank died of SIGABRT / printed "terminate called ..." (the teardown abort), with whether every rank had
          reported success first (the training itself worked)
  hang    it overstayed --timeout and was killed (a teardown that waits forever counts here)
  fail    any other non-zero exit
Target (issue #21): 0 aborts and 0 hangs in 100 template runs and in 50 runs of each recipe. Kept: the output of
every run that was not ok, under --keep (default /tmp/teardown_stress).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Small flags: each run spends its time starting, training a few seconds, and tearing down - the part under test.
RECIPE_FLAGS = {
    "linear": ["--epochs", "1", "--samples", "1024"],
    "mlp": ["--epochs", "1", "--samples", "1024"],
    "gpt": ["--max-steps", "4", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--block-size", "32",
            "--batch-size", "8", "--log-every", "2"],
}
TEMPLATE_FLAGS = ["--epochs", "1"]
# What each program prints once its training is over, on rank 0: "the ranks reported success".
SUCCESS_TEXT = {"template": "epoch 1/1", "recipe": "PASS"}
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def run_once(program: list[str], cwd: Path, timeout: float, success_text: str, python: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *program]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_no_core_files)
    try:
        out, _ = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both ranks: they share its session
        out, _ = proc.communicate()
        hung = True
    rc = proc.returncode
    aborted = "terminate called" in out or "SIGABRT" in out or "exitcode  : -6" in out
    kind = "hang" if hung else "abort" if aborted else "ok" if rc == 0 else "fail"
    return {"kind": kind, "rc": rc, "seconds": round(time.monotonic() - start, 1),
            "succeeded_first": success_text in out, "output": out}


def _no_core_files() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort must not fill the disk with 250 MB cores


def stress(name: str, program: list[str], runs: int, parallel: int, timeout: float, success_text: str,
           python: str, keep: Path) -> dict:
    counts: Counter = Counter()
    succeeded_then_aborted = 0
    with tempfile.TemporaryDirectory(prefix=f"teardown-{name}-") as tmp, ThreadPoolExecutor(parallel) as pool:
        def one(i: int) -> dict:
            cwd = Path(tmp) / str(i)
            cwd.mkdir()
            return run_once(program, cwd, timeout, success_text, python)

        for i, result in enumerate(pool.map(one, range(runs))):
            counts[result["kind"]] += 1
            if result["kind"] != "ok":
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{name}-{i}-{result['kind']}.txt").write_text(result["output"])
                succeeded_then_aborted += result["kind"] == "abort" and result["succeeded_first"]
            print(f"  {name} {i + 1}/{runs}: {result['kind']} rc={result['rc']} {result['seconds']}s", file=sys.stderr,
                  flush=True)
    return {"program": name, "runs": runs, **{k: counts.get(k, 0) for k in ("ok", "abort", "hang", "fail")},
            "aborts_after_success": succeeded_then_aborted}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--template-runs", type=int, default=100)
    p.add_argument("--recipe-runs", type=int, default=50)
    p.add_argument("--recipes", default="linear,mlp,gpt")
    p.add_argument("--script", help="stress this script instead of a fresh `ddplab new` one (e.g. an older copy)")
    p.add_argument("--load", type=int, default=1, help="busy-looping processes started alongside (default: 1)")
    p.add_argument("--parallel", type=int, default=1, help="runs at once (default: 1)")
    p.add_argument("--timeout", type=float, default=300, help="seconds before a run counts as a hang")
    p.add_argument("--python", default=sys.executable, help="interpreter whose torch runs (default: this one)")
    p.add_argument("--keep", type=Path, default=Path("/tmp/teardown_stress"), help="outputs of runs not ok")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` stops the load processes

    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="teardown-script-") as tmp:
            if args.template_runs:
                script = Path(args.script).resolve() if args.script else Path(tmp) / "train_ddp.py"
                if not args.script:
                    subprocess.run([sys.executable, "-m", "ddplab", "new", str(script)], check=True,
                                   stdout=subprocess.DEVNULL)
                results.append(stress("template", [str(script), *TEMPLATE_FLAGS], args.template_runs, args.parallel,
                                      args.timeout, SUCCESS_TEXT["template"], args.python, args.keep))
            for name in [r for r in args.recipes.split(",") if r] if args.recipe_runs else []:
                results.append(stress(name, ["-m", f"ddplab.recipes.{name}", *RECIPE_FLAGS[name]], args.recipe_runs,
                                      args.parallel, args.timeout, SUCCESS_TEXT["recipe"], args.python, args.keep))
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
    summary = {"load": args.load, "parallel": args.parallel, "results": results}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{'program':10} {'runs':>5} {'ok':>5} {'abort':>6} {'hang':>5} {'fail':>5}  aborts after success")
        for r in results:
            print(f"{r['program']:10} {r['runs']:>5} {r['ok']:>5} {r['abort']:>6} {r['hang']:>5} {r['fail']:>5}  "
                  f"{r['aborts_after_success']}")
    return 0 if all(r["ok"] == r["runs"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
