"""Worker functions the runner tests start on real ranks (imported by the agent via PYTHONPATH=tests)."""

import os
import sys
import time

import torch
import torch.distributed as dist

import ddplab.dist as dd
from ddplab.launcher.progress import mark


def sum_ranks(payload):
    """Every rank contributes rank+1; the exact sum is n(n+1)/2."""
    with dd.session(timeout=30) as ctx:
        mark("all_reduce")
        t = torch.tensor([float(ctx.rank + 1)])
        dist.all_reduce(t)
        return {
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "local_rank": ctx.local_rank,
            "sum": t.item(),
            "backend": ctx.backend,
            "pid": os.getpid(),
            "argv": sys.argv,
        }


def slow_steps(payload):
    """Makes steady progress for a while: a long run that is not a hang."""
    with dd.session(timeout=30):
        for step in range(payload["steps"]):
            mark("step", step=step)
            time.sleep(payload["sleep"])
    return {"steps": payload["steps"]}


def listening_addresses(payload):
    """Every TCP address a process of this run listens on (the agent is this worker's parent)."""
    import psutil

    with dd.session(timeout=30) as ctx:
        mark("look")
        procs = [psutil.Process().parent(), psutil.Process()]
        addrs = sorted({c.laddr.ip for p in procs for c in p.net_connections(kind="inet") if c.status == "LISTEN"})
        dist.barrier()
        return {"rank": ctx.rank, "listening": addrs}


def steps_with_all_reduce(payload):
    """Steady collective steps; an elastic restart begins again from step 0 with a fresh group."""
    with dd.session(timeout=30) as ctx:
        total = torch.zeros(1)
        for step in range(payload["steps"]):
            mark("step", step=step)
            t = torch.tensor([float(ctx.rank + 1)])
            dist.all_reduce(t)
            total += t
            time.sleep(payload["sleep"])
        return {
            "rank": ctx.rank,
            "total": total.item(),
            "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        }


def answer_after_the_ranks(payload):
    """A fork of the agent (PendingRun.fork) that answers only once every rank's result is on disk and the caller
    has said it waits (on_wait writes payload["told"]): the run has to keep the agent for it."""
    from pathlib import Path

    results = Path(payload["run_dir"]) / "results"
    while len(list(results.glob("local*.json"))) < payload["nproc"] or not Path(payload["told"]).exists():
        time.sleep(0.01)
    return {
        "pid": os.getpid(),
        "torch_was_imported": "torch._dynamo" in sys.modules,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
    }


def refuse_in_one_line(payload):
    from ddplab.errors import DdplabError

    raise DdplabError(payload["why"])


def fail_with_a_bug(payload):
    raise ValueError("a bug\nwith a second line")


def never_answer(payload):
    while True:
        time.sleep(0.05)
