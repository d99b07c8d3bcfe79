"""The helper module of sanitize_styles.py: a Trainer class configured by a dict, as many projects write it. Its
mistakes are planted by the config, never by a branch named after a mistake: `sampler` off (every rank reads the
whole data set, shuffled alike by the same `shuffle_seed`) and `save_on` "every" (each rank saves the checkpoint)."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

CONFIG = {"epochs": 2, "batch_size": 16, "lr": 0.05, "sampler": True, "shuffle_seed": 0, "save_on": "rank0"}


class Trainer:
    def __init__(self, config: dict, rank: int, world: int, out: str):
        self.config, self.rank, self.out = config, rank, out
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 8, generator=g)
        data = TensorDataset(x, x.sum(dim=1, keepdim=True))
        if config["sampler"]:
            self.sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=config["shuffle_seed"])
            self.loader = DataLoader(data, batch_size=config["batch_size"], sampler=self.sampler)
        else:
            self.sampler = None
            shuffle = torch.Generator().manual_seed(config["shuffle_seed"])
            self.loader = DataLoader(data, batch_size=config["batch_size"], shuffle=True, generator=shuffle)
        torch.manual_seed(0)
        self.model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config["lr"])

    def fit(self) -> float:
        for epoch in range(self.config["epochs"]):
            if self.sampler is not None:
                self.sampler.set_epoch(epoch)
            for xb, yb in self.loader:
                self.optimizer.zero_grad()
                loss = nn.functional.mse_loss(self.model(xb), yb)
                loss.backward()
                self.optimizer.step()
        self.save()
        return loss.item()

    def save(self) -> None:
        if self.config["save_on"] == "every" or self.rank == 0:
            torch.save(self.model.module.state_dict(), os.path.join(self.out, "checkpoint.pt"))
        dist.barrier()
