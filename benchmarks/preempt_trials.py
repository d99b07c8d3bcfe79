"""Is the state saved when the machine is taken away? Real processes, real signals, `ddplab launch` of a plain script
using ddplab.resume (tests/scripts/resumable.py: dropout, a shuffling sampler, momentum, an LR schedule).

    python benchmarks/preempt_trials.py                     # 20 trials of each kind at 2 and 3 ranks
    python benchmarks/preempt_trials.py --trials 3 --nproc 2

Two kinds of trial:
  sigterm  SIGTERM to `ddplab launch --grace 5` at a random step (after 2..40 steps of 20 ms): passes when it exits
           4 with "state saved at step N" and N >= the steps rank 0 had finished when the signal was sent, i.e. at
           most the step in progress is lost (lost = max(0, done - N)).
  sigkill  kill -9 of ddplab's whole session while rank 0 writes a 32 MiB checkpoint (its temporary file exists,
           a complete one is already there); then started again: passes when it says "resumed at step P", P the
           newest complete checkpoint's step (never the torn file). That run is then preempted itself (SIGTERM).
The bitwise equality of resumed runs with uninterrupted ones is tests/test_resume.py's.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "resumable.py"
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT / "src")}


def launch(nproc: int, folder: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ddplab", "launch", "--nproc", str(nproc), "--no-lint",
                             "--hang-timeout", "0", "--grace", "5", str(SCRIPT), "--ckpt", str(folder / "ckpt"),
                             "--losses", str(folder / "losses"), "--out", str(folder / "out"), "--epochs", "50",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)


def lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def wait(condition, proc: subprocess.Popen, timeout: float = 180) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def end(proc: subprocess.Popen, sig=signal.SIGKILL) -> str:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    out, err = proc.communicate(timeout=60)
    return out + err


def sigterm_trial(nproc: int, folder: Path) -> tuple[bool, str]:
    at = random.randint(2, 40)
    proc = launch(nproc, folder, "--sleep", "0.02")
    if not wait(lambda: lines(folder / "losses") >= at, proc):
        end(proc)
        return False, f"never reached step {at}"
    done = lines(folder / "losses")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=5 + 30)
    except subprocess.TimeoutExpired:
        end(proc)
        return False, "did not end"
    took = time.monotonic() - sent
    said = re.search(r"state saved at step (\d+):", out)
    if proc.returncode != 4 or not said:
        return False, f"exit {proc.returncode}: {(out + err)[-300:]}"
    saved = int(said.group(1))
    lost = max(0, done - saved)
    return lost <= 1, f"signal after step {done}, saved at {saved}, lost {lost}, exit 4 after {took:.1f}s"


def sigkill_trial(nproc: int, folder: Path) -> tuple[bool, str]:
    ckpt = folder / "ckpt"
    proc = launch(nproc, folder, "--every", "4", "--big", "32")

    def writing() -> bool:
        try:
            return any(ckpt.glob("step-*.pt")) and any(p.stat().st_size for p in ckpt.glob(".step-*.tmp"))
        except FileNotFoundError:  # the temporary file was renamed between listing and stat
            return False
    if not wait(writing, proc):
        end(proc)
        return False, "never saw a save in progress"
    end(proc)  # kill -9 of the session: ddplab, its agent and the ranks
    complete = sorted(int(p.name[5:13]) for p in ckpt.glob("step-*.pt"))
    torn = [p.name for p in ckpt.glob(".step-*.tmp")]
    before = lines(folder / "losses")
    again = launch(nproc, folder, "--every", "4", "--big", "32")
    resumed = wait(lambda: lines(folder / "losses") >= before + 2, again)  # it trains on
    out = end(again, signal.SIGTERM)  # and is preempted itself: it saves and exits 4
    said = re.search(r"resumed at step (\d+) ", out)
    ok = bool(resumed and torn and said and int(said.group(1)) == complete[-1])
    return ok, (f"killed while writing {torn[0] if torn else 'nothing'}, newest complete step {complete[-1]}; "
                f"restart: {said.group(0).strip() if said else 'no resume line'}, exit {again.returncode}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--nproc", default="2,3")
    p.add_argument("--kinds", default="sigterm,sigkill")
    args = p.parse_args()
    totals = {}
    for nproc in [int(n) for n in args.nproc.split(",")]:
        for kind in args.kinds.split(","):
            passed = 0
            for trial in range(args.trials):
                with tempfile.TemporaryDirectory(prefix="ddplab-preempt-") as tmp:
                    ok, what = (sigterm_trial if kind == "sigterm" else sigkill_trial)(nproc, Path(tmp))
                passed += ok
                print(f"{kind} {nproc} ranks trial {trial + 1}: {'PASS' if ok else 'FAIL'} {what}", flush=True)
            totals[(kind, nproc)] = passed
    for (kind, nproc), passed in totals.items():
        print(f"{kind} at {nproc} ranks: {passed}/{args.trials} passed")
    return 0 if all(v == args.trials for v in totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
