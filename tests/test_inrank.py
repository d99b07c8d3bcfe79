"""ddplab's modules inside a rank (ddplab.inrank) are never the user's code, for both readers of tracebacks: the
launcher's (a live rank's stack, a failed rank's traceback) and explain's (a log)."""

import pytest

from ddplab.explain import reading
from ddplab.launcher import stacks

SITE = "/venv/lib/python3.11/site-packages/ddplab"
INSIDE_THE_RANK = [
    f"{SITE}/sanitize/paramsync.py",
    f"{SITE}/boot/sitecustomize.py",
    f"{SITE}/flight/boot.py",
    f"{SITE}/afterimport.py",
    f"{SITE}/perf/profhook.py",
    "/home/me/ddplab/src/ddplab/sanitize/sameprint.py",  # an editable install: no site-packages in the path
]


@pytest.mark.parametrize("path", INSIDE_THE_RANK)
def test_a_module_of_ddplab_inside_the_rank_is_not_the_users_code(path):
    assert not stacks.own_code(path)
    assert not reading.is_user(reading.Frame(path, 10, "wrapper"))


def test_the_users_script_and_a_module_of_its_own_named_like_ddplabs_are_its_code():
    for path in ("/home/me/project/train.py", "/home/me/project/sanitize/clean.py", "/home/me/afterimport.py"):
        assert stacks.own_code(path)
        assert reading.is_user(reading.Frame(path, 3, "main"))
