"""Rank 0 alone decides to stop (rank0-early-exit): it leaves the training loop while rank 1 goes on to the next
all_reduce and waits for it; when rank 0 exits, rank 1 fails. Plain script: python -m torch.distributed.run
--standalone --nproc-per-node 2 lint_rank0_break.py"""

from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank = dist.get_rank()
grad = torch.ones(4)
for step in range(5):
    dist.all_reduce(grad)
    if rank == 0 and step == 1:
        break  # expect: rank0-early-exit
print(f"rank {rank} left the loop after step {step}", flush=True)
dist.destroy_process_group()
