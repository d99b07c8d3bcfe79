"""`unreduced-metric`: a sum over this rank's batches (loss, accuracy, an AverageMeter) reported on rank 0 as the whole."""

from __future__ import annotations

from ddplab.lint import Seen
from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule
from ddplab.lint.scriptread import given_for


def _not_a_whole_loader(f, seen: Seen) -> bool:
    """Every caller hands the loop a loader its file builds without a sampler (`evaluate(model, val_loader)` with a
    plain DataLoader): each rank sums the whole set, and the number is right."""
    if f.line not in seen.checks.loader_params:
        return True
    func, param = seen.checks.loader_params[f.line]
    sites = seen.callers.sites(seen.path, func)
    return not sites or not all(
        (given := given_for(call, func, param)) is not None and seen.readers[where].built_without_sampler(given)
        for where, call in sites
    )


RULE = Rule(
    id="unreduced-metric",
    severity=BUG,
    what="a sum over this rank's batches (loss, accuracy, an AverageMeter) reported on rank 0 as the whole",
    why="rank 0 saw 1/N of the data: the number shown is not the model's",
    example="correct += (pred == y).sum().item()  # then, on rank 0: print(correct / len(ds))",
    fix="all_reduce the sums first: `t = torch.tensor([total], device=device); dist.all_reduce(t)`, then report from `t`",
    check=Checks.check_unreduced_metric,
    callers_guard=True,
    refine=_not_a_whole_loader,
)
