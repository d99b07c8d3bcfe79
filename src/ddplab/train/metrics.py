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
import time
from array import array
from pathlib import Path

import psutil
import torch


class CommWait:
    """Exposed communication, from DDP's own C++ timers (its runtime logging): per iteration, the time from the end
    of the backward computation to the end of the gradient all-reduces (backward communication minus its overlap
    with the computation). Nothing runs in Python on the gradient path (a Python comm hook costs ~3 % of a 2-rank
    CPU step here). These are private DDP methods (`_set_ddp_runtime_logging_sample_rate`,
    `_get_ddp_logging_data`): if a torch release drops them, the wait is reported as not measured.

    The definition that keeps the part within the whole: the wait is reported as a *share* of the wall time of the
    very iterations DDP measured, then applied to the step. DDP logs iteration i's times at the forward of i + 1,
    so a snapshot after step k covers iterations 1..k-1; dividing by the wall time of steps after the warm-up
    (one iteration later) compared two different windows, and one slow iteration at the window's edge put the
    mean wait above the mean step (seen: 10.6 ms > 7.7 ms under --compile on a loaded machine). Each iteration's
    exposed wait lies inside that iteration's wall time, so over the same iterations the share is at most 1.
    DDP samples the first 10 iterations and every `rate`-th after them (GPUs: reading CUDA timers synchronises,
    so the rate there is the log interval); its running mean is over the sampled ones only, and is weighted so."""

    def __init__(self, ddp, rate: int):
        self.ddp, self.rate = ddp, max(int(rate), 1)
        self.ends = array("d", [time.perf_counter()])  # ends[i]: when step i of this run ended; ends[0]: begin()
        try:
            ddp._set_ddp_runtime_logging_sample_rate(self.rate)
        except Exception:
            self.ddp = None

    def begin(self, now: float) -> None:
        """The loop starts: the first step's wall time (and DDP's first iteration) starts here."""
        self.ends = array("d", [now])

    def step_done(self, now: float) -> None:
        self.ends.append(now)

    def snapshot(self) -> tuple[int, float] | None:
        """(the last DDP iteration logged, DDP's running mean of exposed ms), or None when not measured."""
        if self.ddp is None:
            return None
        try:
            data = self.ddp._get_ddp_logging_data()
            comm, overlap = data["avg_backward_comm_time"], data["avg_backward_compute_comm_overlap_time"]
            return int(data.get("iteration", 0)), (comm - overlap) / 1e6  # nanoseconds; a mean of differences
        except Exception:
            return None

    def _sampled(self, iteration: int) -> int:
        """How many of iterations 1..iteration DDP sampled (Logger::set_runtime_stats_and_log's rule)."""
        if iteration <= 10:
            return iteration
        return 10 + iteration // self.rate - 10 // self.rate

    def share_since(self, start: tuple[int, float] | None) -> tuple[float | None, tuple[int, float] | None]:
        """The share of wall time spent in exposed communication over the iterations DDP logged since `start` (a
        snapshot; None: since the loop began), and a snapshot of now. None when DDP logged no iteration since."""
        now = self.snapshot()
        if now is None:
            return None, None
        a, m0 = start if start is not None else (0, 0.0)
        b, m1 = now
        if b <= a or b >= len(self.ends):
            return None, now
        c0, c1 = self._sampled(a), self._sampled(b)
        if c1 <= c0:
            return None, now
        wait_ms = (m1 * c1 - m0 * c0) / (c1 - c0)
        wall_ms = 1000 * (self.ends[b] - self.ends[a]) / (b - a)
        # Sampled iterations stand for all of them: on GPUs (rate > 1) a sampled slow one can still tip the share
        # over 1, so it is bounded; on CPU (rate 1) every iteration counts and it cannot be.
        return min(max(wait_ms / wall_ms, 0.0), 1.0) if wall_ms > 0 else None, now


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
