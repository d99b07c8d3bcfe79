"""`ddplab lint SCRIPT [--json]`: which DDP mistakes this script makes, read from its source (nothing is run).

Each finding: line, rule id, level, message, fix (the rules: ddplab/diagnose/lint.py). Exit 1 when any finding is
an error (the run would hang or crash), 0 when there are only warnings or none, 2 when the script cannot be read.
"""

from __future__ import annotations

from ddplab import report


def add_parser(sub) -> None:
    p = sub.add_parser("lint", help="which DDP mistakes this script makes (static checks, nothing is run)")
    p.add_argument("script", help="the training script to check, e.g. train.py")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab.diagnose.lint import lint_file

    result = lint_file(args.script)
    report.emit(result, args.json, render)
    return 0 if result.ok else 1


def render(con, r) -> None:
    from rich.markup import escape

    for f in r.findings:
        level = "[bold red]error[/]" if f.level == "error" else "[yellow]warning[/]"
        con.print(f"{escape(r.script)}:{f.line}: {level} {escape(f'[{f.rule}]')} {escape(f.message)}")
        con.print(f"    fix: {escape(f.fix)}")
    if not r.findings:
        con.print(f"{escape(r.script)}: {report.styled('OK')} no DDP mistake found")
    else:
        con.print(f"{escape(r.script)}: {r.errors} error(s), {r.warnings} warning(s)")
