"""Hang: rank 1 is stuck loading data. Each step loads a batch and all-reduces its float32[64] gradient; at step 2
rank 1's loader stalls (a long sleep stands in for a slow disk or a dead DataLoader worker) while the other ranks
wait in all_reduce #3.
Plain script, no ddplab import:  python -m torch.distributed.run --standalone --nproc-per-node 2 hang_slow_data.py"""

import time

import torch
import torch.distributed as dist


def load_batch(rank: int, step: int) -> torch.Tensor:
    if rank == 1 and step == 2:
        print(f"rank {rank} at the hang point", flush=True)
        time.sleep(3600)
    return torch.ones(8, 64) * step


dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(5):
    grad = load_batch(rank, step).sum(0)
    if step == 2:
        print(f"rank {rank} at the hang point", flush=True)
    dist.all_reduce(grad)  # #step+1
dist.destroy_process_group()
