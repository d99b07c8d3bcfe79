"""In-memory datasets and this rank's share of them, batched by indexing tensors.

The tutorial loop wraps tensors in a TensorDataset and a DataLoader: every batch is then built sample by sample
(32 __getitem__ calls and a collate that stacks them), which costs as much as the forward pass of a small model.
Data that already sits in memory as tensors needs none of that: `tensor[indices]` builds the batch in one call.
DistributedSampler still decides which indices each rank gets, so every rank sees a disjoint shard, reshuffled
each epoch by set_epoch().
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.data import DistributedSampler

Batch = tuple[Tensor, ...]


class TensorData:
    """A dataset held as tensors; sample i is row i of each, unless `take` builds batches another way."""

    def __init__(
        self,
        *tensors: Tensor,
        size: int | None = None,
        take: Callable[[tuple[Tensor, ...], Tensor], Batch] | None = None,
        info: dict | None = None,
    ):
        self.tensors = tensors
        self.size = len(tensors[0]) if size is None else size
        self._take = take
        self.info = info or {}  # what the model must know about the data (the gpt vocabulary, say)

    def __len__(self) -> int:
        return self.size

    def to(self, device: torch.device) -> TensorData:
        return TensorData(*(t.to(device) for t in self.tensors), size=self.size, take=self._take, info=self.info)

    def take(self, indices: Tensor) -> Batch:
        if self._take is not None:
            return self._take(self.tensors, indices)
        return tuple(t[indices] for t in self.tensors)


class ShardedBatches:
    """This rank's batches of one epoch: batch i holds samples [i*B, (i+1)*B) of the rank's shard.

    Samples that would leave ranks with unequal shards are dropped (drop_last), so every rank runs the same number
    of steps: a rank with one extra batch would wait forever in an all-reduce the others never join.
    """

    def __init__(self, data: TensorData, batch_size: int, rank: int, world_size: int, seed: int):
        self.data = data
        self.batch_size = batch_size
        self.sampler = DistributedSampler(
            range(len(data)), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        self.order: Tensor | None = None

    def __len__(self) -> int:
        return self.sampler.num_samples // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """A new shuffle, the same on every rank, so the shards stay disjoint (skip this and each epoch repeats)."""
        self.sampler.set_epoch(epoch)
        device = self.data.tensors[0].device
        self.order = torch.tensor(list(self.sampler), dtype=torch.long, device=device)

    def __getitem__(self, i: int) -> Batch:
        return self.data.take(self.order[i * self.batch_size : (i + 1) * self.batch_size])
