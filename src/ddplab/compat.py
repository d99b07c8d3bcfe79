"""Which Python versions and CUDA builds each torch release supports.

Source for every row: the "Release Compatibility Matrix" in PyTorch's RELEASE.md
(https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix), read 2026-12-02.
Experimental free-threaded builds (3.13t, 3.14t) are left out: a learner's interpreter is the regular one.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix"
MIN_TORCH = (2, 6)  # what ddplab declares; older torch lacks APIs ddplab relies on


@dataclass(frozen=True)
class TorchRelease:
    version: tuple[int, int]
    python_min: tuple[int, int]
    python_max: tuple[int, int]
    cuda: tuple[str, ...]  # stable and experimental CUDA builds


RELEASES = [
    TorchRelease((2, 6), (3, 9), (3, 13), ("11.8", "12.4", "12.6")),
    TorchRelease((2, 7), (3, 9), (3, 13), ("11.8", "12.6", "12.8")),
    TorchRelease((2, 8), (3, 9), (3, 13), ("12.6", "12.8", "12.9")),
    TorchRelease((2, 9), (3, 10), (3, 14), ("12.6", "12.8", "13.0")),
    TorchRelease((2, 10), (3, 10), (3, 14), ("12.6", "12.8", "13.0")),
    TorchRelease((2, 11), (3, 10), (3, 14), ("12.6", "12.8", "13.0")),
    TorchRelease((2, 12), (3, 10), (3, 14), ("12.6", "13.0", "13.2")),
    TorchRelease((2, 13), (3, 10), (3, 15), ("12.6", "13.0", "13.2")),
]


def major_minor(version: str) -> tuple[int, int] | None:
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def release(torch_version: str) -> TorchRelease | None:
    mm = major_minor(torch_version)
    return next((r for r in RELEASES if r.version == mm), None)


def fmt(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def python_problem(torch_version: str, python: tuple[int, int]) -> str | None:
    """A warning when this Python is outside what this torch release supports, else None."""
    row = release(torch_version)
    if row is None or row.python_min <= python <= row.python_max:
        return None
    return (
        f"Python {fmt(python)} is outside torch {fmt(row.version)}'s supported range "
        f"{fmt(row.python_min)}–{fmt(row.python_max)} ({SOURCE}): use a Python in that range, "
        "or a torch release that supports yours"
    )


# The private APIs of torch and CPython that ddplab relies on: none is promised to last, so each is named here with
# where it is used, what happens without it, and the releases it was checked on. tests/test_compat.py resolves every
# row against the installed torch, so a release that drops one fails there first, by name.
@dataclass(frozen=True)
class PrivateApi:
    path: str  # module[:attribute.attribute], several attributes apart by | when any one will do
    used_in: str
    without_it: str  # what ddplab does when it is missing
    checked: str  # the torch releases it was seen on


PRIVATE_APIS = [
    PrivateApi(
        "torch._C._distributed_c10d:_dump_fr_trace_json|_dump_nccl_trace_json",
        "flight/rankdump.py",
        "no Flight Recorder record in a hang's report (either name will do: torch renamed it)",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.distributed.elastic.multiprocessing.api:PContext.close",
        "launcher/agent.py (wrapped)",
        "survivors of a failed rank are ended without their Flight Recorder record",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.distributed._tools.mem_tracker:MemTracker",
        "perf/memory_trace.py",
        "`ddplab memory` refuses in one line (needs torch>=2.6)",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.distributed._tools.fsdp2_mem_tracker:FSDPMemTracker",
        "perf/fsdp_tracker.py",
        "the fsdp prediction uses torch's tracker unchanged",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.distributed.tensor._sharding_prop:ShardingPropagator",
        "perf/fsdp_tracker.py",
        "the fsdp prediction counts DTensor's cached sharding as torch does",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.testing._internal.distributed.fake_pg",
        "perf/memory_trace.py",
        "`ddplab memory` traces one rank without a fake process group",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch._subclasses.fake_tensor:FakeTensorMode",
        "perf/memory_trace.py",
        "`ddplab memory` cannot trace without allocating",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.nn.parallel:DistributedDataParallel._get_ddp_logging_data",
        "train/metrics.py, perf/profhook.py",
        "no bucket sizes or comm-hook facts in the metrics and --profile",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.nn.parallel:DistributedDataParallel._set_ddp_runtime_logging_sample_rate",
        "train/metrics.py",
        "DDP's own timings are sampled at torch's default rate",
        "2.6-2.13",
    ),
    PrivateApi(
        "torch.distributed.optim:ZeroRedundancyOptimizer._partition_parameters",
        "perf/memory_trace.py",
        "the zero1 prediction assumes an even split",
        "2.6-2.13",
    ),
    PrivateApi(
        "atexit:_run_exitfuncs",
        "launcher/bootstrap.py",
        "a rank leaving after the save on a notice skips the script's atexit handlers (CPython's, not torch's)",
        "CPython 3.10-3.13",
    ),
]


def resolve(api: PrivateApi) -> object:
    """The object `api.path` names in this interpreter's torch; ImportError or AttributeError when it is gone."""
    import importlib

    module_name, _, attributes = api.path.partition(":")
    module = importlib.import_module(module_name)
    if not attributes:
        return module
    missing = None
    for choice in attributes.split("|"):
        obj = module
        try:
            for part in choice.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError as e:
            missing = e
    raise AttributeError(f"{api.path}: {missing}")
