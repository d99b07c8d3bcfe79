"""`ddplab lint PATH [PATH...] [--all] [--json | --format text|json|sarif]`: which DDP mistakes these scripts (or every script of a folder)
make, read from their source with the local modules they import (nothing is run).

Each finding: file, line, rule id, level, confidence, message, fix (the rules: ddplab/lint/checks.py,
docs/lint.md). The default output shows what lint is sure of; --all adds the possible ones (each saying what lint
could not see). Exit 1 when a shown finding is an error (the run would hang or crash), 0 when there are only warnings
or none, 2 when a path cannot be read. --json prints one LintResult; with several paths, one object with "results"
(one LintResult each) and "ok". --format sarif prints a SARIF 2.1.0 log for code scanning (ddplab/lint/sarif.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from ddplab import report
from ddplab.errors import DdplabError


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
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (--format json)")
    p.add_argument(
        "--format",
        choices=("text", "json", "sarif"),
        default=None,
        help="text (default), json (as --json), or sarif: a SARIF 2.1.0 log for code scanning",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab.lint import lint_file

    fmt = args.format or ("json" if args.json else "text")
    if args.json and fmt != "json":
        raise DdplabError(f"--json and --format {fmt} ask for two outputs: give one of them")
    results = [lint_file(script, show_all=args.show_all) for script in args.script]
    if fmt == "sarif":
        from ddplab.lint.sarif import to_sarif

        json.dump(to_sarif(results), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif len(results) == 1:
        report.emit(results[0], fmt == "json", render)
    else:
        report.emit(
            LintResults(results, all(r.ok for r in results)),
            fmt == "json",
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
    for note in r.notes:
        con.print(note)
    if r.possible:
        con.print(f"    {r.possible} possible finding(s) not shown: --all shows them{_run_hint(r.possible_rules)}")


def _run_hint(rules: list[str]) -> str:
    """Where a run says what the source cannot (the sanitizer's observations): one clause, on the summary line."""
    from ddplab.lint.rules import by_id

    seen = list(dict.fromkeys(by_id()[r].observed for r in rules if r in by_id() and by_id()[r].observed))
    return f"; run it under `ddplab launch` to see ({', '.join(seen)})" if seen else ""
