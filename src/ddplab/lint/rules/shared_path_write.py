"""`shared-path-write`: every rank writes one path (a log file, a TensorBoard writer, `download=True`, a figure, a copy, `makedirs` without `exist_ok`)."""

from __future__ import annotations

from ddplab.lint import Seen
from ddplab.lint.checks import Checks
from ddplab.lint.findings import POSSIBLE, SURE
from ddplab.lint.rules import BUG, Rule


def _path_from_callers(f, seen: Seen) -> bool:
    """A write whose path a parameter brings in is as shared as what the callers pass: possible unless every
    caller's value is built without the rank, a process id, a uuid or the clock."""
    if f.line in seen.checks.path_params and f.confidence == SURE:
        func, param = seen.checks.path_params[f.line]
        if seen.callers.passed_per_rank(seen.path, func, param) is not False:
            f.confidence = POSSIBLE
            f.why = f"the path comes from the parameter {param}: what its callers pass may differ per rank"
    return True


RULE = Rule(
    id="shared-path-write",
    severity=BUG,
    what="every rank writes one path (a log file, a TensorBoard writer, `download=True`, a figure, a copy, `makedirs` without `exist_ok`)",
    why="the ranks' writes interleave or overwrite each other; a download races with itself",
    example='with open("log.txt", "a") as f: f.write(line)',
    fix="do it on rank 0 only (`if rank == 0: ...`, then `dist.barrier()` if the others read it), or put the rank in the path",
    modules_at_run=True,
    script_call_sure=True,
    observed="several ranks writing one path",
    check=Checks.check_shared_writes,
    callers_guard=True,
    refine=_path_from_callers,
)
