"""A healthy long step: after one print, every rank computes for a while without printing, then all_reduces and
finishes. Silence alone is no hang: the watchdog must see the busy CPU and let it run."""

import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()}: started", flush=True)
seconds = float(sys.argv[1])
x, end = torch.randn(64, 64), time.monotonic() + seconds
while time.monotonic() < end:  # silent, busy work
    x = torch.tanh(x @ x)
dist.all_reduce(x)
print(f"rank {dist.get_rank()}: done", flush=True)
dist.destroy_process_group()
