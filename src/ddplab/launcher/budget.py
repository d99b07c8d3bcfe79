"""A spending cap: money counted as time × a price, a warning at WARN_SHARE of the cap, and the stop at the cap.

`ddplab launch --budget USD` stops its one job the way a preemption does (launcher.preempt): SIGTERM to ddplab
itself, which the preemption Forwarder catches and passes to every rank; ddplab.resume saves at the same step on every
rank, the run ends with exit 4 and starts again from there. `ddplab monitor --budget` runs --then (observe.idle).
The price is resolved by the caller (--price, or --gpu/--provider from ddplab's price table, perf.spend): here it is
a rate per hour for what is used, and the clock.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

WARN_SHARE = 0.8  # the warning: early enough to save or extend by hand before the stop


@dataclass
class Budget:
    cap: float  # in `currency`
    per_hour: float  # the rate of what is paid for: price per GPU-hour × GPUs billed
    currency: str
    priced: str  # how the rate was made, for people: "3.99 USD/GPU-hour (--price) × 2 GPU(s)"
    started: float  # time.time() the spending is counted from
    warned: bool = False
    reached_at: float | None = None

    def spent(self, now: float | None = None) -> float:
        return max((time.time() if now is None else now) - self.started, 0.0) / 3600 * self.per_hour

    def money(self, amount: float) -> str:
        return f"{amount:.2f} {self.currency}" if amount >= 1 else f"{amount:.4f} {self.currency}"

    def seconds_left(self) -> float:
        return (self.cap - self.spent()) / self.per_hour * 3600

    def announce(self) -> str:
        """The line said at the start: the cap, its rate, and when it falls."""
        return (
            f"budget {self.money(self.cap)} at {self.priced} = {self.money(self.per_hour)}/hour: the cap falls "
            f"{self.seconds_left():.0f} s from now (a warning at 80 %)"
        )

    def reason(self) -> str:
        return (
            f"budget reached: {self.money(self.spent(self.reached_at))} spent of {self.money(self.cap)} since "
            f"{time.strftime('%H:%M:%S', time.localtime(self.started))} at {self.priced}"
        )

    def poll(self, log: Callable[[str], None]) -> bool:
        """Warn once at WARN_SHARE of the cap; True once the cap is reached (and from then on)."""
        if self.reached_at is not None:
            return True
        now = time.time()
        spent = self.spent(now)
        if spent >= self.cap:
            self.reached_at = now
            return True
        if not self.warned and spent >= WARN_SHARE * self.cap:
            self.warned = True
            left = (self.cap - spent) / self.per_hour * 3600
            log(
                f"WARN budget: {self.money(spent)} spent of {self.money(self.cap)} ({100 * spent / self.cap:.0f} %); "
                f"the cap is reached in {left:.3g} s"
            )
        return False


def check(budget: Budget | None, log: Callable[[str], None]) -> None:
    """The launcher's hook, called as it watches the ranks: at the cap, the stop, once."""
    if budget is not None and budget.reached_at is None and budget.poll(log):
        log(budget.reason() + ": every rank saves and stops, as on a preemption")
        stop_like_a_preemption()


def stop_like_a_preemption() -> None:
    """The notice a cloud's reclaim sends, from within: the launcher's preemption Forwarder catches it and every
    rank saves (ddplab.resume) and leaves with exit 4."""
    os.kill(os.getpid(), signal.SIGTERM)
