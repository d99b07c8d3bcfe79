"""ddplab's own hang reports, read back by `ddplab explain`: `ddplab check`'s TIMEOUT row and verdict, and the
`ddplab launch: TIMEOUT ...` line (any command's `ddplab NAME: TIMEOUT`), with the Flight Recorder's `=> ...` line
that says where the ranks part ways. Piped output may be hard-wrapped: continuation lines are joined back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMMAND_LINE = re.compile(r"^ddplab (\w+): TIMEOUT\s+(.*?)\s*$")
CHECK_ROW = re.compile(r"^([a-z][\w.-]*)\s+TIMEOUT\s+[\d.]+s\s+(.*?)\s*$")
CHECK_FIX = re.compile(r"^  fix: (.*?)\s*$")  # under check's table (lint's own `fix:` lines are indented deeper)
VERDICT = re.compile(r"^verdict: NOT READY .*? timed out\W+fix first: (.*?)\s*$")
FLIGHT = re.compile(r"^\s*=> (.*?)\s*$")
HANG_FIX = (
    "Every rank must call the same collectives in the same order with the same sizes: look at where the rank "
    "that never arrived is (its stack above) and make it call the collective the others wait in; "
    "`ddplab lint SCRIPT` finds the usual causes (a collective under `if rank == 0`, uneven batches)."
)
REFERENCE = "docs/flight.md (ddplab's hang report and the Flight Recorder)"


@dataclass
class Hang:
    line: int  # 0-based index of the report's first line
    command: str  # check, launch, train ...
    reason: str  # what the watchdog saw, joined from wrapped lines
    fix: str | None
    flight: str | None  # the Flight Recorder's verdict, when the report has one
    text: str  # the report's first line


def _joined(lines: list[str], i: int, first: str, continues) -> str:
    parts = [first.strip()]
    for line in lines[i + 1 : i + 12]:
        if not line.strip() or not continues(line):
            break
        parts.append(line.strip())
    return " ".join(parts)


def find(lines: list[str]) -> list[Hang]:
    """Every hang ddplab reported in these (normalised) lines, in order."""
    found: list[Hang] = []
    flight = None
    for i, line in enumerate(lines):
        m = FLIGHT.match(line)
        if m:
            flight = _joined(lines, i, m.group(1), lambda s: not s.startswith(" ") and not s.startswith("verdict"))
            continue
        m = COMMAND_LINE.match(line)
        if m:
            reason = _joined(lines, i, m.group(2), lambda s: not s.startswith((" ", "ddplab ", "Flight", "[")))
            found.append(Hang(i, m.group(1), reason, None, None, line.strip()))
            continue
        m = CHECK_ROW.match(line)
        if m and not line.startswith(" "):
            reason = _joined(lines, i, m.group(2), lambda s: s.startswith(" " * 12))
            found.append(Hang(i, "check", f"stage {m.group(1)}: {reason}", _check_fix(lines, i), None, line.strip()))
    for hang in found:
        hang.flight = flight
    return found


def _check_fix(lines: list[str], row: int) -> str | None:
    """check's own fix for the stage: the `  fix:` line under its table, or its verdict's `fix first:`."""
    for line in lines[row + 1 : row + 200]:
        m = CHECK_FIX.match(line) or VERDICT.match(line)
        if m:
            return m.group(1)
    return None
