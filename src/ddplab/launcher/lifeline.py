"""Tie a process's life to its parent's, so that `kill -9` of ddplab leaves nothing of its run behind.

The elastic agent starts each worker in a session of its own, so killing the agent's process group does not reach
them; PR_SET_PDEATHSIG makes the kernel kill a process the moment its parent dies, however the parent died.
Standard library only: the bootstrap of a user's script imports this before anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
# The pid of the process that started this one, set by that process (agent.spawn for the agent; the agent itself,
# through its environment, for its ranks). os.getppid() read here cannot tell: a parent that died before this process
# read it shows as the subreaper's pid, unchanged after the request, and this process lived on (seen when kill -9
# came within a moment of the ranks' start: tests/launcher/test_kill9.py without its old one-second wait).
PARENT_VAR = "DDPLAB_LIFELINE_PARENT"


def die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    told = os.environ.get(PARENT_VAR, "")
    parent = int(told) if told.isdigit() else os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect: nobody would kill this process
        os.kill(os.getpid(), signal.SIGKILL)
    os.environ[PARENT_VAR] = str(os.getpid())  # what this process starts (the agent's ranks) knows its parent
