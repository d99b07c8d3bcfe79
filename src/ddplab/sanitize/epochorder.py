"""Check `epoch-repeats`: a shuffling DistributedSampler gives an epoch the very order of the one before.

A DistributedSampler shuffles with seed + epoch, and its epoch changes only through set_epoch(): a script that never
calls it trains every epoch on the same order of the same shard (torch's documentation: "Calling the set_epoch()
method at the beginning of each epoch before creating the DataLoader iterator is necessary to make shuffling work
properly across multiple epochs. Otherwise, the same ordering will be always used.").

Rank side: each pass over a DistributedSampler (iter(sampler): once per epoch, from its DataLoader) leaves its
epoch value, its length and a crc32 of its index order; the sampler is named by where the user's code built it.
The hook costs one call per epoch, so it stays past the step window until every shuffling sampler seen has had its
second pass (a first epoch longer than the window), then goes too.

Reader: two consecutive passes of one shuffling sampler with the same order, on any rank.
"""

from __future__ import annotations

import functools
import weakref
import zlib
from array import array

from ddplab.sanitize import Finding, ranks_text, rankside, short

ID = "epoch-repeats"
SAMPLERS = 16
PASSES = 4


class Observer(rankside.Observer):
    ID = ID

    def __init__(self, window):
        super().__init__(window)
        self.on = True
        self.samplers: list[dict] = []
        self.index = weakref.WeakKeyDictionary()  # sampler -> its record
        self.undo: list = []

    def attach(self, torch) -> None:
        from torch.utils.data import DistributedSampler

        init, iterate = DistributedSampler.__init__, DistributedSampler.__iter__
        obs = self

        @functools.wraps(init)
        def __init__(sampler, *args, **kwargs):
            init(sampler, *args, **kwargs)
            if obs.on:
                obs.guarded(obs.built, sampler)

        @functools.wraps(iterate)
        def __iter__(sampler):
            if not obs.on or sampler not in obs.index:
                return iterate(sampler)
            indices = list(iterate(sampler))
            obs.guarded(obs.seen, sampler, indices)
            return iter(indices)

        DistributedSampler.__init__, DistributedSampler.__iter__ = __init__, __iter__
        self.undo = [(DistributedSampler, "__init__", init), (DistributedSampler, "__iter__", iterate)]

    def built(self, sampler) -> None:
        if len(self.samplers) < SAMPLERS:
            self.index[sampler] = record = {
                "where": self.window.where(),
                "shuffle": bool(sampler.shuffle),
                "seed": int(sampler.seed),
                "passes": [],
            }
            self.samplers.append(record)

    def seen(self, sampler, indices: list) -> None:
        record = self.index[sampler]
        if len(record["passes"]) < PASSES:
            order = (
                zlib.crc32(array("q", indices).tobytes())
                if all(type(i) is int for i in indices[:8])
                else zlib.crc32(repr(indices).encode())
            )
            record["passes"].append(
                {"epoch": int(sampler.epoch), "n": len(indices), "order": order, "step": self.window.step}
            )
        if not self.window.open and not self._waiting():
            self.window.done(self)

    def _waiting(self) -> bool:
        return any(r["shuffle"] and len(r["passes"]) == 1 for r in self.samplers)

    def linger(self) -> bool:
        """A shuffling sampler in its first epoch: its __iter__ stays until the second (no new sampler is watched)."""
        if not self._waiting():
            return False
        for owner, name, original in [u for u in self.undo if u[1] == "__init__"]:
            setattr(owner, name, original)
        self.undo = [u for u in self.undo if u[1] != "__init__"]
        return True

    def stop(self) -> None:
        self.on = False
        for owner, name, original in self.undo:
            setattr(owner, name, original)
        self.undo = []

    def data(self) -> dict:
        return {"samplers": self.samplers}


# ------------------------------------------------------------------------------------------------------ reader side
def judge(ranks: dict[int, dict], world: int) -> list[Finding]:
    repeated: dict[str | None, dict] = {}  # where -> what was seen, over the ranks
    for rank, data in sorted(ranks.items()):
        for record in data.get("samplers", []):
            if not record["shuffle"]:
                continue
            passes = record["passes"]
            for before, after in zip(passes, passes[1:]):
                if before["order"] == after["order"] and before["n"] == after["n"] and before["n"] > 1:
                    seen = repeated.setdefault(
                        record["where"],
                        {"ranks": [], "first": before, "second": after, "epochs": sorted({p["epoch"] for p in passes})},
                    )
                    seen["ranks"].append(rank)
                    break
    findings = []
    for where, seen in repeated.items():
        epochs, first = seen["epochs"], seen["first"]
        # A sampler's epoch is 0 until set_epoch(): 0 throughout cannot tell "never called" from "given 0 each time"
        if epochs == [0]:
            stayed = "its epoch stayed 0: set_epoch() was never called, or given 0 every time"
        elif len(epochs) == 1:
            stayed = f"its epoch stayed {epochs[0]}: set_epoch() was given the same value every time"
        else:
            stayed = f"set_epoch() was given {first['epoch']} again"
        observed = (
            f"the shuffling DistributedSampler built at {short(where)} gave the second epoch the very order "
            f"of the first ({first['n']} indices, on rank{'s' if len(seen['ranks']) > 1 else ''} "
            f"{ranks_text(seen['ranks'])}): {stayed}, so every epoch trains on the same order"
        )
        fix = (
            "call sampler.set_epoch(epoch) at the start of every epoch, before iterating the DataLoader "
            "(for epoch in range(epochs): sampler.set_epoch(epoch); for batch in loader: ...)"
        )
        evidence = {
            "ranks": seen["ranks"],
            "epochs": epochs,
            "indices": first["n"],
            "order_crc32": first["order"],
            "second_epoch_at_step": seen["second"]["step"],
        }
        findings.append(Finding(ID, observed, fix, where=where, evidence=evidence))
    return findings
