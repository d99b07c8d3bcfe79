"""What each rank measures about itself, cheaply enough to leave on: the proof that every rank worked.

- Exposed communication: a DDP comm hook notes when the last gradient bucket is handed to all-reduce (the
  backward computation is over); backward() returns once DDP has waited for every all-reduce. The gap is the time
  this rank sat waiting for communication, including waiting for slower ranks to arrive.
- Utilisation: the process's CPU % over the run (psutil); on GPUs the device's NVML utilisation, sampled.
- Peak memory: the process's peak RSS on CPU; torch's peak allocation on GPUs.
- A digest of the parameters, compared across ranks at the end: DDP's whole promise is that they are identical.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
import time
from pathlib import Path

import psutil
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class CommTimer:
    """Seconds of exposed communication per synchronised backward, via a comm hook that wraps the default one."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.seconds_done = 0.0
        self._ready = None
        self._pending: list = []  # CUDA event pairs, read once they have completed

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def hook(self, process_group, bucket):
        if bucket.is_last():  # the last bucket is ready when the backward computation has finished
            self._ready = self._now()
        return default_hooks.allreduce_hook(process_group, bucket)

    def backward_done(self) -> None:
        if self._ready is None:
            return
        end = self._now()
        if self.cuda:
            self._pending.append((self._ready, end))
        else:
            self.seconds_done += end - self._ready
        self._ready = None

    def seconds(self) -> float:
        """Total so far (on GPUs this waits for the recorded events, so call it at log points only)."""
        for start, end in self._pending:
            end.synchronize()
            self.seconds_done += start.elapsed_time(end) / 1000.0
        self._pending.clear()
        return self.seconds_done


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
