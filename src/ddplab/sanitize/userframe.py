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
    codes = _codes
    while frame is not None:
        code = frame.f_code
        known = codes.get(id(code))
        path = _code_path(code) if known is None else known[1]
        if path:
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return None


# id(code object) -> (the code, kept so that its id stays its own; its file's absolute path when it is the user's
# code, else ""): what where() asks of each frame, by the frame's code (a walk up the stack at each digested step,
# with the caches cold, cost 25 us by file names). By id: equal code objects in two files compare equal.
_codes: dict[int, tuple[object, str]] = {}


def _code_path(code) -> str:
    name = code.co_filename
    path = os.path.abspath(name) if is_user(name) else ""
    _codes[id(code)] = (code, path)
    return path


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


def call_through(fn, /, *args, **kwargs):
    """fn(*args, **kwargs) from a wrapper that stands in for fn (DDP's __init__), with the warnings fn raises shown
    where they would be without the wrapper: one raised for fn's caller (torch's stacklevel=2, e.g. DDP's
    `broadcast_buffers` FutureWarning) names the user's line, not ddplab's, and the user's warning filters apply
    to it there. For calls made about once a process (a DDP wrapper, init_process_group): swapping the filters, as
    warnings.catch_warnings does, resets Python's once-per-line memory of every warning shown so far."""
    import warnings

    wrapper = sys._getframe(1)
    caller = wrapper.f_back
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            return fn(*args, **kwargs)
    finally:
        for w in caught:
            frame = None  # the frame the warning would have named without the wrapper (and this helper)
            if w.filename == __file__:
                frame = caller
            elif (w.filename, w.lineno) == (wrapper.f_code.co_filename, wrapper.f_lineno):
                frame = caller and caller.f_back
            if frame is None:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
            else:
                g = frame.f_globals
                registry = g.setdefault("__warningregistry__", {})
                warnings.warn_explicit(
                    w.message, w.category, frame.f_code.co_filename, frame.f_lineno, g.get("__name__"), registry, g
                )
