"""Issue 42 point 7: a model whose auxiliary head never reaches the loss, under DDP without
find_unused_parameters: the second step fails with "Parameter indices which did not receive grad for rank N: 2 3".
`ddplab launch` must say `aux_head.weight, aux_head.bias`."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.aux_head = nn.Linear(4, 2)  # the mistake: built, never used in forward
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
finally:
    dist.destroy_process_group()
