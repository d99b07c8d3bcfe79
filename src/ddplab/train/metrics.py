"""What each rank measures about itself, cheaply enough to leave on: the proof that every rank worked.

- Exposed communication: DDP's reducer times, in C++, the backward computation and the gradient all-reduces;
  the all-reduce time that did not overlap the computation is what this rank sat waiting for communication,
  including waiting for slower ranks to arrive.
- Utilisation: the process's CPU % over the run (psutil); on GPUs the device's NVML utilisation, sampled.
- Peak memory: the process's peak RSS on CPU; torch's peak allocation on GPUs.
- A digest of the parameters, compared across ranks at the end: DDP's whole promise is that they are identical.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
from pathlib import Path

import psutil
import torch


class CommWait:
    """Exposed communication per optimizer step, from DDP's own C++ timers (its runtime logging): backward
    communication time minus the part that overlapped the backward computation. Nothing runs in Python on the
    gradient path (a Python comm hook costs ~3 % of a 2-rank CPU step here). DDP samples every `rate` steps; on
    GPUs reading its CUDA timers synchronises, so the rate there is the log interval. These are private DDP methods
    (`_set_ddp_runtime_logging_sample_rate`, `_get_ddp_logging_data`): if a torch release drops them, the wait
    is reported as not measured instead of failing the run."""

    def __init__(self, ddp, rate: int):
        self.ddp = ddp
        try:
            ddp._set_ddp_runtime_logging_sample_rate(max(int(rate), 1))
        except Exception:
            self.ddp = None

    def snapshot(self) -> tuple[int, float] | None:
        """(DDP iterations so far, DDP's running mean of exposed ms), or None when not measured."""
        if self.ddp is None:
            return None
        try:
            data = self.ddp._get_ddp_logging_data()
            comm, overlap = data["avg_backward_comm_time"], data["avg_backward_compute_comm_overlap_time"]
            return int(data.get("iteration", 0)), max(comm - overlap, 0) / 1e6  # nanoseconds
        except Exception:
            return None

    def mean_since(self, start: tuple[int, float] | None) -> tuple[float | None, tuple[int, float] | None]:
        """Mean exposed ms per step since `start` (a snapshot), and a snapshot of now. DDP keeps one running
        mean; the means of two moments, weighted by their iteration counts, give the mean in between."""
        now = self.snapshot()
        if now is None:
            return None, None
        if start is None or now[0] <= start[0]:
            return now[1], now
        (n0, m0), (n1, m1) = start, now
        return max((m1 * n1 - m0 * n0) / (n1 - n0), 0.0), now


class Utilisation:
    """CPU % of this process over the run; on a GPU, NVML utilisation of this rank's device, sampled at log points."""

    def __init__(self, device: torch.device):
        self.process = psutil.Process()
        self.process.cpu_percent(None)  # starts the measuring interval
        self.gpu_samples: list[int] = []
        self._nvml = _nvml_handle(device) if device.type == "cuda" else None

    def sample(self) -> None:
        if self._nvml is not None:
            import pynvml

            try:
                self.gpu_samples.append(pynvml.nvmlDeviceGetUtilizationRates(self._nvml).gpu)
            except pynvml.NVMLError:
                self._nvml = None

    def cpu_percent(self) -> float:
        return self.process.cpu_percent(None)

    def gpu_percent(self) -> float | None:
        return sum(self.gpu_samples) / len(self.gpu_samples) if self.gpu_samples else None


def _nvml_handle(device: torch.device):
    """NVML's handle for this torch device, found by UUID (CUDA_VISIBLE_DEVICES renumbers devices; NVML does not)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        if not uuid.startswith("GPU-"):
            uuid = f"GPU-{uuid}"
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # no NVML (a driver without it, a MIG slice): utilisation is simply not reported
        return None


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak_kb / (2**20 if sys.platform == "darwin" else 2**10)  # macOS reports bytes, Linux KiB


def state_digest(state: dict) -> str:
    """sha256 over a state_dict's tensors (names and bytes): equal digests mean bitwise-identical models."""
    h = hashlib.sha256()
    for name, t in state.items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes: equal digests mean bitwise-identical parameters."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class JsonlWriter:
    """Metrics as one JSON object per line, appended (a resumed run continues the same file). Rank 0 only."""

    def __init__(self, path: Path | None):
        self.path = path

    def write(self, record: dict) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def mfu(flops_per_sample: float, samples_per_sec_per_device: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: the FLOPs the model needs per second, over what the device could do at peak."""
    return flops_per_sample * samples_per_sec_per_device / (peak_tflops * 1e12)
