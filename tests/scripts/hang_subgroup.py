"""Hang inside a subgroup: ranks 0 and 1 share a group (new_group([0, 1])); rank 1 skips its all_reduce #2 there and
goes on to other work, so rank 0 waits in that subgroup while rank 2 waits for both in a default-group barrier.
Plain script, no ddplab import:  python -m torch.distributed.run --standalone --nproc-per-node 3 hang_subgroup.py"""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
pair = dist.new_group([0, 1])
dist.all_reduce(torch.ones(16))  # default group #1
if rank in (0, 1):
    dist.all_reduce(torch.ones(32), group=pair)  # pair #1
print(f"rank {rank} at the hang point", flush=True)
if rank == 0:
    dist.all_reduce(torch.ones(32), group=pair)  # pair #2: rank 1 never calls it
elif rank == 2:
    dist.barrier()  # default group #2: ranks 0 and 1 never get there
time.sleep(3600)
