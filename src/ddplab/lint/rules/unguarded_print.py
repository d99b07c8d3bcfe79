"""`unguarded-print`: print on every rank without saying which rank (one finding; `also` lists the other lines)."""

from __future__ import annotations

from ddplab.lint import AT_RUN, Seen, function_at, statement_at
from ddplab.lint.checks import Checks
from ddplab.lint.findings import POSSIBLE
from ddplab.lint.rules import MINOR, Rule


def _printed_where_it_runs(f, seen: Seen) -> bool:
    """Keep the print lines that run: not in functions nothing calls; in a module, only in functions some caller runs
    on every rank (a print at a module's top level, or in a function only rank 0 calls, is left to the script)."""
    lines = [line for line in (f.line, *f.also) if not any(a <= line <= b for a, b in seen.spans)]
    sites = []
    if not seen.entry:
        sites = [
            (line, site)
            for line in lines
            if (func := function_at(seen.checks, line)) is not None
            and (site := seen.callers.called_by_script(seen.path, func)) is not None
            and seen.checks.branch_open(statement_at(seen.checks, line), func, site)
        ]
        lines = [line for line, _ in sites]
    if not lines:
        return False
    if sites and not all(seen.callers.unconditional(site) for _, site in sites):
        # the script calls it under a test of its own (`if args.ssl_train: ssl_setting(...)`): whether that branch
        # is the one launched shows in a run
        f.confidence, f.why = POSSIBLE, AT_RUN
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
    observed="the same line printed by every rank",
    check=Checks.check_saving,
    whole_project=("builtins", "__builtin__", "stdout"),
    refine=_printed_where_it_runs,
)
