"""A gloo abort at exit after the work was done (issue #21, docs/teardown.md), made certain rather than left to chance:
rank 1's gloo worker finishes an all-reduce whose tensor only it still holds and waits for the GIL to free it; rank
1's main thread never yields the GIL (a 1000 s switch interval and a busy loop, no I/O) and then exits, so C++ aborts
it ("terminate called without an active exception", SIGABRT). What a busy machine does by chance, done on purpose.
Plain script, no ddplab import:  python -m torch.distributed.run --nproc-per-node 2 abort_at_exit.py
Its rank-1 side is also imported by rank0_collective_peer_aborts.py (torchrun puts this folder on sys.path)."""

import sys
import time

import torch
import torch.distributed as dist


def leave_with_a_gloo_worker_busy() -> None:
    """Rank 1's side: start an all-reduce, let go of its tensor, hold the GIL for 4 s, then return (and exit).
    The all-reduce completes when rank 0 joins it."""
    sys.setswitchinterval(1000)
    t = torch.ones(4)
    work = dist.all_reduce(t, async_op=True)
    del t, work
    end = time.monotonic() + 4
    while time.monotonic() < end:
        pass


if __name__ == "__main__":
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        time.sleep(2)
        dist.all_reduce(torch.ones(4))
        time.sleep(4)
    else:
        print("rank 1: training done", flush=True)  # before: writing releases the GIL, the worker could take it
        leave_with_a_gloo_worker_busy()
