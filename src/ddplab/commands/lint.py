"""`ddplab lint PATH [PATH...] [--all] [--json]`: which DDP mistakes these scripts (or every script of a folder)
make, read from their source with the local modules they import (nothing is run).

Each finding: file, line, rule id, level, confidence, message, fix (the rules: ddplab/lint/checks.py,
docs/lint.md). The default output shows what lint is sure of; --all adds the possible ones (each saying what lint
could not see). Exit 1 when a shown finding is an error (the run would hang or crash), 0 when there are only warnings
or none, 2 when a path cannot be read. --json prints one LintResult; with several paths, one object with "results"
(one LintResult each) and "ok".
"""

from __future__ import annotations

from dataclasses import dataclass

from ddplab import report


@dataclass
class LintResults:
    results: list  # LintResult, one per script
    ok: bool


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lint",
        help="which DDP mistakes this script makes (static checks, nothing is run)",
        description="Read a training script (and the local modules it imports), or every script of "
        "a folder, and report the DDP mistakes found: line, rule, what goes wrong, the fix.",
    )
    p.add_argument("script", nargs="+", metavar="PATH", help="a training script (e.g. train.py) or a folder of them")
    p.add_argument(
        "--all",
        action="store_true",
        dest="show_all",
        help="also show the findings lint is not sure of (each says what it could not see)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab.lint import lint_file

    results = [lint_file(script, show_all=args.show_all) for script in args.script]
    if len(results) == 1:
        report.emit(results[0], args.json, render)
    else:
        report.emit(
            LintResults(results, all(r.ok for r in results)),
            args.json,
            lambda con, rs: [render(con, r) for r in rs.results],
        )
    return 0 if all(r.ok for r in results) else 1


def render(con, r) -> None:
    for f in r.findings:
        level = ("error", "bold red") if f.level == "error" else ("warning", "yellow")
        maybe = " (possible)" if f.confidence == "possible" else ""
        con.print(report.text(f"{f.path or r.script}:{f.line}: ", level, f"{maybe} [{f.rule}] {f.message}"))
        if f.why:
            con.print(f"    why {'not ' if maybe else ''}sure: {f.why}")
        con.print(f"    fix: {f.fix}")
    for why in r.unread:
        con.print(f"{why}: could not read it, so lint did not see what it does")
    if not r.findings:
        con.print(report.text(f"{r.script}: ", report.styled("OK"), " no DDP mistake found"))
    else:
        con.print(f"{r.script}: {r.errors} error(s), {r.warnings} warning(s)")
    if r.possible:
        con.print(f"    {r.possible} possible finding(s) not shown: --all shows them")
