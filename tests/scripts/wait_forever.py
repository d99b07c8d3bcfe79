"""A rank that joins its group and then waits in a collective that never completes (rank 0 never calls it)."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 0:
    time.sleep(3600)
dist.all_reduce(torch.ones(1))
print("never", os.getpid())
