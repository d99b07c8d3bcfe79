"""The names lint knows a meaning by, and how a project adds its own: a `[tool.ddplab.lint]` table in the
pyproject.toml nearest the script (its folder or one above) extends them for that lint only.

    [tool.ddplab.lint]
    rank-names = ["proc_id"]               # a variable that holds the global rank
    main-names = ["is_leader"]             # a flag true on rank 0 only
    main-calls = ["am_leader"]             # a function that returns True on rank 0 only
    save-calls = ["save_checkpoint"]       # a call that writes a checkpoint, judged as torch.save is
    ddp-names = ["ShardedDDP"]             # a class that wraps a model the way DistributedDataParallel does
    distributed-flags = ["multi_node"]     # a switch that holds when a process group runs (`not multi_node or rank == 0`)
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from ddplab.errors import DdplabError
from ddplab.lint.checks import SAVE_CALLS
from ddplab.lint.scriptread import DDP_NAMES, DIST_FLAG_NAMES, GLOBAL_RANK_NAMES, MAIN_CALLS, MAIN_NAMES

VOCABULARIES = {
    "rank-names": GLOBAL_RANK_NAMES,
    "main-names": MAIN_NAMES,
    "main-calls": MAIN_CALLS,
    "save-calls": SAVE_CALLS,
    "ddp-names": DDP_NAMES,
    "distributed-flags": DIST_FLAG_NAMES,
}
TABLE = "[tool.ddplab.lint]"


def nearest_pyproject(start: Path) -> Path | None:
    for folder in [start.resolve(), *start.resolve().parents]:
        if (folder / "pyproject.toml").is_file():
            return folder / "pyproject.toml"
    return None


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:  # Python 3.10 has no tomllib; tomli is its backport, used when it is already installed (no new dependency)
        import tomli

        return tomli
    except ImportError:
        return None


def read(start: Path) -> tuple[dict[str, set[str]], str | None]:
    """The names the project adds ({vocabulary: names}) and a note when its table could not be read here."""
    path = nearest_pyproject(start)
    if path is None:
        return {}, None
    text = path.read_text(encoding="utf-8", errors="replace")
    if "tool.ddplab" not in text:
        return {}, None  # the common case: nothing to parse
    toml = _toml()
    if toml is None:
        return {}, f"{path}: {TABLE} not read: Python 3.10 reads TOML with the tomli package (pip install tomli)"
    try:
        table = toml.loads(text).get("tool", {}).get("ddplab", {}).get("lint", {})
    except toml.TOMLDecodeError as e:
        raise DdplabError(f"{path}: not valid TOML ({e}): fix it so that lint can read {TABLE}") from None
    added: dict[str, set[str]] = {}
    for key, names in table.items():
        if key not in VOCABULARIES:
            raise DdplabError(f"{path}: {TABLE} has no key {key!r}: use one of {', '.join(VOCABULARIES)}")
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise DdplabError(f'{path}: {TABLE} {key} must be a list of names, e.g. {key} = ["name"]')
        added[key] = set(names)
    return added, None


@contextlib.contextmanager
def extended(added: dict[str, set[str]]):
    """The vocabularies with the project's names in them, for one lint; as they were after it."""
    new = {key: names - VOCABULARIES[key] for key, names in added.items()}
    for key, names in new.items():
        VOCABULARIES[key].update(names)
    try:
        yield
    finally:
        for key, names in new.items():
            VOCABULARIES[key].difference_update(names)
