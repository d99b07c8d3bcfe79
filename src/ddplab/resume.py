"""When the machine is taken away: stop on the signal at the same step on every rank, save, resume exactly.

    from ddplab import resume
    ckpt = resume.Checkpointer("ckpt", model=model, optimizer=optimizer, scheduler=scheduler, sampler=sampler)
    for epoch in ckpt.epochs(5):                 # resumes in the epoch it stopped in
        for x, y in ckpt.batches(loader):        # skips the batches already done in that epoch
            ...one optimizer step...
            ckpt.step_done()                     # every rank stops at the same step: saved, then exit code 4
                                                 # (on an epoch's last step: after the epoch's end)
    if rank == 0:
        resume.save_file(model.state_dict(), "model.pt")   # a final file, never torn, on a bucket mount too

- SIGTERM / SIGUSR1 / SIGUSR2 (a spot instance's notice, `ddplab launch` passing one on, Slurm's --signal) only set a
  flag; step_done() shares it through a small all-reduce every few steps (StopFlag), so a signal seen by any rank
  stops all of them after the same step. A rank that stopped alone would leave the others waiting in the next
  collective.
- Saving: every rank's RNG states (Python, NumPy, torch CPU and CUDA) are gathered to global rank 0, which writes the
  registered objects' whole state_dicts (DDP keeps the replicas identical; a sharded model - FSDP's fully_shard - and
  its optimizer, or a ZeroRedundancyOptimizer, are gathered to rank 0 by ddplab.statedict, i.e. by
  torch.distributed.checkpoint.state_dict) as one ddplab.ckptfile checkpoint:
  temporary file, fsync, rename to a name holding its checksum (the rename is the completion marker: a file without
  its checksum in the name is never a checkpoint), the last `keep` kept. On a bucket mounted as a folder
  (mountpoint-s3, gcsfuse: /proc/mounts says so) or wherever the rename fails, a small commit marker written after
  the data takes the rename's place; a checkpoint without its marker is never loaded.
- Constructed, it resumes from the newest checkpoint that verifies (a torn one is named and the previous one used),
  with the RNG states at the epoch's start (so the DataLoader draws the same shuffle and worker seeds) and at the step.
- Bad input stops every rank with one line and exit code 2, before anything is written: a folder that is not
  writable or is full, checkpoints of another run (other objects, other shapes, another `run` name), a checkpoint
  written by another number of ranks (DistributedSampler's shards depend on it, so the data order could not match).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ddplab import ckptfile, faults, statedict
from ddplab.errors import DdplabError
from ddplab.stamps import stamp

PREEMPTED_EXIT = 4  # "preempted, state saved": start it again to resume (shared/design.md's table)
SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2")
NOTE_VAR = "DDPLAB_PREEMPT_NOTE"  # the launcher's file where rank 0 says at which step it saved
# This process saved its state on the notice and is on its way out with PREEMPTED_EXIT: `ddplab launch`'s bootstrap
# then exits without the interpreter's seconds-long teardown (launcher/bootstrap.py).
saved_on_notice = False


# The stop check runs about this often: its all-reduce (a fraction of a millisecond to launch) then costs well under
# 1 % of the time, and a signal is agreed within about two periods - 0.2 s, or a few times that when a loaded
# machine slows the steps after N was chosen (benchmarks/preempt_trials.py measures it: issue 40 asks an exit within
# 5 s of the signal).
CHECK_PERIOD_S = 0.1
MAX_CHECK_INTERVAL = 100  # steps between two checks, at most


class StopFlag:
    """A stop request from a signal, agreed by all ranks at the same step (one small all-reduce).

    The all-reduce runs in the background while the next steps compute (async_op): a check returns what every rank
    had seen when the previous check started it, so the ranks stop together, at the same step, and a step never
    waits on the check's round trip. A check on every step of a few-millisecond step would still cost ~5 % of it
    (launching a collective, and on few cores the collective itself: benchmarks/stop_check_cost.py --in-run), so
    the check runs every N steps, N such that checks come about CHECK_PERIOD_S apart: each rank proposes N from its
    own step time in the same all-reduce and the smallest wins (the slowest rank's: a MAX of -N), so every rank
    counts the same N. A signal stops the run within about two periods - a fraction of any grace a machine
    gives."""

    def __init__(self, signals: Iterable[str] = SIGNALS, device: torch.device | None = None):
        self.signal: int | None = None
        self._previous = {}
        device = device or _collective_device()
        self._tensors = [torch.zeros(2, dtype=torch.int32, device=device) for _ in range(2)]  # [seen, next N]
        self._work = None  # the all-reduce in flight, on self._tensors[0]
        self._left = self._interval = 1  # steps until the next check; steps between the last two
        self._since = time.monotonic()  # when the last check ran
        self._world: int | None = None
        if threading.current_thread() is threading.main_thread():  # Python runs handlers in the main thread only
            for name in signals:
                sig = getattr(signal, name)
                self._previous[sig] = signal.signal(sig, self._seen)
            # The launcher can then tell "too slow to save within the grace" from "never listened" (a script
            # without ddplab.resume, or one still starting when the signal came). Every rank writes the same note;
            # a later one (saved, refused) replaces it.
            _note({"listening": True})

    def _seen(self, signum, frame) -> None:
        self.signal = signum  # only a flag: the step in progress finishes, then every rank agrees
        stamp("rank", "signal")

    def agreed(self) -> bool:
        """True on every rank, at the same call, once any rank has seen a signal. A collective: every rank calls it
        once per step."""
        if self._world is None:  # asked once: get_world_size() costs microseconds, and this runs every step
            self._world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if self._world == 1:
            return self.signal is not None
        self._left -= 1
        if self._left > 0:  # not a check step: the same on every rank, they all count the agreed N
            return False
        interval = 1
        if self._work is not None:
            self._work.wait()
            seen, minus_interval = (int(v) for v in self._tensors[0].tolist())
            interval = -minus_interval
            if seen:  # agreed: nothing more in flight, every rank stops here
                self._work = None
                return True
        now = time.monotonic()
        step_s = (now - self._since) / self._interval  # this rank's time per step since the last check
        self._since, self._interval, self._left = now, interval, interval
        proposed = min(MAX_CHECK_INTERVAL, max(1, math.ceil(CHECK_PERIOD_S / step_s))) if step_s > 0 else 1
        self._tensors.reverse()
        self._tensors[0].copy_(torch.tensor([1 if self.signal is not None else 0, -proposed], dtype=torch.int32))
        self._work = dist.all_reduce(self._tensors[0], op=dist.ReduceOp.MAX, async_op=True)
        return False

    def close(self, wait: bool = True) -> None:
        """Finish the all-reduce in flight (every rank has one: they called agreed() as often), restore handlers.
        wait=False after an error: another rank may never finish it."""
        if self._work is not None and wait:
            self._work.wait()
            self._work = None
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}


def _collective_device() -> torch.device:
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())  # NCCL reduces GPU tensors only
    return torch.device("cpu")


def rng_state() -> dict:
    """Every random number generator this process draws from."""
    state = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": None,
    }
    numpy = sys.modules.get("numpy")  # only when the script uses it: importing it here would cost every script
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(_as_tuple(state["python"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if state["numpy"] is not None:
        import numpy

        numpy.random.set_state(state["numpy"])


def _as_tuple(value):
    """Python's RNG state, which a checkpoint stores as lists (weights_only loading gives lists back for tuples)."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


def _plain(value):
    """NumPy's state (a tuple with an array) as plain values, which weights_only loading accepts."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        return value.tolist()  # a list of ints: a uint32 tensor does not survive all_gather_object
    return value


def _numpy_state(value):
    if value is None:
        return None
    import numpy

    name, keys, pos, has_gauss, cached = value
    return (name, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, cached)


class Checkpointer:
    """Register what makes up the training state; resume from the newest complete checkpoint on construction."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        keep: int = 3,
        every: int = 0,
        run: str = "",
        sampler: Any = None,
        signals: Iterable[str] = SIGNALS,
        **objects: Any,
    ):
        """objects: anything with state_dict()/load_state_dict() (model, optimizer, LR scheduler, GradScaler).
        every: also save every N steps (0: only when stopped). run: a name that must match to resume.
        sampler: a DistributedSampler (or anything with set_epoch), set each epoch by epochs()."""
        self.directory, self.keep, self.every, self.sampler = Path(directory), keep, every, sampler
        self.objects = {k: v for k, v in objects.items() if v is not None}
        for name, obj in self.objects.items():
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                _refuse(
                    f"{name}={type(obj).__name__} has no state_dict()/load_state_dict(): register a model, "
                    "an optimizer, a scheduler or a GradScaler"
                )
        self.rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self.identity = {"run": run, "objects": sorted(self.objects), "shapes": self._shapes()}
        self.step = self.epoch = self.batch = 0
        self.epoch_length: int | None = None  # batches in the current epoch, when the loader says (len())
        self.stopped = False
        self._saved: tuple[int, str] | None = None  # (step, path) of the last save, on every rank
        self._epoch_rng = self._step_rng = None
        self.flag = StopFlag(signals)
        _agree(lambda: ckptfile.prepare(self.directory) and None)  # not writable: one line now, not at the save
        self.resumed_from = self._resume()

    def _shapes(self) -> dict:
        return {
            name: {k: list(v.shape) for k, v in obj.state_dict().items() if isinstance(v, torch.Tensor)}
            for name, obj in self.objects.items()
            if isinstance(obj, torch.nn.Module)
        }

    # ------------------------------------------------------------------------------------------------- the loop

    def epochs(self, count: int) -> Iterator[int]:
        if self.resumed_from is not None and self.epoch >= count and self.rank == 0:
            # Started again after it finished (the same command twice, or an edited script): nothing runs, and a
            # learner must not read the launcher's PASS as "my edit ran".
            print(
                f"nothing left to train: {self.resumed_from} is the end of this run (step {self.step}, "
                f"{count} epoch(s) done); to train again, pass another checkpoint folder or remove this one",
                file=sys.stderr,
                flush=True,
            )
            _note({"finished": self.step, "path": os.path.abspath(self.resumed_from)})
        for epoch in range(self.epoch, count):
            if self.stopped:  # stopped on the last step of the epoch before: its end has run (step_done)
                raise SystemExit(PREEMPTED_EXIT)
            if epoch != self.epoch:
                self.epoch, self.batch, self._step_rng = epoch, 0, None
            if self.sampler is not None:
                self.sampler.set_epoch(epoch)
            yield epoch
        self.epoch, self.batch = count, 0
        self.flag.close()  # the stop check in flight is finished on every rank before anything else
        if self._saved is not None and self._saved[0] == self.step:
            # The training is over and saved at its last step; the signal handlers are the script's again. A
            # notice from now on (the final model being written, the group leaving) ends the ranks, but nothing
            # is lost: the launcher says "state saved at step N" (exit 4), and the same command again trains
            # nothing and finishes (benchmarks/preempt_trials.py: 2 of 20 random moments landed here, exit 1).
            _note({"step": self.step, "path": self._saved[1]})

    def batches(self, loader: Iterable) -> Iterator[Any]:
        """The epoch's batches after those already done. The RNG states are set to the epoch's start before iter()
        (a DataLoader draws its shuffle and its workers' seeds there), and to the step's after skipping."""
        if self.stopped:  # stopped on the last step of the epoch before, in a loop of the script's own (step_done)
            raise SystemExit(PREEMPTED_EXIT)
        self.epoch_length = len(loader) if hasattr(loader, "__len__") else None
        if self._step_rng is not None:  # resumed in the middle of this epoch
            set_rng_state(self._epoch_rng)
            it = iter(loader)
            for _ in range(self.batch):
                next(it)
            set_rng_state(self._step_rng)
            self._step_rng = None
        else:
            self._epoch_rng = rng_state()
            it = iter(loader)
        for item in it:
            self.batch += 1
            yield item

    def step_done(self) -> None:
        """Call after each optimizer step, on every rank. Saves every `every` steps; when any rank has seen a
        signal, every rank saves here (the same step) and exits with PREEMPTED_EXIT."""
        self.step += 1
        faults.preempt_after(self.step, lambda: self.flag.signal is not None)
        stop = self.flag.agreed()
        if stop:
            stamp("rank", f"agreed {self.step}")
        if stop or (self.every and self.step % self.every == 0):
            path = self.save()
            self._saved = (self.step, os.path.abspath(path))
            if stop:
                stamp("rank", "saved")
                global saved_on_notice
                self.stopped = saved_on_notice = True
                self._announce(path)
                if self.epoch_length is not None and self.batch >= self.epoch_length:
                    # The epoch's last step: its end (the epoch's loss summed over the ranks, its line, an
                    # evaluation) runs on every rank before the next epochs()/batches() exits; the state is saved
                    # already, so a machine gone before then loses nothing.
                    return
                raise SystemExit(PREEMPTED_EXIT)

    # ------------------------------------------------------------------------------------------- save and load

    def save(self) -> Path | None:
        """A collective: every rank's RNG states go to rank 0, which writes the checkpoint. Rank 0 returns its path."""
        mine = rng_state()
        mine["numpy"] = _plain(mine["numpy"])
        epoch, batch, epoch_rng = self.epoch, self.batch, self._epoch_rng
        if self.epoch_length is not None and batch >= self.epoch_length:
            # The epoch's last step: resumed, the run starts the next epoch (not this one again, with nothing left
            # to do); the random generators are where that epoch's start finds them.
            epoch, batch, epoch_rng = epoch + 1, 0, None
        rngs = [None] * self.world_size
        if self.world_size > 1:
            dist.all_gather_object(rngs, {"step": mine, "epoch": _plain_epoch(epoch_rng)})
        else:
            rngs = [{"step": mine, "epoch": _plain_epoch(epoch_rng)}]
        objects = self._state_dicts()  # every rank: a sharded model or optimizer gathers its shares to rank 0
        state = {
            "identity": self.identity,
            "world_size": self.world_size,
            "step": self.step,
            "epoch": epoch,
            "batch": batch,
            "rng": rngs,
            "objects": objects if self.rank == 0 else {},
        }
        return _agree(lambda: ckptfile.save(self.directory, state, self.step, self.keep) if self.rank == 0 else None)

    def _state_dicts(self) -> dict:
        """The registered objects' whole states (a collective: sharded ones are gathered to rank 0)."""
        states = {}
        for name, obj in self.objects.items():
            if isinstance(obj, torch.nn.Module):
                states[name] = statedict.full_state_dict(obj, rank0_on_cpu=True)
            elif isinstance(obj, torch.optim.Optimizer):
                states[name] = statedict.optimizer_state_dict(self._model_of(obj), obj, self.rank)
            else:
                states[name] = obj.state_dict()
        return states

    def _load(self, name: str, obj: Any, state: dict) -> None:
        if isinstance(obj, torch.nn.Module):
            statedict.load_full_state_dict(obj, state)
        elif isinstance(obj, torch.optim.Optimizer):
            statedict.load_optimizer_state_dict(self._model_of(obj), obj, state)
        else:
            obj.load_state_dict(state)

    def _model_of(self, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
        """The registered model whose parameters the optimizer updates (a sharded one's state is gathered with it)."""
        first = next((p for group in optimizer.param_groups for p in group["params"]), None)
        for obj in self.objects.values():
            if isinstance(obj, torch.nn.Module) and any(p is first for p in obj.parameters()):
                return obj
        return torch.nn.Module()  # none registered: an unsharded optimizer's own state_dict serves

    def _resume(self) -> str | None:
        def pick():
            found = ckptfile.latest(
                self.directory, warn=lambda msg: print(f"ddplab.resume: {msg}", file=sys.stderr, flush=True)
            )
            return str(found.path) if found else None

        name = _agree(pick)
        if name is None:
            return None
        try:
            state = ckptfile.load(Path(name), verified=self.rank != 0)  # rank 0 has just verified it
        except (ValueError, OSError) as e:
            _refuse(
                f"checkpoint {name} does not load on rank {self.rank} ({e}): every rank must see the same "
                "checkpoint folder (on several machines, a shared file system)",
                everyone=True,
            )
        if state.get("identity") != self.identity:
            _refuse(
                f"{self.directory} holds checkpoints of another run ({_difference(state.get('identity'), self.identity)}"
                "): choose an empty folder for this run (nothing was overwritten)"
            )
        if state["world_size"] != self.world_size:
            _refuse(
                f"checkpoint {name} was written by {state['world_size']} rank(s), this run has "
                f"{self.world_size}: resume with {state['world_size']} (each rank's shard of the data depends on "
                "the number of ranks, so the data order could not continue exactly)"
            )
        for key, obj in self.objects.items():
            self._load(key, obj, state["objects"][key])
        self.step, self.epoch, self.batch = state["step"], state["epoch"], state["batch"]
        rng = state["rng"][self.rank]
        rng["step"]["numpy"] = _numpy_state(rng["step"]["numpy"])
        self._epoch_rng = _epoch_state(rng["epoch"])
        self._step_rng = rng["step"] if self.batch else None
        set_rng_state(rng["step"])
        if self.rank == 0:  # epochs counted from 1, as the script's own epoch lines count them
            where = (
                f"epoch {self.epoch + 1}, after batch {self.batch}"
                if self.batch
                else f"the start of epoch {self.epoch + 1}"
            )
            print(f"resumed at step {self.step} ({where}) from {name}", flush=True)
        return name

    def _announce(self, path: Path | None) -> None:
        """Rank 0 says it; every rank notes it (the path came back from rank 0's save): on several machines each
        node's `ddplab launch` reads its own ranks' note, and a node without rank 0 must know the state is safe."""
        if self.rank == 0:
            print(f"preempted, state saved at step {self.step} ({path})", file=sys.stderr, flush=True)
        _note({"step": self.step, "path": os.path.abspath(path)})


def save_file(obj: Any, path: str | os.PathLike) -> None:
    """torch.save(obj, path) that never leaves a torn file under `path`, wherever the folder is: a temporary file
    and a rename, or, on a bucket mount that cannot rename (mountpoint-s3, gcsfuse: os.replace fails or copies), the
    file written whole under its name (an object appears when its upload ends). A script's final model, say.
    Call it on one rank; a write that fails is one line and exit code 2 (ddplab.ckptfile.atomic_save)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _refuse(f"cannot create {path.parent} ({e.strerror}): choose a writable --out", everyone=True)
    try:
        ckptfile.atomic_save(obj, path)
    except DdplabError as e:
        _refuse(str(e).replace("--checkpoint-dir", "path"), everyone=True)


def _plain_epoch(state):
    if state is None:
        return None
    return {**state, "numpy": _plain(state["numpy"])}


def _epoch_state(state):
    if state is None:
        return None
    return {**state, "numpy": _numpy_state(state["numpy"])}


def _difference(saved: dict | None, here: dict) -> str:
    saved = saved or {}
    for key in ("run", "objects", "shapes"):
        if saved.get(key) != here[key]:
            return f"{key}: {saved.get(key)!r} there, {here[key]!r} here" if key != "shapes" else "other model shapes"
    return "another format"


def _agree(action):
    """Run `action` on rank 0 only and share its result or error with every rank: they then fail or go on together,
    with one line and exit code 2 on an error (a folder or a checkpoint is judged once, by the rank that writes)."""
    outcome = [None, None]
    if not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0:
        try:
            outcome[0] = action()
        except DdplabError as e:
            outcome[1] = str(e)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(outcome, src=0)
    if outcome[1] is not None:
        _refuse(outcome[1])
    return outcome[0]


def _refuse(message: str, everyone: bool = False) -> None:
    """One line (from rank 0, or from every rank when only some may see it) and exit code 2, never a traceback."""
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if rank == 0 or everyone:
        print(f"ddplab.resume: error: {message}", file=sys.stderr, flush=True)
        _note({"refused": message})
    raise SystemExit(2)


def _note(what: dict) -> None:
    """Tell the launcher (`ddplab launch`/`train` set NOTE_VAR) what happened: it says so in one line."""
    note = os.environ.get(NOTE_VAR)
    if note:
        tmp = Path(f"{note}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(what))
        os.replace(tmp, note)
