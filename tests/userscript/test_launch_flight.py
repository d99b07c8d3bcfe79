"""Hang forensics per collective under `ddplab launch`: plain scripts (tests/scripts/hang_*.py, no ddplab import),
real gloo ranks, and the Flight Recorder's record of each rank in --json — rank, sequence number, op, shapes and
dtype — with the cross-rank verdict. A hang must be reported within the hang timeout + 5 s of the ranks' last
output (a deadline, not a speed figure); a failure is read from the records the ranks wrote as they exited."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from conftest import cli

SCRIPTS = Path(__file__).parents[1] / "scripts"
HANG_TIMEOUT_S = 3


def launch(script: str, nproc: int, tmp_path: Path, hang: bool):
    args = ["launch", "--json", "--no-lint", "--nproc-per-node", str(nproc), "--log-dir", str(tmp_path)]
    if hang:
        args += ["--hang-timeout", str(HANG_TIMEOUT_S)]
    ran = cli(*args, str(SCRIPTS / script), timeout=180)
    ended = time.time()
    result = ran.json()
    if hang:
        assert ran.code == 3 and result["status"] == "hang", ran.err[-3000:]
        last_output = max(p.stat().st_mtime for p in tmp_path.glob("*/attempt_*/*/std*.log"))
        # idle CPU must be seen over part of the timeout first, and py-spy reads every stack: allow that too
        assert ended - last_output <= HANG_TIMEOUT_S + 5 + 5, f"reported {ended - last_output:.1f}s after the hang"
    else:
        assert ran.code == 1 and result["status"] == "failed", ran.err[-3000:]
    report = result["flight"]
    assert report is not None and report["available"], result
    return result, report


def collective(rank: dict, which: str, op: str, seq: int, inputs: str, state: str | None = None) -> None:
    c = rank[which]
    assert (c["op"], c["seq"], c["inputs"]) == (op, seq, inputs), c
    assert state is None or c["state"] == state, c


def test_a_rank_that_skips_a_collective_is_named_with_the_collective(tmp_path, no_leftover_workers):
    result, report = launch("hang_skip.py", 3, tmp_path, hang=True)
    assert report["kind"] == "not_called"
    assert (report["seq"], report["op"], report["waiting"], report["missing"]) == (5, "all_reduce", [0, 1], [2])
    for r in (0, 1):
        collective(report["ranks"][r], "last_started", "all_reduce", 5, "float32[1024]", "in progress")
    collective(report["ranks"][2], "last_completed", "broadcast", 4, "int64[10]")
    assert report["verdict"].endswith("ranks 0, 1 wait in it")


def test_ranks_that_call_different_ops_disagree_at_one_sequence_number(tmp_path, no_leftover_workers):
    result, report = launch("hang_ops.py", 2, tmp_path, hang=True)
    assert report["kind"] == "mismatch" and report["seq"] == 4
    assert report["verdict"] == "ranks disagree at #4: rank 0 all_reduce float32[1024]; rank 1 broadcast float32[10]"
    collective(report["ranks"][1], "last_started", "broadcast", 4, "float32[10]", "in progress")


def test_a_rank_stuck_loading_data_is_named_with_its_line(tmp_path, no_leftover_workers):
    result, report = launch("hang_slow_data.py", 2, tmp_path, hang=True)
    assert report["kind"] == "not_called" and (report["seq"], report["waiting"], report["missing"]) == (3, [0], [1])
    collective(report["ranks"][0], "last_started", "all_reduce", 3, "float32[64]", "in progress")
    assert "hang_slow_data.py:" in report["ranks"][1]["where"] and "load_batch" in report["verdict"]


def test_a_rank_that_crashes_while_the_others_wait(tmp_path, no_leftover_workers):
    result, report = launch("hang_crash.py", 3, tmp_path, hang=False)
    assert result["root_cause"] == 1
    assert report["kind"] == "not_called" and (report["seq"], report["missing"], report["waiting"]) == (4, [1], [0, 2])
    collective(report["ranks"][1], "last_started", "all_reduce", 3, "float32[256]", "completed")
    for r in (0, 2):
        collective(report["ranks"][r], "last_started", "all_reduce", 4, "float32[256]", "failed")


def test_ranks_that_all_reduce_different_sizes(tmp_path, no_leftover_workers):
    """On gloo this aborts rather than hangs: one rank aborts (exit -6, C++ what()), the other sees its connection
    reset. The root cause is the one that aborted, named with its signal's meaning and the mismatch (issue #16), and
    the record names #4."""
    result, report = launch("hang_sizes.py", 2, tmp_path, hang=False)
    aborted = result["root_cause"]
    assert [r["exitcode"] for r in result["ranks"] if r["rank"] == aborted] == [-6]
    assert [r["rank"] for r in result["ranks"] if r["exitcode"] == -6] == [aborted], result["ranks"]  # only it
    assert "SIGABRT" in result["summary"] and "Received data size doesn't match" in result["summary"]
    assert result["explanation"]["matches"][0]["rule"] == "gloo-size-mismatch"
    assert report["kind"] == "aborted" and (report["seq"], report["op"]) == (4, "all_reduce"), report
    assert report["verdict"].startswith(f"rank {aborted} aborted in all_reduce #4")
    other = 1 - aborted
    collective(
        report["ranks"][other],
        "last_started",
        "all_reduce",
        4,
        "float32[1024]" if other == 0 else "float32[10]",
        "failed",
    )


def test_ranks_that_outlive_a_crashed_one_leave_their_record(tmp_path, no_leftover_workers):
    """torchrun ends the other ranks the moment one fails: rank 0, slow to fail in #4, and rank 2, still loading its
    batch, are each asked for their record first, and rank 0 is given the moment it needs to fail by itself."""
    result, report = launch("crash_survivors.py", 3, tmp_path, hang=False)
    assert result["root_cause"] == 1
    assert report["kind"] == "not_called" and (report["seq"], report["missing"], report["waiting"]) == (4, [1, 2], [0])
    collective(report["ranks"][0], "last_started", "all_reduce", 4, "float32[256]", "failed")
    collective(report["ranks"][2], "last_started", "all_reduce", 3, "float32[256]", "completed")


@pytest.fixture(autouse=True)
def _no_log_dirs_left(tmp_path):
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)
