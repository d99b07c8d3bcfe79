"""Ranks a watched process starts itself (torch.multiprocessing.spawn, mp.Process: `ddplab launch --nproc-per-node 1
script.py` where the script spawns its ranks), in this process on a real 1-process gloo group: such a process
watches from start-up but is a rank, and writes, only once its own init_process_group returns; the process that
started it then writes nothing. The real 2-rank run is tests/sanitize/test_spawn_styles.py."""

from __future__ import annotations

import json
import os

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
