"""The result of a training run, the per-rank proof table, and the warnings read from it.

Built on rank 0 at the end of a run; printed by rank 0 under torchrun, or returned to `ddplab train`, which prints
the same thing. Plain dataclasses: `--json` prints them as they are.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ddplab import report
from ddplab.launcher.preempt import EXIT_PREEMPTED

PREDICTION_GRACE_S = 120.0  # how long the end of a run waits for a memory prediction slower than the training
SLOW_FACTOR = 1.5  # a rank whose compute per step exceeds the median by this much holds every other rank back
SLOW_FLOOR_MS = 0.5  # below this, differences are timer noise


@dataclass
class Preempted:
    """A signal stopped every rank after the same step; the state was saved there (when there is a checkpoint dir)."""

    step: int
    checkpoint: str | None

    @property
    def exit_code(self) -> int:
        return EXIT_PREEMPTED if self.checkpoint else 1

    def line(self) -> str:
        if self.checkpoint:
            return f"preempted, state saved at step {self.step}: {self.checkpoint}; run again with --resume"
        return f"preempted at step {self.step}, nothing saved: pass --checkpoint-dir to save on a signal"


@dataclass
class RankStats:
    rank: int
    samples: int
    steps: int
    step_ms: float  # mean wall time per optimizer step
    comm_wait_ms: float | None  # mean exposed communication per step: waiting for all-reduce and for slower ranks
    cpu_percent: float  # this process's CPU use over the run (100 = one core)
    gpu_util_percent: float | None  # NVML, GPUs only
    peak_memory_mb: float
    final_loss: float
    digest: str  # sha256 of the parameters at the end
    allocator_peak_mb: float | None = None  # the allocator's peak over model build + 2 steps (CPU: profiler)
    predicted_peak_mb: float | None = None  # ddplab memory's prediction of that peak (rank 0 computes it)

    @property
    def compute_ms(self) -> float:
        return max(self.step_ms - (self.comm_wait_ms or 0.0), 0.0)


@dataclass
class TrainResult:
    recipe: str
    status: str  # PASS, or FAIL when the ranks' parameters differ
    world_size: int
    backend: str
    device: str
    batch_size: int  # per rank, per micro-batch
    grad_accum: int
    global_batch: int
    epochs: int
    steps: int  # optimizer steps this run took
    total_steps: int  # the step reached at the end (counts steps before a resume)
    planned_steps: int
    samples: int  # samples this run trained on, all ranks together
    seconds: float  # the whole training loop
    timed_steps: int  # the steps samples_per_sec is measured over: after the warm-up (compile, first all-reduce)
    samples_per_sec: float
    final_loss: float
    params_identical: bool
    ranks: list[RankStats]
    parameters: int = 0  # trainable parameters: what every step's gradient all-reduce carries
    strategy: str = "ddp"  # ddp | zero1 | fsdp (ddplab.train.strategy)
    tokens_per_sec: float | None = None
    mfu: float | None = None
    mfu_note: str = ""
    weight: float | None = None  # linear: the fitted slope (target 2)
    bias: float | None = None  # linear: the fitted intercept (target 1)
    accuracy: float | None = None  # mlp: accuracy on the training set at the end
    resumed_from: str | None = None
    stopped_early: bool = False
    model_file: str | None = None
    checkpoint: str | None = None
    metrics_file: str | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    profile: object = None  # `--profile`: perf.profile.Profile, added by the caller
    sanitize: object = None  # sanitize.readout.SanitizeReport of the first steps (None with --sanitize-steps 0)

    @classmethod
    def from_dict(cls, d: dict) -> TrainResult:
        return cls(**{**d, "ranks": [RankStats(**r) for r in d["ranks"]]})


def rank_warnings(ranks: list[RankStats]) -> list[str]:
    """A rank that did nothing, or one far slower than the others, and the likely cause."""
    out = []
    for r in ranks:
        if r.samples == 0 or r.steps == 0:
            out.append(
                f"rank {r.rank} processed no samples: its shard of the data was empty (fewer samples than "
                "world size x batch size) or it never reached the training loop"
            )
    if len(ranks) > 1:
        median = statistics.median(r.compute_ms for r in ranks)
        for r in ranks:
            if r.compute_ms > SLOW_FACTOR * median and r.compute_ms - median > SLOW_FLOOR_MS:
                out.append(
                    f"rank {r.rank} computes {r.compute_ms / median:.1f}x slower than the median rank "
                    f"({r.compute_ms:.2f} vs {median:.2f} ms/step) and the others wait for it in every "
                    "all-reduce: likely another process competing for its CPU core or GPU, a slower or "
                    "throttled device, or more threads than cores (set OMP_NUM_THREADS)"
                )
    return out


def render(con, r: TrainResult) -> None:
    con.print(
        report.text(
            report.bold(r.recipe),
            f" ({r.parameters:,} parameters): {r.world_size} rank(s), {r.backend} "
            f"on {r.device}, global batch {r.global_batch} = {r.batch_size} per rank x {r.world_size} "
            f"rank(s) x {r.grad_accum} micro-batch(es)",
        )
    )
    stop = f" (stopped early at step {r.total_steps} of {r.planned_steps})" if r.stopped_early else ""
    con.print(
        f"trained {r.steps} steps, {r.samples} samples in {r.seconds:.1f}s; {r.samples_per_sec:,.0f} "
        f"samples/s over the last {r.timed_steps} steps; final loss {r.final_loss:.4f}{stop}"
    )
    if r.tokens_per_sec is not None:
        con.print(
            f"tokens/s {r.tokens_per_sec:,.0f}; MFU "
            + (f"{100 * r.mfu:.1f}% " if r.mfu is not None else "")
            + f"({r.mfu_note})"
        )
    if r.weight is not None:
        con.print(f"fitted y = {r.weight:.4f} x + {r.bias:.4f} (target y = 2 x + 1)")
    if r.accuracy is not None:
        con.print(f"training-set accuracy {100 * r.accuracy:.1f}%")

    gpu = any(s.gpu_util_percent is not None for s in r.ranks)
    Column = report.Column
    # Numbers stay whole at any width (a CI log is 80 columns): narrower headers first, then the columns the proof
    # needs least are left out, and said so.
    columns = [
        Column("rank"),
        Column("samples"),
        Column("steps"),
        Column("step ms"),
        Column("comm wait ms"),
        Column("compute ms", drop=4),
        Column("GPU util %" if gpu else "CPU %", drop=3),
        Column("peak MiB", drop=1),
        Column("alloc peak MiB", drop=2),
        Column("predicted", drop=2),
        Column("loss"),
    ]
    rows = []
    for s in r.ranks:
        util = s.gpu_util_percent if gpu else s.cpu_percent
        wait = "-" if s.comm_wait_ms is None else f"{s.comm_wait_ms:.2f}"
        rows.append(
            [
                str(s.rank),
                str(s.samples),
                str(s.steps),
                f"{s.step_ms:.2f}",
                wait,
                f"{s.compute_ms:.2f}",
                "-" if util is None else f"{util:.0f}",
                f"{s.peak_memory_mb:.0f}",
                _mib(s.allocator_peak_mb),
                _mib(s.predicted_peak_mb),
                f"{s.final_loss:.4f}",
            ]
        )
    t, left_out = report.fit_table(con.width, columns, rows, box=None)
    con.print(t)
    if left_out:
        con.print(f"note: left out for a {con.width}-column output: {', '.join(left_out)} (set COLUMNS wider)")
    con.print(
        f"memory ({r.strategy}): peak MiB = the process's peak RSS on CPU, the allocator's on GPUs; alloc peak ="
        " the allocator's peak over model build + 2 steps (CPU: profiler memory events); predicted = "
        "`ddplab memory`'s traced prediction of it (the rank that needs most)"
    )
    if r.params_identical:
        con.print(
            report.text(
                f"parameters identical on all {r.world_size} rank(s): ",
                report.styled("PASS"),
                f" (sha256 {r.ranks[0].digest[:12]})",
            )
        )
    else:
        digests = ", ".join(f"rank {s.rank} {s.digest[:12]}" for s in r.ranks)
        con.print(report.text("parameters identical on all ranks: ", report.styled("FAIL"), f" ({digests})"))
    for note in r.notes:
        con.print(f"note: {note}")
    if r.model_file:
        con.print(f"model: {r.model_file} (plain state_dict: model.load_state_dict(torch.load(path)))")
    if r.checkpoint:
        con.print(f"checkpoint: {r.checkpoint}")
    if r.metrics_file:
        con.print(f"metrics: {r.metrics_file}")
    for w in r.warnings:
        con.print(report.text(report.styled("WARN"), f" {w}"))
    if r.profile is not None:
        r.profile.show(con)
    from ddplab.sanitize.readout import render as render_sanitize

    if text := render_sanitize(r.sanitize):  # a recipe is written right: the sanitizer has nothing to say
        con.print(text, markup=False, highlight=False, soft_wrap=True)


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


@dataclass
class TrainFailure:
    """What --json prints when the run itself failed (bad input is a one-line error instead)."""

    status: str  # failed | hang | interrupted
    summary: str
    root_cause: int | None
    ranks: list[dict] = field(default_factory=list)
    flight: object = None  # which collective each rank last called (flight.reader)
    kept: str = ""  # the folder holding every rank's whole output ("" when there was none)


@dataclass
class NodeDone:
    """What a node other than node 0 prints: its ranks finished; rank 0's node prints the training's result."""

    ranks: list[int]
    seconds: float
    status: str = "PASS"


def render_node(con, r: NodeDone) -> None:
    con.print(
        f"ranks {', '.join(map(str, r.ranks))} finished in {r.seconds:.1f}s; the node running rank 0 prints "
        "the training's result"
    )


def render_failure(con, f: TrainFailure) -> None:
    con.print(report.text(report.styled("TIMEOUT" if f.status == "hang" else "FAIL"), f" {f.summary}"))
    for r in f.ranks:
        detail = r["stack"] if f.status == "hang" else (r["output_tail"] if r["rank"] == f.root_cause else None)
        if detail:
            con.print(f"--- rank {r['rank']} ({'stack' if f.status == 'hang' else 'last output'}):")
            con.print(detail, markup=False, highlight=False)
    if f.flight is not None and f.flight.available:
        from ddplab.flight.reader import render as render_flight

        con.print(render_flight(f.flight), markup=False, highlight=False)
    if f.kept:
        con.print(f"kept: every rank's whole output in {f.kept} (delete it when done)", soft_wrap=True)
