"""The runner starts real ranks through torch's elastic launcher and always ends them: ok, crash, hang, busy port."""

import os
import time
from pathlib import Path

import pytest
from conftest import alive

from ddplab.errors import DdplabError
from ddplab.launcher import local

TESTS = str(Path(__file__).parents[1])
ENV = {"PYTHONPATH": TESTS}


@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_init_and_exact_all_reduce(nproc, no_leftover_workers):
    result = local.run("workers:sum_ranks", nproc=nproc, stall_timeout=60, env=ENV)
    assert result.ok, result.summary()
    got = sorted(result.results(), key=lambda r: r["rank"])
    assert [r["rank"] for r in got] == list(range(nproc))
    assert all(r["world_size"] == nproc and r["local_rank"] == r["rank"] for r in got)
    assert all(r["sum"] == nproc * (nproc + 1) / 2 for r in got)
    assert all(r["backend"] == "gloo" for r in got)
    assert not alive(r["pid"] for r in got)


def test_a_crashing_rank_is_named_and_every_worker_ends(no_leftover_workers):
    result = local.run(
        "workers:sum_ranks", nproc=3, stall_timeout=60, env={**ENV, "DDPLAB_FAULT": "crash:1:all_reduce"}
    )
    assert result.status == "failed"
    assert result.root_cause == 1
    crashed = result.ranks[1]
    assert crashed.exitcode == 1 and "injected crash on rank 1" in crashed.error
    assert crashed.phase == "all_reduce"
    assert "rank 1 failed" in result.summary()
    assert not alive(r.pid for r in result.ranks)


def test_fresh_workers_are_new_interpreters_and_report_as_forked_ones_do(no_leftover_workers):
    """bench asks for workers started as torchrun starts a script's (docs/bench.md): results and crashes alike."""
    ok = local.start("workers:sum_ranks", nproc=2, env=ENV, fresh_workers=True).run(None, stall_timeout=60)
    assert ok.ok, ok.summary()
    got = sorted(ok.results(), key=lambda r: r["rank"])
    assert [r["sum"] for r in got] == [3.0, 3.0]
    assert all(r["argv"][0].endswith("worker.py") for r in got)  # a fork would carry the agent's own arguments
    crash = local.start(
        "workers:sum_ranks", nproc=2, env={**ENV, "DDPLAB_FAULT": "crash:1:all_reduce"}, fresh_workers=True
    ).run(None, stall_timeout=60)
    assert crash.status == "failed" and crash.root_cause == 1
    assert "injected crash on rank 1" in crash.ranks[1].error and crash.ranks[1].phase == "all_reduce"
    assert not alive([r["pid"] for r in got] + [r.pid for r in crash.ranks])


def test_a_hanging_rank_is_named_within_the_timeout_plus_5s(no_leftover_workers):
    timeout = 3
    result = local.run(
        "workers:sum_ranks", nproc=2, stall_timeout=timeout, env={**ENV, "DDPLAB_FAULT": "hang:1:all_reduce"}
    )
    detected = time.time()
    assert result.status == "hang"
    assert result.stalled == [1]
    assert detected - result.last_progress <= timeout + 5
    assert "rank 1 (last in start) never reached all_reduce" in result.summary()
    assert "hang_before" in result.ranks[1].stack  # its Python stack shows where it is instead
    assert "all_reduce" in result.ranks[0].stack  # and rank 0's shows it waiting in the collective
    assert not alive(r.pid for r in result.ranks)


def test_the_deadline_ends_a_run_that_makes_progress_too_slowly(no_leftover_workers):
    start = time.monotonic()
    result = local.run(
        "workers:slow_steps", {"steps": 1000, "sleep": 0.2}, nproc=2, stall_timeout=30, deadline=4, env=ENV
    )
    assert result.status == "hang" and "deadline" in result.reason
    assert time.monotonic() - start <= 4 + 5
    assert not alive(r.pid for r in result.ranks)


def test_steady_progress_is_not_a_hang(no_leftover_workers):
    events = []
    result = local.run(
        "workers:slow_steps",
        {"steps": 8, "sleep": 0.5},
        nproc=2,
        stall_timeout=2,
        env=ENV,
        on_event=lambda rank, e: events.append((rank, e["phase"])),
    )
    assert result.ok, result.summary()  # 4 s in total, but never 2 s without a step
    assert sum(1 for rank, phase in events if phase == "step") == 16


def test_a_busy_master_port_is_refused_in_one_line(busy_port):
    port = busy_port
    with pytest.raises(DdplabError, match=f"port {port} on 127.0.0.1 is already in use"):
        local.run("workers:sum_ranks", nproc=2, master_port=port, env=ENV)


def test_a_cancelled_start_leaves_nothing(no_leftover_workers):
    pending = local.start("workers:sum_ranks", nproc=2, env=ENV)
    time.sleep(0.5)
    pending.cancel()
    assert pending.agent.poll() is not None
    assert not os.path.exists(pending.run_dir)


def test_the_single_node_store_listens_on_loopback_only(no_leftover_workers):
    result = local.run("workers:listening_addresses", nproc=2, stall_timeout=30, env=ENV)
    assert result.ok, result.summary()
    for r in result.results():
        assert r["listening"] == ["127.0.0.1"], r  # the agent's store and gloo: never "::" or "0.0.0.0"
