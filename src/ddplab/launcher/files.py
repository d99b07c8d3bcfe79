"""Files the agent, the workers and the caller hand each other: written atomically, read tolerantly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


def write_atomic(path: Path, value: Any) -> None:
    """The caller may read the file the moment it appears, and may end the writer mid-write."""
    tmp = path.with_name(f".{path.name}")
    tmp.write_text(json.dumps(value, default=_jsonable))
    tmp.rename(path)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
