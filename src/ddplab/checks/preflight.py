"""preflight: what can be known to go wrong before a single worker starts.

Each finding is ok, warn or fail; one fail fails the stage and nothing is launched. `ddplab launch` runs the same
checks before starting a user's script.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import psutil

from ddplab import envinfo
from ddplab.checks import FAIL, PASS, StageResult
from ddplab.errors import DdplabError
from ddplab.ports import free_port, port_is_free

GPU_ID = re.compile(r"^(\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+)$")


@dataclass
class Finding:
    level: str  # ok | warn | fail
    what: str
    fix: str = ""


def _devices(nproc: int, device: str, backend: str) -> Finding:
    if device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        if nproc > gpus:
            return Finding("fail", f"{nproc} ranks but {gpus} visible GPU(s): two ranks would share a GPU "
                                   f"({backend} fails with 'Duplicate GPU detected')", f"use --nproc {gpus}")
        return Finding("ok", f"{nproc} rank(s) on {gpus} GPU(s)")
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    if nproc > cores:
        return Finding("warn", f"{nproc} ranks on {cores} CPU core(s): ranks will wait for each other's cores, "
                               "timings are pessimistic", f"use --nproc {cores} for timings that mean something")
    return Finding("ok", f"{nproc} simulated device(s) (CPU processes) on {cores} cores")


def port_finding(master_port: int | None, nodes=None) -> tuple[Finding, int | None]:
    """Checked first, without torch: the agent can start on this port while the rest of preflight runs."""
    if nodes is not None:  # Nodes.parse already refused a busy port on node 0
        host = "this node hosts it" if nodes.rank == 0 else f"this node is {nodes.local_addr}"
        return Finding("ok", f"node {nodes.rank}/{nodes.count}: c10d rendezvous on {nodes.host}:{nodes.port} "
                             f"({host}; unauthenticated: private network only)"), nodes.port
    if master_port is None:
        port = free_port()
        return Finding("ok", f"rendezvous on 127.0.0.1:{port} (a free port)"), port
    if not port_is_free(master_port):
        return Finding("fail", f"--master-port {master_port} is already in use on 127.0.0.1 (EADDRINUSE)",
                       "pass another port, or omit --master-port and ddplab picks a free one"), None
    return Finding("ok", f"rendezvous on 127.0.0.1:{master_port}"), master_port


def _shm(backend: str) -> Finding | None:
    shm = envinfo.shm_mb()
    if backend != "nccl" or shm is None:
        return None
    if shm < envinfo.MIN_SHM_MB:
        return Finding("warn", f"/dev/shm is {shm} MiB: NCCL's shared-memory transport may fail with "
                               "'unhandled system error'", "docker run --shm-size=2g (or --ipc=host)")
    return Finding("ok", f"/dev/shm {shm} MiB")


def _visible_devices(device: str) -> Finding | None:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    ids = [x.strip() for x in raw.split(",")] if raw.strip() else []
    if not ids and device == "cuda":
        return Finding("fail", "CUDA_VISIBLE_DEVICES is empty: it hides every GPU", "unset it, or list GPU indices")
    bad = [x for x in ids if not GPU_ID.match(x)]
    if bad:
        return Finding("fail", f"CUDA_VISIBLE_DEVICES={raw!r} has entries that are not GPU indices or UUIDs: {bad}",
                       "use a comma-separated list such as 0,1")
    if len(set(ids)) != len(ids):
        return Finding("fail", f"CUDA_VISIBLE_DEVICES={raw!r} lists a GPU twice: two ranks would share it",
                       "list each GPU once")
    return Finding("ok", f"CUDA_VISIBLE_DEVICES={raw}")


def _threads(nproc: int) -> Finding:
    raw = os.environ.get("OMP_NUM_THREADS")
    if raw is None:
        return Finding("ok", "1 OpenMP thread per rank (as torchrun sets)")
    if not raw.isdigit() or int(raw) < 1:
        return Finding("fail", f"OMP_NUM_THREADS={raw!r} is not a positive integer", "unset it or set it to 1")
    cores = psutil.cpu_count() or 1
    if nproc * int(raw) > cores:
        return Finding("warn", f"OMP_NUM_THREADS={raw} × {nproc} ranks > {cores} logical cores: oversubscribed",
                       f"set OMP_NUM_THREADS={max(1, cores // nproc)}")
    return Finding("ok", f"OMP_NUM_THREADS={raw}")


def _launcher_leftovers() -> Finding | None:
    from ddplab import dist as ddist

    set_here = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if v in os.environ]
    if not set_here:
        return None
    try:
        ddist.read_launcher_env()
    except DdplabError as e:
        return Finding("warn", f"this shell exports a broken launcher variable: {e}",
                       f"unset {' '.join(set_here)} (launchers set them per process)")
    return Finding("warn", f"this shell exports {', '.join(set_here)}: ddplab's ranks get their own, "
                           "but a script started by hand would read these", f"unset {' '.join(set_here)}")


def environment_findings(nproc: int, device: str, backend: str, ranks_vs_devices: bool = True) -> list[Finding]:
    """Ranks vs devices, shared memory, CUDA_VISIBLE_DEVICES, threads, launcher variables left in the shell:
    everything but the port (`ddplab launch` checks the same before starting a script)."""
    found = (_devices(nproc, device, backend) if ranks_vs_devices else None, _shm(backend),
             _visible_devices(device), _threads(nproc), _launcher_leftovers())
    return [f for f in found if f is not None]


def run(nproc: int, device: str, backend: str, port: Finding) -> StageResult:
    start = time.perf_counter()
    findings = [port, *environment_findings(nproc, device, backend)]
    findings.append(Finding("ok", f"torch build has {backend}"))  # choose_backend refused the command otherwise
    seconds = time.perf_counter() - start
    details = {"findings": [vars(f) for f in findings]}
    failed = [f for f in findings if f.level == "fail"]
    warned = [f for f in findings if f.level == "warn"]
    figure = "; ".join(f.what for f in findings if f.level == "ok" and not f.what.startswith("torch build"))
    if failed:
        return StageResult("preflight", FAIL, seconds, figure, failed[0].what, failed[0].fix, details)
    if warned:
        figure += f"; {len(warned)} warning(s)"
    return StageResult("preflight", PASS, seconds, figure, details=details)
