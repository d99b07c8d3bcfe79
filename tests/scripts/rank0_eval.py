"""Rank 0 alone evaluates through the DDP model (lint's rank0-ddp-forward): DDP broadcasts its buffers before every
forward, rank 1 never joins that broadcast and exits, and rank 0 fails with gloo's "Connection closed by peer".
Rank 0 is both the rank that failed first and the one that lost its peer (issue 32).
Plain script, no ddplab import:  python -m torch.distributed.run --nproc-per-node 2 rank0_eval.py"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.BatchNorm1d(4))  # running mean/var are buffers: broadcast from rank 0 before each forward
model(torch.randn(8, 4)).sum().backward()
if dist.get_rank() == 0:
    model(torch.randn(8, 4))  # the mistake: an evaluation through the DDP model on one rank only
dist.destroy_process_group()
