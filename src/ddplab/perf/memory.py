"""How much memory one rank needs for a training step, per strategy, predicted without running the step.

How the prediction is made (nothing here runs the step being predicted, and no constant is fitted to measurements):

- traced: the model is built and one training step is executed twice under PyTorch's FakeTensorMode, inside a fake
  process group of N ranks ("fake" backend, rank 0 of N). Fake tensors carry shapes, dtypes and storages but no
  data, so nothing is computed or allocated, yet every operator's output storage exists for exactly as long as it
  would in a real step. torch's own memory trackers (torch.distributed._tools.mem_tracker.MemTracker, and
  FSDPMemTracker for FSDP2) follow those storages and report the peak of live bytes with each byte's role:
  parameters, gradients, optimizer state, activations, temporaries, FSDP's all-gather / reduce-scatter buffers.
  zero1 runs the real ZeroRedundancyOptimizer and fsdp the real fully_shard, so their shards are traced too.
- computed: DDP cannot wrap fake tensors (it checks parameter data across ranks), so its gradient buckets are
  computed: one flat buffer per dtype holding every trainable gradient (torch's Reducer with
  gradient_as_bucket_view=True, as ddplab train uses: the gradients are views into the buckets, so buckets and
  gradients are one allocation). The trace places that buffer before the step, so the peak accounts for it.
  On GPUs the CUDA context and the caching allocator's headroom are not allocations; they are reported apart.

The measured side (AllocatorPeak) is the allocator's own count: on CPU the profiler's memory events (every
allocation and free the c10 CPU allocator reports while profile_memory=True), on GPUs max_memory_allocated().
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from ddplab.errors import DdplabError
from ddplab.train import strategy as strategies

MiB = 2**20

# Part names, in the order they are shown; the tracker's categories map onto them.
PARTS = ("parameters", "gradients", "DDP buckets (hold the gradients)", "optimizer state + its step's temporaries",
         "activations",
         "temporaries", "FSDP all-gather buffers", "FSDP reduce-scatter buffers", "input batch", "other")
_CATEGORY = {
    "Parameter": "parameters", "Buffer": "parameters", "Sharded Param": "parameters",
    "Unsharded Param": "FSDP all-gather buffers", "All Gather": "FSDP all-gather buffers",
    "Gradient": "gradients", "Sharded Grad": "gradients", "Unsharded Grad": "FSDP reduce-scatter buffers",
    "Reduce Scatter": "FSDP reduce-scatter buffers", "Optstate": "optimizer state + its step's temporaries",
    "OptState": "optimizer state + its step's temporaries", "Activation": "activations",
    "Temp": "temporaries", "Inputs": "input batch", "Other": "other",
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
        raise DdplabError("memory prediction needs its own fake process group, and this process already belongs to "
                          "a real one: predict before init_process_group, or in another process")
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend

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
        raise DdplabError(f"memory prediction needs torch.distributed._tools.mem_tracker (torch>=2.6); this is "
                          f"torch {torch.__version__}: upgrade torch") from None
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
            p.grad = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        buckets.append(flat)
    return buckets


def _partition_rank(optimizer) -> int:
    """The rank whose ZeRO share of the optimizer state is largest (ZeroRedundancyOptimizer's own partition)."""
    shares = [sum(p.numel() * p.element_size() for g in groups for p in g["params"])
              for groups in optimizer._partition_parameters()]
    return max(range(len(shares)), key=shares.__getitem__)


def trace(spec: Spec, strategy: str, nproc: int, rank: int = 0, steps: int = 2) -> Prediction:
    """Trace model build + `steps` training steps of rank `rank` of `nproc` under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    MemTracker, FSDPMemTracker = _trackers()
    from ddplab.perf import fsdp_tracker
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
            with tracker, fsdp_tracker.metadata_ops_untracked():
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


# --------------------------------------------------------------------------------------------------- measuring


class AllocatorPeak:
    """The allocator's peak of live bytes between start() and stop(), above what was live at start().

    CPU: the profiler with profile_memory=True; the c10 CPU allocator reports every allocation and free made
    while it runs, so the running sum of those events is the live bytes it handed out, and its maximum the peak.
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
        events = [(e.start_ns(), e.nbytes()) for e in self.prof.kineto_results.events()
                  if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
        live = peak = 0
        for _, nbytes in sorted(events):
            live += nbytes
            peak = max(peak, live)
        self.peak, self.prof = peak, None

    def measured_mb(self) -> float | None:
        self.stop()
        return None if self.peak is None else self.peak / MiB


def measure(fn: Callable[[], None], device: torch.device) -> int:
    """Allocator peak of running fn()."""
    peak = AllocatorPeak(device)
    peak.start()
    try:
        fn()
    finally:
        peak.stop()
    return int(peak.peak or 0)


# --------------------------------------------------------------------------------------------------- recipes


def recipe_spec(recipe_name: str, cfg, batch_size: int | None = None, device: str = "cpu") -> Spec:
    """The step `ddplab train RECIPE` runs with these flags, as a Spec (the data is built for real: it is small)."""
    from ddplab.train.loop import load_recipe

    recipe = load_recipe(recipe_name)
    if batch_size is not None:
        cfg = dataclasses.replace(cfg, batch_size=batch_size)
    data = recipe.data(cfg)
    if len(data) < 1:
        raise DdplabError("the recipe's data holds no sample at these flags: use more data or a smaller shape")
    indices = torch.arange(cfg.batch_size) % len(data)
    return Spec(make_model=lambda: recipe.model(cfg, data), batch=tuple(data.take(indices)),
                make_optimizer=lambda m: recipe.optimizer(cfg, m), loss=recipe.loss, amp=cfg.amp,
                grad_clip=cfg.grad_clip, device=device)


def with_batch(spec: Spec, batch_size: int) -> Spec:
    """The same step at another per-rank batch size (rows of the example batch repeated)."""
    rows = torch.arange(batch_size) % spec.batch[0].shape[0]
    return dataclasses.replace(spec, batch=tuple(t[rows] for t in spec.batch))


# --------------------------------------------------------------------------------------------------- planning

# Not allocations, so never traced; reported apart, GPU only.
CUDA_CONTEXT_BYTES = 2**30
CUDA_CONTEXT_SOURCE = ("assumed 1 GiB per process: the CUDA context takes ~700+ MB depending on CUDA version and "
                       "device (PyTorch forums: discuss.pytorch.org/t/high-gpu-memory-overhead/81330 and "
                       "/t/what-is-the-reason-for-pytorchs-gpu-memory-floor/73021), rounded up for NCCL's buffers")
MARGIN = 0.10  # of the GPU's memory, for the caching allocator's fragmentation and rounding (reserved > allocated)


@dataclass
class Fit:
    gpu: str
    memory_gb: float
    usable_bytes: int  # memory - CUDA context - margin
    fits: dict[str, bool] = field(default_factory=dict)  # strategy -> the requested batch fits
    largest_batch: dict[str, int] = field(default_factory=dict)  # strategy -> largest per-rank batch (0: none)
    source: str = ""


@dataclass
class MemoryReport:
    model: str
    settings: dict  # the flags that shape the step
    parameters: int
    batch_size: int
    nproc: int
    amp: str
    predictions: list[Prediction]  # one per strategy, at batch_size
    per_sample_bytes: dict[str, float]  # strategy -> peak growth per sample (traced at batch and 2 x batch)
    fits: list[Fit]
    cuda_context_bytes: int = CUDA_CONTEXT_BYTES
    cuda_context_source: str = CUDA_CONTEXT_SOURCE
    margin: float = MARGIN
    advice: list[str] = field(default_factory=list)
    basis: list[str] = field(default_factory=list)


BASIS = [
    "traced: parameters, gradients, optimizer state, activations, temporaries, FSDP buffers - one real training "
    "step run twice on fake tensors (torch FakeTensorMode, fake process group of N ranks; torch's MemTracker / "
    "FSDPMemTracker count the live storages); no data, no compute, nothing allocated",
    "computed: DDP's gradient buckets (one flat copy of the trainable gradients; the gradients are views into it)",
    "largest batch: the straight line through the traced peaks at the batch and at twice the batch (activations "
    "grow linearly with the batch), against the GPU's memory - CUDA context - margin",
]


def largest_batch(at_batch: int, peak: int, per_sample: float, usable: int) -> int:
    fixed = peak - per_sample * at_batch
    if fixed >= usable:
        return 0
    return int((usable - fixed) // per_sample) if per_sample > 0 else 10**9


def plan(spec: Spec, model_name: str, settings: dict, strategies_: list[str], nproc: int, gpus: dict,
         margin: float = MARGIN, context_bytes: int = CUDA_CONTEXT_BYTES) -> MemoryReport:
    """Trace each strategy at the batch and at twice it; say what fits each GPU in `gpus` (name -> cost.Memory)."""
    batch = int(spec.batch[0].shape[0])
    predictions, per_sample = [], {}
    for name in strategies_:
        at = trace(spec, name, nproc)
        double = trace(with_batch(spec, 2 * batch), name, nproc)
        predictions.append(at)
        per_sample[name] = max(double.peak_bytes - at.peak_bytes, 0) / batch
    with torch.device("meta"):
        parameters = sum(p.numel() for p in dict.fromkeys(spec.make_model().parameters()))
    fits = []
    for gpu in gpus.values():
        usable = int(gpu.gb * 1e9 * (1 - margin)) - context_bytes
        fit = Fit(gpu.gpu, gpu.gb, usable, source=gpu.source)
        for p in predictions:
            fit.fits[p.strategy] = p.peak_bytes <= usable
            fit.largest_batch[p.strategy] = largest_batch(batch, p.peak_bytes, per_sample[p.strategy], usable)
        fits.append(fit)
    report = MemoryReport(model_name, settings, parameters, batch, nproc, spec.amp, predictions, per_sample, fits,
                          context_bytes, CUDA_CONTEXT_SOURCE, margin, basis=list(BASIS))
    report.advice = advice(report)
    return report


def advice(report: MemoryReport) -> list[str]:
    """Per GPU: whether DDP fits, and if not, the first strategy that does (least communication first)."""
    lines = []
    for fit in report.fits:
        if fit.fits.get("ddp"):
            continue
        rescue = next((s for s in ("zero1", "fsdp") if fit.fits.get(s)), None)
        if rescue:
            lines.append(f"{fit.gpu}: ddp does not fit batch {report.batch_size} at {report.nproc} rank(s); {rescue} "
                         f"does (largest batch {fit.largest_batch[rescue]})")
        elif any(s in fit.fits for s in ("zero1", "fsdp")):
            lines.append(f"{fit.gpu}: no strategy fits batch {report.batch_size} at {report.nproc} rank(s): more "
                         "ranks (fsdp shrinks with them), a smaller --batch-size with --grad-accum, or --amp bf16")
    return lines


# --------------------------------------------------------------------------------------------------- subprocess


def predict_recipe(recipe_name: str, config: dict, strategy: str, nproc: int, device: str = "cpu") -> Prediction:
    from ddplab.train.config import from_dict
    from ddplab.train.loop import load_recipe

    cfg = from_dict(load_recipe(recipe_name).config, config)
    return trace(recipe_spec(recipe_name, cfg, device=device), strategy, nproc)


class PredictElsewhere:
    """predict_recipe in a fresh interpreter, started now and collected later: for a training rank, which belongs
    to a real process group and so cannot hold the fake one the trace needs; the trace runs while it trains."""

    def __init__(self, recipe_name: str, config: dict, strategy: str, nproc: int, device: str = "cpu"):
        import json
        import subprocess
        import sys
        import tempfile

        request = json.dumps({"recipe": recipe_name, "config": config, "strategy": strategy, "nproc": nproc,
                              "device": device})
        self.out = tempfile.TemporaryFile(mode="w+")
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "ddplab.perf.memory", request], stdout=self.out,
                                     stderr=self.err, text=True, env=_clean_env())

    def result(self, timeout_s: float) -> Prediction:
        """The prediction; DdplabError when it failed or is not done within timeout_s (then it is stopped)."""
        import json
        import subprocess

        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise DdplabError(f"the trace took longer than the training plus {timeout_s:.0f}s; run `ddplab memory` "
                              "for it") from None
        self.out.seek(0)
        self.err.seek(0)
        if code != 0:
            last = (self.err.read().strip().splitlines() or ["no output"])[-1]
            raise DdplabError(f"memory prediction failed: {last}")
        data = json.loads(self.out.read())
        data["parts"] = [Part(**p) for p in data["parts"]]
        return Prediction(**data)


def _clean_env() -> dict:
    """This process's environment without the launcher's rendezvous variables (the child is no rank)."""
    import os

    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
            "ROLE_RANK", "TORCHELASTIC_RUN_ID")
    return {k: v for k, v in os.environ.items() if k not in drop}


if __name__ == "__main__":
    import json
    import sys

    args = json.loads(sys.argv[1])
    try:
        result = predict_recipe(args["recipe"], args["config"], args["strategy"], args["nproc"], args["device"])
    except DdplabError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    print(json.dumps(dataclasses.asdict(result)))
