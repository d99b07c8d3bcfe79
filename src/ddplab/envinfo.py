"""What is installed, what is visible, and what is wrong with it: the data behind `ddplab env` and preflight."""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ddplab import compat
from ddplab.errors import DdplabError

# NCCL's shared-memory transport needs room in /dev/shm; Docker's 64 MiB default fails with "unhandled system error".
MIN_SHM_MB = 512
STEERING_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
)
STEERING_PREFIXES = ("NCCL_", "TORCH_", "TORCHELASTIC_", "GLOO_")
SECRET_WORDS = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


@dataclass
class Warning_:
    problem: str
    fix: str


@dataclass
class EnvReport:
    python: dict
    platform: dict
    torch: dict
    backends: dict
    devices: list
    driver: str | None
    cpu: dict
    memory: dict
    env_vars: dict
    warnings: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.warnings


def steering_vars(environ=None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    found = {k: v for k, v in environ.items() if k in STEERING_VARS or k.startswith(STEERING_PREFIXES)}
    return {k: ("****" if SECRET_WORDS.search(k) else v) for k, v in sorted(found.items())}


def torch_build(torch) -> dict:
    if torch.version.hip:
        build = f"ROCm {torch.version.hip}"
    elif torch.version.cuda:
        build = f"CUDA {torch.version.cuda}"
    else:
        build = "CPU"
    info = {"version": torch.__version__, "build": build, "cuda": torch.version.cuda, "cudnn": None, "nccl": None}
    if torch.backends.cudnn.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # torch built without NCCL
            pass
    return info


def backends(dist) -> dict[str, bool]:
    return {
        name: bool(getattr(dist, f"is_{name}_available", lambda: False)()) for name in ("nccl", "gloo", "mpi", "ucc")
    }


def cuda_devices(torch) -> list[dict]:
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "index": i,
                "name": p.name,
                "total_memory_gib": round(p.total_memory / 2**30, 1),
                "compute_capability": f"{p.major}.{p.minor}",
            }
        )
    return out


def early_nproc(asked: int | None, device: str | None) -> int | None:
    """The rank count known before torch is imported, so that an agent can start importing it meanwhile: the one
    asked for, or the default 2 CPU ranks where no GPU can be; None when only torch can tell (a driver is here)."""
    return asked or (2 if device == "cpu" or not cuda_possible() else None)


def cuda_possible() -> bool:
    """Whether torch.cuda could see a GPU here, known without importing torch (seconds): not with a CPU-only build
    of torch, nor with a CUDA build and no NVIDIA driver. True: only torch can tell (a driver is here, a ROCm build,
    a torch whose version file could not be read)."""
    build = torch_build_fields()
    if build is None:
        return True
    return build["hip"] is not None or (build["cuda"] is not None and nvidia_driver() is not None)


def cuda_available() -> bool:
    """torch.cuda.is_available(), importing torch only where a GPU is possible."""
    if not cuda_possible():
        return False
    import torch

    return torch.cuda.is_available()


def cuda_device_count() -> int:
    """The GPUs torch can use (0 when it can use none), importing torch only where a GPU is possible."""
    if not cuda_available():
        return 0
    import torch

    return torch.cuda.device_count()


def torch_build_fields() -> dict[str, str | None] | None:
    """torch.version.cuda and .hip, read from torch/version.py as text (torch writes them there as plain
    assignments when it is built), so that nothing of torch is imported; None when the file says otherwise."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")  # a top-level name: found, not imported
        folder = spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None
        tree = ast.parse((Path(folder) / "version.py").read_text()) if folder else None
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
    fields = {}
    for node in tree.body if tree else []:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        target = targets[0] if len(targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip") and isinstance(node.value, ast.Constant):
            fields[target.id] = node.value.value
    return fields if set(fields) == {"cuda", "hip"} else None


def nvidia_driver() -> str | None:
    """The NVIDIA driver version through NVML, or None when there is no driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # no libnvidia-ml: no driver on this machine
        return None


def visible_gpus(raw: str | None) -> list[str] | None:
    """The entries of CUDA_VISIBLE_DEVICES that CUDA uses, or None when unset (every GPU). A negative entry ends
    the list: torch/cuda/__init__.py, _parse_visible_devices ("Negative value aborts the sequence"), as CUDA does;
    so -1 and "" hide every GPU."""
    if raw is None:
        return None
    ids = []
    for entry in (x.strip() for x in raw.split(",")):
        if not entry or re.fullmatch(r"-\d+", entry):
            break
        ids.append(entry)
    return ids


def nvml_gpu_count() -> int:
    """GPUs the NVIDIA driver sees (NVML ignores CUDA_VISIBLE_DEVICES and needs no CUDA): 0 without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no libnvidia-ml: no driver on this machine
        return 0


# The oldest Linux driver each CUDA major release runs on (minor-version compatibility): CUDA Toolkit release
# notes, "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility",
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html (read 2026-12-03).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def unusable_gpus(torch, environ=None, driver: str | None = None, gpus: int | None = None) -> Warning_ | None:
    """The driver sees GPUs that CUDA_VISIBLE_DEVICES leaves visible and torch is a CUDA build, yet torch can use
    none: most often a driver older than torch's CUDA needs. Without this every command would fall back to CPU
    ranks in silence ("READY, simulated devices") on a GPU machine."""
    environ = os.environ if environ is None else environ
    gpus = nvml_gpu_count() if gpus is None else gpus
    visible = visible_gpus(environ.get("CUDA_VISIBLE_DEVICES"))
    if not gpus or visible == [] or not torch.version.cuda:
        return None
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # torch says why in a warning ("driver ... too old")
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            return None
    driver = driver or nvidia_driver() or "?"
    cuda = torch.version.cuda
    needed = MIN_DRIVER.get(_version(cuda)[0])
    why = next((str(w.message).splitlines()[0] for w in caught if "CUDA" in str(w.message)), "")
    if needed and driver != "?" and _version(driver) < _version(needed):
        cause = f"NVIDIA driver {driver} is older than torch's CUDA {cuda} needs (>= {needed})"
        fix = (
            f"update the driver to {needed} or newer, or install a torch built for an older CUDA "
            "(https://pytorch.org/get-started/previous-versions/)"
        )
    else:
        cause = (
            f"the NVIDIA driver ({driver}) sees {gpus} GPU(s) but torch {torch.__version__} (CUDA {cuda}) can use none"
        )
        fix = "run nvidia-smi; in a container, start it with --gpus all"
    if why:
        cause += f" (torch: {why})"
    return Warning_(cause, fix + "; to run on CPU on purpose, hide the GPUs with CUDA_VISIBLE_DEVICES=-1")


def shm_mb() -> int | None:
    try:
        return shutil.disk_usage("/dev/shm").total // 2**20
    except OSError:
        return None


def collect(environ=None) -> EnvReport:
    import torch
    import torch.distributed as dist

    environ = os.environ if environ is None else environ
    python = {"version": platform.python_version(), "executable": sys.executable}
    report = EnvReport(
        python=python,
        platform={"system": platform.system(), "release": platform.release(), "machine": platform.machine()},
        torch=torch_build(torch),
        backends=backends(dist),
        devices=cuda_devices(torch),
        driver=nvidia_driver(),
        cpu={"physical_cores": psutil.cpu_count(logical=False), "logical_cores": psutil.cpu_count()},
        memory={"total_gib": round(psutil.virtual_memory().total / 2**30, 1), "shm_mib": shm_mb()},
        env_vars=steering_vars(environ),
    )
    report.warnings = [vars(w) for w in find_problems(report, environ)]
    return report


def find_problems(report: EnvReport, environ) -> list[Warning_]:
    from ddplab import dist as ddist
    from ddplab.ports import port_is_free

    problems = []
    version = compat.major_minor(report.torch["version"])
    if version is not None and version < compat.MIN_TORCH:
        problems.append(
            Warning_(
                f"torch {report.torch['version']} is older than {compat.fmt(compat.MIN_TORCH)}",
                "pip install -U 'torch>=2.6'",
            )
        )
    py = sys.version_info[:2]
    msg = compat.python_problem(report.torch["version"], py)
    if msg:
        problem, _, fix = msg.partition(": ")
        problems.append(Warning_(problem, fix))
    if report.driver and report.torch["build"] == "CPU":
        problems.append(
            Warning_(
                f"NVIDIA driver {report.driver} is installed but torch is a CPU-only build",
                "install a CUDA build: pip install torch --index-url https://download.pytorch.org/whl/cu126",
            )
        )
    import torch

    unusable = unusable_gpus(torch, environ, driver=report.driver)
    if unusable:
        problems.append(unusable)
    shm = report.memory["shm_mib"]
    if shm is not None and shm < MIN_SHM_MB:
        problems.append(
            Warning_(
                f"/dev/shm is only {shm} MiB; NCCL's shared-memory transport then fails with 'unhandled system error'",
                "docker run --shm-size=2g (or --ipc=host), or set NCCL_SHM_DISABLE=1",
            )
        )
    try:
        env = ddist.read_launcher_env(environ)
    except DdplabError as e:
        problem, _, fix = str(e).partition(": ")
        problems.append(Warning_(problem, fix or "let torchrun set the launcher variables"))
    else:
        launched_here = "TORCHELASTIC_RUN_ID" in environ  # inside a run the port is busy by design: the agent's store
        if env.master_port is not None and not launched_here and not port_is_free(env.master_port):
            problems.append(
                Warning_(
                    f"MASTER_PORT={env.master_port} is already in use on this machine",
                    "unset MASTER_PORT (ddplab picks a free one) or choose another port",
                )
            )
    return problems
