"""How the model and optimizer are spread over the ranks: ddp, zero1 or fsdp (`ddplab train --strategy`).

    ddp    every rank holds the whole model, its gradients and the whole optimizer state; DDP all-reduces the
           gradients (torch.nn.parallel.DistributedDataParallel).
    zero1  as ddp, but each rank keeps the optimizer state of its share of the parameters only and broadcasts
           its updated share after the step (torch.distributed.optim.ZeroRedundancyOptimizer, ZeRO stage 1).
    fsdp   parameters, gradients and optimizer state are all split over the ranks; each block's parameters are
           all-gathered just before it runs and freed after (FSDP2: torch.distributed.fsdp.fully_shard on a
           1-D DeviceMesh). Gradients are reduce-scattered instead of all-reduced.

All three compute the same update from the same data, so they end with the same weights up to float rounding
(tests/train/test_strategy.py proves it on 2 gloo ranks). `ddplab.statedict.full_state_dict` always returns a plain state_dict of the
whole model, whatever the strategy, so model.pt and checkpoints stay ordinary files.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ddplab.errors import DdplabError

STRATEGIES = ("ddp", "zero1", "fsdp")


def fully_shard_fn():
    """FSDP2's fully_shard, or a one-line error naming the torch that has it."""
    try:
        from torch.distributed.fsdp import fully_shard  # public since torch 2.6
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard  # torch 2.4-2.5
        except ImportError:
            raise DdplabError(
                f"--strategy fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard, torch>=2.6); this "
                f"is torch {torch.__version__}: upgrade torch, or use --strategy zero1"
            ) from None
    return fully_shard


def check(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise DdplabError(f"--strategy {strategy}: use one of {', '.join(STRATEGIES)}")
    if strategy == "fsdp":
        fully_shard_fn()


@dataclass
class Wrapped:
    forward: nn.Module  # what the loss calls: DDP's wrapper, the sharded model, or the model itself
    optimizer: torch.optim.Optimizer
    no_sync: Callable[[], contextlib.AbstractContextManager]  # skip gradient sync on accumulation micro-steps
    ddp: nn.Module | None  # the DDP wrapper (for its communication hooks and timers), when there is one


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP gathers one at a time: each parametrised member of a ModuleList or Sequential (a
    transformer's blocks, an MLP's layers); the root takes whatever is left (embeddings, tied head)."""
    units: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if any(name.startswith(f"{u}.") for u, _ in units):  # inside a unit already: the outermost one gathers
            continue
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            units += [
                (f"{name}.{i}" if name else str(i), m)
                for i, m in enumerate(module)
                if any(True for _ in m.parameters())
            ]
    return [m for _, m in units]


def wrap(
    strategy: str,
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    world: int,
    device: torch.device,
    *,
    device_ids=None,
    bucket_cap_mb: float = 25.0,
    process_group=None,
    mesh=None,
) -> Wrapped:
    """Wrap `model` (already on `device`, identical on every rank) for `strategy` and build its optimizer."""
    check(strategy)
    if strategy == "fsdp":
        fully_shard = fully_shard_fn()
        if mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(device.type, (world,))
        for unit in shard_units(model):
            fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)  # the root: broadcasts nothing, each rank keeps its shard of the same init
        optimizer = make_optimizer(model)  # after sharding: it must hold the sharded parameters

        @contextlib.contextmanager
        def no_sync():
            model.set_requires_gradient_sync(False)  # accumulate unsharded gradients locally, reduce on the last
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)

        return Wrapped(model, optimizer, no_sync, None)

    optimizer = make_optimizer(model)
    if strategy == "zero1":
        optimizer = zero1(optimizer, process_group)
    if world == 1:
        # One process has nothing to synchronise: DDP would all-reduce every gradient with itself, ~20% of a small
        # model's CPU step. Accelerate skips the wrapper for one process too.
        return Wrapped(model, optimizer, contextlib.nullcontext, None)
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(
        model,
        device_ids=device_ids,
        gradient_as_bucket_view=True,  # grads live in the buckets
        bucket_cap_mb=bucket_cap_mb,
        process_group=process_group,
    )
    return Wrapped(ddp, optimizer, ddp.no_sync, ddp)


def zero1(optimizer: torch.optim.Optimizer, process_group=None) -> torch.optim.Optimizer:
    """The same optimizer (class, groups, settings) as a ZeroRedundancyOptimizer: state for this rank's share."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    cls = type(optimizer)
    accepted = inspect.signature(cls.__init__).parameters  # defaults can hold keys the constructor does not take
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    groups = [dict(g) for g in optimizer.param_groups]
    return ZeroRedundancyOptimizer(groups, optimizer_class=cls, process_group=process_group, **defaults)
