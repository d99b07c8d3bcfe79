"""Rank 0's progress bar, drawn where the user is looking.

Under torchrun, rank 0 draws it itself (other ranks stay quiet). Under `ddplab train`, workers' output goes to log
files, so each worker reports through ddplab.launcher.progress.mark() and the ddplab process draws the bar from rank 0's events.
Either way the same ProgressView draws it, on stderr (stdout stays clean for --json).
"""

from __future__ import annotations

import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ddplab import report
from ddplab.launcher.progress import mark

TICK_S = 0.25  # how often the bar moves between log points; a clock read per step costs nothing


class ProgressView:
    def __init__(self):
        self.console = report.console(stderr=True)
        self.bar: Progress | None = None
        self.task = None

    def start(self, info: dict) -> None:
        # What is starting, not the result's header (recipe, ranks, batch layout): that follows once, at the end.
        steps = info["planned_steps"] - info["start_step"]
        self.console.print(
            f"training {info['recipe']}: {steps} step(s) to go "
            f"({info['steps_per_epoch']} per epoch x {info['epochs']} epoch(s)) on "
            f"{info['world_size']} rank(s)",
            markup=False,
            highlight=False,
        )
        self.bar = Progress(
            TextColumn("epoch {task.fields[epoch]}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}", markup=False),
            TextColumn("{task.fields[speed]}", markup=False),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.task = self.bar.add_task(
            "train",
            total=info["planned_steps"],
            completed=info["start_step"],
            epoch=f"{info['start_epoch'] + 1}/{info['epochs']}",
            loss="-",
            speed="",
        )
        self.bar.start()

    def step(self, info: dict) -> None:
        if self.bar is None:
            return
        fields = {"epoch": f"{info['epoch'] + 1}/{info['epochs']}"}
        if info.get("loss") is not None:
            fields["loss"] = f"{info['loss']:.4f}"
        if info.get("samples_per_sec"):
            fields["speed"] = f"{info['samples_per_sec']:,.0f} samples/s"
        self.bar.update(self.task, completed=info["step"], **fields)

    def note(self, text: str) -> None:
        self.console.print(report.text(("note", "yellow"), f" {text}") if not text.startswith("WARN") else text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def on_event(self, rank: int, event: dict) -> None:
        """PendingRun.run(on_event=...): draw rank 0's training events."""
        if rank != 0:
            return
        phase = event.get("phase")
        if phase == "train.start":
            self.start(event)
        elif phase in ("train.step", "train.log"):
            self.step(event)
        elif phase == "train.note":
            self.note(event["text"])
        elif phase == "train.end":
            self.close()


class Reporter:
    """A worker's side: draw (rank 0 under torchrun) or mark events (every rank under `ddplab train`).

    Every rank marks under ddplab train: the runner's hang detection and its "who is behind" both read the marks.
    """

    def __init__(self, is_main: bool, events: bool):
        self.events = events
        self.view = ProgressView() if is_main and not events else None
        self._last_tick = 0.0
        self._held: list[str] | None = []  # notes that come before start() follow the header

    def _send(self, kind: str, info: dict) -> None:
        if self.events:
            mark(f"train.{kind}", **info)
        elif self.view is not None:
            self.view.on_event(0, {"phase": f"train.{kind}", **info})

    def start(self, **info) -> None:
        self._send("start", info)
        self._last_tick = time.monotonic()
        held, self._held = self._held or [], None
        for text in held:
            self.note(text)

    def tick(self, **info) -> None:
        """Called every step; passes on at most every TICK_S seconds."""
        now = time.monotonic()
        if now - self._last_tick >= TICK_S:
            self._last_tick = now
            self._send("step", info)

    def log(self, **info) -> None:
        self._send("log", info)

    def note(self, text: str) -> None:
        if self._held is not None:
            self._held.append(text)
        else:
            self._send("note", {"text": text})

    def end(self) -> None:
        self._send("end", {})
