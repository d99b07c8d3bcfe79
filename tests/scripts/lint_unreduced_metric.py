"""Rank 0 reports the accuracy of its own shard as the whole (unreduced-metric). Labels alternate 0, 1, 0, 1...;
the "model" always says 0: the true accuracy is 50 %, but DistributedSampler gives rank 0 the even indices (all
label 0), so rank 0 prints 100 %. Plain script: python -m torch.distributed.run --standalone --nproc-per-node 2
lint_unreduced_metric.py"""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
data = TensorDataset(torch.zeros(16, 1), torch.arange(16) % 2)
loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False))
correct = total = 0
for x, y in loader:
    predicted = torch.zeros_like(y)
    correct += (predicted == y).sum().item()
    total += y.numel()
if rank == 0:
    print(f"accuracy {100 * correct / total:.1f}%")  # expect: unreduced-metric
dist.destroy_process_group()
