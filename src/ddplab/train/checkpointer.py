"""The training loop's checkpoints: one object decides when to save and does the saving and the restoring.

`Checkpointer` owns the run's --checkpoint-dir: what a resumed (or restarted) run continues from, whether to save
after a step (every --checkpoint-every steps, at the end of each epoch, where the run ends, and when every rank
agreed to stop on a signal), the saves themselves and the final model.pt. The files are ddplab.ckptfile's (atomic,
checksummed, written by rank 0); a checkpoint holds the sampler position and every rank's RNG state, so that
--resume takes exactly the batch an uninterrupted run would have taken next.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import ddplab.dist as dd
from ddplab import ckptfile, resume, statedict
from ddplab.errors import DdplabError
from ddplab.stamps import stamp
from ddplab.train.config import TrainConfig
from ddplab.train.data import TensorData
from ddplab.train.result import Preempted


def restarting() -> bool:
    """True when the elastic agent restarted this group after a failure: continue from the latest checkpoint."""
    return os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") not in ("", "0")


class Checkpointer:
    """The run's checkpoint folder and every decision about it. Saving is a collective (the RNG states are
    gathered, zero1 and fsdp gather their shares), so every rank takes the same decisions at the same step; rank 0
    writes. Without --checkpoint-dir nothing is saved, and an agreed signal still stops the run."""

    def __init__(
        self,
        recipe_name: str,
        cfg: TrainConfig,
        ctx: dd.DistContext,
        data: TensorData,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler,
        *,
        global_batch: int,
        steps_per_epoch: int,
        stop: resume.StopFlag | None,
    ):
        self.recipe_name, self.cfg, self.ctx, self.data = recipe_name, cfg, ctx, data
        self.model, self.optimizer, self.scaler = model, optimizer, scaler  # model: the unwrapped one
        self.global_batch, self.steps_per_epoch, self.stop = global_batch, steps_per_epoch, stop
        self.directory = cfg.checkpoint_path
        self.resumed_from: str | None = None
        self.saved: Path | None = None  # the newest checkpoint this run wrote (rank 0 only knows its name)
        self.saved_step: int | None = None

    def restore(self, note: Callable[[str], None]) -> tuple[int, int]:
        """The (epoch, step in epoch) to start from: the newest good checkpoint's when resuming or restarted
        (model, optimizer, scaler and this rank's RNG loaded), else the beginning."""
        found = find(self.cfg, note, self.ctx)
        if found is None:
            torch.manual_seed(self.cfg.seed + self.ctx.rank)  # per-rank randomness (dropout) must differ between ranks
            return 0, 0
        self.resumed_from = str(found.path)
        return restore(
            found,
            self.recipe_name,
            self.cfg,
            self.model,
            self.optimizer,
            self.scaler,
            self.ctx,
            self.global_batch,
            self.steps_per_epoch,
            note,
        )

    def after_step(self, step: int, epoch: int, step_in_epoch: int, done: bool) -> Preempted | None:
        """Save when one is due after this step (step_in_epoch: the steps of this epoch now done). Then, unless the
        run ends here anyway, stop every rank after this same step if any rank saw a signal (ddplab.resume.StopFlag:
        a small all-reduce every few steps), with the state saved there."""
        if self._due(step, step_in_epoch, done):
            self._save(step, epoch, step_in_epoch)
        if done or self.stop is None or not self.stop.agreed():
            return None
        stamp("rank", f"agreed {step}")
        if self.directory and self.saved_step != step:
            self._save(step, epoch, step_in_epoch)
        stamp("rank", "saved")
        if not self.directory:
            return Preempted(step, None)
        return Preempted(step, str(self.saved) if self.saved else str(self.directory))

    def _due(self, step: int, step_in_epoch: int, done: bool) -> bool:
        """Every --checkpoint-every steps, at the end of each epoch, and where the run stops."""
        every = self.cfg.checkpoint_every
        return bool(self.directory) and (
            done or step_in_epoch == self.steps_per_epoch or bool(every and step % every == 0)
        )

    def _save(self, step: int, epoch: int, step_in_epoch: int) -> None:
        self.saved = save(
            self.directory,
            self.recipe_name,
            self.cfg,
            self.model,
            self.optimizer,
            self.scaler,
            self.ctx,
            self.data,
            epoch,
            step_in_epoch,
            step,
            self.global_batch,
        )
        self.saved_step = step

    def save_model(self, weights: dict) -> Path | None:
        """The whole trained model as a plain state_dict, by rank 0 (weights: the full state, gathered)."""
        if not (self.directory and self.ctx.is_main):
            return None
        path = self.directory / "model.pt"
        ckptfile.atomic_save(weights, path)
        return path


def find(cfg: TrainConfig, note: Callable[[str], None], ctx: dd.DistContext) -> ckptfile.Found | None:
    """The checkpoint to resume from, loaded, or None for a fresh start."""
    if cfg.checkpoint_path is None or not (cfg.resume or restarting()):
        return None
    # Rank 0 picks the newest file that verifies (reading and hashing it); the others load that file memory-mapped,
    # unhashed. Every rank hashing its own copy held N copies of the checkpoint in host memory at once.
    chosen: list = [(None, None)]  # (path, error): every damaged file is an error all ranks must hear
    found = None
    if ctx.is_main:
        try:
            found = ckptfile.latest(cfg.checkpoint_path, warn=note)
            chosen[0] = (str(found.path) if found else None, None)
        except DdplabError as e:
            chosen[0] = (None, str(e))
    if ctx.world_size > 1:
        dist.broadcast_object_list(chosen, src=0)
    name, error = chosen[0]
    if error:
        raise DdplabError(error)
    if name is None:
        if cfg.resume and not restarting():
            raise DdplabError(f"--resume: {cfg.checkpoint_path} holds no checkpoint: run once without --resume")
        return None
    if ctx.is_main:
        return found
    path = Path(name)
    try:
        state = ckptfile.load(path, verified=True)
    except (ValueError, OSError) as e:
        raise DdplabError(
            f"checkpoint {path}, chosen by rank 0, does not load on rank {ctx.rank} ({e}): every rank "
            "must see the same --checkpoint-dir (on several machines, a shared file system)"
        ) from None
    return ckptfile.Found(path, ckptfile.step_of(path), state)


def save(
    directory: Path,
    recipe_name: str,
    cfg: TrainConfig,
    model: nn.Module,
    optimizer,
    scaler,
    ctx: dd.DistContext,
    data: TensorData,
    epoch: int,
    step_in_epoch: int,
    step: int,
    global_batch: int,
) -> Path | None:
    """Every rank comes; rank 0 writes the file and returns its path."""
    # Every rank's RNG state goes in (dropout differs per rank); gathering them is a collective, so all ranks come.
    rng = {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(ctx.device) if ctx.device.type == "cuda" else None,
    }
    states: list = [None] * ctx.world_size
    dist.all_gather_object(states, rng)
    # Whole model and optimizer state whatever the strategy (zero1 and fsdp gather their shares: every rank comes).
    weights = statedict.full_state_dict(model, rank0_on_cpu=True)
    optimizer_state = statedict.optimizer_state_dict(model, optimizer, ctx.rank)
    if not ctx.is_main:
        return None
    state = {
        "recipe": recipe_name,
        "shape": cfg.shape(),
        "config": cfg.to_dict(),
        "data_info": data.info,
        "strategy": cfg.strategy,
        "param_shapes": {k: list(v.shape) for k, v in weights.items()},
        "model": weights,
        "optimizer": optimizer_state,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": step,
        "epoch": epoch,
        "step_in_epoch": step_in_epoch,
        "world_size": ctx.world_size,
        "global_batch": global_batch,
        "rng_torch": [s["torch"] for s in states],
        "rng_cuda": [s["cuda"] for s in states],
    }
    return ckptfile.save(directory, state, step, cfg.keep)


def restore(
    found: ckptfile.Found,
    recipe_name: str,
    cfg: TrainConfig,
    model: nn.Module,
    optimizer,
    scaler,
    ctx: dd.DistContext,
    global_batch: int,
    steps_per_epoch: int,
    note: Callable[[str], None],
) -> tuple[int, int]:
    """Load a checkpoint into this rank; return the (epoch, step in epoch) to continue from."""
    state, name = found.state, found.path.name
    check_compatible(state, recipe_name, cfg, found.path)
    here = {k: list(v.shape) for k, v in model.state_dict().items()}  # a DTensor's shape is the whole one
    if here != state["param_shapes"]:
        key = next((k for k in here if here[k] != state["param_shapes"].get(k)), None) or "(parameter names)"
        raise DdplabError(
            f"checkpoint {found.path} holds a model of another shape ({key}: "
            f"{state['param_shapes'].get(key)} there, {here.get(key)} here; the data's vocabulary "
            "decides some shapes): resume with the same flags and data, or choose another "
            "--checkpoint-dir"
        )
    statedict.load_full_state_dict(model, state["model"])
    statedict.load_optimizer_state_dict(model, optimizer, state["optimizer"])
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])

    epoch, step_in_epoch = state["epoch"], state["step_in_epoch"]
    old_world = state["world_size"]
    if state["world_size"] == ctx.world_size and state["global_batch"] == global_batch:
        torch.set_rng_state(state["rng_torch"][ctx.rank])
        if ctx.device.type == "cuda" and state["rng_cuda"][ctx.rank] is not None:
            torch.cuda.set_rng_state(state["rng_cuda"][ctx.rank], ctx.device)
        note(
            f"resumed from {name}: resumed at step {state['step']}, epoch {epoch + 1}, batch {step_in_epoch} of "
            "the epoch"
        )
    else:
        # Each epoch's shuffle is the same whatever the world size, and ranks take interleaved shards, so the
        # samples seen so far are a prefix of it: continue after the same number of samples.
        samples_done = step_in_epoch * state["global_batch"]
        step_in_epoch = samples_done // global_batch
        torch.set_rng_state(state["rng_torch"][ctx.rank % old_world])
        note(
            f"resumed from {name}, written by {old_world} rank(s) with global batch {state['global_batch']}, on "
            f"{ctx.world_size} rank(s) with global batch {global_batch}: the model and optimizer are replicated, "
            f"so this works; epoch {epoch + 1} continues after sample {step_in_epoch * global_batch} "
            "(a changed world size or batch cannot match an uninterrupted run bitwise)"
        )
    if step_in_epoch >= steps_per_epoch:
        epoch, step_in_epoch = epoch + 1, 0
    return epoch, step_in_epoch


def check_compatible(state: dict, recipe_name: str, cfg: TrainConfig, path: Path) -> None:
    """A checkpoint resumes only into the recipe and model shape it was written by."""
    if state.get("strategy", "ddp") != cfg.strategy:  # optimizer states are laid out per strategy
        raise DdplabError(
            f"checkpoint {path} was written with --strategy {state.get('strategy', 'ddp')}, this run "
            f"has --strategy {cfg.strategy}: resume with the same strategy (model.pt, a plain "
            "state_dict, loads into any)"
        )
    if state.get("recipe") != recipe_name:
        raise DdplabError(
            f"checkpoint {path} was written by the {state.get('recipe')} recipe, not {recipe_name}: "
            f"resume with `ddplab train {state.get('recipe')}`, or choose another --checkpoint-dir"
        )
    shape, saved = cfg.shape(), state.get("shape", {})
    differs = [k for k in shape if saved.get(k) != shape[k]]
    if differs:
        was = " ".join(f"--{k.replace('_', '-')} {saved.get(k)}" for k in differs)
        now = " ".join(f"--{k.replace('_', '-')} {shape[k]}" for k in differs)
        raise DdplabError(
            f"checkpoint {path} holds a model trained with {was}, this run has {now}: resume with "
            "the same model flags, or choose another --checkpoint-dir"
        )
