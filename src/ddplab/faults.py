"""Testing hook: make one rank crash or hang at a named phase, so failure paths are exercised for real.

Set DDPLAB_FAULT to KIND:RANK:PHASE (several separated by commas):
    crash:1:collectives            rank 1 raises RuntimeError when it enters a phase starting with "collectives"
    hang:1:collectives.all_reduce  rank 1 sleeps forever instead of joining the all_reduce the others wait in
    exit:0:ddp                     rank 0 exits at once with code 17 (no Python exception, like a killed process)
    corrupt:1:collectives.broadcast  rank 1 feeds one wrong element into that collective (a broken transport's
                                   effect: every rank that receives it must count it as wrong)
    version:1:torch                node rank 1 reports its torch (cuda, nccl, driver) version with "+planted" to the
                                   cross-node preflight: two machines whose versions differ, on one machine
    preempt:0:step.300             the machine's notice at a known step: once rank 0 has finished optimizer step 300
                                   of a ddplab.resume loop, SIGTERM goes to the launcher (`ddplab launch`), as a
                                   spot reclaim sends it, or to the rank itself under plain torchrun
Phases are the names workers pass to ddplab.launcher.progress.mark(); `ddplab check --json` lists them per stage.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

KINDS = ("crash", "hang", "exit", "corrupt", "version", "preempt")
NOTICE_PID_VAR = "DDPLAB_NOTICE_PID"  # set by `ddplab launch` for its ranks: the process a machine's notice reaches
NOTICE_WAIT_S = 60.0  # a launcher that never passes the notice on: the run goes on, as without the fault


def parse(spec: str) -> list[tuple[str, int, str]]:
    faults = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, rest = item.partition(":")
        rank, _, phase = rest.partition(":")
        if kind not in KINDS or not rank.isdigit():
            raise ValueError(f"DDPLAB_FAULT item {item!r} is not KIND:RANK:PHASE with KIND in {', '.join(KINDS)}")
        faults.append((kind, int(rank), phase))
    return faults


def _mine(phase: str, kinds: tuple[str, ...]) -> str | None:
    spec = os.environ.get("DDPLAB_FAULT")
    if not spec:
        return None
    rank = int(os.environ.get("RANK", "0"))
    for kind, fault_rank, fault_phase in parse(spec):
        if kind in kinds and fault_rank == rank and phase.startswith(fault_phase):
            return kind
    return None


def hang_before(phase: str) -> None:
    """A hanging rank never arrives at `phase`: the others wait for it there."""
    if _mine(phase, ("hang",)):
        while True:
            time.sleep(3600)


def fail_in(phase: str) -> None:
    """A crashing rank fails inside `phase`, after it arrived."""
    kind = _mine(phase, ("crash", "exit"))
    if kind == "crash":
        raise RuntimeError(f"injected crash on rank {os.environ.get('RANK', '0')} at {phase} (DDPLAB_FAULT)")
    if kind == "exit":
        os._exit(17)


def feed(phase: str):
    """What this rank contributes to the collective at `phase` passes through the returned function: the identity,
    or, under a corrupt fault, one that adds 1 to the first element (in place) — data that is wrong, not absent."""
    if not _mine(phase, ("corrupt",)):
        return lambda tensor: tensor

    def corrupt(tensor):
        tensor.view(-1)[0] += 1
        return tensor

    return corrupt


def planted_versions(node_rank: int | None) -> set[str]:
    """The version names a `version:NODE_RANK:NAME` fault plants on this node (checks/crossnode.py)."""
    spec = os.environ.get("DDPLAB_FAULT")
    if not spec or node_rank is None:
        return set()
    return {phase for kind, rank, phase in parse(spec) if kind == "version" and rank == node_rank}


def preempt_after(step: int, noticed: Callable[[], bool]) -> None:
    """The machine's notice at a known step, whatever the machine's speed: once this rank has finished `step`, a
    `preempt:RANK:step.N` fault sends SIGTERM where a cloud's notice lands (the launcher named in DDPLAB_NOTICE_PID,
    else this rank), then holds this rank until the notice has come back to it (`noticed()`): the other ranks wait
    for it in their next collective, so every rank stops within the stop check's few steps after N, never at the
    end of a run that a fast machine finished before the signal arrived."""
    spec = os.environ.get("DDPLAB_FAULT")
    if not spec:
        return
    rank = int(os.environ.get("RANK", "0"))
    if not any(
        kind == "preempt" and fault_rank == rank and phase == f"step.{step}" for kind, fault_rank, phase in parse(spec)
    ):
        return
    target = os.environ.get(NOTICE_PID_VAR, "")
    os.kill(int(target) if target.isdigit() else os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + NOTICE_WAIT_S
    while not noticed() and time.monotonic() < deadline:
        time.sleep(0.01)  # an event (the notice's flag), polled: Python runs the handler between these sleeps
