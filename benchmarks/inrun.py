"""Measuring a small per-step cost within one run: whole runs on a shared machine differ by more than the cost, so the
same ranks (under torchrun) train the mlp recipe's model, data and AdamW and alternate blocks of steps with the thing
measured and without. Used by profile_overhead.py and stop_check_cost.py --in-run.

A measuring script is MLP_STEPS followed by its own code: `steps(n, after=None)` runs n steps, calls after() right
after each optimizer step, and returns each step's milliseconds (after() included). The script prints one JSON line
last; run_ranks() returns it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")

MLP_STEPS = r"""
import json, os, statistics, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.recipes import mlp

dist.init_process_group("gloo")
cfg = mlp.Config()
data = mlp.make_data(cfg)
torch.manual_seed(0)
model = DDP(mlp.make_model(cfg, data))
opt = mlp.make_optimizer(cfg, model)
x, y = data.tensors
_next = 0

def steps(n, after=None):
    global _next
    times = []
    for _ in range(n):
        start = time.perf_counter()
        lo = (_next * 32) % (len(x) - 32)
        loss = torch.nn.functional.cross_entropy(model(x[lo:lo + 32]), y[lo:lo + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if after is not None:
            after()
        times.append((time.perf_counter() - start) * 1e3)
        _next += 1
    return times
"""


def run_ranks(script: str, nproc: int = 2, env: dict | None = None) -> dict:
    """Run `script` on nproc gloo ranks under torchrun; the JSON its last stdout line holds."""
    with tempfile.TemporaryDirectory(prefix="ddplab-inrun-") as folder:
        path = Path(folder, "inrun.py")
        path.write_text(script)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": SRC, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                              str(nproc), str(path)], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"the ranks failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
