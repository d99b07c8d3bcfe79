"""What a hung rank's C++ frames say (launcher.stacks.look_inside), read from a real `py-spy dump --native --json`
of tests/scripts/teardown_hang.py's rank 1 (torch 2.13.0+cpu): the main thread in ~ProcessGroupGloo, reached from a
DDP reducer's deallocation, and a gloo worker waiting for the GIL in a work's destructor. The whole path, py-spy
included, is tests/test_teardown.py's hang test."""

import json
from pathlib import Path

from ddplab.launcher.stacks import RankStack, _destroying, describe

DUMP = json.loads((Path(__file__).parent / "data" / "pyspy_native_group_destructor.json").read_text())
PID = 4469


def test_the_main_thread_in_a_groups_destructor_is_named_with_the_reducer_and_the_thread_waiting_for_the_gil():
    assert _destroying(DUMP, PID) == (
        "teardown",
        "~ProcessGroupGloo",
        "freed with a DDP model's reducer; a thread of the process waits for the GIL",
    )


def test_only_the_main_thread_counts_and_only_what_it_shows_is_said():
    worker = [t for t in DUMP if t.get("thread_name") != "MainThread"]
    main = [t for t in DUMP if t.get("thread_name") == "MainThread"]
    assert _destroying(worker, worker[0]["os_thread_id"]) is None  # a worker's ~AsyncWork is no group's destructor
    assert _destroying(main, PID) == ("teardown", "~ProcessGroupGloo", "freed with a DDP model's reducer")


def test_a_rank_in_a_destructor_is_said_before_anything_else():
    stuck = RankStack(1, 1, PID, "teardown", "~ProcessGroupGloo", "train.py:40 in <module>", "", native="")
    done = RankStack(0, 0, 7, "running", None, "train.py:12 in main", "")
    said = describe([done, stuck], None)
    assert said.startswith("rank 1 is stuck in the process group's destructor (c10d::ProcessGroupGloo::~ProcessGroup")
    assert "at train.py:40 in <module>: destroying a group joins its worker threads, and one of them" in said
