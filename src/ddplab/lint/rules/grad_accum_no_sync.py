"""`grad-accum-no-sync`: gradient accumulation (a `% k` step, or an inner backward loop) without `no_sync()` / `require_backward_grad_sync`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="grad-accum-no-sync",
    severity=BUG,
    what="gradient accumulation (a `% k` step, or an inner backward loop) without `no_sync()` / `require_backward_grad_sync`",
    why="every backward all-reduces, though only the last of k is used: k-1 of k all-reduces wasted",
    example="loss.backward()\nif (i + 1) % accum == 0: opt.step()",
    fix="run the micro-steps but the last inside `with model.no_sync():`",
    check=Checks.check_grad_accumulation,
    opt_in="shown with --all only: whether the accumulation takes more than one step depends on the configuration",
    whole_project=("no_sync", "require_backward_grad_sync"),
)
