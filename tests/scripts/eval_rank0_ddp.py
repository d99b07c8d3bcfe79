"""The classic mistake: train under DDP, then evaluate on rank 0 only through the DDP wrapper. DDP's forward
broadcasts the module's buffers (BatchNorm's running stats) from rank 0, so rank 0 starts a broadcast that rank 1,
already done and gone, never joins: on gloo rank 0 fails with "Connection closed by peer".

`ddplab launch` must name rank 0's evaluation line as the cause (not call rank 0's error a consequence of itself),
and tie it to lint's rank0-ddp-forward finding on the same line.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
model = DDP(net)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
print(f"rank {rank}: trained", flush=True)
if rank == 0:
    model.eval()
    with torch.no_grad():
        loss = model(torch.randn(16, 8)).mean().item()  # the mistake: the wrapper, on rank 0 only
    print(f"rank 0: eval {loss:.3f}", flush=True)
