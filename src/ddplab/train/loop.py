"""The training loop every recipe shares: data-parallel training done right, readable top to bottom.

A recipe (ddplab/recipes/*.py) says *what* to train: data, model, loss, optimizer. `fit` says *how*, the same way
for all of them:

 1. Join the process group the launcher described (ddplab.dist: gloo on CPU, NCCL on GPUs, device from LOCAL_RANK).
 2. Build the same dataset on every rank from the seed; each rank trains on its DistributedSampler shard
    (`Schedule`: steps per epoch, planned, where --max-steps stops).
 3. Build the model from the same seed (`build_model`); torch.compile it (optional); spread it over the ranks by
    --strategy (ddplab.train.strategy): ddp wraps it in DDP, which also broadcasts rank 0's weights so that every
    rank starts identical (a single process skips the wrapper: there is nothing to synchronise); zero1 adds a
    ZeroRedundancyOptimizer; fsdp shards it with FSDP2's fully_shard. Then restore a checkpoint when resuming.
 4. Each step (`TrainStep`): micro-batches accumulate gradients locally under no_sync() (no all-reduce), only the
    last one synchronises; the loss is divided by the number of micro-batches so the sum is the mean. bf16
    autocast on CPU or GPU; fp16 needs a GradScaler, and unscale_() before clipping so the clip sees real
    gradient norms.
 5. Every log_every steps (`LogWindow`): the loss averaged over ranks, per-rank step times, one JSONL line, the
    progress bar.
 6. Checkpoints by rank 0 (ddplab.ckptfile) with the sampler position and every rank's RNG state, so that
    --resume takes exactly the batch an uninterrupted run would have taken next; one `Checkpointer`
    (train/checkpointer.py) decides when: every N steps, each epoch's end, the run's end, an agreed signal.
 7. At the end: per-rank statistics (`Measurements`) gathered to rank 0 (with the allocator's peak over the
    model's build and first two steps, next to `ddplab memory`'s prediction of it), the parameters compared across
    ranks, and the whole model saved as a plain state_dict (no "module." from DDP, no "_orig_mod." from
    torch.compile, no shards from FSDP).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import ddplab.dist as dd
from ddplab import ckptfile, report, resume, statedict
from ddplab.errors import DdplabError
from ddplab.launcher.progress import mark
from ddplab.train import metrics, strategy
from ddplab.train.checkpointer import Checkpointer, check_compatible, restarting  # noqa: F401  (API)
from ddplab.train.config import TrainConfig, from_arguments, from_dict, parser
from ddplab.train.data import Batch, ShardedBatches, TensorData
from ddplab.train.memory import AllocatorPeak, PredictElsewhere
from ddplab.train.progress import Reporter
from ddplab.train.result import (  # noqa: F401  (Preempted: the API)
    PREDICTION_GRACE_S,
    Preempted,
    RankStats,
    TrainResult,
    rank_warnings,
    render,
)


@dataclass(frozen=True)
class Recipe:
    """What a recipe provides; everything else is the loop's job."""

    name: str
    config: type[TrainConfig]
    data: Callable[[TrainConfig], TensorData]  # must build the same data on every rank (seeded)
    model: Callable[[TrainConfig, TensorData], nn.Module]
    optimizer: Callable[[TrainConfig, nn.Module], torch.optim.Optimizer]
    loss: Callable[[nn.Module, Batch], Tensor]
    lr_at: Callable[[TrainConfig, int, int], float] | None = None  # (cfg, step, total steps) -> learning rate
    summary: Callable[[TrainConfig, nn.Module, TensorData], dict] | None = None  # extra result fields
    flops_per_sample: Callable[[TrainConfig, nn.Module], float] | None = None  # for MFU on GPUs
    tokens_per_sample: Callable[[TrainConfig], int] | None = None

    def main(self, argv: list[str] | None = None) -> int:
        """Entry point under torchrun (`torchrun --nproc-per-node 2 -m ddplab.recipes.NAME`)."""
        flags = parser(self.config, prog=f"python -m ddplab.recipes.{self.name}").parse_args(argv)
        cfg = from_arguments(self.config, flags)
        prog, rank = f"ddplab.recipes.{self.name}", os.environ.get("RANK", "0")
        try:
            preflight(cfg)
        except DdplabError as e:  # the same on every rank: say it once
            if rank == "0":
                print(f"{prog}: error: {e}", file=sys.stderr)
            return e.exit_code
        try:
            result = fit(self, cfg, signals=resume.SIGNALS)
        except DdplabError as e:
            print(f"{prog}: error (rank {rank}): {e}", file=sys.stderr)
            return e.exit_code
        if isinstance(result, Preempted):
            if rank == "0":
                print(f"{prog}: {result.line()}", file=sys.stderr, flush=True)
            return result.exit_code
        if result is None:  # not rank 0
            return 0
        report.emit(result, cfg.json, render)
        return 0 if result.status == "PASS" else 1


def load_recipe(name: str) -> Recipe:
    import importlib

    return importlib.import_module(f"ddplab.recipes.{name}").RECIPE


def run_worker(payload: dict) -> dict:
    """Target for the launcher (what `ddplab train` starts on every rank)."""
    recipe = load_recipe(payload["recipe"])
    try:
        result = fit(
            recipe,
            from_dict(recipe.config, payload["config"]),
            events=True,
            signals=("SIGTERM",),
            group_timeout=payload.get("group_timeout", dd.DEFAULT_TIMEOUT_S),
            # ddplab's callers predict the run themselves (`ddplab train`, in its own process) or need no
            # prediction (`ddplab scale`: a child tracing for ~3 CPU s per measured run, shown nowhere)
            predict_memory=payload.get("predict_memory", False),
        )
    except DdplabError as e:  # tell the parent it is a ddplab error (its exit code), then fail as usual
        mark("train.error", message=str(e), exit_code=e.exit_code)
        raise
    if isinstance(result, Preempted):
        mark("train.preempted", step=result.step)
        return {"rank": int(os.environ.get("RANK", "0")), "preempted": dataclasses.asdict(result)}
    return dataclasses.asdict(result) if result is not None else {"rank": int(os.environ.get("RANK", "0"))}


def preflight(cfg: TrainConfig) -> None:
    """Checks that need no process group: the flags, and that the checkpoint directory is usable."""
    cfg.check()
    if cfg.checkpoint_path is None:
        return
    directory = ckptfile.prepare(cfg.checkpoint_path)
    existing = ckptfile.listed(directory)
    if cfg.resume and not existing and not restarting():
        raise DdplabError(f"--resume: {directory} holds no checkpoint: run once without --resume to create one")
    if not cfg.resume and existing and not restarting():  # never overwrite another run's good checkpoints
        raise DdplabError(
            f"{directory} already holds checkpoints of an earlier run (newest {existing[0][1].name}): "
            "pass --resume to continue it, or choose an empty --checkpoint-dir"
        )


# --------------------------------------------------------------------------------------------------- the loop


NO_STOP_CHECK = "DDPLAB_NO_STOP_CHECK"  # "1": no per-step stop check (benchmarks/stop_check_cost.py compares)


def fit(
    recipe: Recipe,
    cfg: TrainConfig,
    events: bool = False,
    group_timeout: float = dd.DEFAULT_TIMEOUT_S,
    predict_memory: bool = True,
    signals=("SIGTERM",),
) -> TrainResult | Preempted | None:
    """Train on every rank; rank 0 returns the result, the other ranks None. group_timeout: how long a collective
    may wait (`ddplab train` passes more than its stall timeout, so that its named hang comes first).
    predict_memory: rank 0 has `ddplab memory`'s prediction traced in another process (`ddplab train` traces it
    itself, while the ranks start, and fills it in). signals: those that stop every rank after the same step, saved
    (ddplab.resume.StopFlag); ddplab's own ranks keep SIGUSR1 for their stacks."""
    preflight(cfg)
    with dd.session(device=None if cfg.device == "auto" else cfg.device, timeout=group_timeout) as ctx:
        cfg.check_device(ctx.device.type)
        stop = resume.StopFlag(signals, ctx.device) if os.environ.get(NO_STOP_CHECK) != "1" else None
        try:
            result = _fit(recipe, cfg, ctx, Reporter(ctx.is_main, events), predict_memory, stop)
        except BaseException:
            if stop is not None:
                stop.close(wait=False)
            raise
        if stop is not None:
            stop.close()
        return result


def _fit(
    recipe: Recipe,
    cfg: TrainConfig,
    ctx: dd.DistContext,
    out: Reporter,
    predict_memory: bool = True,
    stop: resume.StopFlag | None = None,
) -> TrainResult | Preempted | None:
    """The plan of a run; each part owns its decisions (see the module docstring's numbers)."""
    # 2. The same data on every rank (the recipe seeds its own generator); this rank trains on its shard.
    data = recipe.data(cfg)
    batches = ShardedBatches(data.to(ctx.device), cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
    schedule = Schedule.of(cfg, data, batches, ctx.world_size)

    # 3. The model, measured from its build on; restored when resuming.
    measure = Measurements(recipe.name, cfg, ctx, predict_memory)
    notes = Notes(out, ctx.is_main)
    model = build_model(recipe, cfg, ctx, data)
    checkpoints = Checkpointer(
        recipe.name,
        cfg,
        ctx,
        data,
        model.raw,
        model.optimizer,
        model.scaler,
        global_batch=schedule.global_batch,
        steps_per_epoch=schedule.steps_per_epoch,
        stop=stop,
    )
    epoch, index = checkpoints.restore(notes)
    step = epoch * schedule.steps_per_epoch + index
    log = LogWindow(cfg, ctx, out, model, schedule.global_batch, fresh=checkpoints.resumed_from is None)
    parameters = sum(p.numel() for p in model.raw.parameters() if p.requires_grad)
    _announce(out, notes, recipe.name, cfg, ctx, schedule, parameters, epoch, step)

    # 4.-6. The steps; after each, the log window and the checkpoints decide whether it is their turn.
    train_step = TrainStep(recipe, cfg, model, ctx.device, schedule.planned)
    run_steps, last_loss = 0, torch.zeros((), device=ctx.device)
    started = measure.begin(model.comm)
    log.begin(started, step, measure.usage)
    for epoch, index in schedule.steps_from(batches, epoch, index):  # noqa: B020 - the position moves on
        last_loss = train_step(batches, index, step)
        step, run_steps = step + 1, run_steps + 1
        measure.step_done(run_steps)
        done = step >= schedule.stop_at
        log.after_step(step, epoch, last_loss, done)
        preempted = checkpoints.after_step(step, epoch, index + 1, done)
        if preempted is not None:
            out.end()
            return preempted

    # 7. The proof: what each rank did, and whether they all hold the same parameters (under fsdp, the whole
    # model gathered from the shards; every rank gets the same copy, so there the digests prove the save path).
    timing = measure.stop(run_steps)
    final_weights = statedict.full_state_dict(model.raw)
    mine = measure.rank_stats(timing, run_steps, last_loss, final_weights, notes)
    everyone = _gather_ranks(mine, timing, ctx.world_size)
    model_file = checkpoints.save_model(final_weights)
    out.end()
    if not ctx.is_main:
        return None
    result = _result(
        recipe.name,
        cfg,
        ctx,
        schedule,
        everyone,
        timing,
        steps=run_steps,
        total_steps=step,
        parameters=parameters,
        predicted_mb=mine.predicted_peak_mb,
        notes=notes.lines,
        resumed_from=checkpoints.resumed_from,
        model_file=str(model_file) if model_file else None,
        checkpoint=str(checkpoints.saved) if checkpoints.saved else None,
        metrics_file=log.metrics_file,
    )
    _recipe_figures(result, recipe, cfg, model.raw, data, final_weights, ctx.device)
    if cfg.compile and measure.first_step_s is not None:
        result.notes.append(compile_note(measure.first_step_s, timing))
    return result


def compile_note(first_step_s: float, timing: Timing) -> str:
    """What --compile cost and what it gave (issue 42 point 8): the first step compiles, the steady steps are
    the gain, which only the same run without --compile can show (on CPU it is often nothing)."""
    steady = f"the steady steps {timing.step_ms:.2f} ms each" if timing.timed_steps else "no steady step timed"
    return (
        f"compile: on (torch.compile before DDP): the first step took {first_step_s:.1f}s (tracing and compiling), "
        f"{steady}; what it gains: the same command without --compile, step ms against step ms"
    )


@dataclass(frozen=True)
class Schedule:
    """How many optimizer steps: per epoch (this rank's shard in steps of --grad-accum micro-batches), planned over
    --epochs (what a learning-rate schedule spans), and where this run stops (--max-steps: a stopped run resumes
    exactly); with the global batch they make."""

    steps_per_epoch: int
    planned: int
    stop_at: int
    global_batch: int

    @classmethod
    def of(cls, cfg: TrainConfig, data: TensorData, batches: ShardedBatches, world: int) -> Schedule:
        steps_per_epoch = len(batches) // cfg.grad_accum
        if steps_per_epoch == 0:
            raise DdplabError(
                f"{len(data)} samples give {batches.sampler.num_samples} per rank, fewer than one step "
                f"needs ({cfg.batch_size} x {cfg.grad_accum} micro-batches): use more data or a "
                "smaller --batch-size / --grad-accum / --nproc"
            )
        planned = steps_per_epoch * cfg.epochs
        return cls(
            steps_per_epoch,
            planned,
            min(planned, cfg.max_steps) if cfg.max_steps else planned,
            cfg.batch_size * world * cfg.grad_accum,
        )

    def steps_from(self, batches: ShardedBatches, epoch: int, index: int) -> Iterator[tuple[int, int]]:
        """(epoch, index in the epoch) of every step left from there to stop_at, each epoch's shuffle set first."""
        while epoch * self.steps_per_epoch + index < self.stop_at:
            batches.set_epoch(epoch)  # a different shuffle each epoch, identical on every rank
            for i in range(index, min(self.steps_per_epoch, self.stop_at - epoch * self.steps_per_epoch)):
                yield epoch, i
            epoch, index = epoch + 1, 0


@dataclass
class Notes:
    """What the result lists under notes; rank 0 also shows each one as it comes."""

    out: Reporter
    is_main: bool
    lines: list[str] = dataclasses.field(default_factory=list)

    def __call__(self, text: str) -> None:
        self.lines.append(text)
        if self.is_main:
            self.out.note(text)


def _announce(
    out: Reporter,
    note: Notes,
    recipe_name: str,
    cfg: TrainConfig,
    ctx: dd.DistContext,
    schedule: Schedule,
    parameters: int,
    epoch: int,
    step: int,
) -> None:
    """The run's first line (the progress bar's start); a resumed run with nothing left says so."""
    out.start(
        recipe=recipe_name,
        parameters=parameters,
        world_size=ctx.world_size,
        backend=ctx.backend,
        device=str(ctx.device),
        global_batch=schedule.global_batch,
        batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum,
        steps_per_epoch=schedule.steps_per_epoch,
        epochs=cfg.epochs,
        planned_steps=schedule.stop_at,
        start_step=step,
        start_epoch=min(epoch, cfg.epochs - 1),
    )
    if step >= schedule.stop_at:
        note(f"nothing left to train: the checkpoint is at step {step} of {schedule.stop_at}; raise --epochs to go on")


# --------------------------------------------------------------------------------------------------- the step


@dataclass
class Model:
    """The recipe's model as the loop's parts need it, spread over the ranks by --strategy."""

    raw: nn.Module  # what is saved and compared: neither DDP's "module." nor compile's "_orig_mod." prefix
    forward: nn.Module  # what the loss calls: DDP's wrapper, the sharded model or the compiled one
    optimizer: torch.optim.Optimizer
    no_sync: Callable[[], contextlib.AbstractContextManager]  # no gradient all-reduce on accumulation micro-steps
    scaler: torch.amp.GradScaler | None  # fp16 only: its range needs the loss scaled, bf16's does not
    comm: metrics.CommWait | None  # DDP's exposed communication time; None without DDP


def build_model(recipe: Recipe, cfg: TrainConfig, ctx: dd.DistContext, data: TensorData) -> Model:
    """The same initial weights on every rank (built from the seed), compiled (optional), spread by --strategy."""
    torch.manual_seed(cfg.seed)
    raw = recipe.model(cfg, data).to(ctx.device)
    scaler = torch.amp.GradScaler("cuda") if cfg.amp == "fp16" else None
    model = torch.compile(raw) if cfg.compile else raw  # before DDP, as DDP's graph-break-per-bucket optimizer expects
    # ddp / zero1 / fsdp (ddplab.train.strategy); DDP also broadcasts rank 0's weights so that every rank starts
    # identical, and FSDP shards the identical weights every rank built from the seed.
    wrapped = strategy.wrap(
        cfg.strategy,
        model,
        lambda m: recipe.optimizer(cfg, m),
        ctx.world_size,
        ctx.device,
        device_ids=ctx.device_ids,
        bucket_cap_mb=cfg.bucket_cap_mb,
    )
    comm = None
    if wrapped.ddp is not None:
        if cfg.comm_hook != "none":  # the all-reduce carries 16-bit floats: half the bytes, rounded in transit
            wrapped.ddp.register_comm_hook(None, getattr(default_hooks, f"{cfg.comm_hook}_compress_hook"))
        comm = metrics.CommWait(wrapped.ddp, rate=1 if ctx.device.type == "cpu" else cfg.log_every)
    return Model(raw, wrapped.forward, wrapped.optimizer, wrapped.no_sync, scaler, comm)


class TrainStep:
    """One optimizer step: this step's learning rate, the micro-batches that accumulate gradients locally (only the
    last one all-reduces), then the update (under fp16 through the GradScaler)."""

    def __init__(self, recipe: Recipe, cfg: TrainConfig, model: Model, device: torch.device, planned: int):
        self.recipe, self.cfg, self.model, self.planned = recipe, cfg, model, planned
        self.autocast = _autocast(cfg.amp, device)

    def __call__(self, batches: ShardedBatches, index: int, step: int) -> Tensor:
        """Take global step `step`, the index-th of its epoch; return its last micro-batch's loss, detached."""
        self._set_lr(step)
        loss = self._accumulate(batches, index)
        self._update()
        return loss.detach()

    def _set_lr(self, step: int) -> None:
        if self.recipe.lr_at is not None:  # a schedule over the whole run (planned steps), resumed with the step
            for group in self.model.optimizer.param_groups:
                group["lr"] = self.recipe.lr_at(self.cfg, step, self.planned)

    def _accumulate(self, batches: ShardedBatches, index: int) -> Tensor:
        accum, scaler = self.cfg.grad_accum, self.model.scaler
        for micro in range(accum):
            batch = batches[index * accum + micro]
            sync = micro == accum - 1  # all-reduce only once per optimizer step
            with contextlib.nullcontext() if sync else self.model.no_sync():
                with self.autocast():
                    loss = self.recipe.loss(self.model.forward, batch)
                scaled = loss / accum if accum > 1 else loss  # the gradients' sum is then the mean over micro-batches
                (scaler.scale(scaled) if scaler else scaled).backward()
        return loss

    def _update(self) -> None:
        optimizer, scaler, clip = self.model.optimizer, self.model.scaler, self.cfg.grad_clip
        if scaler is not None and clip:
            scaler.unscale_(optimizer)  # clip real gradients, not scaled ones
        if clip:
            nn.utils.clip_grad_norm_(self.model.raw.parameters(), clip)
        if scaler is not None:
            scaler.step(optimizer)  # skips the step when the scaled gradients overflowed
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)


# --------------------------------------------------------------------------------------------------- the log


class LogWindow:
    """Decides when to log, and logs: every --log-every steps and after the last one, the loss averaged over the
    ranks and each rank's step time and communication wait (one small all_gather, so every rank decides alike),
    a metrics.jsonl line (rank 0, in --checkpoint-dir) and the progress bar's numbers; between windows the bar
    only ticks, with the numbers last shown."""

    def __init__(
        self, cfg: TrainConfig, ctx: dd.DistContext, out: Reporter, model: Model, global_batch: int, fresh: bool
    ):
        self.cfg, self.ctx, self.out, self.global_batch = cfg, ctx, out, global_batch
        self.optimizer, self.comm = model.optimizer, model.comm
        directory = cfg.checkpoint_path
        self.jsonl = metrics.JsonlWriter(directory / "metrics.jsonl" if directory and ctx.is_main else None)
        if self.jsonl.path and fresh and self.jsonl.path.exists():
            self.jsonl.path.unlink()  # a fresh run starts a fresh metrics file; a resumed one appends
        self.shown: dict = {"loss": None, "samples_per_sec": None}
        self.since, self.since_step, self.wait_since, self.usage = 0.0, 0, None, None

    @property
    def metrics_file(self) -> str | None:
        return str(self.jsonl.path) if self.jsonl.path else None

    def begin(self, now: float, step: int, usage: metrics.Utilisation) -> None:
        """The first window opens at `now`, before global step `step`; usage is sampled at each window's end."""
        self.since, self.since_step, self.usage = now, step, usage

    def after_step(self, step: int, epoch: int, loss: Tensor, done: bool) -> None:
        if step % self.cfg.log_every == 0 or done:
            self._log(step, epoch, loss)
        else:
            self.out.tick(step=step, epoch=epoch, epochs=self.cfg.epochs, **self.shown)

    def _log(self, step: int, epoch: int, loss: Tensor) -> None:
        now, world, shown = time.perf_counter(), self.ctx.world_size, self.shown
        wait, self.wait_since = _wait_share(self.comm, self.wait_since, world)
        self.usage.sample()
        rows = _gather_floats([loss.item(), now - self.since, step - self.since_step, wait], self.ctx.device)
        shown["loss"] = sum(r[0] for r in rows) / world
        shown["samples_per_sec"] = (step - self.since_step) * self.global_batch / max(rows[0][1], 1e-9)
        self.jsonl.write(
            {
                "step": step,
                "epoch": epoch,
                "loss": shown["loss"],
                "samples_per_sec": shown["samples_per_sec"],
                "lr": self.optimizer.param_groups[0]["lr"],
                "rank_step_ms": [1000 * r[1] / max(r[2], 1) for r in rows],
                "rank_comm_wait_ms": [r[3] * 1000 * r[1] / max(r[2], 1) if r[3] >= 0 else None for r in rows],
            }
        )
        self.out.log(step=step, epoch=epoch, epochs=self.cfg.epochs, **shown)
        self.since, self.since_step = now, step


# --------------------------------------------------------------------------------------------------- the figures


@dataclass(frozen=True)
class Timing:
    """This rank's clock at the end of the steps."""

    timed_steps: int  # the steps after the warm-up (all of them in a run too short to have any)
    seconds: float  # their wall time
    total: float  # the whole loop's
    cpu_percent: float
    wait_share: float  # of the timed steps' time, in exposed communication (-1: not measured)

    @property
    def step_ms(self) -> float:
        return 1000 * self.seconds / max(self.timed_steps, 1)


class Measurements:
    """This rank's figures for the table, measured as the run goes: the allocator's peak from the model's build
    through the first MEASURED_STEPS steps (what `ddplab memory` predicts: ddplab.perf.memory traces the same
    span), the clock (steady after WARMUP_STEPS), DDP's exposed communication, CPU and GPU use, and rank 0's
    request for `ddplab memory`'s prediction."""

    def __init__(self, recipe_name: str, cfg: TrainConfig, ctx: dd.DistContext, predict_memory: bool):
        self.recipe_name, self.cfg, self.ctx, self.predict_memory = recipe_name, cfg, ctx, predict_memory
        self.cuda = ctx.device.type == "cuda"
        self.peak = AllocatorPeak(ctx.device)
        self.peak.start()  # before the model is built: its weights are part of the peak
        self.predicting: PredictElsewhere | None = None
        self.comm: metrics.CommWait | None = None
        self.usage: metrics.Utilisation | None = None
        self.timer: Steady | None = None
        self.warm_wait = None  # DDP's communication timers when the warm-up ended
        self.first_step_s: float | None = None  # the first step's wall time: under --compile, mostly compiling

    def begin(self, comm: metrics.CommWait | None) -> float:
        """Right before the first step: start the clocks; return the time they start from."""
        self.usage, self.comm = metrics.Utilisation(self.ctx.device), comm
        now = time.perf_counter()
        if comm is not None:
            comm.begin(now)
        self.timer = Steady(now)
        return now

    def step_done(self, run_steps: int) -> None:
        if self.comm is not None:
            self.comm.step_done(time.perf_counter())
        if run_steps == 1:
            self.first_step_s = time.perf_counter() - self.timer.t0
        if run_steps == MEASURED_STEPS:
            self.peak.stop()
            self.predicting = self._predict() if self.cuda else None
        if run_steps == WARMUP_STEPS:
            if self.cuda:
                torch.cuda.synchronize(self.ctx.device)  # the warm-up's kernels must not count as steady time
            self.timer.warm()
            self.warm_wait = self.comm.snapshot() if self.comm else None

    def _predict(self) -> PredictElsewhere | None:
        # Never during the measured span. On GPUs the tracing child runs on the host while the steps go on; on CPU
        # it would take cores from the ranks and slow the timed steps, so it starts after them.
        if not (self.ctx.is_main and self.predict_memory):
            return None
        return PredictElsewhere(
            self.recipe_name, self.cfg.to_dict(), self.cfg.strategy, self.ctx.world_size, self.ctx.device.type
        )

    def stop(self, run_steps: int) -> Timing:
        if self.cuda:
            torch.cuda.synchronize(self.ctx.device)
        timed_steps, seconds, total = self.timer.stop(run_steps)
        cpu_percent = self.usage.cpu_percent()  # over the steps only: not rank 0's wait for the prediction
        wait, _ = _wait_share(self.comm, self.warm_wait if timed_steps < run_steps else None, self.ctx.world_size)
        return Timing(timed_steps, seconds, total, cpu_percent, wait)

    def rank_stats(
        self, timing: Timing, run_steps: int, last_loss: Tensor, weights: dict, note: Callable[[str], None]
    ) -> RankStats:
        """This rank's row of the table (weights: the whole model, whose digest proves the ranks agree)."""
        if self.predicting is None:
            self.predicting = self._predict()
        predicted_mb = _predicted_peak_mb(self.predicting, note) if self.predicting is not None else None
        step_ms, wait = timing.step_ms, timing.wait_share
        return RankStats(
            rank=self.ctx.rank,
            samples=run_steps * self.cfg.batch_size * self.cfg.grad_accum,
            steps=run_steps,
            step_ms=step_ms,
            comm_wait_ms=wait * step_ms if wait >= 0 else None,
            cpu_percent=timing.cpu_percent,
            gpu_util_percent=self.usage.gpu_percent(),
            peak_memory_mb=metrics.peak_memory_mb(self.ctx.device),
            final_loss=float(last_loss.item()),
            digest=metrics.state_digest(weights),
            allocator_peak_mb=self.peak.measured_mb(),
            predicted_peak_mb=predicted_mb,
        )


def _gather_ranks(mine: RankStats, timing: Timing, world: int) -> list[tuple[dict, float, float]]:
    """Every rank's (stats, steady seconds, total seconds), in rank order; a collective."""
    everyone: list = [None] * world
    dist.all_gather_object(everyone, (dataclasses.asdict(mine), timing.seconds, timing.total))
    return everyone


# --------------------------------------------------------------------------------------------------- the result


def _result(
    recipe_name: str,
    cfg: TrainConfig,
    ctx: dd.DistContext,
    schedule: Schedule,
    everyone: list[tuple[dict, float, float]],
    timing: Timing,
    *,
    steps: int,
    total_steps: int,
    parameters: int,
    predicted_mb: float | None,
    notes: list[str],
    **files: str | None,
) -> TrainResult:
    """Rank 0's TrainResult from every rank's row; files: resumed_from, model_file, checkpoint, metrics_file."""
    ranks = [RankStats(**r) for r, _, _ in everyone]
    for r in ranks:  # one prediction per run: the rank that needs most (they differ only under zero1)
        r.predicted_peak_mb = predicted_mb
    steady = max(s for _, s, _ in everyone)  # the slowest rank's time: what the run as a whole achieved
    identical = len({r.digest for r in ranks}) == 1
    timed, global_batch = timing.timed_steps, schedule.global_batch
    result = TrainResult(
        recipe=recipe_name,
        strategy=cfg.strategy,
        status="PASS" if identical else "FAIL",
        world_size=ctx.world_size,
        backend=ctx.backend,
        device=str(ctx.device),
        batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum,
        global_batch=global_batch,
        epochs=cfg.epochs,
        steps=steps,
        total_steps=total_steps,
        planned_steps=schedule.planned,
        samples=steps * global_batch,
        seconds=max(t for _, _, t in everyone),
        timed_steps=timed,
        samples_per_sec=timed * global_batch / steady if timed else 0.0,
        final_loss=sum(r.final_loss for r in ranks) / ctx.world_size,
        params_identical=identical,
        ranks=ranks,
        parameters=parameters,
        stopped_early=total_steps < schedule.planned,
        notes=notes,
        warnings=rank_warnings(ranks) if steps else [],
        **files,
    )  # a resumed, finished run has nothing to judge
    if not identical:
        result.warnings.insert(
            0,
            "parameters differ between ranks after training: DDP keeps replicas identical "
            "only if every rank starts from the same weights and applies the same all-reduced "
            "gradients; look for per-rank code that changes parameters outside DDP",
        )
    return result


def _recipe_figures(
    result: TrainResult,
    recipe: Recipe,
    cfg: TrainConfig,
    model: nn.Module,
    data: TensorData,
    weights: dict,
    device: torch.device,
) -> None:
    """What the recipe adds to the result: its own summary of the trained model, tokens/s, MFU."""
    if recipe.summary is not None:
        whole = model
        if statedict.is_sharded(model):  # a sharded forward needs every rank: evaluate the gathered weights
            whole = recipe.model(cfg, data).to(device)
            whole.load_state_dict(weights)
        for key, value in recipe.summary(cfg, whole, data).items():
            setattr(result, key, value)
    if recipe.tokens_per_sample is not None:
        result.tokens_per_sec = result.samples_per_sec * recipe.tokens_per_sample(cfg)
    if recipe.flops_per_sample is not None:
        result.mfu, result.mfu_note = _mfu(cfg, recipe.flops_per_sample(cfg, model), result, device)


# --------------------------------------------------------------------------------------------------- helpers

# The first steps compile (torch.compile), warm up allocators and let DDP rebuild its buckets; throughput and the
# per-rank step times are timed after them (as nanoGPT does for MFU), unless the run is too short to have any.
WARMUP_STEPS = 3
MEASURED_STEPS = 2  # the first step creates the optimizer state, the second runs with it: the steady peak


def _predicted_peak_mb(predicting: PredictElsewhere, note: Callable[[str], None]) -> float | None:
    """`ddplab memory`'s prediction for this run (traced while it trained), next to the measured peak."""
    try:
        return predicting.result(PREDICTION_GRACE_S).peak_mib
    except (DdplabError, OSError, ValueError) as e:
        note(f"no memory prediction: {e}")
        return None


class Steady:
    """The loop's clock: the whole run, and the steady part after the warm-up steps."""

    def __init__(self, start: float):
        self.t0 = self.start = start
        self.warm_steps = 0

    def warm(self) -> None:
        self.start, self.warm_steps = time.perf_counter(), WARMUP_STEPS

    def stop(self, run_steps: int) -> tuple[int, float, float]:
        """(steps timed, their seconds, seconds of the whole loop)."""
        now = time.perf_counter()
        if run_steps <= self.warm_steps:  # no step after the warm-up: time the whole run
            return run_steps, now - self.t0, now - self.t0
        return run_steps - self.warm_steps, now - self.start, now - self.t0


def _wait_share(comm: metrics.CommWait | None, since, world: int) -> tuple[float, tuple | None]:
    """The share of the steps' wall time spent in exposed communication since the snapshot `since` (-1 = not
    measured: DDP's timers are all there is, so fsdp's is not; one process has none to wait for), and a snapshot
    of now. A window in which DDP logged no new iteration takes the share over the whole run so far."""
    if comm is None:
        return (0.0 if world == 1 else -1.0), None
    share, now = comm.share_since(since)
    if share is None and since is not None:
        share, _ = comm.share_since(None)
    return (-1.0 if share is None else share), now


def _autocast(amp: str, device: torch.device):
    if amp == "none":
        return contextlib.nullcontext
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def _gather_floats(values: list[float], device: torch.device) -> list[list[float]]:
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine)
    return [r.tolist() for r in rows]


def _mfu(
    cfg: TrainConfig, flops_per_sample: float, result: TrainResult, device: torch.device
) -> tuple[float | None, str]:
    if device.type != "cuda":
        return None, "not applicable on CPU: MFU compares with a GPU's tensor-core peak"
    from ddplab.train.peaks import device_peak, gpu_of_device

    per_device = result.samples_per_sec / result.world_size
    name = torch.cuda.get_device_name(device)
    override = getattr(cfg, "peak_tflops", 0.0)
    if override:
        return metrics.mfu(flops_per_sample, per_device, override), f"vs --peak-tflops {override:g}"
    key, peak = gpu_of_device(name), device_peak(name)  # exact board names: a 4090 D or H100 PCIe gets none
    if peak is None:
        return None, f"no peak known for {name}: pass --peak-tflops from its datasheet (dense BF16)"
    return (
        metrics.mfu(flops_per_sample, per_device, peak.bf16_dense_tflops),
        f"vs {key} dense BF16 peak {peak.bf16_dense_tflops:g} TFLOP/s; source: {peak.source}, read {peak.date}",
    )
