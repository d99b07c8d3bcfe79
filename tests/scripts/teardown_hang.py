"""A rank hung at a function's return after its work was done (docs/teardown.md, "A hang at the return"), made
certain rather than left to chance: main() holds a DDP model past destroy_process_group(), so the model's reducer
still holds the gloo group, and the group is destroyed when main() returns and frees the model, with the GIL held.
Its destructor joins the group's worker threads; rank 1's worker is waiting for the GIL to free an all-reduce's
tensor (abort_at_exit.py's rank-1 side), so neither ever moves on.
Plain script, no ddplab import:  python -m torch.distributed.run --nproc-per-node 2 teardown_hang.py [--del-first]
--del-first: the documented order (`del model`, then destroy_process_group()): the same run exits cleanly."""

import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - its default arguments would hold the group too (docs/teardown.md)
from abort_at_exit import leave_with_a_gloo_worker_busy
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(4, 1))
    model(torch.randn(2, 4)).sum().backward()
    if dist.get_rank() == 0:
        time.sleep(2)
        dist.all_reduce(torch.ones(4))  # rank 1's last collective completes here
    else:
        print("rank 1: training done", flush=True)
        leave_with_a_gloo_worker_busy()
    if "--del-first" in sys.argv:
        del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    print("left main()", flush=True)
