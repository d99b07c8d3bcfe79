"""Leaving a process group cleanly (issue #21, docs/teardown.md), with real 2-rank torchrun groups on gloo.

- the abort itself, made certain rather than left to chance: a gloo worker thread must free a tensor Python let go
  of, and the main thread walks into interpreter exit without ever yielding the GIL; `explain` reads that real
  output as a teardown abort after success;
- the fix: after ddplab.dist.session() and after the `ddplab new` script, no thread of the process group is left
  (the process has as many threads as before it joined the group), so none can be working at interpreter exit;
- the hang at a function's return: a DDP model freed after destroy_process_group() destroys the group with the GIL
  held while a worker waits for it; `ddplab launch` names the rank inside the group's destructor, and the documented
  order (del the model first) ends cleanly.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import cli, torchrun

from ddplab.commands.new import render_script
from ddplab.explain.matcher import explain_text

# Every run here: the ranks' stderr in order with their stdout (the abort's text), no core file for an abort.
RUN = {"timeout": 240, "merge_stderr": True, "core_files": False}

# The abort at exit, made certain: tests/scripts/abort_at_exit.py (rank 1 holds the GIL while its gloo worker must
# free a tensor, then exits).
ABORT_AT_EXIT = Path(__file__).parent / "scripts" / "abort_at_exit.py"
# The hang at main()'s return, made certain: the same worker, and a DDP model freed after destroy_process_group().
TEARDOWN_HANG = Path(__file__).parent / "scripts" / "teardown_hang.py"

THREADS = "len(os.listdir('/proc/self/task'))"

# In one process per rank, each measured on its own: a DDP training step inside ddplab.dist.session(), the way the
# recipes use it; then the written `ddplab new` script's main(). The process's thread count is taken before and
# after each: a thread the first left behind shows in its own "after" (and would not hide the second's).
AROUND_BOTH = f"""
import importlib.util, os, sys, torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
import ddplab.dist as dd
rank = os.environ['RANK']
def say(line):  # one write per line: the two ranks share the pipe, and print() may write the newline apart
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()
before = {THREADS}
with dd.session(device="cpu") as ctx:
    model = DDP(nn.Linear(8, 1))
    model(torch.randn(4, 8)).sum().backward()
    total = torch.ones(1)
    dd.dist.all_reduce(total)
    del model
say(f"session rank {{rank}} threads before {{before}} after {{{THREADS}}}")
spec = importlib.util.spec_from_file_location("written", sys.argv[1])
written = importlib.util.module_from_spec(spec)
spec.loader.exec_module(written)
before = {THREADS}
sys.argv = [sys.argv[1], "--epochs", "1"]
written.main()
say(f"new rank {{rank}} threads before {{before}} after {{{THREADS}}}")
"""


def thread_counts(out: str, what: str) -> dict[int, tuple[int, int]]:
    found = re.findall(rf"{what} rank (\d) threads before (\d+) after (\d+)", out)
    return {int(r): (int(b), int(a)) for r, b, a in found}


def test_a_gloo_thread_freeing_a_tensor_at_exit_aborts_and_explain_says_teardown(no_leftover_workers):
    # Nearly certain, not quite: once in a full-suite run the worker got the GIL before exit. A few tries, then it
    # must have happened (the explain rule needs the real text, not a quote).
    for _ in range(3):
        ran = torchrun(ABORT_AT_EXIT, **RUN)
        if ran.returncode != 0:
            break
    assert ran.returncode != 0, ran.stdout
    assert "rank 1: training done" in ran.stdout  # the work was done...
    assert "terminate called without an active exception" in ran.stdout  # ...then the exit aborted
    explained = explain_text(ran.stdout)
    assert explained.root_cause is not None and explained.root_cause.rank == 1
    assert explained.root_cause.signal == "SIGABRT"
    # SIGABRT's generic rule may lead; the specific cause is the first one that is not a generic pointer
    specific = next(m for m in explained.matches if not m.generic)
    assert specific.rule == "teardown-abort"
    assert "the training itself did not fail" in specific.cause


def test_a_dist_session_and_the_new_script_leave_no_thread_of_their_process_group(tmp_path, no_leftover_workers):
    """One torchrun run for both (each run costs a group's start-up): the session first, then the script's main()."""
    script = tmp_path / "train_ddp.py"
    script.write_text(render_script("regression", script.name))
    wrapper = tmp_path / "around.py"
    wrapper.write_text(AROUND_BOTH)
    ran = torchrun(wrapper, str(script), **RUN)
    assert ran.returncode == 0, ran.stdout
    for what in ("session", "new"):
        counts = thread_counts(ran.stdout, what)
        assert set(counts) == {0, 1}, (what, ran.stdout)
        for rank, (before, after) in counts.items():
            assert after == before, f"{what}: rank {rank}: {after - before} thread(s) of the group outlived it"


def test_a_model_freed_after_destroy_hangs_in_the_groups_destructor_and_launch_says_so(no_leftover_workers):
    """Seen once in CI as "no rank is in a distributed call: rank 0 at <module>" (the C++ frames were not read).
    The hang begins about 10 s after the script's last line (rank 1 holds the GIL that long, busy); 10 s of silence
    and idle CPU confirm it (not 5 s: under a full suite's load the ranks' DDP() alone was once that quiet). Rank 1
    hangs by construction and rank 0 by chance; under load, once in seven runs, rank 1 left cleanly while rank 0
    hung: whichever ranks hang must be named so, and a run with none is tried again (as the abort test above)."""
    for _ in range(3):
        ran = cli("launch", "--no-lint", "--json", "--hang-timeout", "10", "--nproc-per-node", "2", str(TEARDOWN_HANG),
                  timeout=120, cwd=TEARDOWN_HANG.parent)  # fmt: skip
        if ran.code != 0:
            break
    result = ran.json()
    assert ran.code == 3 and result["status"] == "hang", ran.out[-4000:]
    stuck = {r["rank"]: r for r in result["ranks"] if r["stuck_in"]}
    assert stuck and {r["stuck_in"] for r in stuck.values()} == {"~ProcessGroupGloo"}, result["ranks"]
    assert all(
        r["where"].startswith("teardown_hang.py:") and r["where"].endswith("in <module>") for r in stuck.values()
    )
    said = f"rank {min(stuck)} is stuck in the process group's destructor (c10d::ProcessGroupGloo::~ProcessGroupGloo)"
    assert said in result["summary"]
    assert "(freed with a DDP model's reducer; a thread of the process waits for the GIL)" in result["summary"]
    assert "outlived destroy_process_group()" in result["summary"]
    assert result["fix"].startswith("let go of the DDP model before destroy_process_group()")

    ran = cli("launch", "--no-lint", "--json", "--hang-timeout", "10", "--nproc-per-node", "2", str(TEARDOWN_HANG),
              "--del-first", timeout=120, cwd=TEARDOWN_HANG.parent)  # fmt: skip
    assert ran.code == 0 and ran.json()["status"] == "ok", ran.out[-4000:]
