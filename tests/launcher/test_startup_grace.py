"""A short hang timeout counts from the ranks' first mark past "start", not from their fork: importing and forming
the group take the machine's time (a loaded CI machine once spent 4 s there and a `--timeout 4` run read as "every
rank is stuck in start"). Event files written by hand, times set in the past: nothing waits on the clock."""

import json
import os
import time

from ddplab.launcher import local
from ddplab.launcher.hang import HangDetector

LONG_AGO = 30.0  # seconds: far past a 1 s timeout, well within STARTUP_GRACE_S


def _events(run_dir, local_rank, *phases, at):
    path = run_dir / "events" / f"local{local_rank}.jsonl"
    path.parent.mkdir(exist_ok=True)
    with open(path, "a") as f:
        for phase in phases:
            f.write(json.dumps({"seq": 1, "t": at, "phase": phase}) + "\n")
    os.utime(path, (at, at))


def _hung(run_dir, nproc, started_at, follow):
    detector = HangDetector(1.0, since=started_at)
    follow.poll()
    local._note_progress(detector, run_dir, nproc, started_at, follow)
    return detector.hung()


def test_ranks_that_only_started_are_given_the_start_up_grace(tmp_path):
    past = time.time() - LONG_AGO
    follow = local._EventFollower(tmp_path, 2, None)
    _events(tmp_path, 0, "start", at=past)
    _events(tmp_path, 1, "start", at=past)
    assert not _hung(tmp_path, 2, past, follow)


def test_once_a_rank_marks_past_start_a_rank_that_never_does_is_hung(tmp_path):
    past = time.time() - LONG_AGO
    follow = local._EventFollower(tmp_path, 2, None)
    _events(tmp_path, 0, "start", "all_reduce", at=past)
    _events(tmp_path, 1, "start", at=past)  # hangs before its first mark
    assert _hung(tmp_path, 2, past, follow)


def test_a_restarted_attempt_starts_up_again(tmp_path):
    past = time.time() - LONG_AGO
    follow = local._EventFollower(tmp_path, 2, None)
    _events(tmp_path, 0, "start", "step.1", "start", at=past)
    _events(tmp_path, 1, "start", "step.1", "start", at=past)
    assert not _hung(tmp_path, 2, past - 2 * local.STARTUP_GRACE_S, follow)
    _events(tmp_path, 1, "step.1", at=past)
    assert _hung(tmp_path, 2, past - 2 * local.STARTUP_GRACE_S, follow)
