"""Starting a training's ranks: what `ddplab train` and `ddplab scale` both run, the same way."""

from __future__ import annotations

TARGET = "ddplab.train.loop:run_worker"


def start_ranks(
    nproc: int,
    master_port: int | None = None,
    max_restarts: int = 0,
    nodes=None,
    flight: bool = False,
    env: dict | None = None,
):
    """The agent for a training on `nproc` ranks (launcher.local.start). Its ranks are new interpreters, as torchrun
    starts a recipe's: forked ones trained ~6 % slower than `torchrun -m ddplab.recipes.NAME` (docs/architecture.md).
    flight: record collectives, so that a hang names the collective each rank last called (train: yes; scale, which
    times its runs: no)."""
    from ddplab.launcher.local import start

    return start(
        TARGET,
        nproc=nproc,
        master_port=master_port,
        max_restarts=max_restarts,
        nodes=nodes,
        fresh_workers=True,
        flight=flight,
        env=env,
    )
