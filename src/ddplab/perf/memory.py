"""How much memory one rank needs for a training step, per strategy: the plan (what fits which GPU, the largest batch,
the strategy that rescues a model too big for DDP) and the measurement it is checked against.

The prediction itself is traced on fake tensors (ddplab.perf.memory_trace; its API is re-exported here). The
measured side (AllocatorPeak, ddplab.train.memory: the training loop measures it) is the allocator's own count: on CPU the profiler's memory events (every allocation
and free the c10 CPU allocator reports while profile_memory=True), on GPUs max_memory_allocated(). On GPUs the CUDA
context and the caching allocator's headroom are not allocations; the plan reports them apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ddplab.errors import DdplabError
from ddplab.perf.memory_trace import PARTS, MiB, Part, Prediction, Spec, trace  # noqa: F401  the public API
from ddplab.train.memory import AllocatorPeak, peak_bytes  # noqa: F401  the measured side, the training's own

# --------------------------------------------------------------------------------------------------- measuring


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
    return Spec(
        make_model=lambda: recipe.model(cfg, data),
        batch=tuple(data.take(indices)),
        make_optimizer=lambda m: recipe.optimizer(cfg, m),
        loss=recipe.loss,
        amp=cfg.amp,
        grad_clip=cfg.grad_clip,
        device=device,
    )


def with_batch(spec: Spec, batch_size: int) -> Spec:
    """The same step at another per-rank batch size (rows of the example batch repeated)."""
    rows = torch.arange(batch_size) % spec.batch[0].shape[0]
    return dataclasses.replace(spec, batch=tuple(t[rows] for t in spec.batch))


# --------------------------------------------------------------------------------------------------- planning

# Not allocations, so never traced; reported apart, GPU only.
CUDA_CONTEXT_BYTES = 2**30
CUDA_CONTEXT_SOURCE = (
    "assumed 1 GiB per process: the CUDA context takes ~700+ MB depending on CUDA version and "
    "device (PyTorch forums: discuss.pytorch.org/t/high-gpu-memory-overhead/81330 and "
    "/t/what-is-the-reason-for-pytorchs-gpu-memory-floor/73021), rounded up for NCCL's buffers"
)
MARGIN = 0.10  # of the GPU's memory, for the caching allocator's fragmentation and rounding (reserved > allocated)


@dataclass
class Fit:
    gpu: str
    memory_gb: float
    usable_bytes: int  # memory - CUDA context - margin
    fits: dict[str, bool] = field(default_factory=dict)  # strategy -> the requested batch fits
    largest_batch: dict[str, int] = field(default_factory=dict)  # strategy -> largest per-rank batch (0: none)
    source: str = ""
    memory_bytes: int = 0  # what ddplab counts: nvidia-smi's total (cost.Memory.total_bytes)


@dataclass
class HostFit:
    """This machine when the ranks train on its CPU: every rank's memory comes out of the same RAM, so N ranks need
    N times one rank's peak (issue 42 point 3: 2 ranks of 20 GiB on a 23.5 GiB host were OOM-killed)."""

    ram_bytes: int  # psutil's total
    available_bytes: int  # what psutil says is free now
    nproc: int  # ranks on this machine
    usable_bytes: int  # per rank: RAM - margin, shared out
    need_bytes: dict[str, int] = field(default_factory=dict)  # strategy -> every rank's peak together
    fits: dict[str, bool] = field(default_factory=dict)
    largest_batch: dict[str, int] = field(default_factory=dict)  # per rank, at nproc ranks


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
    host: HostFit | None = None  # this machine, when its ranks would train on the CPU


BASIS = [
    "traced: parameters, gradients, optimizer state, activations, temporaries, FSDP buffers - one real training "
    "step run twice on fake tensors (torch FakeTensorMode, fake process group of N ranks; torch's MemTracker / "
    "FSDPMemTracker count the live storages); no data, no compute, nothing allocated",
    "computed: DDP's gradient buckets (one flat copy of the trainable gradients; the gradients are views into it)",
    "largest batch: the straight line through the traced peaks at the batch and at twice the batch (activations "
    "grow linearly with the batch), against the GPU's memory - CUDA context - margin",
    'GPU memory: the total nvidia-smi shows (MiB), in GiB; a datasheet\'s "80GB" is that binary figure (A100 80GB: '
    "81920 MiB), not 80·10^9 bytes; `--gpus 24GiB` or `--gpus 24GB` (10^9 bytes) checks a size of your own",
]


def largest_batch(at_batch: int, peak: int, per_sample: float, usable: int) -> int:
    fixed = peak - per_sample * at_batch
    if fixed >= usable:
        return 0
    return int((usable - fixed) // per_sample) if per_sample > 0 else 10**9


def plan(
    spec: Spec,
    model_name: str,
    settings: dict,
    strategies_: list[str],
    nproc: int,
    gpus: dict,
    margin: float = MARGIN,
    context_bytes: int = CUDA_CONTEXT_BYTES,
    progress: Callable[[str], None] = lambda _: None,
    host: tuple[int, int] | None = None,
) -> MemoryReport:
    """Trace each strategy at the batch and at twice it; say what fits each GPU in `gpus` (name -> cost.Memory),
    and, given HOST = (RAM, free now) of a machine whose ranks train on its CPU, whether nproc ranks fit its RAM.
    progress: told before each trace (they take seconds each on CPU)."""
    batch = int(spec.batch[0].shape[0])
    predictions, per_sample = [], {}
    for i, name in enumerate(strategies_):
        progress(f"tracing {name} at batch {batch} and {2 * batch} ({i + 1} of {len(strategies_)})")
        at = trace(spec, name, nproc)
        double = trace(with_batch(spec, 2 * batch), name, nproc)
        predictions.append(at)
        per_sample[name] = max(double.peak_bytes - at.peak_bytes, 0) / batch
    with torch.device("meta"):
        parameters = sum(p.numel() for p in dict.fromkeys(spec.make_model().parameters()))
    fits = []
    for gpu in gpus.values():
        usable = int(gpu.total_bytes * (1 - margin)) - context_bytes
        fit = Fit(gpu.gpu, gpu.gb, usable, source=f"{gpu.source}; counted: {gpu.basis}", memory_bytes=gpu.total_bytes)
        for p in predictions:
            fit.fits[p.strategy] = p.peak_bytes <= usable
            fit.largest_batch[p.strategy] = largest_batch(batch, p.peak_bytes, per_sample[p.strategy], usable)
        fits.append(fit)
    report = MemoryReport(
        model_name,
        settings,
        parameters,
        batch,
        nproc,
        spec.amp,
        predictions,
        per_sample,
        fits,
        context_bytes,
        CUDA_CONTEXT_SOURCE,
        margin,
        basis=list(BASIS),
    )
    if host is not None:
        report.host = host_fit(predictions, per_sample, batch, nproc, margin, *host)
    report.advice = advice(report)
    return report


def host_memory() -> tuple[int, int]:
    """This machine's RAM and what is free of it now (bytes)."""
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def host_fit(
    predictions: list[Prediction],
    per_sample: dict[str, float],
    batch: int,
    nproc: int,
    margin: float,
    ram: int,
    available: int,
) -> HostFit:
    """Whether nproc ranks fit this machine's RAM together, per strategy, with the same margin as a GPU's (no CUDA
    context on CPU), and the largest per-rank batch at nproc ranks."""
    usable = int(ram * (1 - margin)) // nproc
    fit = HostFit(ram, available, nproc, usable)
    for p in predictions:
        fit.need_bytes[p.strategy] = nproc * p.peak_bytes
        fit.fits[p.strategy] = p.peak_bytes <= usable
        fit.largest_batch[p.strategy] = largest_batch(batch, p.peak_bytes, per_sample[p.strategy], usable)
    return fit


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def advice(report: MemoryReport) -> list[str]:
    """Per GPU: whether DDP fits, and if not, the first strategy that does (least communication first); on this
    machine's CPU, which strategies fit its RAM at nproc ranks and what would."""
    lines = host_advice(report.host, report.batch_size, report.margin) if report.host else []
    for fit in report.fits:
        if fit.fits.get("ddp"):
            continue
        rescue = next((s for s in ("zero1", "fsdp") if fit.fits.get(s)), None)
        if rescue:
            lines.append(
                f"{fit.gpu}: ddp does not fit batch {report.batch_size} at {report.nproc} rank(s); {rescue} "
                f"does (largest batch {fit.largest_batch[rescue]})"
            )
        elif any(s in fit.fits for s in ("zero1", "fsdp")):
            lines.append(
                f"{fit.gpu}: no strategy fits batch {report.batch_size} at {report.nproc} rank(s): more "
                "ranks (fsdp shrinks with them), a smaller --batch-size with --grad-accum, or --amp bf16"
            )
    return lines


def host_advice(host: HostFit, batch: int, margin: float) -> list[str]:
    short = [s for s, ok in host.fits.items() if not ok]
    if not short:
        worst = max(host.need_bytes.values())
        if worst > host.available_bytes:
            return [
                f"this CPU: {host.nproc} rank(s) fit its {gib(host.ram_bytes)} GiB of RAM but need up to "
                f"{gib(worst)} GiB, and {gib(host.available_bytes)} GiB is free now: close other programs first"
            ]
        return []
    needs = ", ".join(
        f"{s} needs {host.nproc} × {gib(host.need_bytes[s] / host.nproc)} = {gib(host.need_bytes[s])}" for s in short
    )
    fitting = [s for s, ok in host.fits.items() if ok]
    if fitting:
        fix = f"{fitting[0]} fits (largest batch {host.largest_batch[fitting[0]]})"
    else:
        best = max(host.largest_batch, key=host.largest_batch.get)
        fix = (
            f"fewer ranks (--nproc), a smaller --batch-size (the largest that fits at {host.nproc} rank(s): "
            f"{host.largest_batch[best]}, {best}) or a smaller --size"
        )
    return [
        f"this CPU: its {host.nproc} rank(s) share {gib(host.ram_bytes)} GiB of RAM ({gib(host.usable_bytes)} "
        f"GiB each with the {100 * margin:.0f} % margin); at batch {batch}, {needs} GiB: too much; {fix}"
    ]


# --------------------------------------------------------------------------------------------------- subprocess


def predict_recipe(recipe_name: str, config: dict, strategy: str, nproc: int, device: str = "cpu") -> Prediction:
    from ddplab.train.config import from_dict
    from ddplab.train.loop import load_recipe

    cfg = from_dict(load_recipe(recipe_name).config, config)
    return trace(recipe_spec(recipe_name, cfg, device=device), strategy, nproc)


def predicted_peak(request: dict) -> dict:
    """predict_recipe for a JSON request {recipe, config, strategy, nproc, device}, answered as a dict: the answer of
    `python -m ddplab.perf.memory REQUEST` (a rank's PredictElsewhere) and of the fork of its agent that `ddplab
    train` asks for."""
    keys = ("recipe", "config", "strategy", "nproc", "device")
    return dataclasses.asdict(predict_recipe(*(request[k] for k in keys)))


if __name__ == "__main__":
    import json
    import sys

    try:
        answer = predicted_peak(json.loads(sys.argv[1]))
    except DdplabError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    print(json.dumps(answer))
