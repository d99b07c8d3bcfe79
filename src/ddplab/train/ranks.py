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
    hooks: tuple[str, ...] = (),
):
    """The agent for a training on `nproc` ranks (launcher.local.start). Its ranks are forks of the agent, which has
    imported torch, torch._dynamo and the training loop once: a new interpreter per rank spent ~3 CPU s importing them
    before its first step, and trained no faster (docs/architecture.md).
    flight: record collectives, so that a hang names the collective each rank last called (train: yes; scale, which
    times its runs: no). hooks: `module:function`s each rank calls first (train: --profile's installer)."""
    from ddplab.launcher.local import start

    return start(
        TARGET,
        nproc=nproc,
        master_port=master_port,
        max_restarts=max_restarts,
        nodes=nodes,
        flight=flight,
        env=env,
        hooks=hooks,
    )
