"""`nccl-hardcoded`: backend `"nccl"` with no CUDA check."""

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
    what='backend `"nccl"` with no CUDA check',
    why="on a machine without GPUs (or a CPU build of torch) init_process_group fails: the script cannot be tried on a laptop",
    example='dist.init_process_group("nccl")',
    fix="`backend = 'nccl' if torch.cuda.is_available() else 'gloo'`",
    check=Checks.check_backend,
    fires=(
        """\
import torch.distributed as dist

dist.init_process_group("nccl")
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
dist.destroy_process_group()
""",
        # the backend chosen in a branch that asks for CUDA, then passed on
        """import torch
import torch.distributed as dist


def setup(backend="gloo"):
    if torch.cuda.is_available():
        backend = "nccl"
    dist.init_process_group(backend=backend)


setup()
dist.destroy_process_group()
""",
        # the workers are spawned only where a GPU count that cannot hold without GPUs was asserted
        """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    dist.destroy_process_group()


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    assert n_gpus >= 2, "needs two GPUs"
    mp.spawn(worker, args=(n_gpus,), nprocs=n_gpus)
""",
    ),
    setup=True,
    refine=_every_caller_checks_cuda,
)
