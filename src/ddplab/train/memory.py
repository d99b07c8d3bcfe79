"""The training's own memory: the allocator's peak a run measures, and `ddplab memory`'s prediction of it asked of
another process. ddplab.perf.memory predicts the same span (model build + the first steps) and is checked against
AllocatorPeak; perf imports this module, never the other way round (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddplab.errors import DdplabError

MiB = 2**20


@dataclass(frozen=True)
class PredictedPeak:
    """What a training needs of a prediction: the predicted allocator peak of one rank."""

    peak_bytes: int

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / MiB


class AllocatorPeak:
    """The allocator's peak of live bytes between start() and stop(), above what was live at start().

    CPU: the profiler with profile_memory=True; the c10 CPU allocator reports every allocation and free made
    while it runs, so the running sum of those events is the live bytes it handed out, and its maximum the peak.
    It reports them only from threads the profiler follows (this one, autograd's): when one of gloo's worker
    threads drops the last reference to a collective's tensor, that free is not seen and the tensor counts as
    live until its address is handed out again (seen for DDP's start-up broadcast of the weights and FSDP's
    gradients, in some runs only). Unseen frees err upwards; benchmarks/memory_accuracy.py keeps the lowest of
    several runs.
    CUDA: torch.cuda.max_memory_allocated() against memory_allocated() at start().
    """

    def __init__(self, device: torch.device):
        self.device, self.prof, self.base, self.peak = device, None, 0, None

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        # The autograd profiler, not torch.profiler.profile: the latter imports torch._dynamo on start (seconds,
        # long enough for a stall watchdog to call a starting rank hung); both record the same memory events.
        self.prof = torch.autograd.profiler.profile(profile_memory=True)
        self.prof.__enter__()

    def stop(self) -> None:
        if self.peak is not None:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.base
            return
        if self.prof is None:
            return
        self.prof.__exit__(None, None, None)
        self.peak, self.prof = peak_bytes(_cpu_allocations(self.prof.kineto_results)), None

    def measured_mb(self) -> float | None:
        self.stop()
        return None if self.peak is None else self.peak / MiB


def peak_bytes(events: list[tuple[int, int | None, int]]) -> int:
    """The peak of the running sum of (time, address, +/- bytes) allocator events, in time order."""
    live = peak = 0
    blocks: dict[int, int] = {}  # address -> bytes, of the blocks handed out and not seen freed
    for _, address, nbytes in events:
        if nbytes > 0 and address in blocks:
            # Handed out again at the same address: the block was freed before, on a thread the profiler does not
            # follow. Counting it freed from here on is still an upper bound, and a tighter one.
            live -= blocks.pop(address)
        if nbytes > 0 and address is not None:
            blocks[address] = nbytes
        elif address is not None:
            blocks.pop(address, None)
        live += nbytes
        peak = max(peak, live)
    return peak


def _cpu_allocations(results) -> list[tuple[int, int | None, int]]:
    """(time ns, address, bytes: + allocated, - freed) of the CPU allocator's events, in time order. The address
    comes from the profiler's event tree; where a torch release lacks it, the flat event list (no address)."""
    found = []
    try:
        stack = list(results.experimental_event_tree())
        while stack:
            node = stack.pop()
            stack.extend(node.children)
            fields = node.extra_fields
            if type(fields).__name__ == "_ExtraFields_Allocation" and fields.device.type == "cpu":
                found.append((node.start_time_ns, fields.ptr, fields.alloc_size))
    except (AttributeError, RuntimeError):
        found = [
            (e.start_ns(), None, e.nbytes())
            for e in results.events()
            if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
        ]
    return sorted(found, key=lambda event: event[0])


class PredictElsewhere:
    """`ddplab memory`'s prediction of a recipe's run (ddplab.perf.memory.predict_recipe) in a fresh interpreter,
    started now and collected later: for a training rank, which belongs to a real process group and so cannot hold
    the fake one the trace needs; the trace runs while it trains. The child is `python -m ddplab.perf.memory
    REQUEST`, a JSON request and a JSON answer: perf predicts train's runs, and train imports nothing of perf."""

    def __init__(self, recipe_name: str, config: dict, strategy: str, nproc: int, device: str = "cpu"):
        import json
        import subprocess
        import sys
        import tempfile

        request = json.dumps(
            {"recipe": recipe_name, "config": config, "strategy": strategy, "nproc": nproc, "device": device}
        )
        self.out = tempfile.TemporaryFile(mode="w+")
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ddplab.perf.memory", request],
            stdout=self.out,
            stderr=self.err,
            text=True,
            env=_clean_env(),
        )

    def done(self) -> bool:
        return self.proc.poll() is not None

    def cancel(self) -> None:
        """Stop the child if it still runs (a run that failed needs no prediction, and leaves no process)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def result(self, timeout_s: float) -> PredictedPeak:
        """The prediction's peak; DdplabError when it failed or is not done within timeout_s (then it is stopped)."""
        import json
        import subprocess

        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise DdplabError(
                f"the trace took longer than the training plus {timeout_s:.0f}s; run `ddplab memory` for it"
            ) from None
        self.out.seek(0)
        self.err.seek(0)
        if code != 0:
            last = (self.err.read().strip().splitlines() or ["no output"])[-1]
            raise DdplabError(f"memory prediction failed: {last}")
        return PredictedPeak(json.loads(self.out.read())["peak_bytes"])


def _clean_env() -> dict:
    """This process's environment without the launcher's rendezvous variables (the child is no rank)."""
    import os

    drop = (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "GROUP_RANK",
        "ROLE_RANK",
        "TORCHELASTIC_RUN_ID",
    )
    return {k: v for k, v in os.environ.items() if k not in drop}
