"""Failure: rank 1 crashes (a Python exception) while the other ranks wait in all_reduce #4. On gloo the waiting
ranks then fail too ("Connection closed by peer"): their error is a consequence, rank 1's is the cause.
Plain script, no ddplab import:  python -m torch.distributed.run --standalone --nproc-per-node 3 hang_crash.py"""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
grad = torch.ones(256)
for _ in range(3):
    dist.all_reduce(grad)  # #1-#3
print(f"rank {rank} at the hang point", flush=True)
if rank == 1:
    raise RuntimeError("rank 1 crashed before all_reduce #4")
dist.all_reduce(grad)  # #4: rank 1 never gets here
dist.destroy_process_group()
