"""The launch CLI as `python -m ddplab` runs it, reporting which heavy modules its own process had loaded when it
exited: `ddplab launch` never imports torch itself (the early agent does), so a module-level `import torch` anywhere
on the launch path (a command module, the plan, the analysis, the rendering) fails the tests that run through it.
tests/userscript/test_launch.py runs its plain, crashing and bad-input launches through it (one run for both
claims); test_launch_startup.py holds the cases of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import Ran, finish

HEAVY = ("torch", "numpy")
CLI = (
    "import atexit, json, os, sys\n"
    f"atexit.register(lambda: open(os.environ['LOADED_AT_EXIT'], 'w').write(json.dumps(sorted(m for m in {HEAVY!r} "
    "if m in sys.modules))))\n"
    "from ddplab.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def launch(*args: str, loaded_at: Path, env: dict | None = None, timeout: float = 150) -> tuple[Ran, list[str]]:
    """`ddplab launch ARGS` for real (as conftest.cli runs the CLI: its own session, killed past `timeout`), and the
    HEAVY modules its process had loaded when it exited (written to `loaded_at`)."""
    import time

    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {}), "LOADED_AT_EXIT": str(loaded_at)}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "launch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
    )
    out, err = finish(proc, timeout, f"ddplab launch {' '.join(args)} overstayed {timeout}s")
    assert loaded_at.exists(), err[-3000:]
    return Ran(proc.returncode, out, err, time.monotonic() - start), json.loads(loaded_at.read_text())
