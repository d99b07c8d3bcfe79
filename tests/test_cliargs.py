"""One name and one meaning for the no-progress timeout: --hang-timeout in check, bench, train and launch, its
default (cliargs.HANG_TIMEOUT_S) in each --help, the older names still accepted."""

from __future__ import annotations

import pytest
from conftest import cli

from ddplab.cli import build_parser
from ddplab.cliargs import HANG_TIMEOUT_S


@pytest.mark.parametrize("command", [["check"], ["bench"], ["train", "mlp"], ["launch"]])
def test_help_shows_hang_timeout_with_its_default(command, capsys):
    """The real entry point in this process: --help starts nothing (a subprocess per command cost ~1.5 CPU s)."""
    from ddplab.cli import main

    try:
        code = main([*command, "--help"])
    except SystemExit as e:  # argparse's own --help
        code = e.code
    out, err = capsys.readouterr()
    assert code == 0, err
    text = " ".join(out.split())
    assert "--hang-timeout S" in text
    assert "no progress on any rank for S seconds: the run is hung" in text
    assert f"(default {HANG_TIMEOUT_S[command[0]]:g}" in text


@pytest.mark.parametrize(
    "argv, dest, value",
    [
        (["check", "--timeout", "7"], "timeout", 7.0),
        (["check", "--hang-timeout", "7"], "timeout", 7.0),
        (["check"], "timeout", HANG_TIMEOUT_S["check"]),
        (["bench", "--timeout", "9"], "timeout", 9.0),
        (["bench", "--hang-timeout", "9"], "timeout", 9.0),
        (["bench"], "timeout", HANG_TIMEOUT_S["bench"]),
    ],
)
def test_old_names_are_aliases(argv, dest, value):
    assert getattr(build_parser().parse_args(argv), dest) == value


def test_train_old_name_is_an_alias():
    import argparse

    from ddplab.commands.train import launcher_arguments

    p = argparse.ArgumentParser()
    launcher_arguments(p)
    assert p.parse_args(["--stall-timeout", "8"]).stall_timeout == 8.0
    assert p.parse_args(["--hang-timeout", "8"]).stall_timeout == 8.0
    assert p.parse_args([]).stall_timeout == HANG_TIMEOUT_S["train"]


def test_launch_hang_timeout_zero_is_off_and_negative_is_bad_input():
    from ddplab.commands.launch import build_parser as launch_parser

    p = launch_parser()
    assert p.parse_args(["x.py"]).hang_timeout == HANG_TIMEOUT_S["launch"]
    assert p.parse_args(["--hang-timeout", "0", "x.py"]).hang_timeout is None
    ran = cli("launch", "--hang-timeout", "-5", "x.py", timeout=60)
    assert ran.code == 2 and "0 turns the watchdog off" in ran.err and len(ran.err.strip().splitlines()) == 1
