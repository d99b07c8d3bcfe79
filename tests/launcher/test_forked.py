"""A function the agent runs in a fork of itself beside the ranks (PendingRun.fork, `ddplab train`'s memory
prediction): its answer, or its one-line error, reaches the caller; a run whose ranks are done first waits for it;
a run that fails ends it; nothing is left behind."""

import time
from pathlib import Path

import psutil
import pytest
from conftest import alive

from ddplab.errors import DdplabError
from ddplab.launcher import local

ENV = {"PYTHONPATH": str(Path(__file__).parents[1])}


def test_the_answers_come_back_and_a_done_run_waits_for_a_late_one(tmp_path, no_leftover_workers):
    pending = local.start("workers:sum_ranks", nproc=2, env=ENV)
    told = tmp_path / "told"
    late = pending.fork(
        "workers:answer_after_the_ranks",
        {"run_dir": str(pending.run_dir), "nproc": 2, "told": str(told)},
        60,
        told.touch,
        background=True,
    )
    refused = pending.fork("workers:refuse_in_one_line", {"why": "no such recipe: fix it"}, 60)
    bug = pending.fork("workers:fail_with_a_bug", None, 60)
    assert refused.wait(60)
    # The agent reaps a fork that ended at once: its ranks, forked next, are its only other children. The agent
    # writes the fork's pid after fork() returns to it: on a loaded machine the fork can answer first.
    deadline = time.monotonic() + 10
    while (pid := refused.pid()) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pid is not None, "the agent never wrote the pid of the fork that answered"
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not psutil.pid_exists(pid), "an ended fork stayed a zombie"
    result = pending.run(None, stall_timeout=60)
    assert result.ok, result.summary()
    value = late.result()
    assert told.exists()  # the ranks were done before it answered: the run said so, and kept the agent for it
    assert value["torch_was_imported"] and value["pid"] not in [r["pid"] for r in result.results()]
    assert value["nice"] == 19  # in the background: only the CPU time the ranks leave
    with pytest.raises(DdplabError, match="^no such recipe: fix it$"):
        refused.result()
    with pytest.raises(DdplabError, match="^ValueError: a bug$"):
        bug.result()
    for forked in (late, refused, bug):
        forked.cancel()
        assert not forked.folder.exists()


def test_a_run_that_fails_ends_a_fork_that_never_answers(no_leftover_workers):
    pending = local.start("workers:sum_ranks", nproc=2, env={**ENV, "DDPLAB_FAULT": "crash:1:all_reduce"})
    forked = pending.fork("workers:never_answer", None, 60)
    result = pending.run(None, stall_timeout=60)
    assert result.status == "failed" and result.root_cause == 1
    assert forked.done()
    with pytest.raises(DdplabError, match="ended before it answered"):
        forked.result()
    pid = int((forked.folder / "pid").read_text())
    assert not alive([pid])
    forked.cancel()
