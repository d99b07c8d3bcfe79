"""ddp: a small model trained K steps under DistributedDataParallel, checked four ways.

(a) the parameters are identical on every rank afterwards;
(b) they equal, within 1e-5, the same model trained in one process on the same global batches;
(c) DistributedSampler's shards are disjoint and together cover the dataset;
(d) the loss over the whole dataset went down.
(b) is the property DDP exists for: averaging gradients over N shards of a batch is one step on the whole batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from ddplab.launcher.progress import mark

STEPS = 12
BATCH = 8  # per rank
SAMPLES_PER_RANK = STEPS * BATCH  # the dataset divides evenly, so shards can be asserted disjoint
FEATURES, HIDDEN, OUTPUTS = 16, 32, 4
LR = 0.05


def _model(device) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights in every process, DDP or not
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUTPUTS)).to(device)


def _dataset(n_ranks: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)  # seeded: every rank holds the very same data
    x = torch.randn(SAMPLES_PER_RANK * n_ranks, FEATURES, generator=gen)
    true_w = torch.randn(FEATURES, OUTPUTS, generator=gen)
    return x.to(device), (x @ true_w + 0.01 * torch.randn(len(x), OUTPUTS, generator=gen)).to(device)


def _shard(n: int, rank: int) -> list[int]:
    sampler = DistributedSampler(range(SAMPLES_PER_RANK * n), num_replicas=n, rank=rank, shuffle=True, seed=7)
    sampler.set_epoch(0)
    return list(sampler)


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def on_rank(ctx, opts: dict) -> dict:
    n, rank, dev = ctx.world_size, ctx.rank, ctx.device
    x, y = _dataset(n, dev)
    shards = [_shard(n, r) for r in range(n)]  # every rank's indices, so the reference can rebuild global batches
    mine = shards[rank]

    mark("ddp.wrap")
    model = DDP(_model(dev), device_ids=ctx.device_ids)
    with torch.no_grad():  # on the whole dataset: per-batch losses are too noisy to show learning in 12 steps
        loss_before = nn.functional.mse_loss(model.module(x), y).item()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        mark("ddp.step", step=step)
        idx = torch.tensor(mine[step * BATCH : (step + 1) * BATCH], device=dev)
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        losses.append(global_loss.item() / n)

    mark("ddp.compare")
    with torch.no_grad():
        loss_after = nn.functional.mse_loss(model.module(x), y).item()
    params = _flat(model.module)
    gathered = [torch.zeros_like(params) for _ in range(n)]
    dist.all_gather(gathered, params)
    spread = max((g - params).abs().max().item() for g in gathered)

    reference = _model(dev)  # one process, same global batches: rank 0's batch, then rank 1's, ...
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    for step in range(STEPS):
        idx = torch.tensor([i for s in shards for i in s[step * BATCH : (step + 1) * BATCH]], device=dev)
        loss = nn.functional.mse_loss(reference(x[idx]), y[idx])
        ref_opt.zero_grad(set_to_none=True)
        loss.backward()
        ref_opt.step()
    vs_single = (params - _flat(reference)).abs().max().item()

    all_indices = [i for s in shards for i in s]
    return {
        "rank": rank,
        "spread": spread,
        "vs_single": vs_single,
        "losses": losses,
        "loss_before": loss_before,
        "loss_after": loss_after,
        "shards_disjoint": len(set(all_indices)) == len(all_indices),
        "shards_cover": set(all_indices) == set(range(len(x))),
        "samples": len(mine),
    }
