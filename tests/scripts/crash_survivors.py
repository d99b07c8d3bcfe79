"""Failure: rank 1 crashes before all_reduce #4 while rank 0 waits in it and rank 2 is still loading its batch.
Rank 0 then fails too, but slowly (its error handling takes a second); rank 2 goes on sleeping. torchrun ends both
as soon as it sees rank 1 exit; ddplab must first get each one's Flight Recorder record.
Plain script, no ddplab import:  python -m torch.distributed.run --standalone --nproc-per-node 3 crash_survivors.py"""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
grad = torch.ones(256)
for _ in range(3):
    dist.all_reduce(grad)  # #1-#3
print(f"rank {rank} at the failure point", flush=True)
if rank == 1:
    raise RuntimeError("rank 1 crashed before all_reduce #4")
if rank == 2:
    time.sleep(60)  # a slow data loader: this rank never reaches #4
try:
    dist.all_reduce(grad)  # #4: fails on rank 0 once rank 1 is gone
except RuntimeError:
    time.sleep(1)  # slow error handling (say, writing logs) before the error goes on
    raise
