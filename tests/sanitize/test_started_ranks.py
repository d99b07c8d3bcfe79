"""Ranks a watched process starts itself (torch.multiprocessing.spawn, mp.Process: `ddplab launch --nproc-per-node 1
script.py` where the script spawns its ranks), in this process on a real 1-process gloo group: such a process
watches from start-up but is a rank, and writes, only once its own init_process_group returns; the process that
started it then writes nothing. The real 2-rank run is tests/sanitize/test_spawn_styles.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from ddplab.sanitize import OWNER_ENV, rankside


@pytest.fixture
def restored(monkeypatch):
    """init_process_group as torch has it, and the owner variable as it was, whatever the test did."""
    originals = dist.init_process_group, dist.distributed_c10d.init_process_group
    monkeypatch.setenv(OWNER_ENV, "1")
    yield
    dist.init_process_group, dist.distributed_c10d.init_process_group = originals


def test_a_started_process_is_a_rank_once_it_joins_a_group(tmp_path, restored):
    w = rankside.Window(str(tmp_path), 3, checks=(), started_by="1")
    w.attach(torch)
    try:
        w.write(wait=True)
        assert w.rank is None and list(tmp_path.iterdir()) == []  # not a rank yet: a DataLoader worker stays so
        assert dist.init_process_group is dist.distributed_c10d.init_process_group  # both names: scripts use either
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        dist.destroy_process_group()
    finally:
        w.handle.remove()
    assert (w.rank, w.world) == (0, 1) and os.environ[OWNER_ENV] == str(os.getpid())
    assert (tmp_path / "started-by-1").read_text() == "0\n"
    w.write(wait=True)
    record = json.loads((tmp_path / "rank0.json").read_text())
    assert record["rank"] == 0 and record["world_size"] == 1 and record["pid"] == os.getpid()


def test_the_process_that_started_the_ranks_writes_nothing(tmp_path, restored):
    """The launched process (nproc 1) that spawned the ranks is not one: its rank0.json would hide the real rank 0."""
    w = rankside.Window(str(tmp_path), 3, checks=())
    assert w.rank == int(os.environ.get("RANK", "0"))
    (tmp_path / f"started-by-{os.getpid()}").write_text("0\n1\n")
    w.write(wait=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"started-by-{os.getpid()}"]
    assert dist.init_process_group is dist.distributed_c10d.init_process_group  # a torchrun worker's is left alone


# A rank forked by the watched process (torch.multiprocessing.start_processes(start_method="fork")), in a fresh
# interpreter: a fork of this test process (a pytest worker holding the threads of every test before it) can inherit
# a lock some other thread held, and hang in the child for reasons that are the test run's, not the sanitizer's.
_FORKING_SCRIPT = """
import faulthandler, json, multiprocessing, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from ddplab.sanitize import OWNER_ENV, rankside

def forked_rank():
    # what it inherited is the parent's window; it becomes a rank when its init_process_group returns, trains one
    # step, and ends as multiprocessing ends a forked child: os._exit(), which runs no atexit handler
    faulthandler.dump_traceback_later(50, exit=True)  # a hang says where, on stderr, before the parent's deadline
    w = rankside._window
    assert w.rank is None and w.started_by == str(os.getppid()) and w.pid == os.getpid()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=8):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    dist.destroy_process_group()

os.environ[OWNER_ENV] = str(os.getpid())
w = rankside.Window(sys.argv[1], 3, checks=("samebatch", "paramsync"))
w.attach(torch)
rankside._window = w
os.register_at_fork(after_in_child=rankside._forked)
before = DataLoader(TensorDataset(torch.arange(32.0).reshape(8, 4)), batch_size=4)
next(iter(before))  # the parent's pass: not the forked rank's
child = multiprocessing.get_context("fork").Process(target=forked_rank)
child.start()
child.join(60)
if child.is_alive():  # a hard deadline, and nothing left behind
    child.kill()
    child.join()
print(json.dumps({"exitcode": child.exitcode, "pid": child.pid, "parent": os.getpid()}), flush=True)
if child.exitcode == 0:
    os.rename(os.path.join(sys.argv[1], "rank0.json"), os.path.join(sys.argv[1], "child.json"))
    w.write(wait=True)  # the launched process: not a rank, its ranks were the forks
"""


def test_a_rank_forked_by_the_watched_process_writes_its_own_record(tmp_path):
    """`ddplab launch --nproc-per-node 1` of a script whose ranks are forked (start_processes(start_method="fork")):
    the fork inherits the launched process's window (pid, rank 0 of the launcher's world of 1), which wrote nothing
    of the ranks' before. The child is a rank once it joins, writes its record at its end through multiprocessing's
    exit (its atexit never runs), without what the parent recorded before the fork (a loader's batches, a file
    written: each forked rank would claim them); the parent then writes nothing."""
    script = tmp_path / "forks.py"
    script.write_text(_FORKING_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", OWNER_ENV)}
    ran = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    child = json.loads(ran.stdout.strip().splitlines()[-1])
    assert child["exitcode"] == 0, ran.stderr[-3000:]
    record = json.loads((out / "child.json").read_text())
    assert record["pid"] == child["pid"] and record["steps"] == 1 and record["world_size"] == 1
    parents, own = record["checks"]["same-samples"]["loaders"]
    assert parents["passes"] == [] and [p["batches"] for p in own["passes"]] == [1] and own["trained"]
    assert [c["step"] for c in record["checks"]["params-diverge"]["checks"]] == [1]
    assert (out / f"started-by-{child['parent']}").read_text() == "0\n"
    assert not (out / "rank0.json").exists()  # the parent, not a rank, wrote nothing of its own
