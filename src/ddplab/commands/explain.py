"""`ddplab explain [LOGFILE | -]`: what this error means and how to fix it.

Matches the log against ddplab's rule table (ddplab/explain/rules.py): the root cause first when the log holds
torchrun's failure summary, then every known error in the order it first appears. LOG may be a file, '-' (stdin) or
a log folder (`ddplab launch`'s, torchrun --log-dir's: every rank's file is read). Exit 0 when something matched,
1 when nothing did (then what the log says: first failed rank, error, your frame, layer), 2 when the log cannot be
read (missing, empty, binary, unreadable, a folder without logs).
"""

from __future__ import annotations

from ddplab import report


def add_parser(sub) -> None:
    p = sub.add_parser(
        "explain",
        help="what this error means and how to fix it",
        description="Explain a failed run's log: the root cause first, each known error's cause and "
        "fix; when no rule knows it, what the log says (first failed rank, error, your "
        "frame, the layer and the setting that makes it say more).",
    )
    p.add_argument(
        "log",
        nargs="?",
        default=None,
        metavar="LOG",
        help="a log file, a log folder (ddplab launch's or torchrun --log-dir's), or '-'/nothing for stdin",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def read_log(name: str | None):
    """The log as logread.LogText; bad input is a DdplabError (one line, exit 2)."""
    from ddplab.explain.logread import read_path, read_stdin

    return read_stdin() if name is None or name == "-" else read_path(name)


def run(args) -> int:
    from ddplab.explain.matcher import explain_log, render

    result = explain_log(read_log(args.log))
    report.emit(result, args.json, render)
    return 0 if result.matched else 1
