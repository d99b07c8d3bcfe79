"""The DDP example learners copy from tutorials: fit y = 2x + 1 — and the quiet mistakes it makes.

docs/guide.md runs `ddplab lint` and `ddplab launch --hang-timeout` on this file. Don't copy it: copy what
`ddplab new train.py` writes instead.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ["MASTER_ADDR"] = "localhost"  # overrides the launcher: every rank now looks for a rendezvous...
os.environ["MASTER_PORT"] = "12355"  # ...on a port that nobody serves under torchrun: init hangs forever
dist.init_process_group("gloo")
rank = dist.get_rank()

x = torch.randn(256, 1)  # unseeded: every rank trains on different data
y = 2 * x + 1
model = DDP(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"rank {rank}: loss {loss.item():.4f}")  # every rank prints
torch.save(model.state_dict(), "model.pt")  # every rank writes, with "module." in every key
