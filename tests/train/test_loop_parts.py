"""The loop's decisions without a process: which steps a run takes, and when the Checkpointer saves or stops.

The whole loop runs for real in test_train.py and test_resume.py; these hold the two decisions that moved out of
_fit to the loop as it was written before (one while/for/break), step for step.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ddplab.train import checkpointer
from ddplab.train.checkpointer import Checkpointer, Preempted
from ddplab.train.loop import Schedule


class Batches:
    def __init__(self):
        self.calls: list = []

    def set_epoch(self, epoch: int) -> None:
        self.calls.append(("set_epoch", epoch))


def as_written_before(steps_per_epoch: int, stop_at: int, epoch: int, index: int) -> list:
    """_fit's loop before the Checkpointer and Schedule: the calls it made, in order."""
    calls, step = [], epoch * steps_per_epoch + index
    while step < stop_at:
        calls.append(("set_epoch", epoch))
        for s in range(index, steps_per_epoch):
            calls.append((epoch, s))
            step += 1
            if step >= stop_at:
                break
        epoch, index = epoch + 1, 0
    return calls


@pytest.mark.parametrize(
    "steps_per_epoch, epochs, max_steps", [(5, 3, 0), (5, 3, 7), (5, 3, 10), (1, 4, 0), (4, 2, 100)]
)
@pytest.mark.parametrize("start", [0, 3, 4, 5, 9, 15])
def test_the_schedule_takes_the_steps_the_loop_took(steps_per_epoch, epochs, max_steps, start):
    planned = steps_per_epoch * epochs
    schedule = Schedule(steps_per_epoch, planned, min(planned, max_steps) if max_steps else planned, 64)
    epoch, index = divmod(start, steps_per_epoch)  # as a restore gives it: index < steps_per_epoch
    batches = Batches()
    for position in schedule.steps_from(batches, epoch, index):
        batches.calls.append(position)
    assert batches.calls == as_written_before(steps_per_epoch, schedule.stop_at, epoch, index)


class Agreed:
    """A StopFlag whose ranks agree to stop after the given steps (it is asked only when the run goes on)."""

    def __init__(self, *at: int):
        self.at, self.asked = set(at), []

    def agreed(self) -> bool:
        self.asked.append(True)
        return len(self.asked) in self.at


def checkpoints(monkeypatch, directory: Path | None, every: int = 0, stop=None) -> tuple[Checkpointer, list]:
    saves: list = []

    def save(directory, recipe_name, cfg, model, optimizer, scaler, ctx, data, epoch, step_in_epoch, step, gb):
        saves.append((step, epoch, step_in_epoch))
        return directory / f"step-{step}.pt"

    monkeypatch.setattr(checkpointer, "save", save)
    cfg = SimpleNamespace(checkpoint_path=directory, checkpoint_every=every)
    return Checkpointer("mlp", cfg, None, None, None, None, None, global_batch=64, steps_per_epoch=4, stop=stop), saves


def run(ckpt: Checkpointer, steps: int) -> Preempted | None:
    for step in range(1, steps + 1):
        epoch, index = divmod(step - 1, 4)
        preempted = ckpt.after_step(step, epoch, index + 1, done=step == steps)
        if preempted is not None:
            return preempted
    return None


def test_saves_at_each_epochs_end_every_n_steps_and_where_the_run_ends(monkeypatch, tmp_path):
    ckpt, saves = checkpoints(monkeypatch, tmp_path, every=3)
    assert run(ckpt, 10) is None
    assert [s[0] for s in saves] == [3, 4, 6, 8, 9, 10]
    assert saves[1] == (4, 0, 4) and saves[-1] == (10, 2, 2)  # (step, epoch, steps of the epoch done)
    assert ckpt.saved == tmp_path / "step-10.pt" and ckpt.saved_step == 10


def test_an_agreed_signal_saves_once_and_stops_after_that_step(monkeypatch, tmp_path):
    ckpt, saves = checkpoints(monkeypatch, tmp_path, stop=Agreed(2, 4))
    assert run(ckpt, 10) == Preempted(2, str(tmp_path / "step-2.pt"))
    assert [s[0] for s in saves] == [2]
    ckpt, saves = checkpoints(monkeypatch, tmp_path, stop=Agreed(4))  # on an epoch's last step: saved once
    assert run(ckpt, 10) == Preempted(4, str(tmp_path / "step-4.pt")) and [s[0] for s in saves] == [4]


def test_the_last_step_never_asks_and_no_folder_saves_nothing(monkeypatch, tmp_path):
    flag = Agreed(1, 2, 3)
    ckpt, saves = checkpoints(monkeypatch, tmp_path, stop=flag)
    assert run(ckpt, 1) is None and flag.asked == [] and [s[0] for s in saves] == [1]
    ckpt, saves = checkpoints(monkeypatch, None, every=1, stop=Agreed(3))
    stopped = run(ckpt, 10)
    assert stopped == Preempted(3, None) and saves == [] and stopped.exit_code == 1


class Scaler:
    """GradScaler's calls, recorded (the real one is CUDA-only: --amp fp16 runs on GPUs alone)."""

    def __init__(self, calls: list):
        self.calls = calls

    def scale(self, loss):
        self.calls.append("scale")
        return loss

    def unscale_(self, optimizer):
        self.calls.append("unscale_")

    def step(self, optimizer):
        self.calls.append("scaler.step")
        optimizer.step()

    def update(self):
        self.calls.append("update")


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_one_optimizer_step_accumulates_without_sync_then_unscales_clips_and_steps(monkeypatch, fp16, clip):
    import contextlib

    import torch

    from ddplab.train.loop import Model, TrainStep

    calls: list = []

    @contextlib.contextmanager
    def no_sync():
        calls.append("no_sync")
        yield

    def clip_grad_norm_(parameters, max_norm):
        calls.append(f"clip {max_norm}")

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_grad_norm_)
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    monkeypatch.setattr(optimizer, "step", lambda: calls.append("step"))
    monkeypatch.setattr(optimizer, "zero_grad", lambda set_to_none: calls.append("zero_grad"))
    recipe = SimpleNamespace(
        lr_at=lambda cfg, step, planned: 0.5 * (1 - step / planned), loss=lambda model, batch: model(batch).sum()
    )
    cfg = SimpleNamespace(grad_accum=3, grad_clip=clip, amp="none")
    model = Model(net, net, optimizer, no_sync, Scaler(calls) if fp16 else None, None)
    batches = [torch.full((2, 3), float(i)) for i in range(6)]
    loss = TrainStep(recipe, cfg, model, torch.device("cpu"), planned=10)(batches, 1, step=4)

    scale = ["scale"] if fp16 else []
    update = (
        (["unscale_"] if fp16 and clip else [])
        + ([f"clip {clip}"] if clip else [])
        + (["scaler.step", "step", "update"] if fp16 else ["step"])
    )
    assert calls == ["no_sync", *scale, "no_sync", *scale, *scale, *update, "zero_grad"]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.3)  # the schedule at step 4 of 10
    assert loss.item() == net(batches[5]).sum().item() and not loss.requires_grad  # the last micro-batch's


def test_compile_says_what_it_cost_and_where_its_gain_is():
    """Issue 42 point 8: `--compile` showed nothing. The note names the first step's time (mostly compiling) and the
    steady step time, and says that the gain is only seen against the same run without --compile."""
    from ddplab.train.loop import Timing, compile_note

    line = compile_note(52.46, Timing(timed_steps=297, seconds=2.352, total=55.0, cpu_percent=20.0, wait_share=0.3))
    assert line.startswith("compile: on (torch.compile before DDP): the first step took 52.5s")
    assert "the steady steps 7.92 ms each" in line and "without --compile" in line
    assert "no steady step timed" in compile_note(3.0, Timing(0, 3.0, 3.0, 50.0, -1.0))
