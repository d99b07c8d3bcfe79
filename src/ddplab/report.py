"""Render a command's result object: text through rich for people, or JSON alone on stdout for scripts.

rich already keeps colour off when stdout is not a terminal or NO_COLOR is set.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, Callable

from rich.console import Console

STATUS_STYLE = {"PASS": "bold green", "FAIL": "bold red", "SKIP": "yellow", "TIMEOUT": "bold magenta",
                "WARN": "yellow", "OK": "bold green"}


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def styled(status: str) -> str:
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status


def finding(con: Console, status: str, what: str, fix: str = "") -> None:
    """One warning or failure and its fix, whole (never cut to the width: a log keeps every word)."""
    from rich.markup import escape

    con.print(f"{styled(status)} {escape(what)}", soft_wrap=True)
    if fix:
        con.print(f"      fix: {escape(fix)}", soft_wrap=True)


def emit(result: Any, as_json: bool, render: Callable[[Console, Any], None]) -> None:
    if as_json:
        json.dump(to_jsonable(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(console(), result)


def log(message: str) -> None:
    """Progress for people: stderr, so that --json output on stdout stays clean."""
    console(stderr=True).print(message)
