"""When the machine is taken away (ddplab.resume, `ddplab launch/train --grace`), with real processes and signals:
- the machine's notice at a random step (the metadata server's, which `ddplab launch --preemption-notice` polls and
  turns into the stop SIGTERM gives; SIGTERM itself in the other tests): every rank saves at the same step, nothing
  done before the notice is lost, exit code 4 with "preempted (...), state saved at step N", every rank gone soon
  after (one that stays is named); started again it says "resumed at step N" and its loss
  curve and final weights are bitwise those of an uninterrupted run (dropout, a shuffling sampler, momentum, an LR
  schedule: every RNG, the optimizer, the scheduler and the position in the epoch must come back);
- the same for a recipe under `ddplab train`;
- SIGKILL while a checkpoint is being written: the next start resumes from the previous complete one;
- bad input - another run's checkpoints, another number of ranks, a read-only folder, a full one - is one line and
  exit 2, and nothing is overwritten.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, kill_tree
from conftest import finish as ended
from test_ckptfile_commit import no_rename  # noqa: F401  (a fixture: a folder where rename(2) fails)

SCRIPT = Path(__file__).parent / "scripts" / "resumable.py"
# --grace 30, the default: a save on a loaded machine must not race a short grace (5 s failed once at load 8)
LAUNCH = ["launch", "--nproc", "2", "--no-lint", "--hang-timeout", "0", "--grace", "30"]


def resumable(ckpt: Path, losses: Path, out: Path) -> list[str]:
    """tests/scripts/resumable.py's command line: its checkpoint folder, its loss log, its final weights' digest."""
    return [str(SCRIPT), "--ckpt", str(ckpt), "--losses", str(losses), "--out", str(out)]


def losses(path: Path) -> dict[int, str]:
    """step -> loss (float.hex) as rank 0 logged it; a step logged twice (killed, then redone) must agree."""
    seen: dict[int, str] = {}
    for line in path.read_text().splitlines():
        step, loss = line.split()
        assert seen.setdefault(int(step), loss) == loss, f"step {step} gave two losses"
    return seen


def run_script(tmp: Path, name: str, *extra: str, expect: int = 0, timeout: float = 150):
    ran = cli(
        *LAUNCH,
        *resumable(tmp / name, tmp / f"{name}.losses", tmp / f"{name}.out"),
        *extra,
        timeout=timeout,
    )
    assert ran.code == expect, ran.err[-3000:]
    return ran


def start(args: list[str], env: dict | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "ddplab", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        **kw,
    )


def wait_for(condition, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_tree(proc.pid)
            out, err = proc.communicate()
            raise AssertionError(f"never saw {what} (exit {proc.returncode})\n{err[-3000:]}")
        time.sleep(0.01)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
    out, err = ended(proc, timeout, f"did not end within {timeout}s of the signal")
    return proc.returncode, out, err


def lines_in(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def last_step(path: Path) -> int:
    """The last step rank 0 logged (0: none yet); the log of a run started several times holds every start's."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return 0
    return int(lines[-1].split()[0]) if lines else 0


def test_a_run_killed_while_saving_then_stopped_by_its_budget_then_by_a_notice_resumes_bitwise_each_time(
    tmp_path, no_leftover_workers
):
    """One run stopped three ways, each stop resumed by the next start of the same command (a test per stop started
    the run once more each), the last start ending bitwise as an uninterrupted run (80 steps, the same flags): every
    resume was exact. A 64 MiB state is written every 6 steps in every start (--every 6 --big 64: the run's flags).
    1. kill -9 of ddplab while rank 0 writes a checkpoint (its temporary file exists): the next start takes the
       newest complete checkpoint, never the torn temporary file, and its first save clears the torn one.
    2. That start has `--budget 1 --price P` for 2 ranks, P chosen so that the cap falls 10 s after the time the
       uninterrupted run took (its start-up and 80 quick steps, on this machine under its present load: a fixed time
       was reached before the first step at load 15 on 2 cores); its steps take 1 s each, so the cap falls mid-run:
       a warning at 80 %, then every rank saves at one step, exit 4.
    3. The next start polls --preemption-notice URL (issue 40): a metadata server on 127.0.0.1 starts serving the
       notice once rank 0 has logged a random step after the budget's (an event, not a sleep); the launcher, polling
       it, stops the run as on SIGTERM: every rank saves at one step, exit 4, "preempted (notice from URL: ...)" and
       no torchrun failure report. Rank 1 does not leave after the save (an atexit handler that sleeps): it is named
       with what it was doing and ended, well within the grace.
    4. The last start resumes at the notice's step and ends as the uninterrupted run, bitwise."""
    from metadata import MetadataServer

    steps = ["--epochs", "5"]  # 80 steps: room for the budget's stop, and for a notice after it
    ref = run_script(tmp_path, "ref", *steps)  # the uninterrupted run
    ref_losses, ref_out = losses(tmp_path / "ref.losses"), (tmp_path / "ref.out").read_text()
    ckpt, log, out = tmp_path / "run", tmp_path / "run.losses", tmp_path / "run.out"
    args = [*resumable(ckpt, log, out), *steps, "--every", "6", "--big", "64"]

    # 1. kill -9 during a save
    proc = start([*LAUNCH, *args])

    def writing() -> bool:
        for tmp in ckpt.glob(".step-*.tmp"):
            try:
                size = tmp.stat().st_size
            except FileNotFoundError:  # renamed into place between the listing and the look
                continue
            if size and list(ckpt.glob("step-*.pt")):
                return True
        return False

    wait_for(writing, proc, 120, "a checkpoint being written after a complete one")
    os.killpg(proc.pid, signal.SIGKILL)  # ddplab's session; its agent and the ranks die with it
    proc.communicate()
    complete = sorted(int(p.name[5:13]) for p in ckpt.glob("step-*.pt"))
    assert complete and list(ckpt.glob(".step-*.tmp")), "the kill did not land during a save"

    # 2. the budget
    cap_s = ref.seconds + 10
    price = f"{3600 / (2 * cap_s):.4f}"
    ran = cli(*LAUNCH, "--budget", "1", "--price", price, *args, "--sleep", "1", timeout=150 + cap_s)
    assert ran.code == 4, ran.out + ran.err[-3000:]
    assert f"resumed at step {complete[-1]} " in ran.out  # the newest complete checkpoint, not the torn one
    assert not list(ckpt.glob(".step-*.tmp"))  # the next save cleared the torn one
    assert re.search(r"^ddplab launch: WARN budget: 0\.8\d+ USD spent of 1\.00 USD", ran.err, re.M), ran.err[-3000:]
    said = re.search(
        r"^ddplab launch: preempted \(budget reached: 1\.0\d+ USD spent of 1\.00 USD since \S+ at \S+ USD/GPU-hour "
        r"\(--price\) x 2 GPU\(s\)\), state saved at step (\d+): ",
        ran.out,
        re.M,
    )
    assert said, ran.out
    by_budget = int(said.group(1))
    assert complete[-1] < by_budget <= len(ref_losses) - 10 and last_step(log) >= by_budget, (by_budget, complete)
    assert not out.exists()

    # 3. the notice
    at = random.randint(by_budget + 2, len(ref_losses) - 8)
    with MetadataServer() as server:
        url = f"{server.base}/notice"
        proc = start(
            [
                *LAUNCH[:-1],
                "60",  # --grace 60: the lingering rank must be ended long before it
                "--preemption-notice",
                url,
                *args,
                "--sleep",
                "0.05",
                "--linger-rank",
                "1",
            ],
            env={"DDPLAB_NOTICE_POLL_S": "0.1"},
        )
        wait_for(lambda: last_step(log) >= at, proc, 120, f"step {at}")
        done_at_notice = last_step(log)
        server.notify()
        code, said_out, err = finish(proc, 40)  # the grace is 60 s: ending before it is the point
    assert code == 4, said_out + err[-3000:]
    assert f"resumed at step {by_budget} " in said_out
    said = re.search(
        rf"^ddplab launch: preempted \(notice from {re.escape(url)}: going at 12:02\), state saved at step (\d+): ",
        said_out,
        re.M,
    )
    assert said, said_out
    by_notice = int(said.group(1))
    assert by_notice >= done_at_notice
    assert re.search(
        r"^  rank 1 \(pid \d+\) was still running 3 s after the save, at resumable\.py:\d+ in linger; it was ended$",
        said_out,
        re.M,
    ), said_out
    for banner in ("FAILED", "Root Cause", "exitcode: 4", "failed (exitcode"):
        assert banner not in err, err[-3000:]
    # one checkpoint for the stop (rank 0's), the newest; the run did not finish
    assert [p.name[5:13] for p in ckpt.glob(f"step-{by_notice:08d}-*.pt")] == [f"{by_notice:08d}"]
    assert max(int(p.name[5:13]) for p in ckpt.glob("step-*.pt")) == by_notice and not out.exists()

    # 4. the end
    ran = run_script(tmp_path, "run", *steps, "--every", "6", "--big", "64")
    assert f"resumed at step {by_notice} " in ran.out
    assert losses(log) == ref_losses
    assert out.read_text() == ref_out


def test_the_preempt_fault_stops_the_run_after_its_step_whatever_the_machines_speed(tmp_path, no_leftover_workers):
    """DDPLAB_FAULT=preempt:1:step.4: once rank 1 has finished step 4, the launcher gets SIGTERM as from a cloud,
    and rank 1 waits for the notice to come back to it: the run saves within two stop checks after step 4 (at most
    200 steps) however fast its steps are - no --sleep here, the steps take milliseconds (the guide's demo). The run
    has 240 steps (a stop later than 204 would let it finish: exit 0, not 4); the same command then resumes from the
    saved step and finishes, and once more trains nothing and says so.
    Every epoch is one step (--batch 256 of 256 samples per rank), so wherever the stop lands it is an epoch's last
    step. Seen in CI (tests/commands/test_new.py): a notice agreed on the last step of an epoch saved and exited
    before the epoch's end, so that epoch's line was never printed, by either run. Here the epoch's end (an
    all-reduce on every rank, rank 0's line) runs, then exit 4, and the resumed run starts the next epoch."""
    epochs, log = tmp_path / "epochs", tmp_path / "run.losses"
    args = [
        *LAUNCH,
        *resumable(tmp_path / "c", log, tmp_path / "run.out"),
        "--batch",
        "256",
        "--epochs",
        "240",
        "--every",
        "16",
        "--epoch-log",
        str(epochs),
    ]  # saved every 16 steps, the last one too

    def epoch_lines() -> list[int]:
        return [int(line.split()[0]) for line in epochs.read_text().splitlines()]

    ran = cli(*args, env={"DDPLAB_FAULT": "preempt:1:step.4"}, timeout=150)
    assert ran.code == 4, ran.out + ran.err[-3000:]
    said = re.search(r"^ddplab launch: preempted \(SIGTERM\), state saved at step (\d+): ", ran.out, re.M)
    assert said and 4 <= int(said.group(1)) <= 4 + 200, ran.out
    assert "FAILED" not in ran.err and "exitcode: 4" not in ran.err, ran.err[-3000:]  # a preemption, not a failure
    saved = int(said.group(1))
    assert epoch_lines() == list(range(saved)), ran.out  # the stop's epoch ended, its line printed
    again = cli(*args, timeout=150)
    assert again.code == 0 and f"resumed at step {saved} (the start of epoch {saved + 1})" in again.out, again.err[
        -3000:
    ]
    assert len(losses(log)) == 240 and (tmp_path / "run.out").exists()
    assert epoch_lines() == list(range(240))
    done = cli(*args, timeout=150)  # once more: a finished run trains nothing, and the launcher says so
    assert done.code == 0 and "nothing left to train" in done.err and "but trained nothing" in done.out, done.out
    assert len(losses(log)) == 240 and epoch_lines() == list(range(240))


def test_ranks_too_slow_to_save_are_said_to_have_been_listening(tmp_path, no_leftover_workers):
    """Nothing saved within the grace, exit 1; but a step longer than the grace (the ranks had ddplab.resume's
    handler) is said so, with its fix. One rank: what the launcher reads (a rank listening, no save) is any rank's.
    (A script without ddplab.resume is asked whether it saves on SIGTERM at all:
    test_a_script_without_ddplab_resume_is_asked_if_it_saves_and_its_last_lines_all_come_out.)"""
    quick = ["launch", "--nproc", "1", "--no-lint", "--hang-timeout", "0", "--grace", "1"]
    log = tmp_path / "slow.losses"
    proc = start(
        [
            *quick,
            *resumable(tmp_path / "c", log, tmp_path / "o"),
            "--sleep",
            "8",
        ]
    )
    wait_for(lambda: lines_in(log) >= 1, proc, 120, "step 1")
    proc.send_signal(signal.SIGTERM)  # the rank is in an 8 s step: no save can come within 1 s
    code, out, err = finish(proc, 1 + 15)
    assert code == 1 and "were listening (ddplab.resume) but none said it saved within the 1 s grace" in out, (
        out + err[-2000:]
    )


def test_a_script_without_ddplab_resume_is_asked_if_it_saves_and_its_last_lines_all_come_out(
    tmp_path, no_leftover_workers
):
    """A script that leaves on SIGTERM without ddplab.resume: nothing said it saved, exit 1, and the script is asked
    whether it uses ddplab.resume or saves on SIGTERM itself (not told it was listening: that is for ranks with
    ddplab.resume's handler, test_ranks_too_slow_to_save_are_said_to_have_been_listening).
    Found while reading a CI failure of tests/commands/test_new.py: a rank's last lines, printed just before it
    exited on the notice, could be missing from `ddplab launch`'s output. torchrun's agent copies a rank's output
    out of its log file every 0.1 s; the launcher ended the agent as soon as the ranks were gone, with those lines
    still in the file. Here
    rank 0 leaves with 100 000 lines, far more than the agent copies in the moment it is given: every one of them
    must come out, in order."""
    leaving = tmp_path / "leaving.py"
    leaving.write_text(
        "import os, pathlib, signal, sys, time\n"
        "def leave(*_):\n"
        "    if os.environ['RANK'] == '0':\n"
        "        print('\\n'.join(f'line {i}' for i in range(100_000)), flush=True)\n"
        "    sys.exit(4)\n"
        "signal.signal(signal.SIGTERM, leave)\n"
        "pathlib.Path(os.environ['MARK'] + os.environ['RANK']).touch()\n"
        "time.sleep(120)\n"
    )
    mark = tmp_path / "started"
    proc = start(
        ["launch", "--nproc", "2", "--no-lint", "--hang-timeout", "0", "--grace", "20", str(leaving)],
        env={"MARK": str(mark)},
    )
    wait_for(lambda: all(Path(f"{mark}{r}").exists() for r in (0, 1)), proc, 120, "both ranks started")
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, 20 + 15)
    printed = [line.split(":", 1)[1] for line in out.splitlines() if line.startswith("[default0]:line ")]
    assert printed == [f"line {i}" for i in range(100_000)], (len(printed), out[-2000:], err[-2000:])
    said = [line for line in out.splitlines() if line.startswith("ddplab launch: preempted (SIGTERM)")]
    assert code == 1 and len(said) == 1, (code, said, out[-2000:], err[-2000:])
    assert "does the script use ddplab.resume" in said[0] and "were listening" not in out, said


def test_a_preempted_run_on_two_nodes_exits_4_on_both_with_ddplabs_line_alone(tmp_path, no_leftover_workers):
    """Two `ddplab launch` nodes of one rank on this machine (c10d rendezvous on loopback, node 0 hosting it), as
    Slurm or SkyPilot start them. SIGTERM reaches node 0 only (a cloud takes one machine): the ranks agree the stop
    through their all-reduce and save once; both nodes - one of them without global rank 0, one never told - exit 4
    with ddplab's line naming the same step, and no torchrun failure report on either (issue 40: the node without
    rank 0 printed one and exited 1). Slurm signals every node: each then says SIGTERM, by the same note.
    The run's optimizer is a ZeroRedundancyOptimizer (--wrap zero1: each rank holds a share of its state), so this
    stop is also the zero1 case of test_a_sharded_state_is_saved_whole_and_resumes_bitwise (one run fewer than a
    stop of its own): the whole state saved by rank 0, then started again on one node of 2 ranks (the same world
    size), the run resumes at the saved step and ends equal to an uninterrupted zero1 run, bit for bit."""
    from ddplab.ports import free_port

    run = ["--wrap", "zero1"]  # 48 steps: a stop at a random step among the first 20 is mid-run
    run_script(tmp_path, "ref", *run)  # the uninterrupted run, on one node
    endpoint, log = f"127.0.0.1:{free_port()}", tmp_path / "run.losses"
    at = random.randint(3, 20)
    procs = [
        start(
            [
                "launch",
                "--nnodes",
                "2",
                "--node-rank",
                str(node),
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                "two",
                "--rdzv-conf",
                f"is_host={int(node == 0)}",
                "--no-lint",
                "--hang-timeout",
                "0",
                *resumable(tmp_path / "run", log, tmp_path / "run.out"),
                "--sleep",
                "0.05",
                *run,
            ]
        )  # fmt: skip
        for node in range(2)
    ]
    try:
        wait_for(lambda: lines_in(log) >= at, procs[0], 150, f"step {at} (global rank 0's log)")
        procs[0].send_signal(signal.SIGTERM)
        ran = [finish(proc, 60) for proc in procs]
    finally:
        for proc in procs:
            kill_tree(proc.pid)
    steps = set()
    for node, (code, out, err) in enumerate(ran):
        told = "SIGTERM" if node == 0 else "a notice to another node"
        said = re.search(rf"^ddplab launch: preempted \({told}\), state saved at step (\d+): ", out, re.M)
        assert code == 4 and said, f"node {node}: exit {code}\n{out[-2000:]}{err[-3000:]}"
        steps.add(int(said.group(1)))
        for banner in ("FAILED", "Root Cause", "exitcode", "ChildFailedError"):
            assert banner not in out + err, f"node {node}: {err[-3000:]}"
    assert len(steps) == 1 and len(list((tmp_path / "run").glob("step-*.pt"))) == 1, steps
    assert not (tmp_path / "run.out").exists()

    ran = run_script(tmp_path, "run", *run)  # one node of 2 ranks: the world size the checkpoint was written by
    assert f"resumed at step {steps.pop()} " in ran.out
    assert losses(log) == losses(tmp_path / "ref.losses")
    assert (tmp_path / "run.out").read_text() == (tmp_path / "ref.out").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("wrap", ["fsdp"])  # zero1: its stop is the two-node test's
def test_a_sharded_state_is_saved_whole_and_resumes_bitwise(wrap, tmp_path, no_leftover_workers):
    """ZeroRedundancyOptimizer (the optimizer state in shares; its stop and resume: the two-node test's) and FSDP2's
    fully_shard (every parameter in shards): SIGTERM mid-run, the whole state saved by rank 0, the resumed run equal
    to an uninterrupted one, bit for bit."""
    run_script(tmp_path, "ref", "--wrap", wrap)
    ckpt, log = tmp_path / "run", tmp_path / "run.losses"
    at = random.randint(2, 20)
    proc = start(
        [
            *LAUNCH,
            *resumable(ckpt, log, tmp_path / "o"),
            "--sleep",
            "0.05",
            "--wrap",
            wrap,
        ]
    )
    wait_for(lambda: lines_in(log) >= at, proc, 120, f"step {at}")
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, 30 + 15)
    assert code == 4, err[-3000:]
    saved = int(re.search(r"state saved at step (\d+): ", out).group(1))
    ran = run_script(tmp_path, "run", "--wrap", wrap)
    assert f"resumed at step {saved} " in ran.out
    assert losses(log) == losses(tmp_path / "ref.losses")
    assert (tmp_path / "run.out").read_text() == (tmp_path / "ref.out").read_text()


def in_process(*argv: str) -> int:
    """SCRIPT run as `python SCRIPT ARGV` in this process (one rank: ddplab.dist's session makes a group of one),
    without the seconds of a new interpreter importing torch; its exit code. The signal handlers
    ddplab.resume installs are this process's: put back after."""
    import runpy

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    argv_before = sys.argv
    sys.argv = [str(SCRIPT), *argv]
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = argv_before
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_another_runs_checkpoints_are_refused_in_one_line_and_kept(tmp_path, capsys, no_leftover_workers):
    """A checkpoint of a 1-process run: another model shape, another run name - ddplab.resume's one line, exit 2
    (in this process, as the checkpoint was written); another number of ranks - `ddplab launch`'s one line, exit 2
    - the files untouched each time."""
    ckpt = tmp_path / "run"
    files = ["--ckpt", str(ckpt), "--losses", str(tmp_path / "l"), "--out", str(tmp_path / "o")]
    assert in_process(*files, "--epochs", "1", "--every", "5") == 0
    before = {p.name: p.stat().st_mtime_ns for p in ckpt.iterdir()}
    assert before
    capsys.readouterr()
    for extra, says in (
        (["--hidden", "16"], "holds checkpoints of another run (other model shapes)"),
        (["--name", "other"], "holds checkpoints of another run (run: '' there, 'other' here)"),
    ):
        assert in_process(*files, *extra) == 2
        err = capsys.readouterr().err
        ours = [line for line in err.splitlines() if line.startswith("ddplab.resume: error:")]
        assert len(ours) == 1 and says in ours[0] and "Traceback" not in err, err[-2000:]
        assert {p.name: p.stat().st_mtime_ns for p in ckpt.iterdir()} == before
    ran = run_script(tmp_path, "run", expect=2)
    ours = [line for line in ran.err.splitlines() if line.startswith("ddplab launch: error:")]
    assert len(ours) == 1 and "was written by 1 rank(s), this run has 2: resume with 1" in ours[0], ran.err[-2000:]
    assert "Traceback" not in ran.err and {p.name: p.stat().st_mtime_ns for p in ckpt.iterdir()} == before


UNSHARE = shutil.which("unshare")


def in_own_mounts(tmp_path: Path, mount: str, *script_args: str) -> subprocess.CompletedProcess:
    """The script (1 process) with its checkpoint folder on a filesystem of its own: a user namespace lets a test
    mount a tiny or read-only tmpfs for real, without privileges."""
    folder = tmp_path / "mnt"
    folder.mkdir()
    command = (
        f"mount -t tmpfs -o size=256k tmpfs {folder} && {mount} "
        f"exec {sys.executable} {SCRIPT} --ckpt {folder}/ckpt --losses {tmp_path}/l --out {tmp_path}/o "
        + " ".join(script_args)
    )
    return subprocess.run(
        [UNSHARE, "-Urm", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _namespaces_work() -> bool:
    return UNSHARE is not None and subprocess.run([UNSHARE, "-Urm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _namespaces_work(), reason="no unprivileged user namespaces here (unshare -Urm)")
@pytest.mark.parametrize(
    "mount, args, says",
    [
        ("mount -o remount,ro {folder} &&", [], "is not writable (Read-only file system)"),
        ("", ["--every", "2", "--big", "1"], "could not write checkpoint step 2"),
    ],
    ids=["read-only", "full"],
)
def test_a_read_only_or_full_folder_is_one_line_and_exit_2(tmp_path, mount, args, says):
    ran = in_own_mounts(tmp_path, mount.format(folder=tmp_path / "mnt"), "--epochs", "1", *args)
    assert ran.returncode == 2, ran.stderr[-2000:]
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddplab.resume: error:") and says in lines[0], ran.stderr
    if args:  # full: torch.save says only "unexpected pos"; the free space is added, so the cause shows
        assert " 0 MiB free there" in lines[0]


# Each recipe for a hundred steps or more (gpt's are the costly ones: 100, its signal within the first 30), a metrics
# line every `--log-every` steps; the signal comes after a random number of lines within the first third of the run.
# linear and gpt: the two data paths of the one training loop (tensors, tokens); mlp, another model on linear's
# path, added a third of this file's CPU time and nothing the stop or the resume do differently.
RECIPE_RUNS = {
    "linear": (["--samples", "1024", "--epochs", "30", "--batch-size", "16", "--log-every", "8"], 40),
    "gpt": (["--max-steps", "100", "--batch-size", "2", "--log-every", "5"], 6),
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPE_RUNS)
def test_sigterm_to_train_stops_every_rank_at_one_step_and_resumes_bitwise(recipe, tmp_path, no_leftover_workers):
    """The recipes use the same stop flag: SIGTERM to `ddplab train` at a random moment: every rank saved at one
    step, exit 4 with the one line and no torchrun report, every process gone well before the grace (the caller
    leaves without its torch teardown: it took 3 of the 3.6 s to the exit); --resume, the final weights bitwise
    those of an uninterrupted run."""
    import torch

    options, lines = RECIPE_RUNS[recipe]
    flags = [recipe, "--nproc", "2", *options, "--grace", "30"]
    every = int(options[options.index("--log-every") + 1])
    ref = tmp_path / "ref"
    ran = cli("train", *flags, "--checkpoint-dir", str(ref), timeout=200)
    assert ran.code == 0, ran.err[-3000:]
    ckpt = tmp_path / "run"
    proc = start(["train", *flags, "--checkpoint-dir", str(ckpt)])
    at = random.randint(1, lines)
    wait_for(lambda: lines_in(ckpt / "metrics.jsonl") >= at, proc, 150, f"metrics line {at}")
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, 30)  # the grace is 30 s: ending before it is the point
    assert code == 4 and "preempted, state saved at step " in out, (code, out, err[-3000:])
    for banner in ("FAILED", "Root Cause", "exitcode", "Traceback", "terminate called"):
        assert banner not in out + err, err[-3000:]
    saved = int(out.split("state saved at step ")[1].split(":")[0])
    assert saved >= every * at

    ran = cli("train", *flags, "--checkpoint-dir", str(ckpt), "--resume", "--json", timeout=200)
    assert ran.code == 0, ran.err[-3000:]
    assert f"resumed at step {saved}," in ran.err
    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (ref, ckpt))
    assert all(torch.equal(a[k], b[k]) for k in a)
    curve = {json.loads(line)["step"]: json.loads(line)["loss"] for line in (ref / "metrics.jsonl").open()}
    for line in (ckpt / "metrics.jsonl").open():
        row = json.loads(line)
        assert curve[row["step"]] == row["loss"], row["step"]


def test_save_file_writes_whole_where_rename_fails_and_refuses_in_one_line(no_rename, tmp_path, capsys):  # noqa: F811
    """resume.save_file, the `ddplab new` script's final model.pt: in a folder where rename(2) fails for real
    (append-only, as mountpoint-s3 refuses renames) the file is written whole under its name; a folder that cannot
    be made is one line and exit 2."""
    import torch

    from ddplab import resume

    resume.save_file({"w": torch.ones(3)}, no_rename / "model.pt")
    assert torch.equal(torch.load(no_rename / "model.pt", weights_only=True)["w"], torch.ones(3))
    with pytest.raises(PermissionError):  # the folder really refuses renames
        os.rename(no_rename / "model.pt", no_rename / "moved.pt")
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as stopped:
        resume.save_file({"w": torch.ones(3)}, tmp_path / "file" / "model.pt")
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ddplab.resume: error: cannot create ") and "\n" not in err, err


def test_a_loop_that_ends_at_a_saved_step_tells_the_launcher_it_is_saved(tmp_path, monkeypatch):
    """A notice after the training loop (the final model being written) ends the ranks by the signal's default,
    the loop's handlers gone; found by benchmarks/preempt_trials.py (2 of 20 random moments: exit 1). The loop's
    end, at a step it saved, notes that save as a stop on the notice would: the launcher then says "state saved
    at step N" and exits 4. In this process, one rank; the launcher reads the same note (the two-node test)."""
    import torch

    from ddplab import resume

    note = tmp_path / "note.json"
    monkeypatch.setenv(resume.NOTE_VAR, str(note))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    try:
        ckpt = resume.Checkpointer(tmp_path / "c", every=2, model=torch.nn.Linear(2, 1))
        assert json.loads(note.read_text()) == {"listening": True}
        for _ in ckpt.epochs(1):
            for _ in ckpt.batches([0, 1, 2, 3]):
                ckpt.step_done()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    said = json.loads(note.read_text())
    assert said["step"] == 4 and said["path"] == str(next((tmp_path / "c").glob("step-00000004-*.pt"))), said
