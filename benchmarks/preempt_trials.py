"""Is the state saved when the machine is taken away? Real processes, real signals, `ddplab launch` of a plain script
using ddplab.resume (tests/scripts/resumable.py: dropout, a shuffling sampler, momentum, an LR schedule).

    python benchmarks/preempt_trials.py                     # 20 trials of each kind at 2 and 3 ranks
    python benchmarks/preempt_trials.py --trials 3 --nproc 2
    python benchmarks/preempt_trials.py --kinds template --nproc 2   # issue 40's: the `ddplab new` template

Three kinds of trial:
  sigterm  SIGTERM to `ddplab launch --grace 5` at a random step (after 2..40 steps of 20 ms): passes when it exits
           4 with "state saved at step N" and N >= the steps rank 0 had finished when the signal was sent, i.e. at
           most the step in progress is lost (lost = max(0, done - N)).
  sigkill  kill -9 of ddplab's whole session while rank 0 writes a 32 MiB checkpoint (its temporary file exists,
           a complete one is already there); then started again: passes when it says "resumed at step P", P the
           newest complete checkpoint's step (never the torn file). That run is then preempted itself (SIGTERM).
  template SIGTERM to `ddplab launch` of the script `ddplab new` writes, at a random moment mid-run (0..90 % of an
           uninterrupted run's training time after its first epoch line): passes when it exits 4 with "state
           saved at step N", prints no torchrun failure report (FAILED, Root Cause, exitcode), and, started again,
           ends with a model.pt bitwise equal to an uninterrupted run's. It reports the time from the signal to the
           save (rank 0's line) and to ddplab's exit, the worst of each (issue 40's target: exit within 5 s).
The bitwise equality of the sigterm kind's resumed runs with uninterrupted ones is tests/test_resume.py's.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "resumable.py"
TEMPLATE: dict[str, bytes] = {}  # "text": the script `ddplab new` writes, written once per benchmark
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


TEMPLATE_EPOCHS = "30"  # 32 steps each at 2 ranks: a few seconds of training to land in
FAILURE_REPORT = ("FAILED", "Root Cause", "exitcode", "ChildFailedError")


def template_launch(folder: Path, nproc: int, stamps: Path | None = None) -> subprocess.Popen:
    env = ENV if stamps is None else {**ENV, "DDPLAB_PREEMPT_STAMPS": str(stamps)}
    return subprocess.Popen([sys.executable, "-m", "ddplab", "launch", "--nproc", str(nproc), "--no-lint",
                             "--hang-timeout", "0", str(folder / "train.py"), "--epochs", TEMPLATE_EPOCHS,
                             "--checkpoint-dir", str(folder / "ckpt"), "--out", str(folder / "model.pt")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


class Lines:
    """Both streams of a run, each line with the moment it came."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[tuple[float, str, str]] = []
        self.threads = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                        for s, n in ((proc.stdout, "out"), (proc.stderr, "err"))]
        for t in self.threads:
            t.start()

    def _read(self, stream, name: str) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), name, line))

    def first(self, text: str) -> float | None:
        return next((t for t, _, line in list(self.lines) if text in line), None)

    def join(self) -> tuple[str, str]:
        for t in self.threads:
            t.join(timeout=30)
        return ("".join(line for _, n, line in self.lines if n == "out"),
                "".join(line for _, n, line in self.lines if n == "err"))


def template_reference(folder: Path, nproc: int) -> tuple[dict, float]:
    """An uninterrupted run: its final weights and how long it trained after its first epoch line."""
    proc = template_launch(folder, nproc)
    lines = Lines(proc)
    proc.wait(timeout=600)
    lines.join()
    if proc.returncode != 0:
        raise SystemExit(f"the uninterrupted template run failed: exit {proc.returncode}")
    first, last = lines.first("epoch 1/"), lines.first(f"epoch {TEMPLATE_EPOCHS}/")
    return torch_load(folder / "model.pt"), last - first


def torch_load(path: Path) -> dict:
    import torch

    return torch.load(path, weights_only=True)


def template_trial(nproc: int, folder: Path, reference: dict, span: float, times: list) -> tuple[bool, str]:
    (folder / "train.py").write_bytes(TEMPLATE["text"])
    proc = template_launch(folder, nproc, folder / "stamps")
    lines = Lines(proc)
    if not wait(lambda: lines.first("epoch 1/") is not None, proc):
        end(proc)
        return False, "never printed its first epoch"
    time.sleep(random.uniform(0, 0.9 * span))  # a random moment: a benchmark, not a test (tests wait on events)
    sent, sent_wall = time.monotonic(), time.time()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        end(proc)
        return False, "did not end within 60 s"
    ended = time.monotonic()
    out, err = lines.join()
    said = re.search(r"state saved at step (\d+):", out)
    saved_at = lines.first("preempted, state saved at step")
    if proc.returncode != 4 or not said or saved_at is None:
        print(f"  stages: {stages(folder / 'stamps', sent_wall, ended - sent)}", flush=True)
        return False, f"exit {proc.returncode}: {(out + err)[-300:]}"
    report = [word for word in FAILURE_REPORT if word in err]
    again = template_launch(folder, nproc)
    again_out, again_err = again.communicate(timeout=600)
    resumed = f"resumed at step {said.group(1)} " in again_out
    import torch

    weights = torch_load(folder / "model.pt") if (folder / "model.pt").exists() else {}
    bitwise = weights.keys() == reference.keys() and all(torch.equal(weights[k], reference[k]) for k in reference)
    times.append((saved_at - sent, ended - sent, stages(folder / "stamps", sent_wall, ended - sent)))
    ok = not report and again.returncode == 0 and resumed and bitwise
    print(f"  stages: {times[-1][2]}", flush=True)
    return ok, (f"saved at step {said.group(1)} {saved_at - sent:.2f} s after the signal, exit 4 after "
                f"{ended - sent:.2f} s; failure report: {', '.join(report) or 'none'}; resumed: {resumed}, "
                f"exit {again.returncode}, weights bitwise equal: {bitwise}")


def stages(path: Path, sent: float, exited: float) -> str:
    """Each stage of the stop (ddplab/stamps.py), in seconds after the signal: where the time went."""
    try:
        rows = [line.split(" ", 3) for line in path.read_text().splitlines()]
    except FileNotFoundError:
        return "no stamps"
    firsts: dict[str, list[str]] = {}
    for when, _pid, who, stage in rows:
        stage = stage if not stage.startswith(("told ", "agreed ")) else stage.split()[0]
        firsts.setdefault(f"{who} {stage}", []).append(f"{float(when) - sent:.2f}")
    return ", ".join(f"{k} {'/'.join(v)}" for k, v in firsts.items()) + f", exit {exited:.2f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--nproc", default="2,3")
    p.add_argument("--kinds", default="sigterm,sigkill")
    args = p.parse_args()
    totals, times = {}, {}
    for nproc in [int(n) for n in args.nproc.split(",")]:
        for kind in args.kinds.split(","):
            passed, times[(kind, nproc)] = 0, []
            trial_of = {"sigterm": sigterm_trial, "sigkill": sigkill_trial}.get(kind)
            if kind == "template":
                with tempfile.TemporaryDirectory(prefix="ddplab-preempt-") as tmp:
                    subprocess.run([sys.executable, "-m", "ddplab", "new", str(Path(tmp) / "train.py")], env=ENV,
                                   check=True, capture_output=True)
                    TEMPLATE["text"] = (Path(tmp) / "train.py").read_bytes()
                    reference, span = template_reference(Path(tmp), nproc)
                print(f"template: an uninterrupted run trained {span:.1f} s after its first epoch line", flush=True)

                def trial_of(n, folder, ref=reference, sp=span, kept=times[(kind, nproc)]):
                    return template_trial(n, folder, ref, sp, kept)
            for trial in range(args.trials):
                with tempfile.TemporaryDirectory(prefix="ddplab-preempt-") as tmp:
                    ok, what = trial_of(nproc, Path(tmp))
                passed += ok
                print(f"{kind} {nproc} ranks trial {trial + 1}: {'PASS' if ok else 'FAIL'} {what}", flush=True)
            totals[(kind, nproc)] = passed
    for (kind, nproc), passed in totals.items():
        print(f"{kind} at {nproc} ranks: {passed}/{args.trials} passed")
        if times[(kind, nproc)]:
            to_save, to_exit, where = zip(*times[(kind, nproc)])
            print(f"  signal to save: worst {max(to_save):.2f} s, median {sorted(to_save)[len(to_save) // 2]:.2f} s;"
                  f" signal to exit: worst {max(to_exit):.2f} s, median {sorted(to_exit)[len(to_exit) // 2]:.2f} s;"
                  f" within 5 s: {sum(t <= 5 for t in to_exit)}/{len(to_exit)}")
            print(f"  the worst run's stages (s after the signal): {where[to_exit.index(max(to_exit))]}")
    return 0 if all(v == args.trials for v in totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
