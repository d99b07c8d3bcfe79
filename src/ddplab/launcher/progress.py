"""The one thing a ddplab-owned rank calls: `mark(phase)`, its progress as the caller sees it.

Each rank appends JSON lines to `events/local{LOCAL_RANK}.jsonl` in its run's folder; the caller watches those files,
so a hang is seen from outside without any help from the stuck process. Kept tiny: every rank imports it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ddplab import faults

_events_file = None
_seq = 0


def open_events(path) -> None:
    """Called once by the worker entry point; before that (a plain torchrun run of a recipe) mark() only injects
    test faults."""
    global _events_file
    _events_file = open(path, "a", buffering=1)


def mark(phase: str, **data: Any) -> None:
    """Record that this rank entered `phase` (and inject a test fault there if DDPLAB_FAULT asks for one)."""
    global _seq
    faults.hang_before(phase)
    if _events_file is not None:
        _seq += 1
        _events_file.write(json.dumps({"seq": _seq, "t": time.time(), "phase": phase, **data}) + "\n")
        _events_file.flush()
    faults.fail_in(phase)


def read_events(path) -> list[dict]:
    """Every mark in an events file (all attempts; a line still being written is left out)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
