"""Rank 0 alone runs a collective (the mistake) while rank 1, its work done, leaves and aborts at exit
(teardown-abort, made certain by abort_at_exit.py: a gloo worker thread must free a tensor while the main thread
never yields the GIL). Rank 0 raises gloo's lost peer and is slow to leave (an atexit handler, as a logger's
final flush is), so torchrun's SIGTERM finds it leaving, and torchrun's summary names rank 1's SIGABRT first.
What a busy machine does by chance to rank0_eval.py (seen in CI), made certain (issue 32).
Plain script, no ddplab import:  python -m torch.distributed.run --nproc-per-node 2 rank0_collective_peer_aborts.py"""

import atexit
import time

import torch
import torch.distributed as dist
from abort_at_exit import leave_with_a_gloo_worker_busy

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    time.sleep(2)
    dist.all_reduce(torch.ones(4))
    atexit.register(time.sleep, 30)  # a slow exit: torchrun's SIGTERM ends it
    dist.all_reduce(torch.ones(4))  # the mistake: a collective on rank 0 only
else:
    leave_with_a_gloo_worker_busy()
