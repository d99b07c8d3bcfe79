"""`collective-in-rank-branch`: a collective only some ranks reach (in a rank test, or after `if rank != 0: return`)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.findings import ERROR
from ddplab.lint.rules import BUG, Rule
from ddplab.lint.scriptread import ANY_RANK0


def _behind_guarded_calls(readers: dict, callers, entries: list) -> None:
    """`if is_main_process(): stats = evaluate(...)` in the script, where evaluate (in another module) runs an
    all_reduce: every call of that function is under a rank test, so the collective runs on those ranks only.
    Reported at the script's guarded call."""
    for path, reader in readers.items():
        if path in entries:
            continue
        for call in reader.calls:
            if not reader.is_collective(call) or any(g.kind != "single" for g in reader.guards(call)):
                continue
            func = reader.enclosing_function(call)
            if func is None:
                continue
            sites = [(w, s) for w, s in callers.sites(path, func) if w != path]
            if not sites or any(
                w not in entries or not readers[w].runs_on_rank0_only(s, ANY_RANK0 - {"single"}) for w, s in sites
            ):
                continue
            for where, site in sites:
                guards = [g for g in readers[where].guards(site) if g.kind != "single"]
                if not guards:
                    continue
                name = reader.callee_last(call)
                readers[where].add(
                    site,
                    "collective-in-rank-branch",
                    ERROR,
                    f"{func.name}() runs {name} ({path.name}:{call.lineno}) and is called on "
                    f"{'rank 0' if guards[0].rank0 else 'every rank but 0'} only here (the rank test "
                    f"on line {guards[0].node.lineno}): the others never join it and it hangs",
                    f"call {func.name}() on every rank, outside the rank test; keep only the printing/saving inside",
                )


RULE = Rule(
    id="collective-in-rank-branch",
    severity=BUG,
    what="a collective only some ranks reach (in a rank test, or after `if rank != 0: return`)",
    why="the ranks that reach it wait for the others, which never come: it hangs",
    example="if rank == 0:\n    dist.barrier()",
    fix="call it on every rank, outside the rank test; keep only the printing/saving inside",
    check=Checks.check_collectives_in_rank_branches,
    opt_in="shown with --all only: whether the other ranks reach a matching collective on another path is known in a run (a hang shows in `ddplab launch`)",
    callers_guard=True,
    across=_behind_guarded_calls,
)
