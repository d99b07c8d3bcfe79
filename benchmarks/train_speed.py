"""How fast is `ddplab train mlp` next to the loops people write by hand? Ratios measured side by side.

    python benchmarks/train_speed.py                 # 1 and 2 CPU ranks, 3 alternating rounds
    python benchmarks/train_speed.py --rounds 5 --epochs 10 --nproc 1,2

Three programs train the same model (the mlp recipe's: 64 -> 256 -> 256 -> 10, AdamW) on the same 20000 samples,
batch 32 per rank, for the same number of epochs, each started the same way (ddplab.launcher, PyTorch's elastic
launcher, OMP_NUM_THREADS=1):
  ddplab  `ddplab train mlp --nproc N --json` (the real command, as a user runs it)
  (a)     the tutorial loop: DataLoader over a TensorDataset with a DistributedSampler (per-sample collate)
  (b)     a hand-written DDP loop with index batching (the least a careful person would write)
Each reports samples/s over its training loop alone (process start-up and data generation excluded), timed the
same way: from the end of the 3rd step (warm-up) to the end of the last, the slowest rank's time. The variants
alternate within each round, in a rotating order, so that the machine's background load falls on all of them
alike. Printed: the medians, the best round of each (on a shared machine the least disturbed one), and the median
of the per-round ratios (the three runs of a round ran back to back, under about the same load).
Targets (issue #4): ddplab >= 0.98x (b) at every world size, >= 1.3x (a) at 1 rank.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARMUP_STEPS = 3  # timed after these, as ddplab.train.loop times its samples/s


# ----------------------------------------------------------------------------------------------- the loops


def _setup(payload: dict):
    import torch

    import ddplab.dist as dd
    from ddplab.recipes import mlp

    ctx = dd.init()
    cfg = mlp.Config(epochs=payload["epochs"], batch_size=payload["batch_size"])
    x, y = mlp.make_data(cfg).tensors
    torch.manual_seed(cfg.seed)
    model = mlp.make_model(cfg, None)
    return ctx, cfg, x, y, model, mlp


def seed_style_loop(payload: dict) -> dict:
    """(a) The tutorial loop: a DataLoader builds every batch sample by sample, then collates."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import ddplab.dist as dd

    ctx, cfg, x, y, model, mlp = _setup(payload)
    ddp = DDP(model)
    optimizer = mlp.make_optimizer(cfg, model)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)
    steps, start = 0, time.perf_counter()
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(ddp(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == WARMUP_STEPS:
                start = time.perf_counter()
    seconds = time.perf_counter() - start
    dd.shutdown()
    return {"seconds": seconds, "samples": (steps - WARMUP_STEPS) * cfg.batch_size * ctx.world_size}


def raw_loop(payload: dict) -> dict:
    """(b) A hand-written DDP loop that batches by indexing the in-memory tensors."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DistributedSampler

    import ddplab.dist as dd

    ctx, cfg, x, y, model, mlp = _setup(payload)
    ddp = DDP(model)
    optimizer = mlp.make_optimizer(cfg, model)
    sampler = DistributedSampler(range(len(x)), shuffle=True, seed=cfg.seed, drop_last=True)
    batch = cfg.batch_size
    steps, start = 0, time.perf_counter()
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        for i in range(len(order) // batch):
            idx = order[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(ddp(x[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == WARMUP_STEPS:
                start = time.perf_counter()
    seconds = time.perf_counter() - start
    dd.shutdown()
    return {"seconds": seconds, "samples": (steps - WARMUP_STEPS) * batch * ctx.world_size}


# ----------------------------------------------------------------------------------------------- the harness


def run_ddplab(nproc: int, epochs: int, batch: int) -> float:
    ran = subprocess.run([sys.executable, "-m", "ddplab", "train", "mlp", "--nproc", str(nproc), "--epochs",
                          str(epochs), "--batch-size", str(batch), "--json"], capture_output=True, text=True,
                         timeout=900)
    if ran.returncode != 0:
        raise SystemExit(f"ddplab train failed:\n{ran.stderr[-2000:]}")
    return json.loads(ran.stdout)["samples_per_sec"]


def run_loop(name: str, nproc: int, epochs: int, batch: int) -> float:
    from ddplab.launcher import local

    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    out = local.run(f"train_speed:{name}", {"epochs": epochs, "batch_size": batch}, nproc=nproc,
                     env={"PYTHONPATH": path}, stall_timeout=300)
    if not out.ok:
        raise SystemExit(f"{name} failed: {out.summary()}")
    results = out.results()
    return results[0]["samples"] / max(r["seconds"] for r in results)  # the slowest rank, as ddplab reports


VARIANTS = {"ddplab": lambda n, e, b: run_ddplab(n, e, b),
            "(a) DataLoader": lambda n, e, b: run_loop("seed_style_loop", n, e, b),
            "(b) raw index": lambda n, e, b: run_loop("raw_loop", n, e, b)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", default="1,2", help="world sizes, comma-separated (default 1,2)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--epochs", type=int, default=8, help="epochs per run: several seconds of training")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank (default 32, as in the issue)")
    parser.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nproc.split(",")]
    names = list(VARIANTS)
    runs: dict = {n: {v: [] for v in names} for n in sizes}
    loads = []
    for rnd in range(args.rounds):
        for n in sizes:
            order = names[rnd % len(names):] + names[:rnd % len(names)]  # rotate: no variant always goes first
            for name in order:
                loads.append(os.getloadavg()[0])
                value = VARIANTS[name](n, args.epochs, args.batch_size)
                runs[n][name].append(value)
                print(f"round {rnd + 1} nproc {n} {name:15s} {value:10,.0f} samples/s  (load {loads[-1]:.1f})",
                      file=sys.stderr, flush=True)

    print(f"\nmlp, batch {args.batch_size}/rank, {args.epochs} epochs x 20000 samples, {args.rounds} rounds; "
          f"1-min load average during the runs: {min(loads):.1f}..{max(loads):.1f} on {os.cpu_count()} CPUs")
    print("samples/s: median of the rounds, and the best round (least disturbed by other work on the machine)")
    print(f"{'nproc':>5} {'':6} {'ddplab':>10} {'(a)':>10} {'(b)':>10} {'ddplab/(a)':>11} {'ddplab/(b)':>11}")
    summary = {}
    for n in sizes:
        summary[n] = {}
        for label, pick in (("median", statistics.median), ("best", max)):
            val = {v: pick(runs[n][v]) for v in names}
            ra, rb = val["ddplab"] / val["(a) DataLoader"], val["ddplab"] / val["(b) raw index"]
            summary[n][label] = {"samples_per_sec": val, "ddplab_over_a": ra, "ddplab_over_b": rb}
            print(f"{n:>5} {label:6} {val['ddplab']:>10,.0f} {val['(a) DataLoader']:>10,.0f} "
                  f"{val['(b) raw index']:>10,.0f} {ra:>10.2f}x {rb:>10.2f}x")
        # The three runs of a round ran back to back under about the same load: their ratio is the fairest pair.
        pa = statistics.median(d / a for d, a in zip(runs[n]["ddplab"], runs[n]["(a) DataLoader"]))
        pb = statistics.median(d / b for d, b in zip(runs[n]["ddplab"], runs[n]["(b) raw index"]))
        summary[n]["paired"] = {"ddplab_over_a": pa, "ddplab_over_b": pb}
        print(f"{n:>5} {'paired':6} {'':>10} {'':>10} {'':>10} {pa:>10.2f}x {pb:>10.2f}x   "
              "(median of per-round ratios)")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "summary": summary, "load": loads}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
