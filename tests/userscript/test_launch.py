"""ddplab launch: real torchrun groups of 2 ranks — a correct script, a crashing rank, a hang — and the preflight
checks that stop a run before anything starts. Every test asserts that no process of the job survives."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import psutil
import pytest

from conftest import cli

SCRIPTS = Path(__file__).parents[1] / "scripts"


def job_processes(marker: str) -> list[int]:
    """Live processes of a launch job: its agent (whose spec names the script) or workers running `marker`."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        argv = p.info["cmdline"] or []
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if "ddplab.launcher.agent" in argv:  # other tests' agents run beside this one: read what this one runs
            try:
                mine = marker in Path(argv[-1]).read_text()
            except OSError:
                mine = False
        else:
            mine = marker in " ".join(argv)
        if mine:
            found.append(p.pid)
    return found


def assert_nothing_left(marker: str) -> None:
    deadline = time.monotonic() + 5
    while (left := job_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


def test_correct_script_as_module_on_a_busy_port(tmp_path, busy_port):
    """-m works, a busy port is swapped for a free one (and said so), per-rank logs are kept, the model trained."""
    import torch

    port = busy_port
    ran = cli("launch", "--json", "--nproc", "2", "--master-port", str(port), "-m", "good_ddp",
              str(tmp_path / "model.pt"), cwd=SCRIPTS, timeout=150)
    assert ran.code == 0, ran.err[-3000:]
    result = ran.json()
    assert result["status"] == "ok" and result["nproc_per_node"] == 2
    assert f"port {port} is busy" in result["notes"][0] and f"port {port} is busy" in ran.err
    assert result["endpoint"] != f"127.0.0.1:{port}"
    logs = sorted(Path(result["log_dir"]).glob("*/attempt_0/*/stdout.log"))
    assert [p.read_text().strip().split(":")[0] for p in logs] == ["rank 0/2", "rank 1/2"]
    assert "rank 0/2: trained" in ran.err and "rank 1/2: trained" in ran.err  # tee'd to the console (stderr: --json)
    torch.nn.Linear(4, 1).load_state_dict(torch.load(tmp_path / "model.pt", map_location="cpu", weights_only=True))
    assert_nothing_left("good_ddp")
    shutil.rmtree(result["log_dir"])  # kept by design; a test need not keep it


def test_crashing_rank_is_named_with_traceback_and_diagnosis(tmp_path):
    ran = cli("launch", "--nproc-per-node", "2", "--log-dir", str(tmp_path), str(SCRIPTS / "crash_ddp.py"),
              timeout=150)
    assert ran.code == 1, ran.err[-3000:]
    out = ran.out
    line = " ".join(out.split())
    assert "rank 1 failed first (exit code 1: it raised an exception; the Python traceback in its output says " \
           "why): RuntimeError: Error(s) in loading state_dict" in line
    assert out.index("failed first") < out.index('Unexpected key(s) in state_dict: "module.weight"')
    assert 'Unexpected key(s) in state_dict: "module.weight"' in out  # the traceback tail
    diagnosis = out[out.index("diagnosis"):]
    assert "[module-prefix]" in diagnosis.split("\n")[1] and "(root cause)" in diagnosis.split("\n")[1]
    assert f"per-rank logs: {tmp_path}" in out
    assert "module.weight" in next(tmp_path.glob("*/attempt_0/1/stderr.log")).read_text()
    # the lint warnings came first, and did not stop the run
    assert "[save-ddp-state-dict]" in ran.err
    assert_nothing_left("crash_ddp.py")


@pytest.mark.slow
def test_hang_is_found_explained_and_ended(tmp_path):
    """The script sets MASTER_PORT itself: every rank waits in init_process_group for a rendezvous nobody serves."""
    timeout = 12
    ran = cli("launch", "--nproc-per-node", "2", "--hang-timeout", str(timeout), "--log-dir", str(tmp_path),
              str(SCRIPTS / "master_port.py"), timeout=120)
    assert ran.code == 3, ran.err[-3000:]
    assert ran.seconds < timeout + 10, f"took {ran.seconds:.1f}s"
    text = " ".join(ran.out.split())
    assert "both ranks are inside init_process_group" in text
    assert "they never reached the rendezvous the launcher serves on 127.0.0.1:" in text
    assert "rank 0 (pid" in text and "rank 1 (pid" in text and "master_port.py:11" in text  # py-spy stacks
    assert "line 10: sets MASTER_PORT" in text
    assert_nothing_left("master_port.py")


def test_nccl_with_more_processes_than_gpus_stops_before_starting():
    import torch

    nproc = (torch.cuda.device_count() if torch.cuda.is_available() else 0) + 1
    ran = cli("launch", "--nproc-per-node", str(nproc), str(SCRIPTS / "nccl_only.py"), timeout=60)
    assert ran.code == 2
    last = ran.err.strip().splitlines()[-1]
    assert "hard-codes backend 'nccl'" in last and f"--nproc-per-node is {nproc}" in last
    assert "Traceback" not in ran.err and "per-rank logs" not in ran.err  # nothing was started
    assert_nothing_left("nccl_only.py")


@pytest.mark.parametrize("args, says", [
    (["--nproc", "2", "no_such_script.py"], "no such file"),
    (["--hang-timeout", "-1", str(SCRIPTS / "good_ddp.py")], "--hang-timeout"),
    (["--nproc-per-node", "two", str(SCRIPTS / "good_ddp.py")], "--nproc-per-node"),
    (["--nnodes", "2:1", str(SCRIPTS / "good_ddp.py")], "torchrun refuses these options: min_nodes"),
])
def test_bad_input_is_one_line_exit_2(args, says):
    ran = cli("launch", *args, timeout=60)
    assert ran.code == 2
    assert says in ran.err and "Traceback" not in ran.err
    assert len(ran.err.strip().splitlines()) == 1


def test_help_lists_torchruns_options_and_ours():
    ran = cli("launch", "--help", timeout=60)
    assert ran.code == 0
    for option in ("--nproc-per-node", "--rdzv-endpoint", "--max-restarts", "--log-dir", "--hang-timeout"):
        assert option in ran.out


def test_a_rank_that_aborts_in_cpp_is_the_root_cause_not_its_peers_reset(tmp_path):
    """gloo's size mismatch: one rank aborts (exit -6, C++ what()), the other sees its connection reset. The root
    cause is the one that aborted, named with its signal's meaning and the mismatch (issue #16)."""
    ran = cli("launch", "--json", "--nproc-per-node", "2", "--log-dir", str(tmp_path),
              str(SCRIPTS / "gloo_size_mismatch.py"), timeout=150)
    assert ran.code == 1, ran.err[-3000:]
    result = ran.json()
    aborted = [r for r in result["ranks"] if r["exitcode"] == -6]
    assert len(aborted) == 1, result["ranks"]
    assert result["root_cause"] == aborted[0]["rank"]
    assert "SIGABRT" in result["summary"] and "Received data size doesn't match" in result["summary"]
    assert result["explanation"]["matches"][0]["rule"] == "gloo-size-mismatch"
    assert_nothing_left("gloo_size_mismatch")
