"""`ddplab explain [LOGFILE | -]`: what this error means and how to fix it.

Matches the log against ddplab's rule table (ddplab/diagnose/rules.py): the root cause first when the log holds
torchrun's failure summary, then every known error in the order it first appears. Exit 0 when something matched,
1 when nothing did (then the generic next steps), 2 when the log cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddplab import report
from ddplab.errors import DdplabError


def add_parser(sub) -> None:
    p = sub.add_parser("explain", help="what this error means and how to fix it")
    p.add_argument("log", nargs="?", default=None, metavar="LOGFILE",
                   help="a log or traceback to explain; '-' or nothing reads stdin")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def read_log(name: str | None) -> tuple[str, str]:
    """(text, source name); bad input is a DdplabError."""
    if name is None or name == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise DdplabError("no log given: pass a file (`ddplab explain train.log`) or pipe one "
                              "(`torchrun ... 2>&1 | ddplab explain -`)")
        return sys.stdin.buffer.read().decode("utf-8", errors="replace"), "<stdin>"
    path = Path(name)
    if not path.is_file():
        raise DdplabError(f"{name}: no such file: pass the path of a saved log, or '-' to read stdin")
    try:
        return path.read_bytes().decode("utf-8", errors="replace"), str(path)
    except OSError as e:
        raise DdplabError(f"{name}: cannot read it ({e.strerror}): check its permissions") from None


def run(args) -> int:
    from ddplab.diagnose.explain import explain_text, render

    text, source = read_log(args.log)
    result = explain_text(text, source=source)
    report.emit(result, args.json, render)
    return 0 if result.matched else 1
