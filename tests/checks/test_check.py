"""`ddplab check` end to end: real ranks on gloo, each failure path made to happen."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import cli, kill_tree, refused, sigint_as_ctrl_c
from inproc import here

STAGE_NAMES = ["preflight", "devices", "collectives", "ddp"]


# 1 (no peer) and 3 (uneven); 2, the default, passes in the guide's `ddplab check` and runs in every test below
@pytest.mark.parametrize("nproc", [1, 3])
def test_full_check_passes(nproc, no_leftover_workers):
    ran = cli("check", "--nproc", str(nproc), "--json")
    assert ran.code == 0, ran.err + ran.out
    result = ran.json()
    assert result["ok"] is True and result["nproc"] == nproc and result["backend"] == "gloo"
    assert [s["name"] for s in result["stages"]] == STAGE_NAMES
    assert all(s["status"] == "PASS" for s in result["stages"]), result["stages"]
    assert result["verdict"].startswith("READY") and result["kept"] == ""  # a run that passed keeps nothing
    collectives = result["stages"][2]["details"]
    assert sum(collectives["wrong"].values()) == 0 and len(collectives["wrong"]) >= 10 - (nproc == 1)
    ddp = result["stages"][3]["details"]
    assert ddp["spread"] == 0 and ddp["vs_single"] <= 1e-5 and ddp["loss_after"] < ddp["loss_before"]
    sanitized = result["sanitize"]  # the sanitizer watched the ddp stage's steps on every rank: nothing to say
    assert sanitized["ranks"] == list(range(nproc)) and sanitized["steps_seen"] >= 1, sanitized
    assert sanitized["findings"] == [] and sanitized["off"] == {}, sanitized
    for stage in result["stages"]:
        assert {"name", "status", "seconds"} <= set(stage)


def test_text_output_is_a_table_and_a_verdict(no_leftover_workers):
    # under CUDA_VISIBLE_DEVICES=-1 (every GPU hidden, as CUDA reads it): the 2 CPU ranks are fine with it
    # (test_visible_devices.py reads the preflight's findings in-process; this is the run with ranks)
    # The CLI itself never imports torch (the agent settles device, backend and ranks in a fork; verdicts.py sums
    # up): Python's own import log of the CLI says so.
    ran = cli("check", "--stages", "collectives", env={"CUDA_VISIBLE_DEVICES": "-1", "PYTHONPROFILEIMPORTTIME": "1"})
    assert ran.code == 0, ran.err
    imported = [line.rpartition("|")[2].strip() for line in ran.err.splitlines() if line.startswith("import time:")]
    assert "ddplab.checks.verdicts" in imported and "torch" not in imported
    assert "collectives" in ran.out and "PASS" in ran.out and "verdict: READY" in ran.out
    assert "CUDA_VISIBLE_DEVICES=-1 (every GPU hidden)" in " ".join(ran.out.split()), ran.out
    rows = [line.split()[0] for line in ran.out.splitlines() if line.split()[:1] in (["devices"], ["ddp"])]
    assert rows == []  # only the asked-for stages (and preflight) have rows


def test_a_crashing_rank_fails_its_stage_by_name(no_leftover_workers):
    ran = cli("check", "--json", env={"DDPLAB_FAULT": "crash:1:collectives.broadcast"})
    assert ran.code == 1, ran.err
    stages = {s["name"]: s for s in ran.json()["stages"]}
    assert stages["devices"]["status"] == "PASS"
    assert stages["collectives"]["status"] == "FAIL"
    assert "rank 1 failed" in stages["collectives"]["cause"] and "injected crash" in stages["collectives"]["cause"]
    assert stages["ddp"]["status"] == "SKIP"
    problem = ran.json()["problems"][0]
    assert problem["rank"] == 1 and "RuntimeError: injected crash" in problem["traceback"]


def test_a_rank_sending_wrong_data_fails_collectives_and_the_ring_is_one_batch_that_carries_data(no_leftover_workers):
    # Rank 1 really sends one wrong element, as a broken transport would: as the root of a broadcast (every rank then
    # holds it), into the all_reduce sum (every rank's sum is off in one element) and along the send/recv ring (only
    # the rank it sends to holds it: one of its two peers at 3 ranks). Nothing else may be blamed. One run for the
    # three faults: each op is counted apart. 3 ranks: the ring's receiver is told from its other peer (at 2 ranks
    # they are one rank).
    # The ring goes through dist.batch_isend_irecv (NCCL needs a rank's send and receive grouped); on gloo the
    # same call runs, and carries the data: the wrong element arrives.
    ran = cli(
        "check",
        "--json",
        "--nproc",
        "3",
        "--stages",
        "collectives",
        env={
            "DDPLAB_FAULT": "corrupt:1:collectives.broadcast,corrupt:1:collectives.all_reduce.sum,"
            "corrupt:1:collectives.send_recv_ring"
        },
    )
    assert ran.code == 1, ran.err
    stage = {s["name"]: s for s in ran.json()["stages"]}["collectives"]
    assert stage["status"] == "FAIL" and "all_reduce.sum (3), broadcast (3)" in stage["cause"], stage["cause"]
    assert {op: n for op, n in stage["details"]["wrong"].items() if n} == {
        "all_reduce.sum": 3,
        "broadcast": 3,
        "send_recv_ring": 1,
    }


def test_a_hanging_rank_times_out_with_its_name_and_stack(no_leftover_workers):
    timeout = 3
    ran = cli("check", "--json", "--timeout", str(timeout), env={"DDPLAB_FAULT": "hang:1:collectives.all_reduce.sum"})
    ended = time.time()
    assert ran.code == 3, ran.err
    stage = {s["name"]: s for s in ran.json()["stages"]}["collectives"]
    assert stage["status"] == "TIMEOUT"
    assert "rank 1" in stage["cause"] and "never reached collectives.all_reduce.sum" in stage["cause"]
    assert stage["details"]["stalled"] == [1]
    assert "hang_before" in stage["details"]["stacks"]["1"]
    assert ended - stage["details"]["last_progress"] <= timeout + 5


def test_ctrl_c_ends_every_worker(tmp_path, no_leftover_workers):
    env = {**os.environ, "DDPLAB_FAULT": "hang:0:collectives", "NO_COLOR": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplab", "check", "--timeout", "120"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=sigint_as_ctrl_c,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until the ranks exist
            if len(psutil.Process(proc.pid).children(recursive=True)) >= 3:  # the agent and both ranks
                break
            time.sleep(0.2)
        workers = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    finally:
        kill_tree(proc.pid)
    assert proc.returncode == 130
    gone, still = psutil.wait_procs([psutil.Process(p) for p in workers if psutil.pid_exists(p)], timeout=5)
    assert not still
    assert not list(tmp_path.glob("ddplab-sanitize-*"))  # the sanitizer's folder goes with an interrupted check


def test_busy_master_port_fails_preflight(busy_port):
    # in this process: with no port to give them, no agent and no rank is started (the spawn guard would say so)
    port = busy_port
    ran = here("check", "--json", "--master-port", str(port))
    assert ran.code == 1
    pre = ran.json()["stages"][0]
    assert pre["status"] == "FAIL" and "already in use" in pre["cause"] and pre["fix"]
    assert all(s["status"] == "SKIP" for s in ran.json()["stages"][1:])


def test_every_worker_stage_is_a_module_with_both_halves():
    from ddplab.checks import STAGES, WORKER_STAGES, stage_module, verdicts

    assert list(STAGES) == STAGE_NAMES and STAGES[0] == "preflight"
    assert set(verdicts.SUMMARIES) == set(WORKER_STAGES)
    for name in WORKER_STAGES:
        module = stage_module(name)
        assert module.__name__ == f"ddplab.checks.{name}"
        assert callable(module.on_rank) and callable(verdicts.SUMMARIES[name])
    with pytest.raises(ValueError):
        stage_module("preflight")  # runs in the CLI process, not on the ranks


@pytest.mark.parametrize(
    "args, words",
    [
        (["--nproc", "0"], "not a positive whole number"),
        (["--nproc", "abc"], "not a positive whole number"),
        (["--nnodes", "2"], "needs --rdzv-endpoint"),
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29500"], "--node-rank 2 is outside"),
        (["--stages", "warp"], "unknown stage"),
        (["--timeout", "-1"], "not a positive number"),
        (["--device", "tpu"], "invalid choice"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, words, capsys):
    assert words in refused(capsys, "check", *args)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a CPU-only machine")
def test_cuda_without_gpu_is_a_usage_error(no_leftover_workers):
    # a real process: check starts its agent while it looks at the device (start-up paid once), and it must end
    ran = cli("check", "--device", "cuda")
    assert ran.code == 2 and "torch sees no CUDA GPU" in ran.err and len(ran.err.strip().splitlines()) == 1


def test_the_ring_calls_batch_isend_irecv():
    import inspect

    from ddplab.checks import collectives

    source = inspect.getsource(collectives._send_recv_ring)
    assert "batch_isend_irecv" in source and "dist.isend(" not in source
