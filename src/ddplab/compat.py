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
    return (f"Python {fmt(python)} is outside torch {fmt(row.version)}'s supported range "
            f"{fmt(row.python_min)}–{fmt(row.python_max)} ({SOURCE}): use a Python in that range, "
            "or a torch release that supports yours")
