"""A correct little DDP training (gloo on CPU, nccl on GPUs): `ddplab launch` runs it in tests; it lints clean."""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init: imported later, it would hold the group past its destroy
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 4, generator=g)
        dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=0)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(4, 1).to(device), device_ids=[local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for xb, yb in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
                loss.backward()
                optimizer.step()
        print(f"rank {rank}/{world_size}: trained, loss {loss.item():.4f}", flush=True)
        if rank == 0 and len(sys.argv) > 1:
            torch.save(model.module.state_dict(), sys.argv[1])
        dist.barrier()  # leave together, then let go of what holds the group (docs/teardown.md)
        del model, optimizer
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
