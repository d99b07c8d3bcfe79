"""Hang forensics from the Flight Recorder, on real gloo runs: plain scripts (tests/scripts/hang_*.py, no ddplab
import) under plain `python -m torch.distributed.run`, with only ddplab's bootstrap in the workers' environment.
The five cases of issue #16 run under `ddplab launch` in test_launch_flight.py; here, what the library does alone.

A hang is declared the way a watchdog would: every rank printed its last line and then nothing happened for
HANG_TIMEOUT_S. From there the per-collective report must be ready within 5 s (a deadline, not a speed figure).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import kill_tree

from ddplab.flight import reader as flight

SCRIPTS = Path(__file__).parents[1] / "scripts"
HANG_TIMEOUT_S = 2.0
ANALYSIS_DEADLINE_S = 5.0
STARTUP_DEADLINE_S = 150.0  # torch imports on a loaded 2-core machine


def torchrun(script: str, nproc: int, dump_dir: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **flight.worker_env(dump_dir)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            str(SCRIPTS / script),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **popen,
    )


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


def check(c: flight.Collective | None, op: str, seq: int, inputs: str, state: str | None = None):
    assert c is not None
    assert (c.op, c.seq, c.inputs) == (op, seq, inputs), c
    if state:
        assert c.state == state, c


def test_no_record_says_why():
    report = flight.analyse({}, 2)
    assert not report.available and "PYTHONPATH" in report.why and report.kind == "unavailable"
    old = {0: {"rank": 0, "trigger": "exit", "traces": {}, "why": "torch 2.7.1 has no Flight Recorder dump function"}}
    report = flight.analyse(old, 1)
    assert not report.available and report.why.startswith("torch 2.7.1") and report.verdict is None
    assert flight.render(report).startswith("Flight Recorder: not available")


def test_bootstrap_keeps_the_sitecustomize_it_shadows(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.SHADOWED_RAN = True\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(flight.BOOT_DIR), str(tmp_path)]),
        flight.rankdump.DIR_ENV: str(tmp_path),
        "RANK": "0",
        "LOCAL_RANK": "0",
    }
    code = (
        "import builtins, sys; from ddplab.flight import rankdump; "
        "print(builtins.SHADOWED_RAN, rankdump._installed, 'torch' in sys.modules)"
    )
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
    assert report.also == [
        "ranks 0, 1 have not called barrier #2 (last: all_reduce #1 float32[16]); rank 2 waits in it"
    ]
