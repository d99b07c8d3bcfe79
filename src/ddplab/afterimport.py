"""Run code the moment a module has been imported, wherever the import came from: how the rank-side hooks that
boot/sitecustomize.py installs (`--profile`'s, the sanitizer's) reach torch without importing it at start-up (a
rank that never imports torch pays nothing, and torch is never imported before the script asks for it).

Standard library only: every rank imports this at start-up.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable

_waiting: dict[str, list[tuple[Callable, str]]] = {}


def when_imported(name: str, then: Callable, what: str) -> None:
    """Call then(module) once `name` is imported (at once if it already is). An error in `then` never reaches the
    importer: it is one stderr line, "ddplab: WHAT not installed: ...", and the import goes on."""
    if name in sys.modules:
        _call(then, sys.modules[name], what)
        return
    if name not in _waiting:
        _waiting[name] = []
        sys.meta_path.insert(0, _AfterImport(name))
    _waiting[name].append((then, what))


def _call(then: Callable, module, what: str) -> None:
    try:
        then(module)
    except Exception as e:  # noqa: BLE001 - the user's script must run even if the hook cannot
        sys.stderr.write(f"ddplab: {what} not installed: {e}\n")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the first look-up of `name` it steps aside, lets the other finders find the module,
    and wraps its loader so that the callbacks run right after the module's code."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        callbacks = _waiting.pop(fullname, [])
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            for then, what in callbacks:
                _call(then, module, what)

        spec.loader.exec_module = exec_module
        return spec
