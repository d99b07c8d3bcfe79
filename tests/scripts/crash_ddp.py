"""Rank 1 fails loading a checkpoint saved from the DDP wrapper ("module." keys); rank 0 waits for it in a barrier.

`ddplab launch` must name rank 1 as the root cause, show its traceback and explain the "module." prefix.
"""

import io

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(2, 2))
buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)  # the mistake: the wrapper's keys, "module.weight"
if dist.get_rank() == 1:
    buffer.seek(0)
    torch.nn.Linear(2, 2).load_state_dict(torch.load(buffer, map_location="cpu"))
dist.barrier()
dist.destroy_process_group()
