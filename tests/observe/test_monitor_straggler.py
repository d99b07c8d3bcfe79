"""`ddplab monitor` on a plain torchrun job (no progress marks) where rank 0 is the straggler: it computes while
rank 1 waits for it in an all_reduce. CPU time alone cannot say who is behind; the rank with little CPU time is the
one waiting, so monitor must not call it "behind" but name the busy rank as the likely straggler."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
from conftest import alive, cli, kill_tree
from test_monitor import LAUNCHER_VARS, wait_for

STRAGGLER = """
import os, sys, time
from pathlib import Path
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
here = Path(sys.argv[1])
(here / f"ready.{rank}").write_text(str(os.getpid()))
end = time.time() + 90
if rank == 0:  # the straggler: a long step before the collective
    while time.time() < end and not (here / "stop").exists():
        x = 0
        for _ in range(200000):
            x += 1
dist.all_reduce(torch.ones(1))  # rank 1 waits here for rank 0
dist.destroy_process_group()
"""


def test_a_rank_waiting_for_a_busy_straggler_is_not_called_behind(tmp_path, no_leftover_workers):
    (tmp_path / "straggler.py").write_text(STRAGGLER)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(tmp_path / "straggler.py"),
            str(tmp_path),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        wait_for(lambda: all((tmp_path / f"ready.{r}").exists() for r in range(2)), 90, "both ranks to start")
        pids = [int((tmp_path / f"ready.{r}").read_text()) for r in range(2)]
        # Until rank 0 has used three times rank 1's CPU time (both paid the same start-up); 60 s under load.
        wait_for(
            lambda: psutil.Process(pids[0]).cpu_times().user > 3.5 * sum(psutil.Process(pids[1]).cpu_times()[:2]),
            60,
            "rank 0 to pull ahead in CPU time",
        )
        ran = cli("monitor", "--once", "--json", "--interval", "1", "--pids", str(proc.pid), timeout=60)
        text = cli("monitor", "--once", "--interval", "1", "--pids", str(proc.pid), timeout=60).out
    finally:
        (tmp_path / "stop").write_text("")
        try:
            proc.wait(timeout=30)  # rank 0 reaches the all_reduce; both end by themselves
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
    assert proc.returncode == 0
    assert ran.code == 1 and ran.out, ran.err  # something is flagged
    rank0, rank1 = ran.json()["jobs"][0]["ranks"]
    assert "behind" not in rank1["flags"] and "waiting" in rank1["flags"], rank1
    assert rank0["flags"] == [], rank0
    problems = " | ".join(ran.json()["problems"])
    assert "rank 0, the busy one, is likely the straggler" in problems, problems
    assert "waiting" in text and "behind" not in text.replace("none behind", ""), text
    assert not alive([proc.pid, *pids])
