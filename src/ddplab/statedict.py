"""The whole state of a model and its optimizer for rank 0 to save, and back, however they are spread over the
ranks: DDP (every rank a replica), ZeRO-1 (ZeroRedundancyOptimizer: each rank holds a share of the optimizer
state), FSDP (fully_shard: each parameter a DTensor shard). Sharded states go through torch's own machinery,
torch.distributed.checkpoint.state_dict; the result is always a plain state_dict of the whole model, so checkpoints
stay ordinary files that load anywhere. Used by `ddplab train`'s recipes and by ddplab.resume."""

from __future__ import annotations

import torch
from torch import nn


def is_sharded(model: nn.Module) -> bool:
    return any(type(p).__name__ == "DTensor" for p in model.parameters())


def full_state_dict(model: nn.Module, rank0_on_cpu: bool = False) -> dict:
    """The whole model as a plain state_dict of ordinary tensors on every rank (a collective when sharded).

    rank0_on_cpu: for a save by rank 0 only. Under fsdp each parameter is gathered in turn and copied to rank 0's
    host memory; the other ranks get {}. Without it every rank gathers the whole model onto its own device at once
    (torch/distributed/checkpoint/state_dict.py, _maybe_full_or_cpu_state_dict: ranks_only=() unless cpu_offload):
    an out-of-memory at the first checkpoint of exactly the models FSDP is for."""
    if not is_sharded(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_on_cpu))


def load_full_state_dict(model: nn.Module, state: dict) -> None:
    if not is_sharded(model):
        model.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


def optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> dict | None:
    """The whole optimizer state, for rank 0 to save; every rank must call it (zero1 and fsdp gather)."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        # Gathered to rank 0's host memory only (see full_state_dict): only rank 0 saves it.
        return get_optimizer_state_dict(
            model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    if hasattr(optimizer, "consolidate_state_dict"):  # ZeroRedundancyOptimizer: gather every share on rank 0
        optimizer.consolidate_state_dict(to=0)
        return optimizer.state_dict() if rank == 0 else None
    return optimizer.state_dict()


def load_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
        return
    optimizer.load_state_dict(state)  # ZeroRedundancyOptimizer takes the whole state and keeps its share
    if hasattr(optimizer, "optim"):  # ZeroRedundancyOptimizer: its local optimizer holds the state
        steps_on_param_devices(optimizer.optim)


def steps_on_param_devices(optimizer: torch.optim.Optimizer) -> None:
    """Put a fused or capturable optimizer's scalar state (Adam's `step`) back on its parameter's device.

    ZeroRedundancyOptimizer.load_state_dict forces every zero-dimensional state tensor onto the CPU
    (torch/distributed/optim/zero_redundancy_optimizer.py, "Force zero-dimensional tensors (like Adam "step") on
    CPU"; pytorch/pytorch#124133, open). Plain Adam keeps `step` on the CPU anyway, but the fused and capturable
    kernels need it on the parameter's device (torch.optim.Optimizer.load_state_dict keeps it there for them since
    pytorch/pytorch#103256), so on GPUs the first step after a resume or an elastic restart fails: the recipes'
    AdamW is fused on CUDA."""
    for group in optimizer.param_groups:
        if not (group.get("fused") or group.get("capturable")):
            continue
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() == 0 and value.device != p.device:
                    state[key] = value.to(p.device)
