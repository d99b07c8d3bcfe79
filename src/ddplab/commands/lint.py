"""`ddplab lint SCRIPT [SCRIPT...] [--json]`: which DDP mistakes these scripts make, read from their source (nothing
is run).

Each finding: line, rule id, level, message, fix (the rules: ddplab/diagnose/lint/rules.py, docs/lint.md). Exit 1 when any
finding is an error (the run would hang or crash), 0 when there are only warnings or none, 2 when a script cannot be
read. --json prints one LintResult; with several scripts, one object with "results" (one LintResult each) and "ok".
"""

from __future__ import annotations

from dataclasses import dataclass

from ddplab import report


@dataclass
class LintResults:
    results: list  # LintResult, one per script
    ok: bool


def add_parser(sub) -> None:
    p = sub.add_parser("lint", help="which DDP mistakes this script makes (static checks, nothing is run)")
    p.add_argument("script", nargs="+", help="the training script(s) to check, e.g. train.py")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab.diagnose.lint import lint_file

    results = [lint_file(script) for script in args.script]
    if len(results) == 1:
        report.emit(results[0], args.json, render)
    else:
        report.emit(LintResults(results, all(r.ok for r in results)), args.json,
                    lambda con, rs: [render(con, r) for r in rs.results])
    return 0 if all(r.ok for r in results) else 1


def render(con, r) -> None:
    for f in r.findings:
        level = ("error", "bold red") if f.level == "error" else ("warning", "yellow")
        con.print(report.text(f"{r.script}:{f.line}: ", level, f" [{f.rule}] {f.message}"))
        con.print(f"    fix: {f.fix}")
    if not r.findings:
        con.print(report.text(f"{r.script}: ", report.styled('OK'), " no DDP mistake found"))
    else:
        con.print(f"{r.script}: {r.errors} error(s), {r.warnings} warning(s)")
