"""Timestamps of a preemption's stages, for benchmarks/preempt_trials.py: where the seconds between the signal and
the exit go (caught, forwarded, seen by a rank, agreed, saved, left, the agent gone, ddplab's answer).

Off unless DDPLAB_PREEMPT_STAMPS names a file; then each stage appends one line `TIME PID WHO STAGE` (time.time(),
one short write with O_APPEND: lines of several processes do not mix). Standard library only: a rank's bootstrap
(launcher/bootstrap.py) loads this file by its path."""

import os
import time

VAR = "DDPLAB_PREEMPT_STAMPS"


def stamp(who: str, stage: str) -> None:
    path = os.environ.get(VAR)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{time.time():.4f} {os.getpid()} {who} {stage}\n".encode())
        finally:
            os.close(fd)
    except OSError:  # a measurement must never change the run
        pass
