"""What the sanitizer's window costs a step, in one process: the template's step (`ddplab new`: a 16-feature linear
model, batch 64, SGD with momentum, a DistributedSampler, DDP on a 1-rank gloo group) with and without a sanitizer
window, alternated blocks, timed in the thread's CPU time (a shared machine's other jobs do not count in it).

    PYTHONPATH=src python benchmarks/sanitize_inprocess.py [--blocks 9] [--window 50]

What benchmarks/sanitize_overhead.py cannot see from the sanitizer's own entry points is here: the forward hooks'
cost inside PyTorch (a module with hooks leaves its fast call path). Each block runs the window's steps (--window)
and one more, plain or sanitized (every check of a CPU run but the write audit hook, which Python cannot remove and
which would stay in this process for the plain blocks too); printed: the median CPU time of a block's steps, each
variant, and the difference per step as microseconds and as a share of the plain step. The PYTHONPATH picks the
ddplab whose sanitizer is measured (a checkout of another commit, to compare).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

CHECKS = ("samebatch", "epochorder", "paramsync", "placement")


def block(torch, sanitize: bool, steps: int, checks: tuple[str, ...] = CHECKS, clock=time.thread_time) -> float:
    """CPU seconds of `steps` template steps, from the first step's start; a window of `steps` - 1 when sanitized.
    `clock` is read once before the first step and once after the last (benchmarks/sanitize_instructions.py passes
    one that turns valgrind's count on and off)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from ddplab.sanitize import rankside

    window, folder = None, tempfile.TemporaryDirectory(prefix="ddplab-sanitize-inprocess-")
    if sanitize:
        window = rankside.Window(folder.name, steps - 1, checks)
        window.attach(torch)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(4096, 16, generator=g)
    data = TensorDataset(x, x @ torch.randn(16, 1, generator=g))
    sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=1234)
    loader = DataLoader(data, batch_size=64, sampler=sampler)
    torch.manual_seed(1234)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ddp = DDP(model)
    loss_fn = torch.nn.MSELoss()
    done, epoch = 0, 0
    start = clock()
    while done < steps:
        sampler.set_epoch(epoch)
        epoch += 1
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(ddp(xb), yb).backward()
            optimizer.step()
            done += 1
            if done == steps:
                break
    spent = clock() - start
    if window is not None:  # the window closed at its last step; what lingers (a sampler's __iter__) goes now
        for observer in list(window.observers):
            observer.stop()
        window.written()  # the last record's writer thread, before its folder goes
    folder.cleanup()
    return spent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=9, help="blocks of each variant, alternated")
    p.add_argument("--window", type=int, default=50)
    args = p.parse_args()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000), RANK="0", WORLD_SIZE="1")
    import torch
    import torch.distributed as dist

    import ddplab

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    steps = args.window + 1
    for sanitize in (False, True):  # warm-up: first calls, allocator
        block(torch, sanitize, steps)
    spent: dict[bool, list[float]] = {False: [], True: []}
    for b in range(args.blocks):
        for sanitize in (False, True) if b % 2 else (True, False):
            spent[sanitize].append(block(torch, sanitize, steps))
    dist.destroy_process_group()
    plain, sanitized = (1e6 * statistics.median(spent[s]) / steps for s in (False, True))
    print(
        f"ddplab at {os.path.dirname(ddplab.__file__)}, {args.blocks} blocks of {steps} steps each (window {args.window})"
    )
    print(f"  plain      {plain:8.1f} us CPU per step  ({', '.join(f'{1e6 * v / steps:.0f}' for v in spent[False])})")
    print(
        f"  sanitized  {sanitized:8.1f} us CPU per step  ({', '.join(f'{1e6 * v / steps:.0f}' for v in spent[True])})"
    )
    print(
        f"  the window costs {sanitized - plain:+.1f} us per step, {100 * (sanitized - plain) / plain:+.2f} % of the plain step"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
