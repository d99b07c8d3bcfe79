"""What every rank runs for `ddplab check`: join the group, then each asked-for stage in order.

Each stage's per-rank result is both returned at the end and announced as it completes (a `mark` event), so the CLI
can report the stages that finished even when a later one crashes or hangs.
"""

from __future__ import annotations

import time

from ddplab import dist as dd
from ddplab.checks import WORKER_STAGES, stage_module
from ddplab.launcher.progress import mark

# Imported here, not on first use: the agent imports this module once before it forks the ranks, so they start with
# the stages already loaded. (The CLI imports only the stage it summarizes.)
STAGES = [stage_module(name) for name in WORKER_STAGES]


def run_stages(payload: dict) -> dict:
    with dd.session(backend=payload["backend"], device=payload["device"], timeout=payload["pg_timeout"]) as ctx:
        out = {}
        for name in payload["stages"]:
            start = time.perf_counter()
            result = stage_module(name).on_rank(ctx, payload)
            out[name] = {"seconds": time.perf_counter() - start, "result": result}
            mark(f"{name}.done", stage=name, **out[name])
        mark("shutdown")
    return out
