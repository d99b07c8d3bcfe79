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


def die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect: nobody would kill this process
        os.kill(os.getpid(), signal.SIGKILL)
