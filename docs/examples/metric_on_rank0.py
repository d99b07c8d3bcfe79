"""A classic hang: a metric averaged with all_reduce, but only inside `if rank == 0:` (the logging branch).
Rank 0 waits in that all_reduce for a peer that never calls it; rank 1 has gone on to the barrier before saving."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
grad = torch.randn(4096)
for step in range(1, 6):
    dist.all_reduce(grad)  # stands for DDP's gradient all-reduce
if rank == 0:  # "log the mean loss", on rank 0 only
    loss = torch.tensor([0.5])
    dist.all_reduce(loss)
    print(f"loss {loss.item() / dist.get_world_size():.3f}", flush=True)
dist.barrier()  # every rank, before rank 0 saves the model
dist.destroy_process_group()
