"""Hang: the last rank skips a collective. Every rank all-reduces three times and joins a broadcast (#4); then
ranks 0..N-2 call all_reduce #5 and the last rank never does: it goes on to other work (a sleep stands in for it).
Plain script, no ddplab import:  python -m torch.distributed.run --standalone --nproc-per-node 3 hang_skip.py"""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
grad = torch.ones(1024)
for _ in range(3):
    dist.all_reduce(grad)  # #1-#3
dist.broadcast(torch.zeros(10, dtype=torch.int64), src=0)  # #4
print(f"rank {rank} at the hang point", flush=True)
if rank != world - 1:
    dist.all_reduce(grad)  # #5: the last rank never calls it
time.sleep(3600)
