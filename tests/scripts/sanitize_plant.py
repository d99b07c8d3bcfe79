"""A plain DDP training script (no ddplab import) with DDP mistakes planted on purpose, for `ddplab launch`'s
sanitizer (tests/sanitize/). Without a mistake it is a correct script: DistributedSampler, set_epoch, DDP, rank 0
saves.

    torchrun --nproc-per-node 2 sanitize_plant.py [MISTAKE ...] [--out DIR] [--epochs N]

MISTAKE: no-sampler (every rank reads the whole data set in the same order) | rank0-sampler (DistributedSampler
given rank=0 everywhere) | no-set-epoch | module-forward (ddp.module(x)) | no-ddp | no-sync (never left) |
all-save (every rank saves the model to one path) | all-save-replace (every rank saves to one temporary file, then
renames it: all but one rank fail) | all-log (every rank appends to one log file) | all-mkdir (every rank makes one
folder without exist_ok: all but the first fail) | cycle (the steps read itertools.cycle(loader): the first epoch's
batches replayed) | cycle-moved (the same, each batch copied before its forward as xb.to('cuda') does on a GPU:
a new tensor every step) | accum-off-by-one (accumulation over 2 micro-batches, no_sync() on the one the step follows) |
late-param (a parameter added to the model after DDP() was built) | unfreeze (the first layer frozen when DDP() is
built, unfrozen after step 2).
"""

# ruff: noqa: E402 - the check below must come before the imports
import sys

# Nothing of ddplab's rank side imports a module the script has not asked for (the sanitizer watches logging once
# torch imports it): checked before this script imports anything that would.
assert "logging" not in sys.modules, "logging was imported before the script asked for it"

import argparse
import contextlib
import itertools
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group, as the template does (see its comment)
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

MISTAKES = {"no-sampler", "rank0-sampler", "no-set-epoch", "module-forward", "no-ddp", "no-sync", "all-save",
            "all-save-replace", "all-log", "all-mkdir", "cycle", "cycle-moved", "accum-off-by-one", "late-param", "unfreeze",
            "rank0-load", "rank0-load-part", "reinit"}
p = argparse.ArgumentParser()
p.add_argument("mistakes", nargs="*", help=", ".join(sorted(MISTAKES)))
p.add_argument("--out", default=".")
p.add_argument("--epochs", type=int, default=3)
args = p.parse_args()
planted = set(args.mistakes)
if planted - MISTAKES:
    p.error(f"unknown mistake {sorted(planted - MISTAKES)}: choose from {sorted(MISTAKES)}")


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    sampler = None
    if "no-sampler" in planted:
        torch.manual_seed(0)  # the same shuffle on every rank
        loader = DataLoader(data, batch_size=16, shuffle=True)
    else:
        sampler = DistributedSampler(data, num_replicas=world, rank=0 if "rank0-sampler" in planted else rank,
                                     seed=0)
        loader = DataLoader(data, batch_size=16, sampler=sampler)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    if "unfreeze" in planted:
        model[0].requires_grad_(False)
    ddp = model if "no-ddp" in planted else DDP(model)
    if "late-param" in planted:
        model.scale = nn.Parameter(torch.ones(1))  # after DDP(): its reducer never hears of it
        model.register_forward_hook(lambda module, inputs, out: out * module.scale)
    if "rank0-load" in planted and rank == 0:  # after DDP(): its start-up broadcast is over
        model.load_state_dict({k: v + 0.5 for k, v in model.state_dict().items()})
    if "rank0-load-part" in planted and rank == 0:  # a pretrained part, loaded into a layer of the wrapped model
        model[0].load_state_dict({k: v + 0.5 for k, v in model[0].state_dict().items()})
    if "reinit" in planted:  # a fresh start after DDP(), seeded per rank
        torch.manual_seed(rank)
        model[0].reset_parameters()
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    if {"cycle", "cycle-moved", "accum-off-by-one", "unfreeze"} & planted:
        steps(ddp, model, optimizer, loader, sampler)
        # the teardown below, here: this frame holds the DDP model. Deleted in steps(), it lived on in this frame
        # past destroy_process_group(), and freeing it at this function's return destroyed the group with the GIL
        # held; a gloo worker then waiting for the GIL hung the rank (docs/teardown.md, "A hang at the return")
        dist.barrier()
        del ddp
        dist.destroy_process_group()
        return
    log = open(os.path.join(args.out, "train.log"), "a") if "all-log" in planted else None
    with ddp.no_sync() if "no-sync" in planted else contextlib.nullcontext():
        for epoch in range(args.epochs):
            if sampler is not None and "no-set-epoch" not in planted:
                sampler.set_epoch(epoch)
            for xb, yb in loader:
                optimizer.zero_grad()
                out = ddp.module(xb) if "module-forward" in planted else ddp(xb)
                loss = nn.functional.mse_loss(out, yb)
                loss.backward()
                optimizer.step()
            if log is not None:
                log.write(f"rank {rank} epoch {epoch} loss {loss.item():.4f}\n")
    print(f"rank {rank}: trained, loss {loss.item():.4f}", flush=True)
    folder = os.path.join(args.out, "ckpt")
    if "all-mkdir" in planted:
        os.makedirs(folder)
    else:
        os.makedirs(folder, exist_ok=True)  # every rank, and no error: not a finding
    path = os.path.join(args.out, "model.pt")
    if "all-save-replace" in planted:
        torch.save(model.state_dict(), path + ".tmp")
        dist.barrier()  # every rank has written the temporary file: the second rename finds it gone
        os.replace(path + ".tmp", path)
    elif "all-save" in planted or rank == 0:
        torch.save(model.state_dict(), path)
    dist.barrier()  # leave together, then let go of what holds the group (docs/teardown.md)
    del ddp
    dist.destroy_process_group()


def epochs(loader, sampler):
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        yield from loader


def steps(ddp, model, optimizer, loader, sampler) -> None:
    """A loop counted in steps (cycle), or over epochs with accumulation (accum-off-by-one) or a warm-up (unfreeze)."""
    cycle = bool({"cycle", "cycle-moved"} & planted)
    if cycle:
        sampler.set_epoch(0)
        batches = itertools.cycle(loader)  # 8 batches a pass on each of 2 ranks, replayed from the 9th step on
    else:
        batches = epochs(loader, sampler)
    for i, (xb, yb) in zip(range(48 if cycle else 10**9), batches):
        if "cycle-moved" in planted:
            xb = xb.clone()  # as xb.to('cuda') is on a GPU: a new tensor, the same values
        if "unfreeze" in planted and i == 2:
            model[0].requires_grad_(True)  # DDP() was built without it: it is never averaged
        accumulate = "accum-off-by-one" in planted and i % 2 == 1  # off by one: the step follows this micro-batch
        with ddp.no_sync() if accumulate else contextlib.nullcontext():
            nn.functional.mse_loss(ddp(xb), yb).backward()
        if "accum-off-by-one" not in planted or i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
