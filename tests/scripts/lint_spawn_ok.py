"""A script that starts its own workers with mp.spawn, as the one-node tutorials do, written the careful way:
it is its own launcher, so setting MASTER_ADDR/MASTER_PORT is its job, and its `__main__` block runs once.
`ddplab lint` must find nothing here. Linted by tests/lint/test_lint.py; never run."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    path = "wrapped.pt"
    if rank == 0:
        torch.save(model.state_dict(), path)  # the wrapper's keys, loaded back into the wrapper below
    dist.barrier()
    model.load_state_dict(torch.load(path, map_location="cpu"))
    print(f"worker {rank} of {world_size} loaded")
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = max(torch.cuda.device_count(), 2)
    print(f"starting {world_size} workers")  # the parent: one process
    mp.spawn(worker, args=(world_size,), nprocs=world_size)
