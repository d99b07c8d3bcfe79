"""Every mistake `ddplab lint` knows, one per marked line (`# expect: RULE`). Linted by tests/lint/test_lint.py; never run. (Its nccl is no mistake: it needs GPUs anyway.)"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

os.environ["MASTER_ADDR"] = "localhost"  # expect: sets-master-env
os.environ["MASTER_PORT"] = "12355"  # expect: sets-master-env
os.environ["WORLD_SIZE"] = "2"  # expect: sets-rank-env
dist.init_process_group("nccl")  # expect: no-destroy
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])

x = torch.randn(1024, 8)
y = x.sum(dim=1, keepdim=True) + torch.randn(1024, 1)
dataset = TensorDataset(x, y)  # expect: unseeded-random-data
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler, shuffle=True)  # expect: shuffle-with-sampler

model = torch.nn.Linear(8, 1).cuda()  # expect: hardcoded-cuda-device
model = DDP(model)  # expect: ddp-no-device-ids
extra = torch.zeros(1).to("cuda:0")  # expect: hardcoded-cuda-device
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if os.path.exists("ckpt.pt"):
    model.module.load_state_dict(torch.load("ckpt.pt"))  # expect: load-no-map-location

for epoch in range(3):  # expect: sampler-no-set-epoch
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb.cuda(local_rank)), yb.cuda(local_rank))
        loss.backward()
        optimizer.step()
    print("epoch", epoch, "loss", loss.item())  # expect: unguarded-print
    if rank == 0:
        dist.barrier()  # expect: collective-in-rank-branch
    torch.save(model.state_dict(), "ckpt.pt")  # expect: save-ddp-state-dict unguarded-save
    if local_rank == 0:
        torch.save(model.module.state_dict(), "model.pt")  # expect: local-rank-save
