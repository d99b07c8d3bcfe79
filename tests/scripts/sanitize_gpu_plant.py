"""Two ranks that both train on cuda:0 (the tutorial's `model.cuda()` with no set_device), gloo so that one GPU is
enough: the sanitizer's device-placement check must name them (tests/gpu/test_gpu.py)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = torch.nn.Linear(8, 8).cuda()  # the planted mistake: every rank on the current device, cuda:0
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    ddp(torch.randn(4, 8, device="cuda")).sum().backward()
    opt.step()
dist.destroy_process_group()
