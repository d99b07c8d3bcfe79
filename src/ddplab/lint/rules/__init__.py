"""lint's rules, one module each, found by discovery: a new rule is a new module here plus its fixtures, nothing
else. Each module holds RULE: its id, severity, doc (what, why, example, fix), the reader pass that finds it, and
what the engine needs to know to judge it in an imported module. Its fixtures are whole scripts, as ruff keeps its
own: tests/lint/fixtures/RULE-ID/fires_N.py (it must flag each) and quiet_N.py (the same scripts written right: it
must stay silent); tests/lint/test_rule_fixtures.py runs them all."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ddplab import discover

BUG, MINOR = "bug", "minor"  # bug: hangs, crashes, wrong results, wasted GPUs; minor: noise, hygiene


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # BUG | MINOR
    what: str  # what it flags, one line (the rules table)
    why: str  # what goes wrong at run time
    example: str  # the mistake, as a line or two of code
    fix: str  # what to write instead
    check: Callable  # the reader pass (a Checks method) that finds it; rules found together share one pass
    in_modules: bool = True  # judged in the modules the script imports too (where the script calls them)
    callers_guard: bool = False  # in a module, a caller may guard it: sure only when some caller runs it on every rank
    setup: bool = False  # process-group setup: in a module, only the setup the script's calls reach counts
    # rests on the whole project: not sure when a file of it that could not be parsed holds one of these words
    # (`destroy_process_group` for no-destroy: a file without it destroys nothing)
    whole_project: tuple[str, ...] = ()
    once: bool = False  # one mistake however many files show it: the first finding speaks for all
    observed: str = ""  # what `ddplab launch`'s sanitizer sees of it in a run, where it does: lint points there
    # in a module the script imports, whether every rank runs the statement (on one path) is known only in a run:
    # there the finding is possible, and the sanitizer (`observed`) says
    modules_at_run: bool = False
    # ... unless the script itself calls the function on every rank (callers_guard finds the call there): then who
    # runs it is known, and what the rule is about (one path, written by each) is in the code read
    script_call_sure: bool = False
    # why the rule is shown with --all only: its findings are too often wrong on the benchmark sets
    # (benchmarks/lint_rules.py) and no general mechanism fixes them; "" for a rule of the default output
    opt_in: str = ""
    across: Callable | None = None  # (readers, callers, entries): findings only several files together show
    refine: Callable | None = None  # (finding, Seen) -> keep it?: what the project around a finding says of it
    # (finding, Seen) -> why it is only possible in this project, or "": what its launch instructions say of it
    doubt: Callable | None = None


@functools.cache
def all_rules() -> tuple[Rule, ...]:
    """Every rule, by id."""
    found = [importlib.import_module(f"{__name__}.{name}").RULE for name in discover.modules(__path__)]
    return tuple(sorted(found, key=lambda r: r.id))


@functools.cache
def by_id() -> dict[str, Rule]:
    return {r.id: r for r in all_rules()}


def passes() -> list[Callable]:
    """The reader passes that find the rules, each once, in the rules' order."""
    return list(dict.fromkeys(r.check for r in all_rules()))


def markdown_table() -> str:
    """docs/lint.md's rules table, from the rules' docs (tools/lint_rules_table.py writes it there)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    rows = [
        f"| `{r.id}`{' (--all)' if r.opt_in else ''} | {r.severity} | {cell(r.what)} | {cell(r.why)} | {cell(r.fix)} |"
        for r in all_rules()
    ]
    return "\n".join(
        ["| rule | severity | what it flags | what goes wrong | the fix |", "|---|---|---|---|---|", *rows]
    )
