"""`unreduced-metric`: a sum over this rank's batches (loss, accuracy, an AverageMeter) reported on rank 0 as the whole."""

from __future__ import annotations

from ddplab.lint import Seen
from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule
from ddplab.lint.scriptread import given_for


def _not_a_whole_loader(f, seen: Seen) -> bool:
    """Every caller hands the loop a loader its file builds without a sampler (`evaluate(model, val_loader)` with a
    plain DataLoader): each rank sums the whole set, and the number is right."""
    if f.line not in seen.checks.loader_params:
        return True
    func, param = seen.checks.loader_params[f.line]
    sites = seen.callers.sites(seen.path, func)
    return not sites or not all(
        (given := given_for(call, func, param)) is not None and seen.readers[where].built_without_sampler(given)
        for where, call in sites
    )


RULE = Rule(
    id="unreduced-metric",
    severity=BUG,
    what="a sum over this rank's batches (loss, accuracy, an AverageMeter) reported on rank 0 as the whole",
    why="rank 0 saw 1/N of the data: the number shown is not the model's",
    example="correct += (pred == y).sum().item()  # then, on rank 0: print(correct / len(ds))",
    fix="all_reduce the sums first: `t = torch.tensor([total], device=device); dist.all_reduce(t)`, then report from `t`",
    check=Checks.check_unreduced_metric,
    fires=(
        """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
model = DDP(torch.nn.Linear(2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
rank = dist.get_rank()
sampler = DistributedSampler(ds, shuffle=False)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
total = 0.0
with torch.no_grad():
    for x, y in loader:
        total += torch.nn.functional.mse_loss(model(x), y, reduction="sum").item()
if rank == 0:
    print(f"val loss {total / len(ds):.4f}")
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
model = DDP(torch.nn.Linear(2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
rank = dist.get_rank()
sampler = DistributedSampler(ds, shuffle=False)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
total = 0.0
with torch.no_grad():
    for x, y in loader:
        total += torch.nn.functional.mse_loss(model(x), y, reduction="sum").item()
t = torch.tensor([total])
dist.all_reduce(t)
if rank == 0:
    print(f"val loss {t.item() / len(ds):.4f}")
dist.destroy_process_group()
""",
        # the sums are over a loader built without a sampler (in a tuple assignment): every rank reads the whole set
        """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
model = torch.nn.Linear(2, 1)
train_loader, val_loader = DataLoader(ds, sampler=DistributedSampler(ds)), DataLoader(ds, batch_size=8)
total = 0.0
for x, y in val_loader:
    total += torch.nn.functional.mse_loss(model(x), y).item()
if dist.get_rank() == 0:
    print(f"val loss {total / len(val_loader):.4f}")
dist.destroy_process_group()
""",
        # a message built again in each pass (`message = ...`, then `message += ...`): no sum over batches
        """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
model = torch.nn.Linear(2, 1)
loader = DataLoader(ds, sampler=DistributedSampler(ds))
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    if dist.get_rank() == 0:
        message = f"step {step}"
        message += f" loss {loss.item():.4f}"
        print(message)
dist.destroy_process_group()
""",
    ),
    callers_guard=True,
    refine=_not_a_whole_loader,
)
