"""ddplab launch: real torchrun groups of 2 ranks — a correct script, a crashing rank, a hang — and the preflight
checks that stop a run before anything starts. Every test asserts that no process of the job survives."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
import torchless
from conftest import cli

from ddplab.ports import free_port

SCRIPTS = Path(__file__).parents[1] / "scripts"


def own_port() -> list[str]:
    """torchrun's default 29500 may be taken by another suite between preflight and bind on this shared machine."""
    return ["--master-port", str(free_port())]


def no_flags_env(tmp: Path) -> dict:
    """For a test of plain `ddplab launch SCRIPT`: a private TMPDIR, and torchrun's own PET_MASTER_PORT instead of its
    default 29500, which the other suites on this shared machine may take between preflight and bind."""
    return {"TMPDIR": str(tmp), "PET_MASTER_PORT": str(free_port())}


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
    """-m works, a busy port is swapped for a free one (and said so), per-rank logs are kept where --log-dir says,
    the model trained."""
    import torch

    port = busy_port
    logs = tmp_path / "logs"
    ran = cli(
        "launch",
        "--json",
        "--nproc",
        "2",
        "--master-port",
        str(port),
        "--log-dir",
        str(logs),
        "--hang-timeout",
        "0",
        "-m",
        "good_ddp",
        str(tmp_path / "model.pt"),
        cwd=SCRIPTS,
        timeout=150,
    )
    assert ran.code == 0, ran.err[-3000:]
    result = ran.json()
    assert result["status"] == "ok" and result["nproc_per_node"] == 2
    assert f"port {port} is busy" in result["notes"][0] and f"port {port} is busy" in ran.err
    assert result["endpoint"] != f"127.0.0.1:{port}"
    assert result["log_dir"] == str(logs)
    assert "hang watchdog off (--hang-timeout 0)" in ran.err
    kept = sorted(logs.glob("*/attempt_0/*/stdout.log"))
    assert [p.read_text().strip().split(":")[0] for p in kept] == ["rank 0/2", "rank 1/2"]
    assert "rank 0/2: trained" in ran.err and "rank 1/2: trained" in ran.err  # tee'd to the console (stderr: --json)
    torch.nn.Linear(4, 1).load_state_dict(torch.load(tmp_path / "model.pt", map_location="cpu", weights_only=True))
    assert_nothing_left("good_ddp")


def test_a_run_that_passed_leaves_nothing_in_tmp_and_runs_two_ranks_by_default(tmp_path):
    """No flags: 2 CPU ranks, as every ddplab command (torchrun's default is 1); no --log-dir: the run's temporary
    folder is gone once it passed, and the last line says so. The CLI's own process never imported torch."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    ran, loaded = torchless.launch(
        str(SCRIPTS / "good_ddp.py"), loaded_at=tmp_path / "loaded.json", env=no_flags_env(tmp)
    )
    assert ran.code == 0, ran.err[-3000:]
    assert loaded == [], f"the launch CLI imported {loaded}"
    assert "rank 0/2: trained" in ran.out and "rank 1/2: trained" in ran.out
    assert "PASS 2 rank(s) per node" in ran.out
    assert ran.out.strip().splitlines()[-1].strip().startswith("logs: none kept (the run passed; --log-dir DIR")
    left = [p.name for p in tmp.iterdir() if p.name.startswith("ddplab")]  # torch keeps caches of its own there
    assert left == [], left
    assert_nothing_left("good_ddp.py")


def test_crashing_rank_is_named_with_traceback_and_diagnosis(tmp_path):
    """Explained without torch in the CLI's own process, too."""
    logs = tmp_path / "logs"  # beside loaded.json, not holding it
    logs.mkdir()
    ran, loaded = torchless.launch(
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(logs),
        str(SCRIPTS / "crash_ddp.py"),
        loaded_at=tmp_path / "loaded.json",
        env={"PET_MASTER_PORT": str(free_port())},
    )
    assert ran.code == 1, ran.err[-3000:]
    assert loaded == [], f"the launch CLI imported {loaded}"
    out = ran.out
    line = " ".join(out.split())
    assert (
        "rank 1 failed first at crash_ddp.py:18 (exit code 1: it raised an exception; the Python traceback in its output says "
        "why): RuntimeError: Error(s) in loading state_dict" in line
    )
    assert out.index("failed first") < out.index('Unexpected key(s) in state_dict: "module.weight"')
    assert 'Unexpected key(s) in state_dict: "module.weight"' in out  # the traceback tail
    diagnosis = out[out.index("diagnosis") :]
    assert "[module-prefix]" in diagnosis.split("\n")[1] and "(root cause)" in diagnosis.split("\n")[1]
    assert out.strip().splitlines()[-1].strip() == f"logs: {logs}"  # a folder `ddplab explain` reads
    rank_log = next(logs.glob("*/attempt_0/1/stderr.log")).read_text()
    assert "module.weight" in rank_log
    # what the user reads names their script: torchrun's summary, and a traceback that starts in it (issue 27)
    launcher_text = ran.err + "".join(p.read_text() for p in logs.glob("torchrun-summary.txt"))
    assert "crash_ddp.py FAILED" in launcher_text and "bootstrap.py FAILED" not in launcher_text
    assert "bootstrap.py" not in rank_log and "runpy" not in rank_log
    # the lint warnings came first, and did not stop the run
    assert "[save-ddp-state-dict]" in ran.err
    assert_nothing_left("crash_ddp.py")
    first_screen_of_a_crash(ran, logs)


def first_screen_of_a_crash(ran, logs: Path) -> None:
    """Issue 42 points 4 and 5, on the same run: the answer first, each thing once, lint's warning tied to it."""
    screen = 24  # a terminal's first screen
    report = ran.out.splitlines()
    verdict = next(i for i, line in enumerate(report) if line.startswith("ddplab launch: FAIL"))
    first = "\n".join(report[verdict : verdict + screen])
    assert "[module-prefix]" in first and "fix:   Save ddp_model.module.state_dict()" in first
    # what a terminal shows from the very top (lint and notes on stderr first, then the ranks and the report)
    assert "fix: save model.module.state_dict()" in "\n".join((ran.err.splitlines() + report)[:screen])
    console = ran.err + ran.out
    assert "\nRoot Cause (first observed failure):" not in console and "*****" not in console  # torchrun's banners
    assert console.count('crash_ddp.py", line 18, in <module>') == 1  # the traceback, as the rank printed it
    assert "rank 1's traceback: above" in ran.out and "1 OpenMP thread per rank" in ran.err
    assert "Root Cause (first observed failure)" in (logs / "torchrun-summary.txt").read_text()  # kept, not lost
    assert [line for line in report if line.startswith("  lint saw it before the run")] == [
        "  lint saw it before the run — crash_ddp.py:15: model.state_dict() is the DDP wrapper's: every key starts "
        "with 'module.', so the file does not load into the plain model [save-ddp-state-dict]"
    ]


@pytest.mark.slow
def test_hang_is_found_explained_and_ended(tmp_path):
    """The script sets MASTER_PORT itself: every rank waits in init_process_group for a rendezvous nobody serves."""
    timeout = 12
    ran = cli(
        "launch",
        "--nproc-per-node",
        "2",
        "--hang-timeout",
        str(timeout),
        "--log-dir",
        str(tmp_path),
        str(SCRIPTS / "master_port.py"),
        timeout=120,
    )
    assert ran.code == 3, ran.err[-3000:]
    assert ran.seconds < timeout + 20, f"took {ran.seconds:.1f}s"  # start-up on a loaded 2-core machine counts
    text = " ".join(ran.out.split())
    assert "both ranks are inside init_process_group" in text
    assert "they never reached the rendezvous the launcher serves on 127.0.0.1:" in text
    assert "rank 0 (pid" in text and "rank 1 (pid" in text and "master_port.py:11" in text  # py-spy stacks
    assert "likely cause — master_port.py:10: sets MASTER_PORT" in text
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


@pytest.mark.parametrize(
    "args, says",
    [
        (["--nproc", "2", "no_such_script.py"], "no such file"),
        (["--nproc", "2", str(SCRIPTS)], "is a folder: pass the training script's path"),
        (["--hang-timeout", "-1", str(SCRIPTS / "good_ddp.py")], "--hang-timeout"),
        (["--nproc-per-node", "two", str(SCRIPTS / "good_ddp.py")], "--nproc-per-node"),
        (["--nnodes", "2:1", str(SCRIPTS / "good_ddp.py")], "torchrun refuses these options: min_nodes"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, says, tmp_path, no_leftover_workers):
    """The agent starts before the options are read (it imports torch meanwhile): bad input ends it, and its
    folder, at once. The parse (an unknown value) and torchrun's own checks of the values (min > max nodes) happen
    in the agent: the CLI's own process never imports torch for them either."""
    ran, loaded = torchless.launch(*args, loaded_at=tmp_path / "loaded.json", env={"TMPDIR": str(tmp_path)}, timeout=60)
    assert ran.code == 2
    assert loaded == [], f"the launch CLI imported {loaded}"
    assert says in ran.err and "Traceback" not in ran.err
    assert len(ran.err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("ddplab-*"))


def test_help_lists_torchruns_options_and_ours(capsys):
    """In this process: --help is printed before the agent starts (no torch, no process)."""
    from ddplab.cli import main

    assert main(["launch", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--nproc-per-node", "--rdzv-endpoint", "--max-restarts", "--log-dir", "--hang-timeout"):
        assert option in out


def test_rank0_evaluation_through_the_ddp_wrapper_names_its_line_not_a_peer(tmp_path):
    """Rank 0 evaluates through the DDP wrapper after training; rank 1 has finished and exited. gloo tells rank 0
    "Connection closed by peer", a text that usually follows another rank's failure, but no rank failed before it:
    the cause is rank 0's own evaluation line, tied to lint's finding on that line (issue 32). Without --log-dir the
    logs of a failed run are kept, in the folder the last line names."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    ran = cli("launch", "--json", str(SCRIPTS / "eval_rank0_ddp.py"), env=no_flags_env(tmp), timeout=150)
    assert ran.code == 1, ran.err[-3000:]
    result = ran.json()
    assert result["root_cause"] == 0 and [r["rank"] for r in result["ranks"]] == [0]  # rank 1 exited 0
    assert "Connection closed by peer" in result["ranks"][0]["error"]
    cause = result["cause"]
    assert cause["rank"] == 0 and cause["where"] == "eval_rank0_ddp.py:28"
    assert cause["code"].startswith("loss = model(torch.randn(16, 8))")
    assert "that rank 1 never called: rank 1 had already finished (exit code 0)" in cause["text"]
    assert "broadcast #" in cause["text"]  # the collective, from the Flight Recorder
    assert result["summary"].startswith("rank 0 ran broadcast #") and "at eval_rank0_ddp.py:28" in result["summary"]
    assert [(f["rule"], f["line"]) for f in result["related_lint"]] == [("rank0-ddp-forward", 28)]
    peer_closed = [m for m in result["explanation"]["matches"] if m["rule"] == "peer-closed"]
    assert peer_closed and "find the rank that failed first" not in peer_closed[0]["fix"]
    assert "fix eval_rank0_ddp.py:28" in peer_closed[0]["fix"]
    kept = Path(result["log_dir"])
    assert kept.parent == tmp and kept.name.startswith("ddplab-") and list(kept.glob("*/attempt_0/0/stderr.log"))
    assert_nothing_left("eval_rank0_ddp.py")


def test_rank0_evaluation_in_text(tmp_path):
    """The same case as people read it: the cause line with the source, then lint's finding."""
    ran = cli("launch", *own_port(), "--log-dir", str(tmp_path), str(SCRIPTS / "eval_rank0_ddp.py"), timeout=150)
    assert ran.code == 1, ran.err[-3000:]
    text = " ".join(ran.out.split())
    assert "cause: rank 0 ran broadcast #" in text and "No rank failed first: this line runs a collective" in text
    assert "loss = model(torch.randn(16, 8)).mean().item()" in text
    assert (
        "lint saw it before the run — eval_rank0_ddp.py:28: model(...) runs the DDP wrapper's forward on rank 0 only"
        in text
    )
    assert "[rank0-ddp-forward]" in text
    assert_nothing_left("eval_rank0_ddp.py")


def test_a_plain_crash_after_the_collectives_sends_nobody_to_stacks_not_shown(tmp_path):
    ran = cli(
        "launch",
        *own_port(),
        "--json",
        "--no-lint",
        "--log-dir",
        str(tmp_path),
        str(SCRIPTS / "crash_after_collectives.py"),
        timeout=150,
    )
    assert ran.code == 1, ran.err[-3000:]
    result = ran.json()
    assert result["root_cause"] == 1 and result["cause"] is None  # a plain crash: its own error is the cause
    verdict = result["flight"]["verdict"]
    assert result["flight"]["kind"] == "none_in", verdict
    assert "stacks" not in verdict
    assert "the failure is outside the collectives (ValueError: bad batch after the collectives)" in verdict
    assert_nothing_left("crash_after_collectives.py")


def test_silent_busy_work_then_a_silent_loop_of_collectives_is_not_a_hang(tmp_path):
    """Silence alone never fires. One run, silent for over 3x the timeout: the ranks first compute without printing
    (busy CPU), then sit in all_reduce at the same line at nearly every look, CPU busy: the Flight Recorder's sequence
    numbers move between looks, so it is progress. Either phase read as a hang would end the run with exit 3."""
    ran = cli(
        "launch",
        *own_port(),
        "--hang-timeout",
        "3",
        "--log-dir",
        str(tmp_path),
        str(SCRIPTS / "silent_work.py"),
        "5",  # busy seconds: past the timeout alone, and looked at more than once after it
        "5",  # then the collectives' seconds: several looks, each finding every rank in all_reduce
        timeout=150,
    )
    assert ran.code == 0, ran.out[-3000:] + ran.err[-3000:]
    assert "rank 0: done after" in ran.out and "rank 1: done after" in ran.out
    assert_nothing_left("silent_work.py")


@pytest.mark.slow
def test_a_hang_under_plain_launch_with_no_flags_is_named_within_the_default(tmp_path):
    """No flags at all: the watchdog is on by default (cliargs.HANG_TIMEOUT_S["launch"], shown in --help). Rank 1
    skips an all_reduce and sleeps; rank 0 waits in it. Named with exit 3 within the default after the last
    output (plus the confirmation window and py-spy: a deadline, not a speed figure)."""
    from ddplab.cliargs import HANG_TIMEOUT_S

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    ran = cli("launch", str(SCRIPTS / "hang_skip.py"), env=no_flags_env(tmp), timeout=HANG_TIMEOUT_S["launch"] + 150)
    ended = time.time()
    assert ran.code == 3, ran.out[-3000:] + ran.err[-3000:]
    kept = next(tmp.glob("ddplab-*"))
    last_output = max(p.stat().st_mtime for p in kept.glob("*/attempt_*/*/std*.log"))
    assert ended - last_output <= HANG_TIMEOUT_S["launch"] + 30, f"named {ended - last_output:.0f}s after the hang"
    text = " ".join(ran.out.split())
    assert "TIMEOUT" in text and "rank 0 in all_reduce (hang_skip.py:18" in text, text[-3000:]
    assert "rank 1 has not called all_reduce #5" in text  # the Flight Recorder
    assert f"logs: {kept}" in text
    assert_nothing_left("hang_skip.py")
