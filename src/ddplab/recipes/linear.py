"""linear: fit y = 2x + 1 + noise with DDP — the tutorial example, done right.

Run it (both give the same result, printed at the end: weight ~2, bias ~1, and a table of what each rank did):

    ddplab train linear --nproc 2
    torchrun --nproc-per-node 2 -m ddplab.recipes.linear

    ddplab train linear --nproc 2 --json                       # the result as JSON (samples_per_sec, weight, bias)
    ddplab train linear --nproc 2 --checkpoint-dir runs/lin    # checkpoints, metrics.jsonl and model.pt there
    ddplab train linear --nproc 2 --checkpoint-dir runs/lin --resume --epochs 8   # continue it
    ddplab train linear --help                                  # every flag with its default and why

What the usual tutorial gets wrong, and where this differs:
- every rank generates its own unseeded data: here one seeded generator gives every rank the same dataset,
  and DistributedSampler gives each rank its own disjoint shard of it (make_data);
- MASTER_PORT is set inside the script: here the launcher owns it (ddplab.dist reads it, never writes it);
- rank 0 saves DDP's "module."-prefixed state_dict: here model.pt loads into a plain nn.Linear as it is;
- nothing shows that the second rank worked: here every rank's samples, steps and timings are printed, and
  the parameters are compared across ranks.
The loop itself is ddplab/train/loop.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ddplab.train.config import TrainConfig, opt
from ddplab.train.data import TensorData
from ddplab.train.loop import Recipe


@dataclass
class Config(TrainConfig):
    samples: int = opt(4096, "training points; enough that the noise averages out to well within 0.05")
    noise: float = opt(0.1, "standard deviation of the noise added to 2x + 1")
    epochs: int = opt(5, "passes over the data; a few hundred steps: plenty for a convex problem")
    lr: float = opt(0.1, "learning rate; plain SGD on a convex loss takes large steps safely")


def make_data(cfg: Config) -> TensorData:
    # One generator seeded with cfg.seed: every rank builds the same dataset, so the shards never overlap.
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.rand(cfg.samples, 1, generator=g) * 2 - 1
    y = 2 * x + 1 + cfg.noise * torch.randn(cfg.samples, 1, generator=g)
    return TensorData(x, y)


def make_model(cfg: Config, data: TensorData) -> nn.Module:
    return nn.Linear(1, 1)


def make_optimizer(cfg: Config, model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=cfg.lr)


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x), y)


def summary(cfg: Config, model: nn.Module, data: TensorData) -> dict:
    return {"weight": model.weight.item(), "bias": model.bias.item()}


RECIPE = Recipe(
    name="linear",
    config=Config,
    data=make_data,
    model=make_model,
    optimizer=make_optimizer,
    loss=loss_fn,
    summary=summary,
)

if __name__ == "__main__":
    sys.exit(RECIPE.main())
