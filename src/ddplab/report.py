"""Render a command's result object: text through rich for people, or JSON alone on stdout for scripts.

rich already keeps colour off when stdout is not a terminal or NO_COLOR is set.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import json
import sys
from typing import Any, Callable, Sequence

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

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
    """Width: COLUMNS when set, else the terminal's (rich asks stdin, stdout and stderr, so `| tee` in a terminal
    keeps its width), else 80 (a CI log). Tables built with fit_table stay whole at any of these."""
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


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


def fit_table(width: int, columns: Sequence[Column], rows: Sequence[Sequence[RenderableType]],
              narrowest_text: int = 8, **table_args) -> tuple[Table, list[str]]:
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
