"""Every `ddplab COMMAND --help` (and `ddplab train|memory RECIPE --help`) opens with a line saying what it does."""

from __future__ import annotations

import argparse

import pytest
from conftest import cli

from ddplab import cli as ddplab_cli


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
    return found


def _description(help_text: str) -> str:
    """The paragraph between the usage lines and the first section (positional arguments:, options:)."""
    blocks = help_text.split("\n\n")
    return (
        blocks[1].strip()
        if len(blocks) > 1
        and not blocks[1].rstrip().endswith(":")
        and not blocks[1].lstrip().startswith(("options:", "positional arguments:"))
        else ""
    )


COMMANDS = ddplab_cli.command_names()


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_help_has_a_description(name):
    top = _subparsers(ddplab_cli.build_parser())
    assert _description(top[name].format_help()), top[name].format_help()
    for recipe, sub in _subparsers(top[name]).items():  # train RECIPE, memory RECIPE
        assert _description(sub.format_help()), f"{name} {recipe}:\n{sub.format_help()}"


def test_help_through_the_cli():
    for name in ("env", "cost"):
        ran = cli(name, "--help", timeout=60)
        assert ran.code == 0 and _description(ran.out), ran.out
    assert "What is installed, what is visible, what is wrong with it." in cli("env", "--help", timeout=60).out


def _first_clause(text: str) -> str:
    return text.split(";")[0].split(" (")[0].strip()


def test_a_recipe_flag_says_what_it_does_not_only_why_its_default():
    """A recipe that changes a default gives its reason after what the flag does (the common field's first clause),
    and a help text that names its default is not followed by a second '(default: ...)'."""
    import dataclasses
    import importlib

    from ddplab import recipes
    from ddplab.train.config import TrainConfig, parser

    common = {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}
    for name in recipes.names():
        cls = importlib.import_module(f"ddplab.recipes.{name}").Config
        for f in dataclasses.fields(cls):
            what = f.metadata["help"]
            assert what, f"{name} --{f.name} has no help"
            if f.name in common and what != common[f.name]:
                assert _first_clause(what) == _first_clause(common[f.name]), f"{name} --{f.name}: {what!r}"
        text = parser(cls, f"ddplab train {name}").format_help()
        for block in text.split("\n  --"):
            assert block.count("(default") <= 1, block


def test_monitor_help_explains_every_column_and_flag():
    from ddplab.commands import monitor

    text = ddplab_cli.build_parser()._subparsers._group_actions[0].choices["monitor"].format_help()
    assert monitor.COLUMNS.splitlines()[0] in text
    for word in (
        "job",
        "rank",
        "local",
        "pid",
        "state",
        "CPU %",
        "CPU s",
        "RSS MiB",
        "GPU %",
        "GPU MiB",
        "marks",
        "phase",
        "idle",
        "behind",
        "waiting",
        "exited",
        "util %",
        "power W",
    ):
        assert word in monitor.COLUMNS, word


def test_launch_help_shows_ddplab_options_before_torchruns(capsys):
    """Issue 42 point 12: the five options ddplab adds come first; torchrun's ~60 lines of its own after them."""
    from ddplab.cli import main

    assert main(["launch", "--help"]) == 0
    text = capsys.readouterr().out
    usage = text.splitlines()[0]
    assert usage.startswith("usage: ddplab launch [--hang-timeout S]") and "--rdzv" not in usage
    ours = text.index("--hang-timeout S ")
    assert ours < text.index("--rdzv-backend") and ours < text.index("--nnodes")
    assert text.index("\nddplab:\n") < text.index("\ntorchrun's options (")
