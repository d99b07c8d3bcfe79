"""A plain DDP training script (no ddplab import) with one slowdown planted on purpose, for `ddplab launch --profile`.

    torchrun --nproc-per-node 2 profile_plant.py PLANT [--fixed] [--steps N]

PLANT: none | loader | rank | item | buckets | unused | nosync | threads | stats. --fixed applies the fix ddplab names for
that planting (the planting itself stays: a slow dataset gets workers; a slow rank keeps its extra work off).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group, as the template does (see its comment)
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

p = argparse.ArgumentParser()
p.add_argument("plant")
p.add_argument("--fixed", action="store_true")
p.add_argument("--clean", action="store_true", help="the planting's model and data, without the slowdown")
p.add_argument("--steps", type=int, default=14)
p.add_argument("--time-from", type=int, default=0, help="rank 0 prints the mean step ms after this step")
args = p.parse_args()
plant, fixed = ("none" if args.clean and args.plant != "loader" else args.plant), args.fixed


class Data(Dataset):
    def __init__(self, n, slow):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)
        self.slow = slow

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.slow:
            time.sleep(0.0015)  # a dataset that decodes or reads from disk per sample
        return self.x[i], self.y[i]


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if plant == "threads" and not fixed:
        torch.set_num_threads(4 * (os.cpu_count() or 1))  # more threads than this rank's share of the cores
    torch.manual_seed(0)
    shape = args.plant  # a clean run keeps its planting's model
    depth = 24 if shape in ("buckets", "unused") else 4
    width = 64 if shape in ("buckets", "unused") else 256
    layers = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    ddp = DDP(model, bucket_cap_mb=0.0001 if plant == "buckets" and not fixed else 25,
              find_unused_parameters=plant == "unused" and not fixed)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    accum = 4 if shape == "nosync" else 1
    batch = 16 if shape == "nosync" else 64
    data = Data(batch * accum * 2 * (args.steps + 2), slow=plant == "loader" and not args.clean)
    workers = 2 if plant == "loader" and fixed else 0
    loader = DataLoader(data, batch_size=batch, sampler=DistributedSampler(data, shuffle=False),
                        num_workers=workers, persistent_workers=workers > 0)
    it = iter(loader)
    ends = []
    for step in range(args.steps):
        for micro in range(accum):
            x, y = next(it)
            use_no_sync = shape == "nosync" and (fixed or args.clean) and micro < accum - 1
            ctx = ddp.no_sync() if use_no_sync else torch.enable_grad()
            with ctx:
                out = ddp(x)
                loss = nn.functional.cross_entropy(out, y) / accum
                loss.backward()
            if plant == "item" and not fixed:
                print(f"step {step} loss {loss.item():.4f} logits {out}")  # a host sync and a tensor print
        if plant == "rank" and rank == 1 and not fixed:
            a = torch.randn(384, 384)
            for _ in range(12):
                a = torch.tanh(a @ a)  # one rank doing work the others do not
        opt.step()
        opt.zero_grad(set_to_none=True)
        if plant == "stats":  # a "monitoring" habit: every parameter tensor's norm averaged over the ranks
            norms = [q.detach().norm() for q in model.parameters()]
            if fixed:
                dist.all_reduce(torch.stack(norms))  # one collective for all of them
            else:
                for norm in norms:
                    dist.all_reduce(norm)  # one tiny collective per tensor: each pays the fixed latency
        ends.append(time.perf_counter())
    if args.time_from and rank == 0:
        timed = ends[args.time_from - 1:]
        print(f"plant-step-ms {1000 * (timed[-1] - timed[0]) / (len(timed) - 1):.3f}", flush=True)
    # Leaving as `ddplab new`'s template does (its comments say why): together, DDP dropped before the group is
    # destroyed; otherwise gloo's threads can outlive the interpreter and abort the exit (SIGABRT, seen under load).
    dist.barrier()
    del ddp, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
