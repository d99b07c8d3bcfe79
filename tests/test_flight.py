"""Hang forensics from the Flight Recorder, on real gloo runs: plain scripts (tests/scripts/hang_*.py, no ddplab
import) under plain `python -m torch.distributed.run`, with only ddplab's bootstrap in the workers' environment.

A hang is declared the way a watchdog would: every rank printed its last line and then nothing happened for
HANG_TIMEOUT_S. From there the per-collective report must be ready within 5 s (a deadline, not a speed figure).
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import kill_tree
from ddplab.diagnose import flight

SCRIPTS = Path(__file__).parent / "scripts"
HANG_TIMEOUT_S = 2.0
ANALYSIS_DEADLINE_S = 5.0
STARTUP_DEADLINE_S = 150.0  # torch imports on a loaded 2-core machine


def torchrun(script: str, nproc: int, dump_dir: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **flight.worker_env(dump_dir)}
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc-per-node={nproc}", str(SCRIPTS / script)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **popen)


def hang_report(script: str, nproc: int, tmp_path: Path, stacks=None) -> flight.FlightReport:
    """Start the script, wait for it to hang, ask every rank for its record and analyse it within the deadline."""
    dump_dir = tmp_path / "fr"
    dump_dir.mkdir()
    proc = torchrun(script, nproc, dump_dir)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        arrived, log, deadline = 0, [], time.monotonic() + STARTUP_DEADLINE_S
        while arrived < nproc:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{script} did not reach its hang point in time\n{''.join(log)[-3000:]}")
            log.append(line)
            arrived += line.count("at the hang point")  # two ranks may share a line
        time.sleep(HANG_TIMEOUT_S)  # the watchdog's quiet period: nothing may move now
        assert proc.poll() is None, f"{script} ended instead of hanging\n{''.join(log)[-3000:]}"
        start = time.monotonic()
        dumps = flight.request_dumps(dump_dir, range(nproc), timeout=ANALYSIS_DEADLINE_S)
        report = flight.analyse(dumps, nproc, stacks=stacks)
        assert time.monotonic() - start <= ANALYSIS_DEADLINE_S, "the hang was not analysed within its deadline"
    finally:
        kill_tree(proc.pid)
        proc.wait()
    json.dumps(report.to_dict())  # the --json form must hold
    return report


def failed_run(script: str, nproc: int, tmp_path: Path) -> tuple[str, dict[int, dict]]:
    """Run a script that fails (rather than hangs) to its end; its log and the records the ranks left at exit."""
    dump_dir = tmp_path / "fr"
    dump_dir.mkdir()
    proc = torchrun(script, nproc, dump_dir)
    try:
        out, _ = proc.communicate(timeout=STARTUP_DEADLINE_S)
    finally:
        kill_tree(proc.pid)
        proc.wait()
    assert proc.returncode != 0, out[-3000:]
    return out, flight.read_dumps(dump_dir)


def check(c: flight.Collective | None, op: str, seq: int, inputs: str, state: str | None = None):
    assert c is not None
    assert (c.op, c.seq, c.inputs) == (op, seq, inputs), c
    if state:
        assert c.state == state, c


def test_rank_skips_a_collective(tmp_path, no_leftover_workers):
    report = hang_report("hang_skip.py", 3, tmp_path)
    assert report.available and report.kind == "not_called", report
    assert (report.seq, report.op, report.waiting, report.missing) == (5, "all_reduce", [0, 1], [2])
    for r in (0, 1):
        check(report.ranks[r].last_started, "all_reduce", 5, "float32[1024]", "in progress")
        check(report.ranks[r].last_completed, "broadcast", 4, "int64[10]")
    check(report.ranks[2].last_started, "broadcast", 4, "int64[10]", "completed")
    assert report.verdict.startswith("rank 2 has not called all_reduce #5"), report.verdict
    assert report.verdict.endswith("ranks 0, 1 wait in it"), report.verdict


def test_ranks_call_different_ops(tmp_path, no_leftover_workers):
    report = hang_report("hang_ops.py", 2, tmp_path)
    assert report.kind == "mismatch" and report.seq == 4, report
    assert report.verdict == "ranks disagree at #4: rank 0 all_reduce float32[1024]; rank 1 broadcast float32[10]"
    check(report.ranks[0].last_started, "all_reduce", 4, "float32[1024]", "in progress")
    check(report.ranks[1].last_started, "broadcast", 4, "float32[10]", "in progress")
    check(report.ranks[1].last_completed, "all_reduce", 3, "float32[1024]")


def test_rank_stuck_loading_data(tmp_path, no_leftover_workers):
    where = "hang_slow_data.py:16 in load_batch"  # what the watchdog's stack reader would pass
    report = hang_report("hang_slow_data.py", 2, tmp_path, stacks={1: where})
    assert report.kind == "not_called" and (report.seq, report.waiting, report.missing) == (3, [0], [1]), report
    check(report.ranks[0].last_started, "all_reduce", 3, "float32[64]", "in progress")
    check(report.ranks[1].last_completed, "all_reduce", 2, "float32[64]")
    assert report.verdict == (f"rank 1 has not called all_reduce #3 (last: all_reduce #2 float32[64]; it is in "
                              f"{where}); rank 0 waits in it")
    assert f"[{where}]" in flight.render(report)


def test_rank_crashes_while_others_wait(tmp_path, no_leftover_workers):
    out, dumps = failed_run("hang_crash.py", 3, tmp_path)
    assert sorted(dumps) == [0, 1, 2] and all(d["trigger"] == "exit" for d in dumps.values())
    report = flight.analyse(dumps, 3)
    assert report.kind == "not_called" and (report.seq, report.missing, report.waiting) == (4, [1], [0, 2]), report
    assert "rank 1 crashed before all_reduce #4" in report.ranks[1].error
    check(report.ranks[1].last_started, "all_reduce", 3, "float32[256]", "completed")
    for r in (0, 2):  # their all_reduce #4 ended in an error, which retires an entry as success would
        check(report.ranks[r].last_started, "all_reduce", 4, "float32[256]", "failed")
        check(report.ranks[r].last_completed, "all_reduce", 3, "float32[256]")
    assert report.verdict.startswith("rank 1 has not called all_reduce #4 (last: all_reduce #3 float32[256]; "
                                     "it exited: RuntimeError: rank 1 crashed before all_reduce #4)"), report.verdict


def test_ranks_all_reduce_different_sizes(tmp_path, no_leftover_workers):
    out, dumps = failed_run("hang_sizes.py", 2, tmp_path)
    # gloo's transport thread ends the receiving rank in std::terminate (SIGABRT): no record, only its log line.
    what = re.search(r"what\(\):\s*(.*)", out)
    aborted = re.search(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*-6", out)
    assert what and aborted, out[-3000:]
    rank = int(aborted.group(1))
    assert rank not in dumps and flight.GLOO_SIZE_MISMATCH in what.group(1)
    report = flight.analyse(dumps, 2, errors={rank: what.group(1)})
    assert report.kind == "aborted" and (report.seq, report.op) == (4, "all_reduce"), report
    other = 1 - rank
    check(report.ranks[other].last_started, "all_reduce", 4, "float32[1024]" if other == 0 else "float32[10]",
          "failed")
    assert report.verdict.startswith(f"rank {rank} aborted in all_reduce #4"), report.verdict
    # Without the launcher's log line the record alone still names the collective and the silent rank.
    alone = flight.analyse(dumps, 2)
    assert alone.kind == "no_record" and alone.missing == [rank] and alone.seq == 4, alone


def test_no_record_says_why():
    report = flight.analyse({}, 2)
    assert not report.available and "PYTHONPATH" in report.why and report.kind == "unavailable"
    old = {0: {"rank": 0, "trigger": "exit", "traces": {}, "why": "torch 2.7.1 has no Flight Recorder dump function"}}
    report = flight.analyse(old, 1)
    assert not report.available and report.why.startswith("torch 2.7.1") and report.verdict is None
    assert flight.render(report).startswith("Flight Recorder: not available")


def test_bootstrap_keeps_the_sitecustomize_it_shadows(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.SHADOWED_RAN = True\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(flight.BOOT_DIR), str(tmp_path)]),
           flight.frdump.DIR_ENV: str(tmp_path), "RANK": "0", "LOCAL_RANK": "0"}
    code = ("import builtins, sys; from ddplab.diagnose import frdump; "
            "print(builtins.SHADOWED_RAN, frdump._installed, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "True", "False"], out.stderr  # installed, chained, and torch not imported
    record = json.loads((tmp_path / "rank0.json").read_text())  # written at exit
    assert record["trigger"] == "exit" and record["why"] == "the script had not imported torch yet"


def test_hang_inside_a_subgroup(tmp_path, no_leftover_workers):
    report = hang_report("hang_subgroup.py", 3, tmp_path)
    # The cause is the pair group, where idle rank 1 keeps rank 0 waiting; rank 2's wait in the default group's
    # barrier is the consequence and comes second.
    assert report.kind == "not_called" and (report.group, report.seq, report.op) == ("1", 2, "all_reduce"), report
    assert (report.waiting, report.missing) == ([0], [1])
    check(report.ranks[0].last_started, "all_reduce", 2, "float32[32]", "in progress")
    check(report.ranks[2].last_started, "barrier", 2, "", "in progress")
    assert report.verdict.startswith("rank 1 has not called all_reduce #2 in group 1"), report.verdict
    assert report.also == ["ranks 0, 1 have not called barrier #2 (last: all_reduce #1 float32[16]); "
                           "rank 2 waits in it"]
