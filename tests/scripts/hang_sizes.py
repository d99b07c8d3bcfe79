"""Failure: two ranks all-reduce tensors of different sizes. At all_reduce #4 rank 0 passes float32[1024] and rank 1
float32[10]; gloo aborts ("Received data size doesn't match expected size") rather than hang.
Plain script, no ddplab import:  python -m torch.distributed.run --standalone --nproc-per-node 2 hang_sizes.py"""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for _ in range(3):
    dist.all_reduce(torch.ones(1024))  # #1-#3
print(f"rank {rank} at the hang point", flush=True)
dist.all_reduce(torch.ones(1024 if rank == 0 else 10))  # #4: sizes differ
dist.destroy_process_group()
