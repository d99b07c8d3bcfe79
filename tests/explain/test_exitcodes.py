"""ddplab.explain.exitcodes.describe_exit: exit codes and signals of real processes, in every form they arrive."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from ddplab.explain.exitcodes import describe_exit

# (how the child ends itself, its signal, words the explanation must hold)
DEATHS = [
    pytest.param(
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        9,
        ("SIGKILL", "dmesg", "out-of-memory"),
        id="sigkill",
    ),
    pytest.param("import os; os.abort()", 6, ("SIGABRT", "what():"), id="sigabrt"),
    pytest.param("import ctypes; ctypes.string_at(0)", 11, ("SIGSEGV", "segmentation fault"), id="sigsegv"),
    pytest.param("import os, signal; os.kill(os.getpid(), signal.SIGBUS)", 7, ("SIGBUS", "/dev/shm"), id="sigbus"),
    pytest.param("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 15, ("SIGTERM",), id="sigterm"),
]


def _run(argv: list[str]) -> int:
    return subprocess.run(argv, capture_output=True, timeout=60).returncode


@pytest.mark.skipif(sys.platform != "linux", reason="signal numbers are Linux's")
@pytest.mark.parametrize("code, number, words", DEATHS)
def test_a_real_death_by_signal_is_named_in_every_form(code, number, words):
    returncode = _run([sys.executable, "-c", code])
    assert returncode == -number
    shell = _run(["sh", "-c", f'"{sys.executable}" -c "{code}"; exit $?'])
    assert shell == 128 + number
    forms = [
        returncode,
        shell,
        f"  exitcode  : {returncode} (pid: 4242)",
        f"  traceback : Signal {number} ({signal.Signals(number).name}) received by PID 4242",
        f"failed (exitcode: {returncode}) local_rank: 0 (pid: 4242) of binary: python",
        f"Process finished with exit code {shell}",
    ]
    for form in forms:
        line = describe_exit(form)
        assert all(w in line for w in words), (form, line)
        assert "\n" not in line


def test_exit_code_1_points_at_the_traceback():
    returncode = _run([sys.executable, "-c", "raise ValueError('x')"])
    assert "traceback" in describe_exit(returncode)
    assert "above" not in describe_exit(returncode)  # ddplab prints the traceback after this line


@pytest.mark.parametrize("code, words", [(0, "normally"), (2, "usage"), (3, "sys.exit(3)"), (-64, "signal 64")])
def test_other_codes(code, words):
    assert words in describe_exit(code)


def test_text_without_a_code_says_so():
    assert describe_exit("all ranks finished").startswith("no exit code found")
