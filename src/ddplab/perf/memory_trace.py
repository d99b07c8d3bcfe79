"""The prediction: one rank's peak memory for a training step, traced on fake tensors (ddplab.perf.memory plans
with it and measures the real thing).

Nothing here runs the step being predicted, and no constant is fitted to measurements:

- traced: the model is built and one training step is executed twice under PyTorch's FakeTensorMode, inside a fake
  process group of N ranks ("fake" backend, rank 0 of N). Fake tensors carry shapes, dtypes and storages but no
  data, so nothing is computed or allocated, yet every operator's output storage exists for exactly as long as it
  would in a real step. torch's own memory trackers (torch.distributed._tools.mem_tracker.MemTracker, and
  FSDPMemTracker for FSDP2, corrected in ddplab.perf.fsdp_tracker) follow those storages and report the peak of
  live bytes with each byte's role: parameters, gradients, optimizer state, activations, temporaries, FSDP's
  all-gather / reduce-scatter buffers.
  zero1 runs the real ZeroRedundancyOptimizer and fsdp the real fully_shard, so their shards are traced too.
- computed: DDP cannot wrap fake tensors (it checks parameter data across ranks), so its gradient buckets are
  computed: one flat buffer per dtype holding every trainable gradient (torch's Reducer with
  gradient_as_bucket_view=True, as ddplab train uses: the gradients are views into the buckets, so buckets and
  gradients are one allocation). The trace places that buffer before the step, so the peak accounts for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ddplab.errors import DdplabError
from ddplab.train import strategy as strategies

MiB = 2**20

# Part names, in the order they are shown; the tracker's categories map onto them.
PARTS = (
    "parameters",
    "gradients",
    "DDP buckets (hold the gradients)",
    "optimizer state + its step's temporaries",
    "activations",
    "temporaries",
    "FSDP all-gather buffers",
    "FSDP reduce-scatter buffers",
    "input batch",
    "other",
)
_CATEGORY = {
    "Parameter": "parameters",
    "Buffer": "parameters",
    "Sharded Param": "parameters",
    "Unsharded Param": "FSDP all-gather buffers",
    "All Gather": "FSDP all-gather buffers",
    "Gradient": "gradients",
    "Sharded Grad": "gradients",
    "Unsharded Grad": "FSDP reduce-scatter buffers",
    "Reduce Scatter": "FSDP reduce-scatter buffers",
    "Optstate": "optimizer state + its step's temporaries",
    "OptState": "optimizer state + its step's temporaries",
    "Activation": "activations",
    "Temp": "temporaries",
    "Inputs": "input batch",
    "Other": "other",
}


@dataclass
class Spec:
    """One training step to trace: a user's own model works the same as a recipe's."""

    make_model: Callable[[], nn.Module]  # builds the model (called under FakeTensorMode: allocates nothing)
    batch: tuple  # an example per-rank batch (real tensors, small: token ids or features)
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    loss: Callable[[nn.Module, tuple], torch.Tensor]
    amp: str = "none"  # none | bf16 | fp16
    grad_clip: float = 0.0
    device: str = "cpu"


@dataclass
class Part:
    name: str
    bytes: int
    basis: str  # traced | computed


@dataclass
class Prediction:
    strategy: str
    nproc: int
    batch_size: int
    peak_bytes: int  # allocator peak of one rank over model build + two steps
    parts: list[Part]  # what is live at that peak
    between_steps_bytes: int  # live after a step: what stays (weights, gradients in DDP buckets, optimizer state)
    rank: int = 0  # the rank traced (zero1: the one holding the largest share)

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / MiB


# --------------------------------------------------------------------------------------------------- tracing


@contextlib.contextmanager
def fake_group(nproc: int, rank: int):
    """A process group of `nproc` ranks that does no communication (torch's "fake" backend), for this process
    only. Refused where a real group exists: the trace would otherwise talk to real ranks."""
    if dist.is_initialized():
        raise DdplabError(
            "memory prediction needs its own fake process group, and this process already belongs to "
            "a real one: predict before init_process_group, or in another process"
        )
    if "fake" not in dist.Backend.backend_list:  # built in on recent torch (2.13); else its testing module adds it
        import torch.testing._internal.distributed.fake_pg  # noqa: F401

    dist.init_process_group("fake", store=dist.HashStore(), rank=rank, world_size=nproc)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _trackers():
    try:
        from torch.distributed._tools.mem_tracker import MemTracker

        from ddplab.perf.fsdp_tracker import ExactFSDPMemTracker
    except ImportError:
        raise DdplabError(
            f"memory prediction needs torch.distributed._tools.mem_tracker (torch>=2.6); this is "
            f"torch {torch.__version__}: upgrade torch"
        ) from None
    return MemTracker, ExactFSDPMemTracker


def _autocast(spec: Spec):
    if spec.amp == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=spec.device, dtype=torch.bfloat16 if spec.amp == "bf16" else torch.float16)


def _ddp_buckets(model: nn.Module) -> list[torch.Tensor]:
    """DDP's gradient buckets (computed): one flat buffer per dtype; each gradient becomes a view into it."""
    buckets = []
    by_dtype: dict[torch.dtype, list[nn.Parameter]] = {}
    for p in dict.fromkeys(p for p in model.parameters() if p.requires_grad):  # tied weights count once
        by_dtype.setdefault(p.dtype, []).append(p)
    for dtype, params in by_dtype.items():
        flat = torch.zeros(sum(p.numel() for p in params), dtype=dtype, device=params[0].device)
        offset = 0
        for p in params:
            p.grad = flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        buckets.append(flat)
    return buckets


def _partition_rank(optimizer) -> int:
    """The rank whose ZeRO share of the optimizer state is largest (ZeroRedundancyOptimizer's own partition)."""
    shares = [
        sum(p.numel() * p.element_size() for g in groups for p in g["params"])
        for groups in optimizer._partition_parameters()
    ]
    return max(range(len(shares)), key=shares.__getitem__)


def trace(spec: Spec, strategy: str, nproc: int, rank: int = 0, steps: int = 2) -> Prediction:
    """Trace model build + `steps` training steps of rank `rank` of `nproc` under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    MemTracker, FSDPMemTracker = _trackers()
    strategies.check(strategy)
    device = torch.device(spec.device)
    batch_size = int(spec.batch[0].shape[0])
    with fake_group(nproc, rank):
        mesh = None
        if strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(spec.device, (nproc,))  # outside fake mode: the mesh holds real rank ids
        with FakeTensorMode(allow_non_fake_inputs=True) as fake:
            batch = tuple(fake.from_tensor(t.to(device)) for t in spec.batch)
            if strategy == "fsdp":
                with device:  # built where it will live (a fake tensor cannot be moved by Module.to)
                    model = spec.make_model()
                wrapped = strategies.wrap("fsdp", model, spec.make_optimizer, nproc, device, mesh=mesh)
                optimizer, buckets = wrapped.optimizer, []
                tracker = FSDPMemTracker(model, optimizer)
                tracker.track_inputs(batch)
            else:
                tracker = MemTracker()
                with device:
                    model = spec.make_model()
                optimizer = spec.make_optimizer(model)
                if strategy == "zero1":
                    optimizer = strategies.zero1(optimizer)
                    biggest = _partition_rank(optimizer)
                    if biggest != rank:  # predict the rank that needs most
                        return trace(spec, strategy, nproc, biggest, steps)
                buckets = _ddp_buckets(model) if nproc > 1 else []
                tracker.track_external(model, optimizer, *batch, *buckets)
            between = 0
            with tracker:
                for _ in range(steps):
                    with _autocast(spec):
                        loss = spec.loss(model, batch)
                    loss.backward()
                    if spec.grad_clip:
                        nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
                    optimizer.step()
                    # DDP's buckets stay whatever zero_grad does; zeroing in place keeps the emulated views in them
                    optimizer.zero_grad(set_to_none=not buckets)
                    del loss
                    between = _live(tracker)
                    tracker.reset_mod_stats()  # per-module statistics only; the peak stays
            peak = tracker.get_tracker_snapshot("peak")
    bucket_bytes = sum(b.numel() * b.element_size() for b in buckets)
    return Prediction(strategy, nproc, batch_size, _total(peak), _parts(peak, bucket_bytes), between, rank)


def _device_snapshot(snapshot: dict) -> dict:
    real = [v for k, v in snapshot.items() if str(k) != "meta"] or list(snapshot.values())
    merged: dict = {}
    for per_device in real:
        for k, v in per_device.items():
            merged[k] = merged.get(k, 0) + v
    return merged


def _total(snapshot: dict) -> int:
    return int(_device_snapshot(snapshot).get("Total", 0))


def _live(tracker) -> int:
    return _total(tracker.get_tracker_snapshot("current"))


def _parts(snapshot: dict, bucket_bytes: int) -> list[Part]:
    sums: dict[str, int] = {}
    for category, value in _device_snapshot(snapshot).items():
        if category == "Total" or not value:
            continue
        name = _CATEGORY.get(str(getattr(category, "value", category)), "other")
        sums[name] = sums.get(name, 0) + int(value)
    # What was handed to the tracker from outside (track_external) is "other": the input batch and, under DDP,
    # the buckets, whose size is known; gradients that are views into the buckets are counted there.
    if bucket_bytes:
        sums["DDP buckets (hold the gradients)"] = bucket_bytes
        sums["other"] = sums.get("other", 0) + sums.pop("gradients", 0) - bucket_bytes
    if "other" in sums:
        sums["input batch"] = sums.get("input batch", 0) + sums.pop("other")
        if sums["input batch"] <= 0:
            sums.pop("input batch")
    return [Part(n, sums[n], "computed" if n.startswith("DDP buckets") else "traced") for n in PARTS if n in sums]
