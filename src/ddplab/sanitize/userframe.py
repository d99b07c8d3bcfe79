"""Which frame of a rank's stack is the user's code: not the standard library, not an installed package (torch,
numpy, ...), not ddplab, not Python's own machinery (<frozen ...>). A finding names that frame's file:line.

Standard library only (runs in every rank at start-up)."""

from __future__ import annotations

import os
import sys
import sysconfig

_verdicts: dict[str, bool] = {}
_roots: tuple[str, ...] | None = None
IMPORTING = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


PACKAGE_DIRS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # ddplab itself
    return tuple(os.path.join(os.path.abspath(r), "") for r in roots if r)


def is_user(filename: str) -> bool:
    """Neither Python's nor an installed package's: packages found elsewhere than this environment's own folders
    (`pip install --user`, a PYTHONPATH to another environment, conda's) sit in a site-packages or dist-packages
    folder all the same."""
    global _roots
    verdict = _verdicts.get(filename)
    if verdict is None:
        if _roots is None:
            _roots = _library_roots()
        path = os.path.abspath(filename)
        verdict = (
            not filename.startswith("<")
            and not path.startswith(_roots)
            and not any(part in path for part in PACKAGE_DIRS)
        )
        _verdicts[filename] = verdict
    return verdict


def where(depth: int = 2) -> str | None:
    """'/abs/path/train.py:40' of the innermost user frame above the caller, or None when the call did not come from
    the user's code (a library's own work, an import)."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if is_user(name):
            return f"{os.path.abspath(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def where_outside_imports(depth: int = 2) -> str | None:
    """As where(), but None when the stack is inside an import (a .pyc written, a package's first-import cache)."""
    frame = sys._getframe(depth)
    found = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name in IMPORTING:
            return None
        if found is None and is_user(name):
            found = f"{os.path.abspath(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return found
