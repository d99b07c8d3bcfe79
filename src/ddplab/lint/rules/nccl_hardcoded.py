"""`nccl-hardcoded`: backend `"nccl"` with no CUDA check, in a script whose training could run without GPUs (one
whose DDP function puts something on a GPU unconditionally cannot, whatever the backend)."""

from __future__ import annotations

from ddplab.lint import Seen, function_at
from ddplab.lint.checks import Checks
from ddplab.lint.rules import MINOR, Rule


def _every_caller_checks_cuda(f, seen: Seen) -> bool:
    """In a module, a setup function every caller of which checks CUDA first (`if not torch.cuda.is_available():
    raise`, then setup()) is not hard-coded for a machine without GPUs."""
    if seen.entry or (func := function_at(seen.checks, f.line)) is None:
        return True
    sites = seen.callers.sites(seen.path, func)
    return not sites or not all(seen.readers[w]._cuda_checked(c) for w, c in sites)


RULE = Rule(
    id="nccl-hardcoded",
    severity=MINOR,
    what='backend `"nccl"` with no CUDA check (not where the training puts something on a GPU unconditionally: it needs GPUs anyway)',
    why="on a machine without GPUs (or a CPU build of torch) init_process_group fails: the script cannot be tried on a laptop",
    example='dist.init_process_group("nccl")',
    fix="`backend = 'nccl' if torch.cuda.is_available() else 'gloo'`",
    check=Checks.check_backend,
    setup=True,
    refine=_every_caller_checks_cuda,
)
