"""Check `epoch-repeats`: a shuffling DistributedSampler gives an epoch the very order of the one before.

A DistributedSampler shuffles with seed + epoch, and its epoch changes only through set_epoch(): a script that never
calls it trains every epoch on the same order of the same shard (torch's documentation: "Calling the set_epoch()
method at the beginning of each epoch before creating the DataLoader iterator is necessary to make shuffling work
properly across multiple epochs. Otherwise, the same ordering will be always used.").

Rank side: each pass over a DistributedSampler (iter(sampler): once per epoch, from its DataLoader) leaves its
epoch value, its length and a crc32 of its index order; the sampler is named by where the user's code built it.
Each set_epoch() call leaves its value, and the first one made while a pass still had indices to hand out (the
loop had begun: too late for that epoch's order) leaves where it was made; a subclass's own set_epoch() leaves the
values the script gave it (one that never calls DistributedSampler's leaves the epoch where it was). The hooks cost
one call per epoch, so they stay past the step window until every line that built a shuffling sampler has seen its
second pass (a first epoch longer than the window; a sampler built anew each epoch), then go too.

Reader: two consecutive passes of one shuffling sampler with the same order, on any rank (not two passes with no
set_epoch() between them where set_epoch() is called: one epoch read twice), or the first pass of a sampler built
anew at the line that built the one before, with no set_epoch() on it; why, from the set_epoch() calls: none, always
one value, too late, made on another sampler, or swallowed by a subclass's set_epoch().
"""

from __future__ import annotations

import functools
import inspect
import operator
import struct
import weakref
import zlib
from array import array

from ddplab.sanitize import Finding, ranks_text, rankside, short

ID = "epoch-repeats"
SAMPLERS = 16
PASSES = 4
SET_CALLS = 8


class Observer(rankside.Observer):
    ID = ID

    def __init__(self, window):
        super().__init__(window)
        self.on = True
        self.samplers: list[dict] = []
        self.index = weakref.WeakKeyDictionary()  # sampler -> its record
        self.current = weakref.WeakKeyDictionary()  # sampler -> the iterator of its latest pass (its indices left)
        self.overrides: set[type] = set()  # subclasses whose own set_epoch() is watched
        self.seq = 0  # samplers built and passes begun, in order: a sampler built anew after the last one's pass
        self.undo: list = []

    def attach(self, torch) -> None:
        from torch.utils.data import DistributedSampler

        init, iterate, set_epoch = (
            DistributedSampler.__init__,
            DistributedSampler.__iter__,
            DistributedSampler.set_epoch,
        )
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
            it = obs.current[sampler] = iter(indices)
            return it

        @functools.wraps(set_epoch)
        def _set_epoch(sampler, epoch):
            set_epoch(sampler, epoch)
            if obs.on and sampler in obs.index:
                obs.guarded(obs.epoch_set, sampler, epoch)

        DistributedSampler.__init__, DistributedSampler.__iter__ = __init__, __iter__
        DistributedSampler.set_epoch = _set_epoch
        self.undo = [
            (DistributedSampler, "__init__", init),
            (DistributedSampler, "__iter__", iterate),
            (DistributedSampler, "set_epoch", set_epoch),
        ]

    def built(self, sampler) -> None:
        if len(self.samplers) >= SAMPLERS:
            return
        where = self.window.where()
        if not self.window.open and where not in self._waiting():
            return  # after the window: only a sampler built anew where one waits for its second epoch
        self.seq += 1
        self.index[sampler] = record = {
            "where": where,
            "seq": self.seq,
            "shuffle": bool(sampler.shuffle),
            "seed": int(sampler.seed),
            "passes": [],
            "calls": 0,  # set_epoch() calls so far
            "set_epoch": [],  # the values given, in order (up to SET_CALLS)
            "late": None,  # the first set_epoch() made while a pass still had indices to hand out
        }
        self.samplers.append(record)
        self._watch_override(type(sampler))

    def _watch_override(self, cls: type) -> None:
        """A subclass's own set_epoch(), wrapped once: the values the script gives it, which DistributedSampler's
        wrapper never sees when the override does not pass them on (`super().set_epoch(epoch)`)."""
        from torch.utils.data import DistributedSampler

        owner = next(c for c in cls.__mro__ if "set_epoch" in c.__dict__)
        original = owner.__dict__["set_epoch"]
        if owner is DistributedSampler or owner in self.overrides or not inspect.isfunction(original):
            return
        obs = self

        @functools.wraps(original)
        def set_epoch(sampler, *args, **kwargs):
            if obs.on and args and (record := obs.index.get(sampler)) is not None:
                obs.guarded(obs.asked, record, args[0], original)
            return original(sampler, *args, **kwargs)

        owner.set_epoch = set_epoch
        self.overrides.add(owner)
        self.undo.append((owner, "set_epoch", original))

    def asked(self, record: dict, epoch, method) -> None:
        values = record.setdefault("asked", [])
        if len(values) < SET_CALLS and isinstance(epoch, int):
            values.append(int(epoch))
        code = method.__code__
        record["override"] = {"name": method.__qualname__, "where": f"{code.co_filename}:{code.co_firstlineno}"}

    def seen(self, sampler, indices: list) -> None:
        record = self.index[sampler]
        if len(record["passes"]) < PASSES:
            order = (
                zlib.crc32(_words(indices))
                if all(type(i) is int for i in indices[:8])
                else zlib.crc32(repr(indices).encode())
            )
            self.seq += 1
            record["passes"].append(
                {
                    "seq": self.seq,
                    "epoch": int(sampler.epoch),
                    "n": len(indices),
                    "order": order,
                    "step": self.window.step,
                    "calls": record["calls"],  # set_epoch() calls before this pass
                }
            )
        if not self.window.open and not self._waiting():
            self.window.done(self)

    def forked(self) -> None:
        for record in self.samplers:  # built before the fork: this process's too; their passes and calls are not
            record.update(passes=[], calls=0, set_epoch=[], late=None)
            record.pop("asked", None)
        self.current = weakref.WeakKeyDictionary()

    def epoch_set(self, sampler, epoch) -> None:
        record = self.index[sampler]
        record["calls"] += 1
        if len(record["set_epoch"]) < SET_CALLS:
            record["set_epoch"].append(int(epoch))
        it = self.current.get(sampler)
        left = operator.length_hint(it) if it is not None else 0
        if left and record["late"] is None and record["passes"]:
            record["late"] = {"epoch": int(epoch), "left": left, "n": record["passes"][-1]["n"]}
            record["late"]["where"] = self.window.where()

    def _waiting(self) -> set:
        """The lines whose shuffling samplers have had one pass in all: one sampler in its first epoch, or the first of
        those built anew there each epoch."""
        passes: dict = {}
        for r in self.samplers:
            if r["shuffle"]:
                passes[r["where"]] = passes.get(r["where"], 0) + len(r["passes"])
        return {where for where, n in passes.items() if n == 1}

    def linger(self) -> bool:
        """A shuffling sampler in its first epoch: the hooks stay until its line's second pass (one call an epoch; a
        new sampler is watched only where one waits)."""
        return bool(self._waiting())

    def stop(self) -> None:
        self.on = False
        for owner, name, original in self.undo:
            setattr(owner, name, original)
        self.undo = []
        self.current.clear()  # the passes' index lists

    def data(self) -> dict:
        return {"samplers": self.samplers}


def _words(indices: list) -> bytes:
    """The indices as 64-bit words, array("q")'s bytes: struct packs a list of ints in half array's time (60 us for
    an epoch of 1024 indices, with the caches cold twice that)."""
    try:
        return struct.pack(f"{len(indices)}q", *indices)
    except (struct.error, OverflowError, TypeError):  # array says what is wrong with them, as it always did
        return array("q", indices).tobytes()


# ------------------------------------------------------------------------------------------------------ reader side
def judge(ranks: dict[int, dict], world: int) -> list[Finding]:
    repeated: dict[str | None, dict] = {}  # where -> what was seen, over the ranks
    for rank, data in sorted(ranks.items()):
        samplers = data.get("samplers", [])
        done = set()
        for record, before, after, later, rebuilt in _pairs(samplers):
            if record["where"] in done or not rebuilt and _one_epoch_read_twice(record, before, after, later):
                continue
            if before["order"] == after["order"] and before["n"] == after["n"] and before["n"] > 1:
                same_line = [r for r in samplers if r["where"] == record["where"]]
                seen = repeated.setdefault(
                    record["where"],
                    {
                        "ranks": [],
                        "first": before,
                        "second": after,
                        "epochs": sorted({p["epoch"] for r in same_line for p in r["passes"]}),
                        "record": record,
                        "rebuilt": len(same_line) if rebuilt else 0,
                        "others": [
                            r
                            for r in samplers
                            if r is not record
                            and r.get("set_epoch")
                            and not (rebuilt and r["where"] == record["where"])
                        ],
                    },
                )
                seen["ranks"].append(rank)
                done.add(record["where"])
    findings = []
    for where, seen in repeated.items():
        first = seen["first"]
        stayed, fix = _why(seen)
        observed = (
            f"the shuffling DistributedSampler built at {short(where)} gave the second epoch the very order "
            f"of the first ({first['n']} indices, on rank{'s' if len(seen['ranks']) > 1 else ''} "
            f"{ranks_text(seen['ranks'])}): {stayed}"
        )
        evidence = {
            "ranks": seen["ranks"],
            "epochs": seen["epochs"],
            "set_epoch": seen["record"].get("set_epoch"),
            "indices": first["n"],
            "order_crc32": first["order"],
            "second_epoch_at_step": seen["second"]["step"],
        }
        findings.append(Finding(ID, observed, fix, where=where, evidence=evidence))
    return findings


def _pairs(samplers: list[dict]):
    """(record, pass before, pass after, the pass after that or None, rebuilt) for each two consecutive passes of a
    shuffling sampler; and, for a sampler built at a line that built one before (a new one each epoch), its first
    pass after the last one of the sampler before, unless set_epoch() was called on the new one first."""
    last: dict = {}  # where -> the last pass of the latest sampler built there
    for record in samplers:
        if not record["shuffle"]:
            continue
        passes = record["passes"]
        before = last.get(record["where"])
        if (
            passes
            and before is not None
            and passes[0].get("calls", 0) == 0
            and before.get("seq", 0) < record.get("seq", 1)  # built after that pass began: not two built together
        ):
            yield record, before, passes[0], None, True
        for i in range(len(passes) - 1):
            yield record, passes[i], passes[i + 1], passes[i + 2] if i + 2 < len(passes) else None, False
        if passes:
            last[record["where"]] = passes[-1]


def _one_epoch_read_twice(record: dict, before: dict, after: dict, later: dict | None) -> bool:
    """No set_epoch() between two passes of a sampler that does get set_epoch() calls: the same epoch read twice (the
    training loader read again to measure it), whose order is meant to be the same - unless the second pass trained
    too (optimizer steps between its start and the next pass's, `later`): then set_epoch() was called once, not per
    epoch."""
    if "calls" not in after or "calls" not in before:
        return False
    if after["calls"] != before["calls"] or record.get("calls", 0) == 0:
        return False
    return later is None or later["step"] <= after["step"]


FIX = (
    "call sampler.set_epoch(epoch) at the start of every epoch, before iterating the DataLoader "
    "(for epoch in range(epochs): sampler.set_epoch(epoch); for batch in loader: ...)"
)


def _why(seen: dict) -> tuple[str, str]:
    """Why the order repeated, from the set_epoch() calls the rank saw (a record without them: from the epochs)."""
    record, epochs = seen["record"], seen["epochs"]
    given, late = record.get("set_epoch"), record.get("late")
    same = ", so every epoch trains on the same order"
    asked, override = record.get("asked"), record.get("override")
    if asked and not given and override:
        name = override["name"]
        return (
            f"set_epoch() was called with {', '.join(map(str, asked))}, but the sampler's epoch stayed "
            f"{seen['first']['epoch']}: {name} (at {short(override['where'])}) replaces DistributedSampler.set_epoch "
            f"and never passes the value on{same}",
            f"call super().set_epoch(epoch) in {name} (DistributedSampler's set_epoch is what sets the epoch its "
            "shuffle is seeded with)",
        )
    if seen["rebuilt"]:
        return (
            f"a new DistributedSampler is built there for each epoch ({seen['rebuilt']} in the window) and "
            f"set_epoch() is not called on the new one before its loop: each starts at epoch "
            f"{seen['second']['epoch']}{same}",
            "build the sampler (and its DataLoader) once, before the epoch loop, and call sampler.set_epoch(epoch) "
            "at the start of every epoch; or call set_epoch(epoch) on each new sampler before iterating its DataLoader",
        )
    if late:
        return (
            f"set_epoch({late['epoch']}) was called at {short(late['where'])} after the epoch's loop had begun "
            f"({late['left']} of its {late['n']} indices still to hand out), too late: a DataLoader draws an epoch's "
            "order when the loop over it starts, so each epoch runs on the order meant for the one before",
            "call sampler.set_epoch(epoch) before the loop over the DataLoader starts, not inside it "
            "(for epoch in range(epochs): sampler.set_epoch(epoch); for batch in loader: ...)",
        )
    if given == [] and seen["others"]:
        other = seen["others"][0]
        size = other["passes"][0]["n"] if other["passes"] else None
        return (
            f"set_epoch() was never called on it, but was on the DistributedSampler built at "
            f"{short(other['where'])} ({'shuffling' if other['shuffle'] else 'not shuffling'}"
            f"{f', {size} indices a pass' if size is not None else ''}){same}",
            "call set_epoch(epoch) on this sampler too, at the start of every epoch before iterating its DataLoader: "
            "each DistributedSampler has an epoch of its own",
        )
    if given == []:
        return f"set_epoch() was never called on it{same}", FIX
    if given is not None and len(given) == 1 and seen["second"].get("calls") == 1:
        return (
            f"set_epoch({given[0]}) was called once, before the passes, and not again for each epoch{same}",
            "call sampler.set_epoch(epoch) inside the epoch loop, at the start of every epoch (a resumed run: "
            "for epoch in range(start_epoch, epochs): sampler.set_epoch(epoch))",
        )
    if given is not None and len(set(given)) == 1:
        return f"set_epoch() was given {given[0]} every time{same}", FIX
    # A sampler's epoch is 0 until set_epoch(): 0 throughout cannot tell "never called" from "given 0 each time"
    if epochs == [0]:
        return f"its epoch stayed 0: set_epoch() was never called, or given 0 every time{same}", FIX
    if len(epochs) == 1:
        return f"its epoch stayed {epochs[0]}: set_epoch() was given the same value every time{same}", FIX
    return f"set_epoch() was given {seen['first']['epoch']} again{same}", FIX
