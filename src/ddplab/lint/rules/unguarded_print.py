"""`unguarded-print`: print on every rank without saying which rank (one finding; `also` lists the other lines)."""

from __future__ import annotations

from ddplab.lint import Seen, function_at
from ddplab.lint.checks import Checks
from ddplab.lint.rules import MINOR, Rule


def _printed_where_it_runs(f, seen: Seen) -> bool:
    """Keep the print lines that run: not in functions nothing calls; in a module, only in functions some caller runs
    on every rank (a print at a module's top level, or in a function only rank 0 calls, is left to the script)."""
    lines = [line for line in (f.line, *f.also) if not any(a <= line <= b for a, b in seen.spans)]
    if not seen.entry:
        lines = [
            line
            for line in lines
            if (func := function_at(seen.checks, line)) is not None
            and seen.callers.called_by_script(seen.path, func) is not None
        ]
    if not lines:
        return False
    f.line, f.also = lines[0], lines[1:]
    more = f" (also lines {', '.join(map(str, lines[1:6]))}{'...' if len(lines) > 6 else ''})" if len(lines) > 1 else ""
    f.message = f"print runs on every rank: each line appears once per process, interleaved{more}"
    return True


RULE = Rule(
    id="unguarded-print",
    severity=MINOR,
    what="print on every rank without saying which rank (one finding; `also` lists the other lines)",
    why="each line appears once per process, interleaved",
    example='print(f"epoch {epoch} loss {loss:.3f}")',
    fix="print on global rank 0 only (`if rank == 0: print(...)`), or put the rank in the message",
    modules_at_run=True,
    observed="the same line printed by every rank",
    check=Checks.check_saving,
    whole_project=("builtins", "__builtin__", "stdout"),
    refine=_printed_where_it_runs,
)
