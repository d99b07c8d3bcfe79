"""mlp: classify synthetic data with a multi-layer perceptron and DDP — the throughput workload.

Run it (both give the same result):

    ddplab train mlp --nproc 2
    torchrun --nproc-per-node 2 -m ddplab.recipes.mlp

    ddplab train mlp --nproc 2 --hidden 512 --layers 3           # a bigger model: more compute per all-reduce
    ddplab train mlp --nproc 2 --grad-accum 4                    # 4 micro-batches per all-reduce
    ddplab train mlp --nproc 2 --amp bf16                        # bf16 autocast (CPU or GPU)
    ddplab train mlp --nproc 1 --device cuda --amp fp16          # fp16 with a GradScaler (GPU)
    ddplab train mlp --help

What to look at: samples/s at 1 and at 2 ranks, and the "comm wait ms" column. On CPU ranks (gloo) a small
model spends most of each step waiting for the gradient all-reduce, so 2 ranks can be slower than 1; a larger
--batch-size or --grad-accum moves the balance back to compute. `benchmarks/train_speed.py` measures this loop
against a tutorial DataLoader loop and a hand-written one (docs/train.md has the figures).
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
    samples: int = opt(20000, "training samples; about 300 steps per epoch at 2 ranks x 32: long enough to time")
    in_features: int = opt(64, "input width", shape=True)
    hidden: int = opt(256, "hidden width: ~85k parameters in all, a 340 KB gradient all-reduce", shape=True)
    layers: int = opt(2, "hidden layers", shape=True)
    classes: int = opt(10, "output classes", shape=True)


def make_data(cfg: Config) -> TensorData:
    # Labels come from a fixed random linear "teacher" plus noise: learnable, but not trivially.
    # One generator seeded with cfg.seed gives every rank the same dataset.
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.samples, cfg.in_features, generator=g)
    teacher = torch.randn(cfg.in_features, cfg.classes, generator=g)
    y = (x @ teacher + 0.5 * torch.randn(cfg.samples, cfg.classes, generator=g)).argmax(dim=1)
    return TensorData(x, y)


def make_model(cfg: Config, data: TensorData) -> nn.Module:
    layers, width = [], cfg.in_features
    for _ in range(cfg.layers):
        layers += [nn.Linear(width, cfg.hidden), nn.ReLU()]
        width = cfg.hidden
    return nn.Sequential(*layers, nn.Linear(width, cfg.classes))


def make_optimizer(cfg: Config, model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr)


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def summary(cfg: Config, model: nn.Module, data: TensorData) -> dict:
    x, y = (t.to(next(model.parameters()).device) for t in data.tensors)
    return {"accuracy": (model(x).argmax(dim=1) == y).float().mean().item()}


RECIPE = Recipe(
    name="mlp", config=Config, data=make_data, model=make_model, optimizer=make_optimizer, loss=loss_fn, summary=summary
)

if __name__ == "__main__":
    sys.exit(RECIPE.main())
