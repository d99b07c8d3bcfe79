"""The caller's handle on a function the agent runs in a fork of itself, beside the ranks (agent._fork_call)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddplab.errors import DdplabError
from ddplab.launcher.files import read_json
from ddplab.launcher.procs import pid_alive

POLL_S = 0.02
ANSWER_TIMEOUT_S = 600.0  # the agent imports torch first: minutes on a machine busy enough; a hang is a bug


class NoAnswer(DdplabError):
    """The fork gave no answer: it (or its agent, before forking it) ended first, or it took too long."""


@dataclass
class Forked:
    folder: Path  # the fork's pid and answer land here (agent._fork_call)
    wait_s: float  # how long a run whose ranks are done keeps the agent for this answer
    on_wait: Callable[[], None] | None = None  # called once, when the run has to wait for it
    agent_alive: Callable[[], bool] = lambda: True  # an agent that died before it forked answers nothing

    def pid(self) -> int | None:
        """The fork's pid, once the agent has forked it."""
        return read_json(self.folder / "pid")

    def done(self) -> bool:
        """Answered, or ended without an answer (killed with its agent)."""
        if (self.folder / "answer.json").exists():
            return True
        pid = self.pid()
        if pid is None:  # not forked yet: the agent still imports, or died doing so
            return not self.agent_alive() and self.pid() is None
        return not pid_alive(pid)

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.done():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def result(self, timeout_s: float = 0.0) -> Any:
        """The function's return value, after printing what it printed, as if it had run in this process; what it
        raised the same way: DdplabError (its line, its exit code), SystemExit (argparse's --help, a bad flag). A
        NoAnswer when it ended without an answer or gave none within timeout_s."""
        if not self.wait(timeout_s):
            raise NoAnswer(f"no answer within {timeout_s:g}s")
        answer = read_json(self.folder / "answer.json")
        if answer is None:
            raise NoAnswer("it ended before it answered (its run was ended)")
        sys.stdout.write(answer.get("stdout", ""))
        sys.stderr.write(answer.get("stderr", ""))
        if "exit" in answer:
            raise SystemExit(answer["exit"])
        if "error" in answer:
            raise DdplabError(answer["error"], exit_code=answer.get("exit_code"))
        return answer["value"]

    def cancel(self) -> None:
        """End the fork if it still runs, and remove its folder."""
        pid = self.pid()
        # Answered: it has left, and its pid may be another process's by now.
        if pid is not None and not (self.folder / "answer.json").exists() and pid_alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)


def in_fork_or_here(agent, target: str, payload: Any, timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
    """`module:function`(payload) in a fork of `agent` (a PendingRun not yet run) when there is one: it has imported
    torch, and the caller then need not (~1.5 CPU s). Here when there is none, and when the agent died before it
    answered (as its torch import crashing would: the run then reports how it ended). What the function raised is
    raised here either way."""
    if agent is not None:
        forked = agent.fork(target, payload)
        try:
            return forked.result(timeout_s)
        except NoAnswer:
            pass
        finally:
            forked.cancel()
    from ddplab.launcher.worker import resolve

    return resolve(target)(payload)
