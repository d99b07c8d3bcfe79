"""The two tiers: conftest marks a test `e2e` when its code can reach a process start, and the spawn guard fails an
unmarked test that starts one anyway. Nothing here starts a process: the functions below are read, never called."""

from __future__ import annotations

import subprocess
import sys

import conftest
from conftest import cli


def _pure():
    return sum(range(3))


def _direct():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _through_a_helper():
    return _direct()


def _through_the_cli_helper():
    return cli("--help")


def _local_import():
    import subprocess as sp

    sp.Popen(["true"])


def _launcher():
    from ddplab.launcher import local

    return local.run("x:y", nproc=1)


def test_code_that_reaches_a_process_start_is_seen_through_helpers_imports_and_ddplabs_launcher():
    assert not conftest._reaches_a_spawn(_pure)
    for func in (_direct, _through_a_helper, _through_the_cli_helper, _local_import, _launcher):
        assert conftest._reaches_a_spawn(func), func.__name__


def test_this_module_is_in_the_fast_tier(request):
    assert request.node.get_closest_marker("e2e") is None  # it names subprocess, but no test here calls it
