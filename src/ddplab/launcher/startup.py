"""Start-up without waiting twice for torch: the agent starts on a guessed rank count while the caller imports torch
and settles the device, backend and count; a wrong guess is ended and started again.

    with startup.early(lambda n: local.start(TARGET, nproc=n), envinfo.early_nproc(args.nproc, args.device)) as ranks:
        import torch                      # ~2 s, in parallel with the agent's own import
        nproc = ...                       # may raise: bad input ends the early agent
        result = ranks.get(nproc).run(payload)   # the early agent when the guess was right
"""

from __future__ import annotations

from collections.abc import Callable

from ddplab.launcher.local import PendingRun


class early:
    def __init__(self, start: Callable[[int], PendingRun], guess: int | None):
        self.start = start
        self.pending: PendingRun | None = start(guess) if guess else None
        self.handed_out = False

    def __enter__(self) -> early:
        return self

    def get(self, nproc: int) -> PendingRun:
        """The agent for exactly `nproc` ranks, ready to run."""
        if self.pending is not None and self.pending.nproc != nproc:
            self.pending.cancel()
            self.pending = None
        if self.pending is None:
            self.pending = self.start(nproc)
        self.handed_out = True
        return self.pending

    def __exit__(self, exc_type, exc, tb) -> None:
        # An error before the run began (bad input, Ctrl-C), or no run needed after all (a failed preflight): nothing
        # started may outlive the caller's answer. A run, once begun, ends its agent itself.
        if self.pending is not None and not self.pending.launched and (exc_type is not None or not self.handed_out):
            self.pending.cancel()
