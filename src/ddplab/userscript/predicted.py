"""Which of lint's start-of-run findings predicted a failure (issue 42 point 5): `ddplab launch` printed "lint
warning: train.py:149 [unguarded-save]" before the run, then the run crashed on that very mistake and the report
never said so. A finding is tied to a failure when its line is a frame of the failing rank's traceback, or when its
rule names a way to fail that the failure shows (explain's diagnosis, or the exception's class)."""

from __future__ import annotations

import re
from pathlib import Path

FRAME = re.compile(r'\s*File "(?P<file>.+)", line (?P<line>\d+), in ')

# Several ranks writing one path: a rename of the same temporary file fails on all ranks but one, a reader meets a
# half-written file (torch's zip reader), a folder made twice.
_SHARED_FILE = (
    "FileNotFoundError",
    "FileExistsError",
    "PermissionError",
    "PytorchStreamReader failed",
    "PytorchStreamWriter failed",
    "UnpicklingError",
    "EOFError",
)
# A collective some ranks never call: the others leave or wait (explain's rule ids).
_UNEVEN_COLLECTIVES = {"peer-closed", "collective-timeout", "collective-mismatch", "gloo-size-mismatch"}

# lint rule -> (explain rule ids, exception texts) that its mistake produces.
PREDICTS: dict[str, tuple[set[str], tuple[str, ...]]] = {
    "unguarded-save": (set(), _SHARED_FILE),
    "local-rank-save": (set(), _SHARED_FILE),
    "save-ddp-state-dict": ({"module-prefix", "checkpoint-missing-keys"}, ()),
    "load-no-map-location": ({"cuda-oom", "invalid-device-ordinal", "duplicate-gpu"}, ()),
    "hardcoded-cuda-device": ({"invalid-device-ordinal", "duplicate-gpu"}, ()),
    "ddp-no-device-ids": ({"ddp-device-ids-cpu"}, ()),
    "collective-in-rank-branch": (_UNEVEN_COLLECTIVES, ()),
    "rank0-ddp-forward": (_UNEVEN_COLLECTIVES, ()),
    "sets-master-env": ({"rendezvous-incomplete", "port-in-use", "master-unreachable"}, ()),
    "sets-rank-env": ({"rank-out-of-range", "rendezvous-incomplete"}, ()),
    "nccl-hardcoded": ({"nccl-not-built", "duplicate-gpu", "ddp-device-ids-cpu"}, ()),
}


def frames(traceback: str) -> set[tuple[str, int]]:
    """(resolved file, line) of every frame a traceback text names."""
    found = set()
    for m in FRAME.finditer(traceback):
        try:
            found.add((str(Path(m["file"]).resolve()), int(m["line"])))
        except (OSError, ValueError):
            continue
    return found


def predicted(findings: list, script: Path | None, traceback: str, error: str, rules: set[str]) -> list:
    """The findings that foretold this failure, those on a line of the traceback first. findings: lint's, for
    SCRIPT (a finding's `path` names a module the script imports, relative to the script's folder); traceback: the
    failing rank's text; error: its error line; rules: the ids of explain's diagnoses of the failure."""
    if not findings or script is None:
        return []
    seen = frames(traceback)
    here = script.resolve().parent

    def on_a_frame(f) -> bool:
        file = (here / f.path).resolve() if getattr(f, "path", None) else script.resolve()
        return any((str(file), line) in seen for line in (f.line, *getattr(f, "also", [])))

    def foretold(f) -> bool:
        ids, texts = PREDICTS.get(f.rule, (set(), ()))
        return bool(ids & rules) or any(t in (error or "") or t in traceback for t in texts)

    def distance(f) -> int:  # to the nearest frame in its file: of two saves, the one just above the failing line
        file = str((here / f.path).resolve() if getattr(f, "path", None) else script.resolve())
        return min((abs(line - f.line) for name, line in seen if name == file), default=10**9)

    first = [f for f in findings if on_a_frame(f)]
    nearest: dict[str, object] = {}
    for f in sorted((f for f in findings if f not in first and foretold(f)), key=distance):
        nearest.setdefault(f.rule, f)  # one finding per rule: the same mistake elsewhere in the file is not this one
    return first + list(nearest.values())
