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
            return Finding(
                "fail",
                f"{nproc} ranks but {gpus} visible GPU(s): two ranks would share a GPU "
                f"({backend} fails with 'Duplicate GPU detected')",
                f"use --nproc {gpus}",
            )
        return Finding("ok", f"{nproc} rank(s) on {gpus} GPU(s)")
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    if nproc > cores:
        return Finding(
            "warn",
            f"{nproc} ranks on {cores} CPU core(s): ranks will wait for each other's cores, timings are pessimistic",
            f"use --nproc {cores} for timings that mean something",
        )
    return Finding("ok", f"{nproc} simulated device(s) (CPU processes) on {cores} cores")


def port_finding(master_port: int | None, nodes=None) -> tuple[Finding, int | None]:
    """Checked first, without torch: the agent can start on this port while the rest of preflight runs."""
    if nodes is not None:  # Nodes.parse already refused a busy port on node 0
        host = "this node hosts it" if nodes.rank == 0 else f"this node is {nodes.local_addr}"
        return Finding(
            "ok",
            f"node {nodes.rank}/{nodes.count}: c10d rendezvous on {nodes.host}:{nodes.port} "
            f"({host}; unauthenticated: private network only)",
        ), nodes.port
    if master_port is None:
        port = free_port()
        return Finding("ok", f"rendezvous on 127.0.0.1:{port} (a free port)"), port
    if not port_is_free(master_port):
        return Finding(
            "fail",
            f"--master-port {master_port} is already in use on 127.0.0.1 (EADDRINUSE)",
            "pass another port, or omit --master-port and ddplab picks a free one",
        ), None
    return Finding("ok", f"rendezvous on 127.0.0.1:{master_port}"), master_port


def _shm(backend: str) -> Finding | None:
    shm = envinfo.shm_mb()
    if backend != "nccl" or shm is None:
        return None
    if shm < envinfo.MIN_SHM_MB:
        return Finding(
            "warn",
            f"/dev/shm is {shm} MiB: NCCL's shared-memory transport may fail with 'unhandled system error'",
            "docker run --shm-size=2g (or --ipc=host)",
        )
    return Finding("ok", f"/dev/shm {shm} MiB")


def _unusable_gpus(device: str) -> Finding | None:
    """CPU ranks on a machine whose driver sees GPUs torch cannot use: a failure with its fix, not a silent fallback
    (to run on CPU on purpose there, CUDA_VISIBLE_DEVICES=-1 hides the GPUs)."""
    gpus = envinfo.nvml_gpu_count() if device == "cpu" and envinfo.cuda_possible() else 0
    if not gpus:  # torch could use none, or the driver sees none: nothing to ask torch, whose import takes seconds
        return None
    import torch

    unusable = envinfo.unusable_gpus(torch, gpus=gpus)
    return Finding("fail", unusable.problem, unusable.fix) if unusable else None


def _visible_devices(device: str) -> Finding | None:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    # A negative index ends the list, as CUDA reads it: -1 is the standard way to hide every GPU.
    ids = envinfo.visible_gpus(raw)
    entries = [x.strip() for x in raw.split(",")]
    ignored = [x for x in entries[len(ids) + 1 :] if x] if len(ids) < len(entries) else []
    if not ids:
        if device == "cuda":
            return Finding("fail", f"CUDA_VISIBLE_DEVICES={raw!r} hides every GPU", "unset it, or list GPU indices")
        return Finding("ok", f"CUDA_VISIBLE_DEVICES={raw} (every GPU hidden)")
    bad = [x for x in ids if not GPU_ID.match(x)]
    if bad:
        return Finding(
            "fail",
            f"CUDA_VISIBLE_DEVICES={raw!r} has entries that are not GPU indices or UUIDs: {bad}",
            "use a comma-separated list such as 0,1",
        )
    if len(set(ids)) != len(ids):
        return Finding(
            "fail", f"CUDA_VISIBLE_DEVICES={raw!r} lists a GPU twice: two ranks would share it", "list each GPU once"
        )
    if ignored:
        return Finding(
            "warn",
            f"CUDA_VISIBLE_DEVICES={raw}: CUDA stops at {entries[len(ids)] or 'the empty entry'} and ignores "
            f"{','.join(ignored)} (GPUs {','.join(ids)} are visible)",
            f"CUDA_VISIBLE_DEVICES={','.join(ids + ignored)} if those GPUs were meant to be used",
        )
    return Finding("ok", f"CUDA_VISIBLE_DEVICES={raw}")


def _threads(nproc: int) -> Finding:
    raw = os.environ.get("OMP_NUM_THREADS")
    if raw is None:
        return Finding("ok", "1 OpenMP thread per rank (as torchrun sets)")
    if not raw.isdigit() or int(raw) < 1:
        return Finding("fail", f"OMP_NUM_THREADS={raw!r} is not a positive integer", "unset it or set it to 1")
    cores = psutil.cpu_count() or 1
    if nproc * int(raw) > cores:
        return Finding(
            "warn",
            f"OMP_NUM_THREADS={raw} × {nproc} ranks > {cores} logical cores: oversubscribed",
            f"set OMP_NUM_THREADS={max(1, cores // nproc)}",
        )
    return Finding("ok", f"OMP_NUM_THREADS={raw}")


def _launcher_leftovers() -> Finding | None:
    set_here = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if v in os.environ]
    if not set_here:
        return None
    from ddplab import dist as ddist  # imports torch: only when there is something to read

    try:
        ddist.read_launcher_env()
    except DdplabError as e:
        return Finding(
            "warn",
            f"this shell exports a broken launcher variable: {e}",
            f"unset {' '.join(set_here)} (launchers set them per process)",
        )
    return Finding(
        "warn",
        f"this shell exports {', '.join(set_here)}: ddplab's ranks get their own, "
        "but a script started by hand would read these",
        f"unset {' '.join(set_here)}",
    )


def interface_matches(var: str, value: str, present: list[str]) -> tuple[list[str], list[str]]:
    """(interfaces VAR=VALUE selects among PRESENT, entries of VALUE that select none), each library's way.

    gloo (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, Options::create_default): VALUE split on ',', a device
    made for each entry, an exact interface name, so every entry must exist; torch ignores a value of one character.
    NCCL (docs: env.html#nccl-socket-ifname; src/misc/socket.cc matchIfList): entries are name prefixes ("eth" picks
    eth0, eth1), "=" before the list makes them exact names, "^" before that excludes them instead; ":port" after
    an entry is allowed; NCCL uses whatever matches.
    """
    if var.startswith("GLOO"):
        if len(value) <= 1:
            return [], []
        names = [n.strip() for n in value.split(",") if n.strip()]
        return [n for n in names if n in present], [n for n in names if n not in present]
    rest, exclude, exact = value.strip(), False, False
    if rest.startswith("^"):
        rest, exclude = rest[1:], True
    if rest.startswith("="):
        rest, exact = rest[1:], True
    entries = [e.strip().split(":")[0] for e in rest.split(",") if e.strip()]

    def hit(name: str, entry: str) -> bool:
        return name == entry if exact else name.startswith(entry)

    if exclude:  # nothing to match: the only failure is excluding every interface
        return [n for n in present if not any(hit(n, e) for e in entries)], []
    return (
        [n for n in present if any(hit(n, e) for e in entries)],
        [e for e in entries if not any(hit(n, e) for n in present)],
    )


def _socket_interfaces(backend: str) -> list[Finding]:
    """GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME naming an interface this machine lacks (a value copied from another
    machine): without this, every rank starts and then dies in init_process_group with a long traceback."""
    present = sorted(psutil.net_if_addrs())
    found = []
    for var, library in (("GLOO_SOCKET_IFNAME", "gloo"), ("NCCL_SOCKET_IFNAME", "nccl")):
        value = os.environ.get(var)
        if value is None or not value.strip():
            continue
        used, unmatched = interface_matches(var, value, present)
        if not used and not unmatched and library == "gloo":  # a value torch ignores
            continue
        here = f"interfaces here: {', '.join(present) or 'none'}"
        fix = (
            f"set {var} to the interface that reaches the other nodes ({', '.join(present)}; lo on a single "
            f"machine), or unset it"
        )
        # gloo needs every listed name; NCCL only one that matches. Either matters only when that library runs:
        # ddplab's gloo-on-CPU runs never read NCCL_*, and an nccl run reads GLOO_* only for a script's gloo groups.
        broken = bool(unmatched) if library == "gloo" else not used
        level = "fail" if library == backend else "warn"
        if broken:
            what = (
                f"{var}={value} names no interface of this machine"
                if not used
                else f"{var}={value}: {', '.join(unmatched)} is not an interface of this machine"
            )
            what += f" ({here}): {library} fails as the ranks connect"
            found.append(Finding(level, what, fix))
        elif unmatched:
            found.append(
                Finding(
                    "warn",
                    f"{var}={value}: {', '.join(unmatched)} matches no interface here ({here})",
                    f"drop {', '.join(unmatched)} from {var}",
                )
            )
        else:
            found.append(Finding("ok", f"{var}={value} ({', '.join(used)})"))
    return found


def environment_findings(nproc: int, device: str, backend: str, ranks_vs_devices: bool = True) -> list[Finding]:
    """Ranks vs devices, shared memory, CUDA_VISIBLE_DEVICES, threads, launcher variables left in the shell, socket
    interface names: everything but the port (`ddplab launch` and `ddplab train` check the same before starting)."""
    found = (
        _unusable_gpus(device),
        _devices(nproc, device, backend) if ranks_vs_devices else None,
        _shm(backend),
        _visible_devices(device),
        _threads(nproc),
        _launcher_leftovers(),
        *_socket_interfaces(backend),
    )
    return [f for f in found if f is not None]


def settle(request: dict) -> list:
    """[device, backend, nproc] for `ddplab check`'s flags (request: {"device", "backend", "nproc"}, None where not
    given): CUDA when torch sees a GPU, nccl on GPUs, one rank per GPU or 2 CPU ranks; a bad combination is a
    DdplabError (exit 2). Imports torch: `ddplab check` runs it in a fork of its early agent."""
    import torch

    from ddplab import dist as ddist

    device = request["device"] or ("cuda" if torch.cuda.is_available() else "cpu")
    backend = ddist.choose_backend(ddist.choose_device(0, device), request["backend"])
    return [device, backend, request["nproc"] or (torch.cuda.device_count() if device == "cuda" else 2)]


def run(nproc: int, device: str, backend: str, port: Finding, cross=None) -> StageResult:
    """cross: several nodes' preflight (checks/crossnode.py), given this node's findings to share; returns the job's."""
    start = time.perf_counter()
    findings = [port, *environment_findings(nproc, device, backend)]
    nodes = []
    if cross is not None:
        shared = cross(findings)
        findings += shared.findings
        nodes = shared.nodes
        if not shared.failed:
            findings.append(
                Finding(
                    "ok", f"{len(nodes)} node(s) met at the preflight in {shared.seconds:.1f} s, every pair connects"
                )
            )
    findings.append(Finding("ok", f"torch build has {backend}"))  # choose_backend refused the command otherwise
    seconds = time.perf_counter() - start
    details = {"findings": [vars(f) for f in findings]}
    if nodes:
        details["nodes"] = nodes
    failed = [f for f in findings if f.level == "fail"]
    warned = [f for f in findings if f.level == "warn"]
    figure = "; ".join(f.what for f in findings if f.level == "ok" and not f.what.startswith("torch build"))
    if failed:
        return StageResult("preflight", FAIL, seconds, figure, failed[0].what, failed[0].fix, details)
    if warned:
        figure += f"; {len(warned)} warning(s)"
    return StageResult("preflight", PASS, seconds, figure, details=details)
