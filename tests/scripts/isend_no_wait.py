"""Rank 0 sends with dist.isend() and exits without wait(); rank 1 is still receiving (torchrun --nproc-per-node 2).

gloo on rank 1 then reports "Connection closed by peer": tests/explain/test_explain.py checks that `ddplab explain` names it
(peer-closed, whose explanation covers isend/irecv without wait()).
"""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
tensor = torch.ones(1 << 20)
if dist.get_rank() == 0:
    dist.isend(tensor, 1)  # the mistake: no .wait() before the process ends
else:
    time.sleep(1)
    dist.recv(tensor, 0)
