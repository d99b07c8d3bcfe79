"""Hang: two ranks call different collectives. After three matching all_reduces, rank 0 calls all_reduce #4 on a
float32[1024] while rank 1 calls broadcast #4 on a float32[10] (code paths that diverged on a rank-dependent test).
Plain script, no ddplab import:  python -m torch.distributed.run --standalone --nproc-per-node 2 hang_ops.py"""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for _ in range(3):
    dist.all_reduce(torch.ones(1024))  # #1-#3
print(f"rank {rank} at the hang point", flush=True)
if rank == 0:
    dist.all_reduce(torch.ones(1024))  # #4
else:
    dist.broadcast(torch.zeros(10), src=0)  # #4, a different op
time.sleep(3600)
