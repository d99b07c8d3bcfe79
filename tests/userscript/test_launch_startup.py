"""`ddplab launch` costs little over plain torchrun because its own process never imports torch (seconds): the early
agent imports it, parses torchrun's options and checks their values; the CLI lints, runs the preflight, watches and
reports. The CLI is run as tests/userscript/torchless.py runs it, reading which modules its process loaded, so a
module-level `import torch` anywhere on the launch path fails. A run that passes, one that fails and bad options are
checked that way on test_launch.py's own runs of them (one run each for both claims); here: --help among options,
the torch build read as text, and an agent that dies before it answers (the CLI then reads the options itself).
(The figure itself: benchmarks/launch_vs_torchrun.py; no timing in tests.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from torchless import CLI


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


def test_an_agent_that_writes_more_than_a_pipe_holds_before_go_is_not_blocked(tmp_path, no_leftover_workers):
    """PYTHONVERBOSE=1: the agent writes its imports (MBs) to stderr while it imports torch, before the CLI says go.
    Read only after go, that pipe filled and the agent blocked on its write for good; the launch hung. Now its output
    is read from the start, held, and comes out (and into the log) once the run starts."""
    script = tmp_path / "hello.py"
    script.write_text("print('hello from', __import__('os').environ['RANK'])\n")
    ran = subprocess.run(
        [sys.executable, "-m", "ddplab", "launch", "--nproc-per-node", "1", "--no-lint", str(script)],
        capture_output=True,
        text=True,
        timeout=120,  # the hang this is about was forever
        env={**os.environ, "PYTHONVERBOSE": "1", "NO_COLOR": "1"},
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "hello from 0" in ran.stdout
    assert len(ran.stderr) > 1 << 16 and "import 'torch'" in ran.stderr  # the agent's own, held, then forwarded
