"""A healthy run that prints nothing for a long while, in two phases a hang watchdog must both let run: every rank
first computes without printing (busy CPU, no collective), then all-reduces a large tensor over and over (py-spy
finds the ranks inside all_reduce at most looks, always at the same line; only the Flight Recorder's sequence
numbers show that they move on). argv: the busy seconds, then the collectives' seconds."""

import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()}: started", flush=True)
busy_s, collectives_s = float(sys.argv[1]), float(sys.argv[2])

x, end = torch.randn(64, 64), time.monotonic() + busy_s
while time.monotonic() < end:  # silent, busy work
    x = torch.tanh(x @ x)
dist.all_reduce(x)

x, end, n = torch.ones(4_000_000), time.monotonic() + collectives_s, 0
while True:
    dist.all_reduce(x)  # silent, and most of the loop's time
    x.fill_(1.0)
    n += 1
    stop = torch.tensor([int(time.monotonic() > end)])
    dist.broadcast(stop, src=0)  # rank 0's clock decides for all: every rank makes the same calls
    if stop.item():
        break
print(f"rank {dist.get_rank()}: done after {n} all_reduce", flush=True)
dist.destroy_process_group()
