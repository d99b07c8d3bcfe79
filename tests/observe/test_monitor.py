"""`ddplab monitor` against real running jobs: a 2-rank torchrun job, a ddplab runner job with an idle straggling
rank, the live view following a job to its end; then bad input and the no-job case. Every job is ended and
checked gone. GPU paths (NVML) run only where a GPU is."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import alive, cli, kill_tree

# A small DDP job: joins a process group, says it is ready, computes until told to stop (or its own deadline).
# SPIN_GPU=1: one GPU per rank (set from LOCAL_RANK before init), NCCL, matrix products.
SPIN = """
import os, sys, time
from pathlib import Path
import torch
import torch.distributed as dist

gpu = os.environ.get("SPIN_GPU") == "1"
if gpu:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if gpu else "gloo")
rank = dist.get_rank()
here = Path(sys.argv[1])
(here / f"ready.{rank}").write_text(str(os.getpid()))
a = torch.randn(2048, 2048, device="cuda") if gpu else None
end = time.time() + 60
while time.time() < end and not (here / "stop").exists():
    if gpu:
        a = a @ a
        a /= a.norm()
        torch.cuda.synchronize()
    else:
        x = 0
        for _ in range(200000):
            x += 1
dist.destroy_process_group()
"""

LAUNCHER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting {timeout}s for {what}")


class TorchrunJob:
    """`python -m torch.distributed.run --standalone --nproc-per-node 2 spin.py DIR`, ended for sure on exit."""

    def __init__(self, where: Path, nproc: int = 2, gpu: bool = False):
        self.dir, self.nproc = where, nproc
        (where / "spin.py").write_text(SPIN)
        env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
        env.update(OMP_NUM_THREADS="1", SPIN_GPU="1" if gpu else "0")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(nproc),
                str(where / "spin.py"),
                str(where),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pids: list[int] = []

    def __enter__(self):
        try:
            wait_for(
                lambda: all((self.dir / f"ready.{r}").exists() for r in range(self.nproc)),
                90,
                "both ranks to join their process group",
            )
        except BaseException:
            self.__exit__()
            raise
        self.pids = [int((self.dir / f"ready.{r}").read_text()) for r in range(self.nproc)]
        return self

    def __exit__(self, *exc):
        everyone = [self.proc.pid, *self.pids]
        kill_tree(self.proc.pid)
        self.proc.wait(timeout=10)
        for pid in self.pids:  # a worker orphaned by a dead agent would not be in the tree any more
            if alive([pid]):
                psutil.Process(pid).kill()
        wait_for(lambda: not alive(everyone), 10, "the job's processes to go")


def job_of(snap: dict, agent_pid: int) -> dict:
    mine = [job for job in snap["jobs"] if job["agent_pid"] == agent_pid]
    assert len(mine) == 1, snap["jobs"]
    return mine[0]


def test_monitor_finds_both_ranks_of_a_running_torchrun_job(tmp_path, no_leftover_workers):
    with TorchrunJob(tmp_path) as job:
        ran = cli("monitor", "--once", "--json", "--interval", "1", timeout=60)
        # 1 would mean something is flagged: another helper's job may be running on this machine too.
        assert ran.code in (0, 1), ran.err
        found = job_of(ran.json(), job.proc.pid)
        assert found["id"] == f"torchrun:{job.proc.pid}" and found["world_size"] == 2
        ranks = found["ranks"]
        assert [(r["rank"], r["local_rank"], r["pid"]) for r in ranks] == [(0, 0, job.pids[0]), (1, 1, job.pids[1])]
        for r in ranks:
            assert r["cpu_percent"] > 0 and r["cpu_seconds"] > 0 and r["rss_mib"] > 0, r
            assert r["flags"] == [], r  # both compute all the time: neither idle nor behind

        # Given the launcher's pid, monitor watches that job alone, and a person gets a table and a verdict.
        ran = cli("monitor", "--once", "--interval", "0.5", "--pids", str(job.proc.pid), timeout=60)
        assert ran.code == 0, ran.out + ran.err
        assert f"torchrun:{job.proc.pid}" in ran.out and str(job.pids[1]) in ran.out
        assert "verdict: OK 2 rank(s) in 1 job(s)" in ran.out


def test_live_view_follows_the_job_and_ends_with_it(tmp_path, no_leftover_workers):
    with TorchrunJob(tmp_path) as job:
        out_path = tmp_path / "monitor.jsonl"
        with open(out_path, "w") as out:
            live = subprocess.Popen(
                [sys.executable, "-m", "ddplab", "monitor", "--json", "--interval", "0.5", "--pids", str(job.proc.pid)],
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        try:
            wait_for(lambda: out_path.read_text().count("\n") >= 2, 60, "two samples from the live view")
            (tmp_path / "stop").write_text("")  # the ranks leave their loop, the job ends...
            _, err = live.communicate(timeout=60)  # ...and so does the live view, by itself
        finally:
            kill_tree(live.pid)
        assert live.returncode == 0, err
        assert "the job ended" in err
        samples = [json.loads(line) for line in out_path.read_text().splitlines()]
        for snap in samples[:2]:
            assert [r["pid"] for r in job_of(snap, job.proc.pid)["ranks"]] == job.pids


SLOW_RANK = """
import time
from pathlib import Path
from ddplab.launcher.progress import mark

def work(payload):
    import os, torch.distributed as dist
    rank = int(os.environ["RANK"])
    here = Path(payload["dir"])
    (here / f"ready.{rank}").write_text(str(os.getpid()))
    end, marks = time.time() + 60, 0
    while time.time() < end and not (here / "stop").exists():
        if rank == 1:
            time.sleep(0.1)  # the straggler: makes no progress and uses no CPU
        else:
            x = 0
            for _ in range(50000):
                x += 1
            mark("step")
            marks += 1
            if marks == 20:  # a few marks ahead of rank 1: the test samples from here on
                (here / "ahead").write_text("")
    return rank
"""


@contextlib.contextmanager
def slow_rank_job(where: Path):
    """A 2-rank ddplab runner job running SLOW_RANK; yields the ranks' pids; on exit the job is stopped, and it
    must have ended by itself, successfully."""
    from ddplab.launcher import local

    (where / "slow_rank.py").write_text(SLOW_RANK)
    outcome = {}
    env = {"PYTHONPATH": os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")])}
    thread = threading.Thread(
        target=lambda: outcome.setdefault(
            "result", local.run("slow_rank:work", {"dir": str(where)}, nproc=2, deadline=120, env=env)
        )
    )
    thread.start()
    try:
        wait_for(lambda: all((where / f"ready.{r}").exists() for r in range(2)), 90, "both ranks to start")
        yield [int((where / f"ready.{r}").read_text()) for r in range(2)]
    finally:
        (where / "stop").write_text("")
        thread.join(timeout=90)
    assert not thread.is_alive()
    assert outcome["result"].ok, outcome["result"].summary()


def test_monitor_flags_an_idle_rank_behind_the_others_in_a_ddplab_job(tmp_path, no_leftover_workers):
    with slow_rank_job(tmp_path) as pids:
        wait_for(lambda: (tmp_path / "ahead").exists(), 90, "rank 0 to get a few marks ahead")
        ran = cli("monitor", "--once", "--json", "--interval", "1", "--pids", *map(str, pids), timeout=60)

    assert ran.code == 1, ran.err  # something is flagged
    snap = ran.json()
    assert len(snap["jobs"]) == 1 and snap["jobs"][0]["id"].startswith("ddplab:")
    rank0, rank1 = snap["jobs"][0]["ranks"]
    assert (rank0["rank"], rank0["pid"], rank1["rank"], rank1["pid"]) == (0, pids[0], 1, pids[1])
    assert rank0["flags"] == [] and rank0["cpu_percent"] > 0 and rank0["phase"] == "step"
    assert rank1["flags"] == ["idle", "behind"], rank1
    assert rank0["progress"] > rank1["progress"]
    assert "rank 1 idle and behind" in snap["verdict"]
    assert not alive(pids)


def test_no_job_found_is_one_line_exit_1():
    # In a PID namespace of its own, monitor sees no process but itself, whatever else runs on this machine.
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private PID namespace")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid is not allowed here: {probe.stderr.decode().strip()}")
    done = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-m",
            "ddplab",
            "monitor",
            "--once",
            "--interval",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "no running torchrun or ddplab job found" in done.stderr
    assert done.stdout == ""


def test_bad_input_is_one_line_exit_2():
    gone = subprocess.Popen(["true"])
    gone.wait()
    for args, why in [
        (["--pids", str(gone.pid)], f"no process with pid {gone.pid}"),
        (["--pids", "abc"], "is not a process id"),
        (["--interval", "0"], "not a positive number of seconds"),
        (["--interval", "soon"], "not a positive number of seconds"),
    ]:
        ran = cli("monitor", "--once", *args, timeout=60)
        assert ran.code == 2, (args, ran.err)
        assert ran.err.count("\n") == 1 and why in ran.err and "Traceback" not in ran.err, ran.err


# ----------------------------------------------------------------------------------------------- GPUs (NVML)


def _nvml_gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


needs_gpu = pytest.mark.skipif(_nvml_gpus() == 0, reason="no NVIDIA GPU/driver: the NVML paths need one")


@needs_gpu
def test_nvml_reports_every_gpu_and_the_process_on_it():
    import torch

    from ddplab.observe.monitor import Sampler

    if not torch.cuda.is_available():
        pytest.skip("NVML sees a GPU but this torch build has no CUDA")
    held = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")  # this process now holds GPU memory
    torch.cuda.synchronize()
    sampler = Sampler()
    try:
        gpus, state = sampler.nvml.read()
    finally:
        sampler.close()
    assert state == "ok" and len(gpus) == _nvml_gpus()
    for gpu in gpus:
        assert gpu.name and gpu.memory_total_mib > 0 and gpu.memory_used_mib <= gpu.memory_total_mib
        assert gpu.util_percent is None or 0 <= gpu.util_percent <= 100
    mine = [p for gpu in gpus for p in gpu.processes if p.pid == os.getpid()]
    # Inside a container NVML reports host pids: this process may not recognise itself then.
    if not mine and not any(gpu.processes for gpu in gpus):
        pytest.skip("NVML lists no compute process here (a container with its own PID namespace?)")
    del held


@needs_gpu
def test_monitor_places_each_rank_on_its_gpu(tmp_path):
    if _nvml_gpus() < 2:
        pytest.skip("one GPU: a 2-rank NCCL job needs two")
    with TorchrunJob(tmp_path, gpu=True) as job:
        ran = cli("monitor", "--once", "--json", "--pids", str(job.proc.pid), timeout=60)
        assert ran.code in (0, 1), ran.err
        snap = ran.json()
        ranks = job_of(snap, job.proc.pid)["ranks"]
        assert [r["gpu"] for r in ranks] == [0, 1], ranks
        assert all(r["gpu_util_percent"] is not None for r in ranks)
        assert len(snap["gpus"]) == _nvml_gpus()
        busy = [g for g in snap["gpus"] if g["index"] in (0, 1)]
        assert all(g["util_percent"] and g["util_percent"] > 0 for g in busy), busy


def test_a_run_spec_written_by_another_ddplab_version_is_skipped_not_a_crash(tmp_path):
    # Found on the shared machine: another branch's run wrote a spec without "nproc", and every monitor crashed
    # with a KeyError. Such a run's ranks are still found through their launcher variables.
    from ddplab.observe import monitor as mon

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"run_dir": str(tmp_path), "workers": 2}))
    assert mon._ddplab_job(str(spec), {}) is None


def _gpu_job(progress, quiet_s, util=100.0):
    from ddplab.observe.monitor import JobView, RankView

    ranks = [
        RankView(
            100 + i,
            i,
            i,
            "running",
            cpu_percent=100.0,
            progress=progress,
            phase="train.step",
            quiet_s=quiet_s,
            gpu=i,
            gpu_util_percent=util,
        )
        for i in range(2)
    ]
    return JobView("ddplab:x", "ddplab runner", 99, 2, ranks)


def test_a_gpu_rank_without_progress_is_flagged_quiet_though_its_gpu_reads_busy():
    # What a rank hung in NCCL looks like: its GPU at 100 % (NCCL's kernels spin), its last mark minutes ago.
    from ddplab.observe.monitor import QUIET_S, Snapshot, judge

    snap = Snapshot(0.0, 1.0, [_gpu_job(40, QUIET_S + 30)], [], "ok")
    judge(snap)
    assert all(r.flags == ["quiet"] for r in snap.jobs[0].ranks) and not snap.ok
    assert "no progress for 90 s" in snap.problems[0] and "NCCL" in snap.problems[0]
    assert "quiet" in snap.verdict


def test_recent_progress_is_busy_and_without_marks_the_limit_is_said():
    from ddplab.observe.monitor import QUIET_S, Snapshot, judge

    snap = Snapshot(0.0, 1.0, [_gpu_job(40, QUIET_S / 10)], [], "ok")
    judge(snap)
    assert snap.ok and not snap.notes
    snap = Snapshot(0.0, 1.0, [_gpu_job(None, None)], [], "ok")  # a torchrun job: no marks
    judge(snap)
    assert snap.ok and any("GPU utilisation alone cannot tell" in n for n in snap.notes)


def test_a_running_ddplab_launch_does_not_break_monitor(tmp_path, no_leftover_workers):
    """`ddplab launch`'s agent has a spec of its own (torchrun's options, no rank count): monitor, which reads every
    ddplab agent's spec on the machine, once died on it with a KeyError, whatever job it was asked about."""
    (tmp_path / "spin.py").write_text(SPIN)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", SPIN_GPU="0")
    launch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ddplab",
            "launch",
            "--nproc-per-node",
            "2",
            "--no-lint",
            "--log-dir",
            str(tmp_path / "logs"),
            str(tmp_path / "spin.py"),
            str(tmp_path),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: all((tmp_path / f"ready.{r}").exists() for r in range(2)), 120, "both ranks to start")
        ran = cli("monitor", "--once", "--json", "--interval", "0.5", timeout=60)
        assert ran.code in (0, 1) and "Traceback" not in ran.err, ran.err  # 1: another job may be flagged
        pids = {int((tmp_path / f"ready.{r}").read_text()) for r in range(2)}
        assert pids <= {r["pid"] for job in ran.json()["jobs"] for r in job["ranks"]}, ran.out
    finally:
        kill_tree(launch.pid)
        launch.wait(timeout=30)
