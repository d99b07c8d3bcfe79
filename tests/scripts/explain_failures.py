"""Real multi-rank failures for tests/explain/test_explain.py, made one after another in one 2-rank gloo group.

Each caught traceback is printed after a `### RULE` line. At the end rank 1 leaves the group while rank 0 is in an
all_reduce (gloo: "Connection closed by peer"), then is SIGKILLed, so that torchrun prints its failure summary with
rank 1 as the root cause. Run it with torchrun --nproc-per-node 2.
"""

import datetime
import os
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch import nn


def caught(rule, make_error, sync=True):
    try:
        make_error()
    except Exception:
        print(f"### {rule}", file=sys.stderr, flush=True)
        traceback.print_exc()
        sys.stderr.flush()
    if sync:
        dist.barrier()


def different_models():
    nn.parallel.DistributedDataParallel(nn.Linear(2, 2) if rank == 0 else nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)))


def rank1_skips_the_all_reduce():
    group = dist.new_group(timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        dist.all_reduce(torch.ones(1), group=group)


def rank1_leaves():
    if rank == 1:
        dist.destroy_process_group()
        time.sleep(2)  # rank 0 reports the closed connection before torchrun ends it
    else:
        dist.all_reduce(torch.ones(1))


dist.init_process_group("gloo")
rank = dist.get_rank()
caught("syncbn-cpu", lambda: nn.SyncBatchNorm(3).train()(torch.randn(2, 3, 4)))
caught("ddp-model-mismatch", different_models)
caught("collective-timeout", rank1_skips_the_all_reduce)
caught("peer-closed", rank1_leaves, sync=False)
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)  # rank 0: torchrun ends it once rank 1 is gone
