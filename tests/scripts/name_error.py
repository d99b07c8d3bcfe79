"""Rank 1 calls a function nobody defined (a NameError in the user's own code); rank 0 waits for it in a barrier.
No explain rule is about a NameError: explain must still say which rank failed, the error and the line.
Plain script, no ddplab import:  python -m torch.distributed.run --nproc-per-node 2 name_error.py"""

import torch
import torch.distributed as dist


def evaluate(rank: int) -> float:
    if rank == 1:
        return compute_accuracy(torch.ones(4))  # noqa: F821 - the mistake: never defined
    return 1.0


dist.init_process_group("gloo")
evaluate(dist.get_rank())
dist.barrier()
dist.destroy_process_group()
