"""Registries made by discovery: a package's modules are its entries (commands, recipes), found without importing
them, so that `ddplab --help` imports no torch and adding an entry is adding a file."""

from __future__ import annotations

import pkgutil


def modules(path, order: tuple[str, ...] = ()) -> list[str]:
    """The public modules in a package's __path__: those named in `order` first, in that order, then the rest by
    name."""
    found = [m.name for m in pkgutil.iter_modules(path) if not m.name.startswith("_")]
    return sorted(found, key=lambda n: (order.index(n) if n in order else len(order), n))
