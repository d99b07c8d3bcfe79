"""`no-destroy`: `destroy_process_group()` never called (in the script or any module it imports)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import MINOR, Rule

RULE = Rule(
    id="no-destroy",
    severity=MINOR,
    what="`destroy_process_group()` never called (in the script or any module it imports)",
    why="on exit or after an error the other ranks may wait for this one until the timeout",
    example='dist.init_process_group("gloo")  # and no destroy_process_group() anywhere',
    fix="call `dist.destroy_process_group()` at the end, in a `finally:` so that it runs after errors too",
    check=Checks.check_teardown,
    setup=True,
    whole_project=("destroy_process_group",),
    once=True,  # one group never destroyed, however many files make it (the script's finding speaks for all)
)
