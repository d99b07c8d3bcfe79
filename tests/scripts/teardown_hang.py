"""A rank hung at a function's return after its work was done (docs/teardown.md, "A hang at the return"), made
certain rather than left to chance: main() holds a DDP model past destroy_process_group(), so the model's reducer
still holds the gloo group, and the group is destroyed when main() returns and frees the model, with the GIL held.
Its destructor joins the group's worker threads. Rank 1's worker is then waiting for the GIL to free an all-reduce's
tensor: after destroy_process_group(), rank 1 starts an all-reduce on the group (still alive), lets go of its tensor
and holds the GIL, busy and with no call that would release it, until main() returns; rank 0 joins the all-reduce
2 s in. Whenever it completes, the worker must take the GIL to free the tensor, and the main thread holds it.
Plain script, no ddplab import:  python -m torch.distributed.run --nproc-per-node 2 teardown_hang.py [--del-first]
--del-first: the documented order (`del model`, then destroy_process_group()): the same run exits cleanly."""

import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - its default arguments would hold the group too (docs/teardown.md)
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(4, 1))
    model(torch.randn(2, 4)).sum().backward()
    # a line once the model is built: DDP() imports torch._dynamo on first use, seconds on a busy machine, and a
    # watchdog with a short timeout must count its silence from here
    print(f"rank {rank}: model built", flush=True)
    group = dist.distributed_c10d._get_default_group()  # the C++ group itself, usable after destroy
    if "--del-first" in sys.argv:
        del model
    dist.destroy_process_group()
    if rank == 0:
        time.sleep(2)
        group.allreduce([torch.ones(4)]).wait()
        del group
        return
    print("rank 1: training done", flush=True)
    sys.setswitchinterval(1000)
    t = torch.ones(4)
    work = group.allreduce([t])
    del t, work, group  # the worker's references are the last ones now
    end = time.monotonic() + 10
    while time.monotonic() < end:  # no I/O, no call into torch: the GIL is never released
        pass


if __name__ == "__main__":
    main()
    print("left main()", flush=True)
