"""Render a command's result object: text through rich for people, or JSON alone on stdout for scripts.

rich already keeps colour off when stdout is not a terminal or NO_COLOR is set.

Markup is off on every console made here: most of what ddplab prints comes from outside (torch's and gloo's error
messages, paths, log lines, users' output), and rich would read `[/x.cc:78]` in them as a closing tag and raise.
Styles are given as objects instead: styled(), text(), or a `style=` argument.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.status import Status
from rich.table import Table
from rich.text import Text

STATUS_STYLE = {
    "PASS": "bold green",
    "FAIL": "bold red",
    "SKIP": "yellow",
    "TIMEOUT": "bold magenta",
    "WARN": "yellow",
    "OK": "bold green",
}


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


class _NoTrailingSpaces(io.TextIOBase):
    """A pipe or file gets no spaces at line ends (rich pads table cells and leaves the space where it wrapped):
    copied text and diffs stay clean. A run of spaces at the end of one write waits for the next to know."""

    def __init__(self, stream):
        self.stream = stream
        self.held = ""

    def write(self, s: str) -> int:
        text = re.sub(r" +(?=\n)", "", self.held + s)
        body = text.rstrip(" ")
        self.held = text[len(body) :]
        self.stream.write(body)
        return len(s)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


class _Status(Status):
    def update(self, status: RenderableType | None = None, **kwargs) -> None:
        super().update(Text(status) if isinstance(status, str) else status, **kwargs)


class _Console(Console):
    def status(self, status: RenderableType, **kwargs) -> Status:  # rich reads a str status as markup
        return _Status(Text(status) if isinstance(status, str) else status, console=self, **kwargs)


def console(stderr: bool = False) -> Console:
    """Width: COLUMNS when set, else the terminal's (rich asks stdin, stdout and stderr, so `| tee` in a terminal
    keeps its width), else 80 (a CI log). Tables built with fit_table stay whole at any of these.

    Not a terminal (a pipe, a file, `| tee`): prose is not wrapped (a URL or path cut at column 80 cannot be
    copied; the reader's pager wraps), tables still fit the width, and no line ends in spaces."""
    stream = sys.stderr if stderr else sys.stdout
    tty = Console(file=stream).is_terminal  # rich's own test: FORCE_COLOR, TTY_COMPATIBLE, isatty
    return _Console(file=stream if tty else _NoTrailingSpaces(stream), highlight=False, markup=False, soft_wrap=not tty)


Part = str | Text | tuple


def text(*parts: Part) -> Text:
    """One line from plain strings (never markup), Texts, and (string, style) pairs."""
    return Text.assemble(*parts)


def bold(s: str) -> Text:
    return Text(s, style="bold")


@dataclass
class Column:
    """A table column for fit_table.

    kind "id": numbers and ids (rank, pid, MiB): never wrapped or cut; "text": wraps, a long word folds.
    drop: 0 = always shown; otherwise left out when the table cannot fit, the highest `drop` first.
    """

    header: str
    kind: str = "id"
    drop: int = 0
    justify: str = "right"
    fold_last: bool = False  # an id that may fold over lines when nothing else makes the table fit


def _cells(value: RenderableType) -> list[int]:
    text = value if isinstance(value, Text) else Text(str(value))
    return [line.cell_len for line in text.split("\n")] or [0]


def fit_table(
    width: int,
    columns: Sequence[Column],
    rows: Sequence[Sequence[RenderableType]],
    narrowest_text: int = 8,
    **table_args,
) -> tuple[Table, list[str]]:
    """A rich Table that fits WIDTH without cutting an id or a number (rich's own fitting, past a point, shrinks
    every column and ends values with "…"). Tried in turn: as is; narrow (no box lines, multi-word headers of id
    columns on several lines); then narrow without the optional columns, least useful first; last, ids marked
    fold_last fold over lines. Returns the table and the headers left out (say so in a note).

    Width needed = id columns at their widest + text columns at `narrowest_text` (or less when they are shorter) +
    rich's gaps (padding 1 each side of every column but the table's edges, one line between columns with a box).
    """

    def build(keep: list[int], narrow: bool, fold: bool = False) -> tuple[Table, int]:
        table = Table(pad_edge=False, **({**table_args, "box": None} if narrow else table_args))
        need = 0
        for i in keep:
            col = columns[i]
            header = col.header.replace(" ", "\n") if narrow and col.kind == "id" else col.header
            widest = max([*_cells(header), *(w for row in rows for w in _cells(row[i]))])
            if col.kind == "id" and not (fold and col.fold_last):
                table.add_column(header, justify=col.justify, no_wrap=True, min_width=widest)
                need += widest
            else:
                table.add_column(header, justify=col.justify, overflow="fold")
                need += min(widest, narrowest_text)
        for row in rows:
            table.add_row(*(row[i] for i in keep))
        lines = (len(keep) + 1 if table.show_edge else len(keep) - 1) if table.box else 0
        return table, need + 2 * len(keep) - 2 + lines

    keep = list(range(len(columns)))
    optional = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop)
    left_out: list[str] = []
    for narrow in (False, True):
        table, need = build(keep, narrow)
        if need <= width:
            return table, left_out
    while optional:
        gone = optional.pop(0)
        keep.remove(gone)
        left_out.append(columns[gone].header)
        table, need = build(keep, True)
        if need <= width:
            return table, left_out
    return build(keep, True, fold=True)[0], left_out


def styled(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def finding(con: Console, status: str, what: str, fix: str = "") -> None:
    """One warning or failure and its fix, whole (never cut to the width: a log keeps every word)."""
    con.print(text(styled(status), " ", what), soft_wrap=True)
    if fix:
        con.print(f"      fix: {fix}", soft_wrap=True)


def emit(result: Any, as_json: bool, render: Callable[[Console, Any], None]) -> None:
    if as_json:
        json.dump(to_jsonable(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(console(), result)


def log(message: str | Text) -> None:
    """Progress for people: stderr, so that --json output on stdout stays clean. A str is printed as it is."""
    console(stderr=True).print(message)
