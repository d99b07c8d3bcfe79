"""A plain training script using ddplab.resume: dropout, a shuffling DistributedSampler, momentum and an LR schedule,
so an exact resume must restore every RNG, the optimizer, the scheduler and the position in the epoch.
Rank 0 appends `step loss.hex()` per step to --losses and writes the final weights' sha256 to --out.
--epoch-log: each epoch ends with an all-reduce of its loss (a summary every rank computes) and rank 0's line.
--wrap: DDP (default), DDP with a ZeroRedundancyOptimizer (each rank holds a share of the optimizer state), or FSDP2's
fully_shard (each rank holds a shard of every parameter): ddplab.resume saves the whole state in each case."""

import argparse
import hashlib
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import ddplab.dist as dd
from ddplab import resume, statedict

p = argparse.ArgumentParser()
p.add_argument("--ckpt", required=True)
p.add_argument("--losses", required=True)
p.add_argument("--out", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--every", type=int, default=0)
p.add_argument("--sleep", type=float, default=0.0, help="seconds per step: time to send a signal mid-run")
p.add_argument("--big", type=int, default=0, help="MiB of extra state: a save that takes a while")
p.add_argument("--name", default="", help="the run name ddplab.resume checks")
p.add_argument("--hidden", type=int, default=32)
p.add_argument("--wrap", choices=("ddp", "zero1", "fsdp"), default="ddp")
p.add_argument("--batch", type=int, default=16)
p.add_argument("--epoch-log", help="rank 0 appends `epoch loss.hex()`: each epoch's loss summed over the ranks")
p.add_argument("--linger-rank", type=int, default=-1, help="this rank stays on after the save on a notice")
args = p.parse_args()


def linger() -> None:
    """A rank that does not leave after the save (a slow upload, a logger's flush): the launcher names it."""
    time.sleep(600)

with dd.session() as ctx:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(512, 1, generator=g)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=ctx.world_size, rank=ctx.rank, seed=7)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, args.hidden), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 1))
    if args.big:
        model.register_buffer("ballast", torch.zeros(args.big * 2**18))
    if args.wrap == "fsdp":  # sharded before the optimizer is made: it must hold the shards
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (ctx.world_size,))
        for layer in (model[0], model[3]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    if args.wrap == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
    ckpt = resume.Checkpointer(args.ckpt, model=model, optimizer=opt, scheduler=sched, sampler=sampler,
                               every=args.every, run=args.name)
    torch.manual_seed(100 + ctx.rank) if ckpt.resumed_from is None else None  # dropout differs between ranks
    ddp = model if args.wrap == "fsdp" else DDP(model)
    try:
        for epoch in ckpt.epochs(args.epochs):
            total = torch.zeros(1)
            for xb, yb in ckpt.batches(loader):
                loss = torch.nn.functional.mse_loss(ddp(xb), yb)
                total += loss.detach()
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                if ctx.rank == 0:
                    with open(args.losses, "a") as f:
                        f.write(f"{ckpt.step + 1} {loss.item().hex()}\n")
                time.sleep(args.sleep)
                ckpt.step_done()
            if args.epoch_log:  # the epoch's end: a collective every rank must reach, then rank 0's line
                dist.all_reduce(total)
                if ctx.rank == 0:
                    with open(args.epoch_log, "a") as f:
                        f.write(f"{epoch} {total.item().hex()}\n")
    finally:  # the first line after the save and the SystemExit: a rank that stays there on purpose
        if ctx.rank == args.linger_rank and ckpt.stopped:
            linger()
    weights = statedict.full_state_dict(model)  # every rank: a sharded model is gathered
    if ctx.rank == 0:
        h = hashlib.sha256()
        for k, v in weights.items():
            if k != "ballast":  # zeros, never trained: the same weights with or without it
                h.update(v.detach().numpy().tobytes())
        with open(args.out, "w") as f:
            f.write(h.hexdigest())
    del ddp
