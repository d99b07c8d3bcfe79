"""Write the outputs of real runs that tests only read, to tests/logs/made/: the consoles of failing 2-rank torchrun
runs that tests/explain/test_explain_read.py explains (NAME.log); `ddplab bench`'s JSON that tests/perf/test_scale.py
gives `ddplab scale --bench`, and the check, bench and train outputs benchmarks/gpu_report.py renders in
tests/test_gpu_validate.py (NAME.json). Run it after changing one of the scripts below (the tests refuse a log whose
script changed since it was made) or to see a newer torch's output:

    python tools/make_test_logs.py              # every one
    python tools/make_test_logs.py name_error   # one

Each run is what the tests used to start themselves (2-3 s of CPU each, for a text that only explain reads): plain
torchrun, 2 CPU ranks on gloo, `--tee 3` (every rank's lines with `[defaultN]:`), the script in tests/scripts/. The
log keeps the console verbatim below four header lines: how it was made, the script's sha256, torch's version.
One real run per reader stays in the tests (crash_ddp.py's console, made at every run), so a torch whose output
explain no longer reads is still caught there; bench's JSON keys are pinned by tests/perf/test_bench.py's real runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
OUT = ROOT / "tests" / "logs" / "made"

# name -> (script, torchrun options, a text the console must hold: a run that raced the other way is made again)
LOGS = {
    "name_error": ("name_error.py", [], "NameError"),
    "rank0_eval": ("rank0_eval.py", [], "Traceback"),
    # rank 1 aborts at exit nearly always, not quite (tests/test_teardown.py): the log is the case where it did
    "rank0_collective_peer_aborts": ("rank0_collective_peer_aborts.py", [], "(SIGABRT)"),
    "crash_restart": ("crash_restart.py", ["--max-restarts", "1"], "Traceback"),
}


TINY_GPT = ["gpt", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--block-size", "16"]
# name -> (`ddplab ARGS` whose --json output is kept, what that output must hold or the run is made again).
# bench_all_reduce: all_reduce over 4K..4M on 2 CPU ranks for test_scale.py (a loaded machine can give times that do
# not grow with size: no ring fit). gpu_*: what benchmarks/gpu_validate.sh runs, at CPU size, for the report that
# tests/test_gpu_validate.py renders ({tmp}: a folder of the run's own).
JSON = {
    "bench_all_reduce": (
        ["bench", "all_reduce", "--nproc", "2", "-b", "4K", "-e", "4M", "-f", "4", "-n", "10"],
        lambda d: d.get("ring_fit"),
    ),
    "gpu_check": (["check", "--stages", "collectives"], lambda d: d["ok"]),
    "gpu_bench": (["bench", "-b", "1K", "-e", "4K", "all_reduce"], lambda d: d["status"] == "PASS"),
    "gpu_train_ddp": (
        ["train", *TINY_GPT, "--max-steps", "4", "--checkpoint-dir", "{tmp}/ck"],
        lambda d: True,  # exit 0 says it trained
    ),
}


def script_sha256(script: str) -> str:
    return hashlib.sha256((SCRIPTS / script).read_bytes()).hexdigest()


def run(script: str, options: list[str], deadline_s: float = 400) -> str:
    """The console of one real 2-rank torchrun run of SCRIPT, which must fail."""
    from ddplab.ports import free_port

    with tempfile.TemporaryDirectory(prefix="ddplab-made-") as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
        cmd += ["--master-port", str(free_port()), "--log-dir", tmp, "--tee", "3", *options, str(SCRIPTS / script)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(var, None)
        done = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=deadline_s
        )
    if done.returncode == 0:
        raise SystemExit(f"{script}: the run passed; it must fail\n{done.stdout[-2000:]}")
    return done.stdout


def make(name: str, tries: int = 5) -> Path:
    import torch

    script, options, must_hold = LOGS[name]
    for _ in range(tries):
        console = run(script, options)
        if must_hold in console:
            break
    else:
        raise SystemExit(f"{name}: {tries} runs, none printed {must_hold!r}")
    header = [
        f"# made-by: python tools/make_test_logs.py {name}",
        f"# command: torchrun --nproc-per-node 2 --tee 3 {' '.join(options)} tests/scripts/{script}".replace("  ", " "),
        f"# script-sha256: {script_sha256(script)}",
        f"# torch: {torch.__version__}",
    ]
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.log"
    path.write_text("\n".join(header) + "\n" + console)
    return path


def make_json(name: str, tries: int = 5) -> Path:
    command, good = JSON[name]
    for _ in range(tries):
        with tempfile.TemporaryDirectory(prefix="ddplab-made-") as tmp:
            args = [a.replace("{tmp}", tmp) for a in command] + ["--json"]
            done = subprocess.run([sys.executable, "-m", "ddplab", *args], capture_output=True, text=True, timeout=300)
        if done.returncode == 0 and good(json.loads(done.stdout)):
            break
    else:
        raise SystemExit(f"{name}: {tries} runs of ddplab {' '.join(command)}, none as wanted\n{done.stderr[-2000:]}")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(done.stdout)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = [*LOGS, *JSON]
    parser.add_argument("names", nargs="*", help=f"which (default: all): {', '.join(known)}")
    names = parser.parse_args().names or known
    if unknown := [n for n in names if n not in known]:
        parser.error(f"unknown: {', '.join(unknown)}: choose from {', '.join(known)}")
    for name in names:
        print(make(name) if name in LOGS else make_json(name))


if __name__ == "__main__":
    main()
