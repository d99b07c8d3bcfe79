"""Two ranks all-reduce tensors of different sizes on gloo (run with torchrun --nproc-per-node 2).

The rank that receives more bytes than it expects aborts (C++ `terminate called ... what(): ... Received data size
doesn't match expected size`, exit -6); the other reports a reset connection: a consequence. tests/explain/test_explain.py
checks that `ddplab explain` names the mismatch as the root cause.
"""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.all_reduce(torch.ones(1000 if rank == 1 else 10))
dist.destroy_process_group()
