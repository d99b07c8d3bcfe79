"""`ddplab launch` costs little over plain torchrun because its own process never imports torch (seconds): the early
agent imports it, parses torchrun's options and checks their values; the CLI lints, runs the preflight, watches and
reports. These tests run the real CLI on real ranks and read which modules the CLI process loaded, so a module-level
`import torch` anywhere on the launch path (a command module, the plan, the analysis, the rendering) fails here.
An agent that dies before it answers leaves the reading of the options to the CLI. (The figure itself: benchmarks/launch_vs_torchrun.py; no timing in tests.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import kill_tree

from ddplab.ports import free_port

SCRIPTS = Path(__file__).parents[1] / "scripts"
HEAVY = ("torch", "numpy")
# The CLI as `python -m ddplab` runs it, writing at exit which of HEAVY it had loaded.
CLI = (
    "import atexit, json, os, sys\n"
    f"atexit.register(lambda: open(os.environ['LOADED_AT_EXIT'], 'w').write(json.dumps(sorted(m for m in {HEAVY!r} "
    "if m in sys.modules))))\n"
    "from ddplab.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def launch_loads(tmp_path: Path, *args: str, timeout: float = 150) -> tuple[int, list[str], str]:
    """(exit code, the HEAVY modules the CLI process had loaded when it exited, its stderr)."""
    loaded = tmp_path / "loaded.json"
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "LOADED_AT_EXIT": str(loaded),
        "TMPDIR": str(tmp_path),
        "PET_MASTER_PORT": str(free_port()),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "launch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.communicate()
        raise AssertionError(f"ddplab launch {' '.join(args)} overstayed {timeout}s") from None
    assert loaded.exists(), err[-3000:]
    return proc.returncode, json.loads(loaded.read_text()), err


def test_a_run_that_passes_never_imports_torch_in_the_cli(tmp_path, no_leftover_workers):
    code, loaded, err = launch_loads(tmp_path, "--nproc-per-node", "2", str(SCRIPTS / "good_ddp.py"))
    assert code == 0, err[-3000:]
    assert loaded == [], f"the launch CLI imported {loaded}"


def test_bad_options_are_refused_without_torch_in_the_cli(tmp_path, no_leftover_workers):
    """The parse (an unknown value) and torchrun's own checks of the values (min > max nodes) happen in the agent:
    still one line, exit 2."""
    for args, says in (
        (["--nproc-per-node", "two"], "--nproc-per-node"),
        (["--nnodes", "2:1"], "torchrun refuses these options: min_nodes"),
    ):
        code, loaded, err = launch_loads(tmp_path, *args, str(SCRIPTS / "good_ddp.py"), timeout=60)
        assert code == 2 and says in err and "Traceback" not in err, err[-3000:]
        assert loaded == [], f"the launch CLI imported {loaded}"


def test_help_after_options_is_the_agents_parser_help(tmp_path, no_leftover_workers):
    """--help among other options goes through torchrun's parser in the agent: its text on stdout, exit 0."""
    loaded = tmp_path / "loaded.json"
    ran = subprocess.run(
        [sys.executable, "-c", CLI, "launch", "--nproc-per-node", "2", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LOADED_AT_EXIT": str(loaded)},
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "--rdzv-endpoint" in ran.stdout and "--hang-timeout" in ran.stdout
    assert json.loads(loaded.read_text()) == []


def test_the_torch_build_is_read_without_importing_torch():
    """envinfo.cuda_possible (the launch CLI's answer to "could there be a GPU?") reads torch.version's cuda and hip
    from torch/version.py as text; they must be what torch.version says once imported."""
    code = (
        "import sys; from ddplab import envinfo; fields = envinfo.torch_build_fields(); "
        "possible = envinfo.cuda_possible(); assert 'torch' not in sys.modules; import torch; "
        "print(fields == {'cuda': torch.version.cuda, 'hip': torch.version.hip}, possible, "
        "torch.cuda.is_available())"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-3000:]
    same, possible, available = ran.stdout.split()
    assert same == "True"
    assert possible == "True" or available == "False"  # "no GPU possible" is never wrong


def test_an_agent_that_died_before_answering_leaves_the_options_to_this_process(tmp_path, monkeypatch):
    """The agent killed before it answered (as if its torch import crashed): the options are read here, with
    torchrun's own functions; the check is left to the run, which reports how the agent ended."""
    import signal

    from ddplab.commands.launch import build_parser
    from ddplab.launcher.script import EarlyAgent

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    early = EarlyAgent()
    try:
        os.kill(early.proc.pid, signal.SIGKILL)
        early.proc.wait(timeout=30)
        ns = early.parser(build_parser).parse_args(["--nproc-per-node", "3", "--nnodes", "1:2", "train.py", "-x"])
        assert (ns.nproc_per_node, ns.training_script, ns.training_script_args) == ("3", "train.py", ["-x"])
        assert early.counts(ns) == (3, 2)
        assert early.check(ns) is None
    finally:
        early.cancel()
    assert not list(tmp_path.glob("ddplab-*"))


@pytest.mark.slow
def test_a_run_that_fails_is_explained_without_torch_in_the_cli(tmp_path, no_leftover_workers):
    code, loaded, err = launch_loads(tmp_path, "--nproc-per-node", "2", str(SCRIPTS / "crash_ddp.py"))
    assert code == 1, err[-3000:]
    assert loaded == [], f"the launch CLI imported {loaded}"
