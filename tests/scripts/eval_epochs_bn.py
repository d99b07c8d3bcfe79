"""Issue 42 point 6: each epoch ends with an evaluation on rank 0 through the DDP wrapper of a model with BatchNorm.
DDP's forward broadcasts the buffers, so rank 0's evaluation broadcast pairs with rank 1's next training broadcast
(same op, same sizes; DDP then skips the broadcast of rank 0's next training forward, which follows a no_grad one):
no error, nothing out of step in the ranks' records, until the end, when rank 0's last evaluation broadcast has no
partner and rank 1 waits in the final barrier. Steps per epoch: argv[1] (default 4), epochs: argv[2] (default 3)."""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps, epochs = (int(a) for a in (sys.argv[1:] + ["4", "3"])[:2])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(epochs):
    model.train()
    for step in range(steps):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if rank == 0:
        model.eval()
        with torch.no_grad():
            loss = model(torch.randn(16, 8)).mean().item()  # the mistake: the wrapper, on rank 0 only
        print(f"epoch {epoch + 1}: eval {loss:.3f}", flush=True)
dist.barrier()
dist.destroy_process_group()
