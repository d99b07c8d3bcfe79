"""The process-group runtime every ddplab worker uses, and any user script may import.

    import ddplab.dist as dd
    with dd.session() as ctx:          # reads what torchrun set; 1 process when nothing is set
        model = DDP(model.to(ctx.device), device_ids=ctx.device_ids)
        dd.print0("only rank 0 prints this")

Rules it follows so that scripts don't have to:
- the launcher owns MASTER_ADDR/MASTER_PORT; they are read, never written;
- on GPUs the device is set from LOCAL_RANK *before* the process group exists (NCCL binds to it);
- a group restarted by the elastic agent never reads keys left by the previous attempt (see _store and
  pytorch/pytorch#135712);
- shutdown always runs, even after an exception, and really stops gloo's threads (see session()).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ddplab.errors import DdplabError

# How long a collective may wait before the group gives up: torch's own NCCL default (default_pg_nccl_timeout,
# 10 min). Longer than ddplab's watchdogs (a launcher that watches for hangs passes its own limit plus a margin: its
# named hang with stacks must come first, not an abort), and long enough for real waits such as a large checkpoint
# written by rank 0 while the others stand in the next collective. 60 s (before) turned both into aborts.
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device_ids(self) -> list[int] | None:
        """What DistributedDataParallel wants: [local GPU] on CUDA, None on CPU."""
        return [self.device.index] if self.device.type == "cuda" else None


_context: DistContext | None = None


def _int_var(environ, name: str, default: int | None) -> int | None:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise DdplabError(
            f"{name}={raw!r} is not an integer: unset it, or let torchrun / ddplab launch set it"
        ) from None


@dataclass(frozen=True)
class LauncherEnv:
    """What the launcher told this process, validated."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str | None
    master_port: int | None
    restart_count: int
    launched: bool  # False when no launcher variables are present: a single process


def read_launcher_env(environ=None) -> LauncherEnv:
    environ = os.environ if environ is None else environ
    world_size = _int_var(environ, "WORLD_SIZE", None)
    rank = _int_var(environ, "RANK", None)
    launched = world_size is not None or rank is not None
    world_size = 1 if world_size is None else world_size
    rank = 0 if rank is None else rank
    local_rank = _int_var(environ, "LOCAL_RANK", rank)
    local_world_size = _int_var(environ, "LOCAL_WORLD_SIZE", world_size)
    master_port = _int_var(environ, "MASTER_PORT", None)
    restart_count = _int_var(environ, "TORCHELASTIC_RESTART_COUNT", 0)
    if world_size < 1:
        raise DdplabError(f"WORLD_SIZE={world_size} must be at least 1: set it to the total number of processes")
    if not 0 <= rank < world_size:
        raise DdplabError(
            f"RANK={rank} is outside 0..WORLD_SIZE-1={world_size - 1}: each process needs a distinct "
            "rank below WORLD_SIZE (torchrun sets both)"
        )
    if local_rank < 0:
        raise DdplabError(f"LOCAL_RANK={local_rank} is negative: it must be 0..(processes on this node - 1)")
    if master_port is not None and not 0 < master_port < 65536:
        raise DdplabError(f"MASTER_PORT={master_port} is not a TCP port: use 1024..65535")
    master_addr = environ.get("MASTER_ADDR") or None
    if world_size > 1 and (master_addr is None or master_port is None):
        raise DdplabError(
            f"WORLD_SIZE={world_size} but MASTER_ADDR/MASTER_PORT are not set: start the script with "
            "torchrun or `ddplab launch`, which set them"
        )
    return LauncherEnv(
        rank, local_rank, world_size, local_world_size, master_addr, master_port, restart_count, launched
    )


def choose_device(local_rank: int, device: str | None = None) -> torch.device:
    """cuda:LOCAL_RANK when CUDA is there (or asked for), else cpu."""
    kind = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if kind != "cuda":
        raise DdplabError(f"device {kind!r} is not supported: use cpu or cuda")
    if not torch.cuda.is_available():
        raise DdplabError(
            "device 'cuda' asked for, but torch sees no CUDA GPU "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}): use --device cpu"
        )
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise DdplabError(
            f"LOCAL_RANK={local_rank} but only {count} GPU(s) are visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
            f"start at most {count} processes per node"
        )
    return torch.device("cuda", local_rank)


def choose_backend(device: torch.device, backend: str | None = None) -> str:
    """nccl for GPUs when torch has it, gloo otherwise; an explicit choice wins but is checked."""
    if backend is None:
        return "nccl" if device.type == "cuda" and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise DdplabError(
                "backend 'nccl' asked for, but this torch build has no NCCL "
                f"(torch {torch.__version__}): use --backend gloo, or install a CUDA build of torch"
            )
        if device.type != "cuda":
            raise DdplabError("backend 'nccl' needs CUDA GPUs, but the device is cpu: use --backend gloo on CPU")
    elif backend == "gloo":
        if not dist.is_gloo_available():
            raise DdplabError("backend 'gloo' asked for, but this torch build has no gloo: use --backend nccl")
    elif backend == "mpi":
        if not dist.is_mpi_available():
            raise DdplabError("backend 'mpi' asked for, but this torch build has no MPI: use gloo or nccl")
    else:
        raise DdplabError(f"unknown backend {backend!r}: use gloo or nccl")
    return backend


def _store(env: LauncherEnv, timeout: timedelta) -> dist.Store:
    if env.master_addr is None:  # a single process (read_launcher_env insists on an address for more)
        return dist.HashStore()
    # Under torchelastic the agent may serve the store on MASTER_ADDR:MASTER_PORT; otherwise rank 0 hosts it.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(
        env.master_addr,
        env.master_port,
        env.world_size,
        is_master=env.rank == 0 and not agent_store,
        timeout=timeout,
        wait_for_workers=False,
    )
    one_agent = os.environ.get("GROUP_WORLD_SIZE", "1") == "1"
    if agent_store and one_agent:
        # The agent's store outlives a restart, and the previous attempt's keys are still in it: a restarted group
        # could read a dead peer's address (pytorch/pytorch#135712). One agent means one restart count for all.
        return dist.PrefixStore(f"ddplab/attempt{env.restart_count}", store)
    # Several agents count restarts each on their own, so the count is no common prefix. ddplab runs several nodes
    # with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: every rendezvous round then gets a fresh store, nothing is stale.
    return store


def init(backend: str | None = None, device: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> DistContext:
    """Join the process group the launcher described (or a 1-process group) and return who we are."""
    global _context
    if _context is not None:
        return _context
    env = read_launcher_env()
    dev = choose_device(env.local_rank, device)
    chosen = choose_backend(dev, backend)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)  # before init: NCCL picks the current device for this rank
    delta = timedelta(seconds=timeout)
    # Before the group exists: imported later (DDP does), torch.distributed.nn keeps the group in default arguments,
    # and destroy_process_group then leaves gloo's threads running into interpreter exit (docs/teardown.md).
    # Bound to another name: a bare `import torch.distributed.nn` makes `torch` a local of this whole function,
    # and torch.cuda.set_device above then raised UnboundLocalError on every GPU rank (ruff F823).
    import torch.distributed.nn as _keeps_group_args  # noqa: F401

    try:
        # device_id (torch >= 2.3) binds the group to this rank's GPU: NCCL's communicator is made here, at once,
        # rather than lazily by the first collective, and barrier() knows its device instead of guessing.
        dist.init_process_group(
            chosen,
            store=_store(env, delta),
            rank=env.rank,
            world_size=env.world_size,
            timeout=delta,
            device_id=dev if dev.type == "cuda" else None,
        )
    except DdplabError:
        raise
    except Exception as e:  # torch's errors here are long; keep the cause, add the likely fix
        raise DdplabError(
            f"could not join the process group ({chosen}, rank {env.rank}/{env.world_size} via "
            f"{env.master_addr}:{env.master_port}): {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            " — check that every rank was started and can reach MASTER_ADDR",
            exit_code=1,
        ) from e
    _context = DistContext(env.rank, env.local_rank, env.world_size, env.local_world_size, chosen, dev)
    return _context


def shutdown() -> None:
    """Leave the process group; safe to call twice or when init never happened."""
    global _context
    _context = None
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def session(backend: str | None = None, device: str | None = None, timeout: float = DEFAULT_TIMEOUT_S):
    """init() ... shutdown(), leaving in the order that exits cleanly (docs/teardown.md):
    1. every rank finishes together (a barrier; not after an error: the others may never arrive);
    2. the caller has dropped its DDP model by then (its reducer holds the group): build it inside the block;
    3. the group is destroyed while the interpreter is alive, which stops gloo's worker threads. A worker that
       frees a Python tensor after interpreter exit has begun aborts the process ("terminate called without an
       active exception", pytorch/pytorch#190489)."""
    try:
        ctx = init(backend=backend, device=device, timeout=timeout)
        yield ctx
        if ctx.world_size > 1:
            dist.barrier()
    except BaseException as e:
        # Leaving the group makes the other ranks fail too; stamp this error so the first failure stays identifiable.
        with contextlib.suppress(AttributeError):
            e.ddplab_failed_at = time.time()
        raise
    finally:
        shutdown()


def context() -> DistContext:
    if _context is None:
        raise DdplabError("ddplab.dist.init() has not been called in this process: call it (or use dd.session()) first")
    return _context


def rank() -> int:
    return _context.rank if _context else 0


def world_size() -> int:
    return _context.world_size if _context else 1


def is_main() -> bool:
    return rank() == 0


def print0(*args, **kwargs) -> None:
    """print on global rank 0 only (every node has a local rank 0; only one process has global rank 0)."""
    if is_main():
        kwargs.setdefault("flush", True)
        print(*args, **kwargs)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
