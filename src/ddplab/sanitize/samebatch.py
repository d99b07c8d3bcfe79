"""Check `same-samples`: several ranks read the same samples, so N ranks do the work of one, N times.

Rank side: every batch a DataLoader yields (torch.utils.data's iterator, whatever the loader's workers) leaves a
fingerprint of each of its samples: the batch's largest tensor, row by row, up to COLS values evenly spread over
the row, hashed to 64 bits (a weighted sum of their bit patterns, all rows in one numpy product; crc32 and
adler32 where numpy is missing).
Per loader (named by where the user's code built it and its order there) and per pass over it (an epoch: each
iter(loader)), up to PASS_SAMPLES samples; the sampler's kind, and a DistributedSampler's rank, num_replicas and
shuffle. A loader counts as a training loader once an optimizer step follows one of its batches (an evaluation
loader read in full on every rank is not a mistake).

Reader: the same pass of the same loader on two ranks, compared as sets. A DistributedSampler gives each rank its
own samples (padding repeats at most WORLD_SIZE - 1 of them); SHARE of a rank's samples or more read by another
rank is the mistake. A rank whose own samples repeat (constant data) tells nothing: not judged.
"""

from __future__ import annotations

import functools
import weakref
import zlib
from array import array
from collections import Counter
from itertools import combinations

from ddplab.sanitize import Finding, ranks_text, rankside, short

ID = "same-samples"
ROWS = 1024  # samples fingerprinted per batch
COLS = 256  # values per sample: enough to tell real samples apart, few enough to cost microseconds
PASS_SAMPLES = 8192  # per pass over a loader
PENDING_BYTES = 4 << 20  # bytes of batches kept before they are hashed
HOLD = 64  # batches kept before they are read, at most
PASSES = 4  # passes per loader
LOADERS = 16
# torch.utils.data's own samplers, none of which splits by rank (a loader's default, shuffle=True's, a subset's...)
TORCH_SAMPLERS = {
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "_InfiniteConstantSampler",
}
SHARE = 0.1  # of a rank's samples in a pass, also read by another rank in the same pass
MIN_SAMPLES = 8
DISTINCT = 0.9  # a rank's own fingerprints must be this distinct to tell anything
DRAWN = 0.5  # of the draws of a sampler with replacement, the same sample at the same position on two ranks
REPLAYS = 64  # batches of an ended pass seen fed to a DDP wrapper again, per loader
REPLAYED = 4  # ... in the pass's order, from its first: the fewest that make it a replay (or the whole pass, if 8+)


class Observer(rankside.Observer):
    ID = ID

    def __init__(self, window):
        super().__init__(window)
        self.on = True
        self.torch = None  # once the script imports it (attach): a script that never does still writes its record
        self.loaders: list[dict] = []
        self.by_loader = weakref.WeakKeyDictionary()  # DataLoader -> index in self.loaders
        # id(its iterator) -> (loader index, the pass's record, [samples taken], a weak reference to the iterator):
        # by id, with the reference to tell a reused id apart (a WeakKeyDictionary made a reference at every batch)
        self.by_iter: dict[int, tuple] = {}
        self.last: int | None = None  # the loader that yielded the last batch
        self.last_at = 0  # the optimizer steps counted when it did: a step since makes that loader a training one
        # Each batch is kept as it came (its tensors, in a list of ours: the script may change its own list or dict),
        # read later, many batches in one go (once a loader's `hold` batches wait, or at a write of the rank's file),
        # and hashed later still (at a write, or past PENDING_BYTES): read one batch at a time between training
        # steps, the same Python and torch calls ran with cold caches at several times their cost (25 us for the
        # template's batch, against 5 in a loop over the batches kept). A batch changed in place before it is hashed
        # is hashed as changed: the same change on every rank (a normalisation) keeps equal samples equal; a random
        # one per rank can only hide an overlap, never make one.
        self.pending: list[tuple] = []  # (the pass's record, its [samples taken], loader index, the batch)
        # the rows read from them, to hash: (the pass's record, a 2-D tensor of n rows, n, dtype, values a row); a
        # CPU batch's rows are the batch itself or a view of it, a GPU batch's a copy of the values read
        self.kept: list[tuple] = []
        self.kept_bytes = 0
        # per loader, the batches kept before a flush: as many as PENDING_BYTES holds of its largest (up to HOLD),
        # learnt from its first batch (0 until then) and again at each flush; 1 for a loader that yields GPU tensors,
        # whose sampled values cross to the CPU at once (a GPU batch kept would hold the device's memory)
        self.holds: list[int] = []
        # per loader, how its first batch was read (plan()): its later batches are read the same way while their
        # tensor has the same shape past the batch dimension; None until then
        self.plans: list[tuple | None] = []
        # Replays: a pass of a shuffling loader that ended (StopIteration), whose very batch tensors are then fed to a
        # DDP wrapper again with no new pass begun (itertools.cycle(loader), a list of its batches): every later epoch
        # is the first one's order. Weak references to each batch's picked tensor, by pass, then by tensor.
        self.fed: dict[int, list] = {}  # id(a pass's record) -> a weakref to each batch's picked tensor, in order
        self.replayable: dict[int, tuple] = {}  # id(tensor) -> (loader index, position in its pass, weakref)
        # ... and by value: a batch moved or copied before its forward (xb.to('cuda') each step: a new tensor every
        # time) is the same values. The fingerprint of each batch's first sample, by pass, then by fingerprint; a
        # forward is compared by value only when no loader yielded a batch since the forward before it (its input
        # came from somewhere else than a loader: a cache), so a training loop over its loader pays nothing.
        self.firsts: dict[int, list[int]] = {}  # id(a pass's record) -> each batch's first fingerprint, in order
        self.replay_values: dict[int, tuple] = {}  # a first fingerprint -> (loader index, position in its pass)
        self.yielded = self.yielded_before = 0  # batches any loader yielded: in all, and up to the last forward
        self.undo: list = []

    def attach(self, torch) -> None:
        from torch.utils.data import (
            BatchSampler,
            DistributedSampler,
            IterableDataset,
            RandomSampler,
            SubsetRandomSampler,
            dataloader,
        )

        self.torch, self.kinds = torch, (BatchSampler, DistributedSampler, IterableDataset)
        self.shuffling = (RandomSampler, SubsetRandomSampler)
        DataLoader, Iter = dataloader.DataLoader, dataloader._BaseDataLoaderIter
        init, iterate, step = DataLoader.__init__, DataLoader.__iter__, Iter.__next__
        obs = self

        @functools.wraps(init)
        def __init__(loader, *args, **kwargs):
            init(loader, *args, **kwargs)
            if obs.on:
                obs.guarded(obs.built, loader)

        @functools.wraps(iterate)
        def __iter__(loader):
            it = iterate(loader)
            if obs.on:
                obs.guarded(obs.started, loader, it)
            return it

        @functools.wraps(step)
        def __next__(it):
            try:
                batch = step(it)
            except StopIteration:
                if obs.on:
                    obs.guarded(obs.ended, it)
                raise
            if obs.on:
                obs.guarded(obs.seen, it, batch)
            return batch

        DataLoader.__init__, DataLoader.__iter__, Iter.__next__ = __init__, __iter__, __next__
        self.undo = [(DataLoader, "__init__", init), (DataLoader, "__iter__", iterate), (Iter, "__next__", step)]

    def built(self, loader) -> None:
        if len(self.loaders) >= LOADERS:
            return
        _, DistributedSampler, IterableDataset = self.kinds
        sampler = _drawing(loader)
        record = {
            "where": self.window.where(),
            "sampler": type(sampler).__name__,
            "iterable": isinstance(loader.dataset, IterableDataset),
            "distributed": None,
            "trained": False,
            "passes": [],
        }
        if getattr(sampler, "replacement", False) is True:  # RandomSampler(replacement=True), WeightedRandomSampler
            record["replacement"] = True
        subset = _subset(loader.dataset)
        if subset is not None:
            record["subset"] = subset
        if isinstance(sampler, self.shuffling) or (isinstance(sampler, DistributedSampler) and sampler.shuffle):
            record["shuffles"] = True  # a new order each epoch, as meant (a replayed pass repeats one)
        if isinstance(sampler, DistributedSampler):
            record["distributed"] = {
                "rank": int(sampler.rank),
                "num_replicas": int(sampler.num_replicas),
                "shuffle": bool(sampler.shuffle),
                "seed": int(sampler.seed),
            }
        self.by_loader[loader] = len(self.loaders)
        self.loaders.append(record)
        self.holds.append(0)
        self.plans.append(None)

    def started(self, loader, it) -> None:
        index = self.by_loader.get(loader)
        if index is None:
            return
        self._not_replayable(index)  # a new pass: the batches of the one before are no replay
        if len(self.loaders[index]["passes"]) >= PASSES:
            return
        record = {"batches": 0, "samples": []}
        self.loaders[index]["passes"].append(record)
        key = id(it)
        # [samples taken from the pass, hashed or pending]; the entry goes with the iterator
        self.by_iter[key] = (index, record, [0], weakref.ref(it, functools.partial(self._iterator_gone, key)))
        if self.loaders[index].get("shuffles"):
            self.fed[id(record)], self.firsts[id(record)] = [], []

    def _not_replayable(self, index: int) -> None:
        """Loader `index`'s batches of an ended pass are watched for no more (by tensor or by value)."""
        if self.replayable or self.replay_values:
            self.replayable = {k: v for k, v in self.replayable.items() if v[0] != index}
            self.replay_values = {k: v for k, v in self.replay_values.items() if v[0] != index}

    def _iterator_gone(self, key: int, ref) -> None:
        entry = self.by_iter.get(key)
        if entry is not None and entry[3] is ref:
            del self.by_iter[key]

    def seen(self, it, batch) -> None:
        self.yielded += 1
        tag = self.by_iter.get(id(it))
        if tag is None:
            return
        index, record, taken, ref = tag
        if ref() is not it:  # (an id of an iterator gone, before its entry went)
            return
        # a training loader: an optimizer step followed one of its batches (the previous batch, any loader's)
        step = self.window.step
        if step != self.last_at:
            if self.last is not None:
                self.loaders[self.last]["trained"] = True
            self.last_at = step
        self.last = index
        record["batches"] += 1
        if taken[0] >= PASS_SAMPLES:
            self._unwatched(record)
            return
        if isinstance(batch, list):
            batch = list(batch)
        elif isinstance(batch, dict):
            batch = list(batch.values())
        self.pending.append((record, taken, index, batch))
        hold = self.holds[index]
        if not hold:  # the loader's first batch: its size (and the loader's plan, which read() then follows)
            picked = self.plan(index, batch)
            hold = self.holds[index] = 1 if picked is None else _hold(picked[0])
        if len(self.pending) >= hold:
            self.read()

    def _unwatched(self, record: dict) -> None:
        """The pass's batches are no longer picked: a replay's positions could not be told."""
        self.fed.pop(id(record), None)
        self.firsts.pop(id(record), None)

    def read(self) -> None:
        """Read the batches kept: the rows to hash (a GPU batch's cross to the CPU now), hashed by flush() once
        PENDING_BYTES of them wait."""
        pending, self.pending = self.pending, []
        kept, largest = self.kept, {}
        for record, taken, index, batch in pending:
            room = PASS_SAMPLES - taken[0]
            if room <= 0:
                self._unwatched(record)
                continue
            picked = self.plan(index, batch)
            if picked is None:
                continue
            t, shape, width, cpu, dtype, row_bytes = picked
            fed = self.fed.get(id(record))
            if fed is not None:  # the very tensor the script gets: fed to a DDP wrapper again, a replay (ended())
                fed.append(weakref.ref(t))
            n = min(room, ROWS, shape[0])
            taken[0] += n
            if cpu:  # as it is where it can be (the template's batch): no torch call for it
                rows = t if n == shape[0] and width <= COLS and len(shape) == 2 else sample_rows(t, n, width)
                size = shape[0] * row_bytes  # what the rows keep alive
                if size > largest.get(index, 0):
                    largest[index] = size
            else:  # a GPU batch: only the values read cross to the CPU
                rows = sample_rows(t, n, width).cpu()
                size, largest[index] = rows.nbytes, PENDING_BYTES
            self.kept_bytes += size
            # (dtype, values per sample read: a row of more than COLS is read at COLS of them): what one product can
            # hash together
            kept.append((record, rows, n, dtype, min(width, COLS)))
        for index, size in largest.items():  # never more than the loader's largest batch so far allows
            self.holds[index] = min(self.holds[index] or HOLD, max(1, PENDING_BYTES // max(1, size)))
        if self.kept_bytes > PENDING_BYTES:
            self.flush()

    def plan(self, index: int, batch) -> tuple | None:
        """pick() and what read() asks of the tensor picked (on the CPU, dtype, bytes a sample), the way loader
        `index`'s first batch was read while a batch is the same kind of container and its tensor at the same place
        has the same shape past the batch dimension: one torch call (its shape) instead of a dozen (13,000
        instructions a batch). A tensor elsewhere grown larger is not looked for: ranks that read the same batches
        read them the same way, which is all the fingerprints compare."""
        plan = self.plans[index]
        if plan is not None:
            kind, size, key, rest, width, cpu, dtype, row_bytes = plan
            if type(batch) is kind and (key is None or len(batch) == size):
                t = batch if key is None else batch[key]
                if isinstance(t, self.torch.Tensor):
                    shape = t.shape
                    if shape[1:] == rest and shape[0]:
                        return t, shape, width, cpu, dtype, row_bytes
        picked = pick(self.torch, batch)
        if picked is None:
            return None
        t, shape, width = picked
        found = (t, shape, width, t.is_cpu, t.dtype, t.nbytes // shape[0])
        if plan is None and type(batch) in (list, tuple, self.torch.Tensor):
            key = None if t is batch else next(i for i, x in enumerate(batch) if x is t)
            self.plans[index] = (type(batch), None if key is None else len(batch), key, shape[1:], *found[2:])
        return found

    def ended(self, it) -> None:
        """A pass came to its end (the loader's iterator raised StopIteration): its batches become replayable, and
        the forwards through DDP wrappers are watched for them (within the window)."""
        tag = self.by_iter.get(id(it))
        if tag is None or tag[3]() is not it:
            return
        index, record = tag[0], tag[1]
        if id(record) in self.fed:  # the pass's last batches, kept or read: hashed now, for their first samples
            self.flush()
        elif self.pending:  # still kept as they came: read at the pass's end, not held past it
            self.read()
        refs, firsts = self.fed.pop(id(record), None), self.firsts.pop(id(record), None)
        if not refs or len(refs) < 2:
            return
        self.loaders[index]["ended"] = {"batches": len(refs), "step": self.window.step}
        self._not_replayable(index)
        for pos, ref in enumerate(refs):
            t = ref()
            if t is not None:
                self.replayable[id(t)] = (index, pos, ref)
        for pos, first in enumerate(firsts or ()):
            self.replay_values.setdefault(first, (index, pos))
        self.yielded_before = self.yielded  # a forward from now on with no batch yielded first is fed from a cache
        if (self.replayable or self.replay_values) and not any(name == "forward" for _, name, _ in self.undo):
            self._watch_forwards()

    def _watch_forwards(self) -> None:
        """DDP's forward, wrapped for the rest of the window: one dictionary lookup per tensor argument."""
        from torch.nn.parallel import DistributedDataParallel

        forward = DistributedDataParallel.forward
        obs = self

        @functools.wraps(forward)
        def _forward(ddp, *args, **kwargs):
            if obs.on and (obs.replayable or obs.replay_values):
                obs.guarded(obs.fed_again, args, kwargs)
            return forward(ddp, *args, **kwargs)

        DistributedDataParallel.forward = _forward
        self.undo.append((DistributedDataParallel, "forward", forward))

    def fed_again(self, args, kwargs) -> None:
        """A forward's tensors (and those one level inside a list, tuple or dict): one of them a batch of an ended
        pass, in a forward that will be trained on: a replay. The very object the loader yielded; or, when no loader
        yielded a batch since the forward before (the input came from a cache), the same values as one (a batch
        moved to the GPU again each step): its first sample's fingerprint, the only one computed here."""
        cached, self.yielded_before = self.yielded == self.yielded_before, self.yielded
        tensors = []
        for x in (*args, *kwargs.values()):
            parts = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else (x,)
            for t in parts:
                hit = self.replayable.get(id(t))
                if hit is not None and hit[2]() is t:
                    self._replayed(hit[0], hit[1], "tensors")
                    return
                tensors.append(t)
        if cached and self.replay_values:
            first = fingerprints(self.torch, tensors, 1)
            hit = self.replay_values.get(first[0]) if first else None
            if hit is not None:
                self._replayed(hit[0], hit[1], "values")

    def _replayed(self, index: int, pos: int, how: str) -> None:
        """Batch `pos` of loader `index`'s ended pass fed to a DDP wrapper again (the same tensors, or values)."""
        if not self.torch.is_grad_enabled():
            return
        loader = self.loaders[index]
        replays = loader.setdefault("replays", [])
        if len(replays) < REPLAYS:
            replays.append(pos)
        loader.setdefault("replayed_from", self.window.step + 1)
        loader.setdefault("replayed_as", how)

    def flush(self) -> None:
        """Read the batches kept, and hash the rows read since the last flush: runs of one dtype and width in one
        product."""
        if self.pending:
            self.read()
        torch, kept, self.kept, self.kept_bytes = self.torch, self.kept, [], 0
        at, end = 0, len(kept)
        while at < end:  # runs of one dtype and width
            _, _, _, dtype, width = kept[at]
            stop = at + 1
            while stop < end and kept[stop][3] == dtype and kept[stop][4] == width:
                stop += 1
            run = [rows for _, rows, _, _, _ in kept[at:stop]]
            hashed = hash_rows(torch, (run[0] if len(run) == 1 else torch.cat(run)).detach())
            i = 0
            for record, _, n, _, _ in kept[at:stop]:  # slices of the words, kept as they are until the file is written
                record["samples"].append(hashed[i : i + n])
                firsts = self.firsts.get(id(record))
                if firsts is not None:  # a shuffling pass still watched for a replay: its batch's first sample
                    firsts.append(int(hashed[i]))
                i += n
            at = stop

    def forked(self) -> None:
        self.pending, self.kept, self.kept_bytes, self.last, self.last_at = [], [], 0, None, 0
        self.by_iter = {}
        self._forget_replays()
        for loader in self.loaders:  # the loaders built before the fork are this process's too; their passes are not
            loader["passes"], loader["trained"] = [], False

    def stop(self) -> None:
        self.on = False
        for owner, name, original in self.undo:
            setattr(owner, name, original)
        self.undo = []
        self._forget_replays()

    def _forget_replays(self) -> None:
        """No pass is watched for a replay any more: a forked process's passes are its own, a stopped window sees none."""
        self.fed, self.replayable, self.firsts, self.replay_values = {}, {}, {}, {}

    def data(self) -> dict:
        """The loaders' records, each pass's fingerprints as the hex of their 64-bit words (json.dumps writes a
        string at once; a list of thousands of big numbers takes it ten times as long)."""
        return self.record(None)

    def record(self, verbatim: dict | None) -> dict:
        """data(), each pass's hex left to the rank's file as it is (rankside.Observer.record): json.dumps reads a
        string character by character for what to escape, 0.2 ms for a window's 3,000 fingerprints."""
        self.flush()
        if self.last is not None and self.window.step != self.last_at:  # a step since the last batch
            self.loaders[self.last]["trained"] = True
        return {
            "loaders": [
                {
                    **loader,
                    "passes": [
                        {**p, "samples": rankside.verbatim(verbatim, _hex(p["samples"]))} for p in loader["passes"]
                    ],
                }
                for loader in self.loaders
            ]
        }


def _drawing(loader):
    """The sampler that draws the loader's indices: the one inside its batch sampler (the loader's own BatchSampler
    holds `loader.sampler`; `batch_sampler=BatchSampler(DistributedSampler(...))` of the user's holds theirs, and
    the loader's `sampler` is then an unused SequentialSampler), followed down a few wrappers; a batch sampler of
    the user's with no inner sampler draws by itself."""
    sampler = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    for _ in range(4):
        inner = getattr(sampler, "sampler", None)
        if inner is None or inner is sampler:
            break
        sampler = inner
    return sampler


def _hold(t) -> int:
    """The batches to keep before a flush, for a batch whose tensor read is `t`: none but itself on a GPU."""
    return max(1, min(HOLD, PENDING_BYTES // max(1, t.nbytes))) if t.is_cpu else 1


SUBSET_INDICES = 65536  # a Subset's indices read for its crc32, once per loader


def _subset(dataset) -> dict | None:
    """A torch Subset's size, its data set's, and a crc32 of its indices (ranks that picked other parts differ)."""
    from torch.utils.data import Subset

    if not isinstance(dataset, Subset):
        return None
    indices = dataset.indices
    head = indices[:SUBSET_INDICES] if hasattr(indices, "__getitem__") else list(indices)[:SUBSET_INDICES]
    head = head.tolist() if hasattr(head, "tolist") else list(head)
    return {"len": len(indices), "of": len(dataset.dataset), "crc": zlib.crc32(array("q", map(int, head)).tobytes())}


def _hex(chunks: list) -> str:
    """The hex of the 64-bit words of a pass's chunks of fingerprints (numpy arrays of uint64, or lists of ints):
    bytes.hex, about 115 instructions a fingerprint, is CPython's cheapest text of them (binascii's base64 costs
    more)."""
    return b"".join(c.tobytes() if hasattr(c, "tobytes") else array("Q", c).tobytes() for c in chunks).hex()


def fingerprints(torch, batch, rows: int) -> list[int]:
    """One 64-bit number per sample (up to `rows`) of the batch's largest tensor (pick, sample_rows, hash_rows); a GPU
    tensor's values read on the CPU, as read() reads a GPU batch's, so that both give the same numbers."""
    picked = pick(torch, batch)
    if picked is None:
        return []
    t, _, width = picked
    read = sample_rows(t.detach(), min(rows, t.shape[0]), width)
    hashed = hash_rows(torch, (read if t.is_cpu else read.cpu()).contiguous())
    return hashed.tolist() if hasattr(hashed, "tolist") else hashed


def pick(torch, batch):
    """(the batch's largest tensor by values per sample, its shape, that number), or None for a batch with no tensor
    rows. Two torch calls a tensor (its layout, its shape), the rest Python's: every torch call costs microseconds
    between training steps (cold caches)."""
    Tensor = torch.Tensor
    if isinstance(batch, Tensor):
        parts = (batch,)
    elif isinstance(batch, dict):
        parts = batch.values()
    elif isinstance(batch, (list, tuple)):
        parts = batch
    else:
        return None
    t, size, width, strided = None, None, 0, torch.strided
    for x in parts:  # a sparse or nested tensor has no rows to read: not fingerprinted
        if isinstance(x, Tensor) and x.layout == strided:
            shape = x.shape
            if shape and shape[0]:
                values = x.numel() // shape[0]  # the product of shape[1:], in C
                if values > width:
                    t, size, width = x, shape, values
    return None if t is None else (t, size, width)


def sample_rows(t, n: int, width: int):
    """The values a fingerprint reads, a view where it can be: the first n samples of t, up to COLS values evenly
    spread over each (n x values)."""
    x = t[:n] if n < t.shape[0] else t
    if x.dim() != 2:
        x = x.reshape(n, width)
    return x[:, :: width // COLS][:, :COLS] if width > COLS else x


def hash_rows(torch, rows):
    """One 64-bit number per row (a numpy array of uint64; a list of ints without numpy): the row's bit patterns
    read as integers (bfloat16's and bool's too: torch reinterprets them in place; 64-bit words of them where the
    row's bytes make whole words), times fixed odd 64-bit weights,
    summed with wrap-around - one vectorised product for all rows. Equal rows give equal numbers in every process;
    distinct rows collide with odds near 2**-64, and a weight per position tells a sample from the same values in
    another order."""
    kind = _INTS.get(rows.element_size()) if not rows.is_complex() else None
    try:
        values = rows.view(getattr(torch, kind)).numpy() if kind else None
    except (RuntimeError, TypeError):  # torch built without numpy
        values = None
    if values is None:
        return _crc_rows(torch, rows)
    import numpy

    if values.itemsize < 8 and values.shape[1] * values.itemsize % 8 == 0:
        # a row's bytes read as 64-bit words: a half or a quarter of the products, and no widening copy first
        values = numpy.ascontiguousarray(values).view(numpy.int64)
    return (values @ _weights(values.shape[1])).view(numpy.uint64)  # unsigned: as array("Q") holds them


_INTS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}  # element size -> the integer type its bits are read as
_WEIGHTS: dict = {}  # row width -> its numpy weights


def _weights(width: int):
    w = _WEIGHTS.get(width)
    if w is None:
        import numpy

        w = _WEIGHTS[width] = numpy.array(_splitmix(width), dtype=numpy.uint64).view(numpy.int64)
    return w


def _splitmix(n: int) -> list[int]:
    """n odd 64-bit weights from a fixed seed (splitmix64): the same in every rank."""
    out, state, mask = [], 0x9E3779B97F4A7C15, (1 << 64) - 1
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append((z ^ (z >> 31)) | 1)
    return out


def _crc_rows(torch, x) -> list[int]:
    """Without numpy (or for a dtype it lacks): crc32 and adler32 of each row's bytes."""
    x = x.clone()
    if x.dtype.is_complex:
        x = torch.view_as_real(x).reshape(x.shape[0], -1)
    raw = x.view(torch.uint8)
    data, width = bytes(raw.reshape(-1).tolist()), raw.shape[1]
    out = []
    for i in range(x.shape[0]):
        row = data[i * width : (i + 1) * width]
        out.append(zlib.crc32(row) << 32 | zlib.adler32(row))
    return out


# ------------------------------------------------------------------------------------------------------ reader side
def judge(ranks: dict[int, dict], world: int) -> list[Finding]:
    loaders: dict[tuple, dict[int, dict]] = {}
    for rank, data in ranks.items():
        seen = Counter()
        for record in data.get("loaders", []):
            key = (record["where"], seen[record["where"]])  # the same line may build several loaders
            seen[record["where"]] += 1
            loaders.setdefault(key, {})[rank] = record
    findings, said = [], {}
    for (where, _), records in loaders.items():
        if len(records) > 1 and any(r["trained"] for r in records.values()):
            found = _overlap(records, world)
            if found is None:
                continue
            if where in said:  # one line building a loader each epoch: one mistake, said once
                said[where].evidence["loaders"] = said[where].evidence.get("loaders", 1) + 1
                continue
            said[where] = _finding(where, records, world, found)
            findings.append(said[where])
    for (where, _), records in loaders.items():
        replayed = {r: record for r, record in records.items() if _replayed(record)}
        if replayed:
            findings.append(_replay_finding(where, replayed))
    return findings


def _subsets_differ(records: dict[int, dict]) -> bool:
    """Every rank's data set is a Subset, and their indices differ (a crc32 of each rank's)."""
    return all(r.get("subset") for r in records.values()) and len({r["subset"]["crc"] for r in records.values()}) > 1


def _replayed(record: dict) -> bool:
    """A shuffling training loader whose ended pass was fed to the model again, batch for batch in its order from
    its first batch, at least REPLAYED batches (or the whole pass, if shorter; 8 at most): the order repeats. A
    batch fed twice in a row (two forwards of one batch) counts once; a cache reshuffled per epoch is no replay."""
    ended, replays = record.get("ended"), record.get("replays")
    if not (record.get("shuffles") and record.get("trained") and ended and replays):
        return False
    n = ended["batches"]
    seq = [p for i, p in enumerate(replays) if i == 0 or p != replays[i - 1]]
    if n < 2 or seq[0] != 0 or any(b != (a + 1) % n for a, b in zip(seq, seq[1:])):
        return False
    return len(seq) >= max(REPLAYED, min(n, 8))


def _replay_finding(where: str | None, records: dict[int, dict]) -> Finding:
    record = records[min(records)]
    ended, replays = record["ended"], record["replays"]
    said = f"{len(replays)}{'+' if len(replays) >= REPLAYS else ''}"
    # the loader's very tensors, or the same values in new ones (each batch moved or copied before its forward)
    fed = "its batches (the same values, copied anew)" if record.get("replayed_as") == "values" else "its very batches"
    observed = (
        f"the DataLoader built at {short(where)} ended its pass after {ended['batches']} batches (at step "
        f"{ended['step']}) and no new pass over it began, yet from step {record['replayed_from']} the model was fed "
        f"{fed} again, in the same order ({said} of them in the window, on "
        f"rank{'s' if len(records) > 1 else ''} {ranks_text(sorted(records))}): the batches of one pass are replayed "
        "from a cache (itertools.cycle(loader), or a list of its batches), so every epoch after the first trains on "
        "the first one's order, and the sampler's shuffle (and set_epoch()) does nothing"
    )
    fix = (
        "iterate the DataLoader anew for each epoch (for epoch in range(epochs): sampler.set_epoch(epoch); for batch "
        "in loader: ...); in a loop counted in steps, on StopIteration call sampler.set_epoch(epoch + 1) and take "
        "it = iter(loader) again, instead of itertools.cycle(loader), which replays the first pass"
    )
    evidence = {
        "ranks": sorted(records),
        "batches": ended["batches"],
        "ended_at_step": ended["step"],
        "replayed_from_step": record["replayed_from"],
        "replays": replays[:16],
        "as": record.get("replayed_as", "tensors"),
    }
    return Finding("epoch-repeats", observed, fix, where=where, evidence=evidence)


def _overlap(records: dict[int, dict], world: int) -> dict | None:
    """The first pass in which ranks share samples: the pairs that do, with their counts."""
    passes = min(len(r["passes"]) for r in records.values())
    for p in range(passes):
        pairs = []
        for a, b in combinations(sorted(records), 2):
            sa, sb = _samples(records[a]["passes"][p]), _samples(records[b]["passes"][p])
            if min(len(sa), len(sb)) < MIN_SAMPLES:
                continue
            if records[a].get("replacement") or records[b].get("replacement"):
                drawn = _same_draws(sa, sb)
                if drawn is not None:
                    pairs.append(
                        {
                            "ranks": [a, b],
                            **drawn,
                            "batches": min(records[a]["passes"][p]["batches"], records[b]["passes"][p]["batches"]),
                        }
                    )
                continue
            if _repeats(sa) or _repeats(sb):
                continue
            shared = len(set(sa) & set(sb))
            smaller = min(len(set(sa)), len(set(sb)))
            if shared >= max(world, 2) and shared / smaller >= SHARE:
                pairs.append(
                    {
                        # the rank of the fewer samples first: the finding says "N of the M samples rank a read"
                        "ranks": [a, b] if len(set(sa)) <= len(set(sb)) else [b, a],
                        "shared": shared,
                        "of": smaller,
                        "share": round(shared / smaller, 3),
                        "same_order": sa == sb,
                        "batches": min(records[a]["passes"][p]["batches"], records[b]["passes"][p]["batches"]),
                    }
                )
        if pairs:
            return {"pass": p + 1, "pairs": pairs}
    return None


def _samples(record: dict) -> list[int]:
    """A pass's fingerprints: the hex of their 64-bit words as a rank writes them, or a list of numbers."""
    samples = record["samples"]
    if isinstance(samples, str):
        words = array("Q")
        words.frombytes(bytes.fromhex(samples))
        return words.tolist()
    return samples


def _same_draws(sa: list[int], sb: list[int]) -> dict | None:
    """Ranks drawing with replacement (a WeightedRandomSampler): their samples repeat by design, and ranks that draw
    independently (a seed each) share samples by chance, which is no mistake; what is one is the same draws,
    position for position, far beyond the chance the samples' own frequencies give (constant data agrees everywhere
    by chance)."""
    n = min(len(sa), len(sb))
    same = sum(x == y for x, y in zip(sa[:n], sb[:n]))
    ca, cb = Counter(sa[:n]), Counter(sb[:n])
    chance = sum(k * cb.get(v, 0) for v, k in ca.items()) / (n * n)
    if same < DRAWN * n or same / n - chance < DRAWN / 2:
        return None
    return {"shared": same, "of": n, "share": round(same / n, 3), "same_order": sa[:n] == sb[:n], "drawn": True}


def _repeats(samples: list[int]) -> bool:
    return len(set(samples)) < DISTINCT * len(samples)


def _finding(where: str | None, records: dict[int, dict], world: int, found: dict) -> Finding:
    pairs = found["pairs"]
    ranks = sorted({r for p in pairs for r in p["ranks"]})
    top = max(pairs, key=lambda p: p["share"])
    a, b = top["ranks"]
    epoch = f"epoch {found['pass']}" if found["pass"] > 1 else "the first epoch"
    if all(p["same_order"] for p in pairs) and len(ranks) == len(records):
        observed = (
            f"ranks {ranks_text(ranks)} read the same {top['batches']} batches, sample for sample and in the "
            f"same order ({top['of']} samples fingerprinted on each), in {epoch}"
        )
    elif top.get("drawn"):
        observed = (
            f"in {epoch}, ranks {a} and {b} drew the same sample at {top['shared']} of {top['of']} positions "
            f"({100 * top['share']:.0f} %)" + (f"; {len(pairs)} pairs of ranks did" if len(pairs) > 1 else "")
        )
    else:
        observed = (
            f"in {epoch}, {top['shared']} of the {top['of']} samples rank {a} read were also read by rank {b} "
            f"({100 * top['share']:.0f} %)" + (f"; {len(pairs)} pairs of ranks overlap" if len(pairs) > 1 else "")
        )
    sampler = records[a]
    dist = [records[r]["distributed"] for r in sorted(records)]
    # too few replicas first: a sampler refuses a rank >= num_replicas, so ranks sharing a rank= follow from it
    if all(d is not None for d in dist) and any(d["num_replicas"] < world for d in dist):
        cause = (
            f"its DistributedSampler was given num_replicas={min(d['num_replicas'] for d in dist)} for {world} ranks"
            f" (and rank={', '.join(sorted({str(d['rank']) for d in dist}))}): it splits the data set into fewer "
            "shards than there are ranks, so ranks are handed the same shard"
        )
        fix = (
            "pass num_replicas=dist.get_world_size() and rank=dist.get_rank(), or leave both out (the sampler "
            "reads them from the process group)"
        )
    elif all(d is not None for d in dist) and len({d["rank"] for d in dist}) < len(dist):
        cause = (
            f"its DistributedSampler was given rank={dist[0]['rank']} on more than one rank, so they were handed "
            "the same shard"
        )
        fix = (
            "build the sampler after init_process_group without rank= and num_replicas= (it reads them from the "
            "process group), or pass rank=dist.get_rank(), num_replicas=dist.get_world_size()"
        )
    elif all(d is not None for d in dist) and len({d.get("seed") for d in dist}) > 1 and dist[0]["shuffle"]:
        seeds = ", ".join(f"rank {r}: {records[r]['distributed'].get('seed')}" for r in sorted(records))
        cause = (
            f"its DistributedSampler was given another seed on each rank ({seeds}): each rank shuffles the data "
            "set its own way, then takes its share of its own order, and the shares overlap"
        )
        fix = (
            "give the sampler the same seed on every rank (leave seed= out, or pass one constant), and call "
            "sampler.set_epoch(epoch) for a new order each epoch"
        )
    elif all(d is not None for d in dist) and all(p["same_order"] for p in pairs):
        cause = (
            "its DistributedSamplers agree (each its own rank, the same ranks and seed) and hand the ranks other "
            "indices, yet the ranks read the very same samples in the same order: the samples do not follow the "
            "indices. The data set makes them itself (random data drawn in __getitem__, or read from a stream "
            "regardless of the index) from a generator seeded alike on every rank: a global seed, or a "
            "worker_init_fn that seeds by worker id alone, the same ids on every rank"
        )
        fix = (
            "make each sample a function of its index (a generator of its own: np.random.default_rng((seed, epoch, "
            "index))), or seed what draws them by rank as well as by worker: in a worker_init_fn, "
            "np.random.seed((torch.initial_seed() + 7919 * dist.get_rank()) % 2**32) (torch's own worker seed "
            "differs per worker, not per rank, where every rank set the same torch seed)"
        )
    elif all(d is not None for d in dist) and _subsets_differ(records):
        part = records[a]["subset"]
        cause = (
            "its DistributedSamplers agree (each its own rank, the same ranks and seed), but what they split is a "
            f"Subset with other indices on each rank ({part['len']} of the {part['of']} samples on each): its indices "
            "were picked on each rank its own way (a per-rank seed, or an unseeded generator), so the shares overlap"
        )
        fix = (
            "pick the Subset's indices alike on every rank: one constant seed (np.random.default_rng(seed)), or pick "
            "them on rank 0 and send them to the others (dist.broadcast_object_list)"
        )
    elif all(d is not None for d in dist):
        cause = (
            "its DistributedSamplers agree (each its own rank, the same ranks and seed), so the data sets "
            "themselves differ from rank to rank: built in another order on each (a file list shuffled or read "
            "unsorted per rank, a split with a per-rank seed), the same index names different samples"
        )
        fix = (
            "build the data set identically on every rank: sort file lists, and seed every shuffle or "
            "random_split with one constant seed, the same on every rank"
        )
    elif sampler["iterable"]:
        cause = "its dataset is an IterableDataset, which every rank iterates in full: DDP splits nothing by itself"
        fix = (
            "split the stream by rank inside the dataset's __iter__ (e.g. itertools.islice(stream, rank, None, "
            "world_size), and by torch.utils.data.get_worker_info() across loader workers)"
        )
    elif _subsets_differ(records) and not top["same_order"]:
        part = records[a]["subset"]
        cause = (
            f"its dataset is a Subset with other indices on each rank ({part['len']} of the {part['of']} samples "
            "on each): each rank picked its own part of the data set, and the parts overlap - picked at random on "
            "each rank (a per-rank seed), not split by rank"
        )
        fix = (
            "split one order by rank: the same permutation on every rank (one seed, the same everywhere) and each "
            "rank its slice, perm[rank::world_size]; or give the DataLoader sampler=DistributedSampler(dataset) "
            "over the whole data set"
        )
    elif any(records[r].get("replacement") for r in records):
        cause = (
            f"its sampler is a {sampler['sampler']}, drawing with replacement from the whole data set on every "
            "rank, not split by rank, and the ranks made the same draws (the same seed on every rank)"
        )
        fix = (
            "draw once, alike on every rank, and give each rank its share: a Sampler of your own whose __iter__ "
            f"draws the indices as {sampler['sampler']} does, with a generator seeded by one constant plus the "
            "epoch, and yields indices[rank::world_size]; or seed each rank's sampler differently "
            f"({sampler['sampler']}(..., generator=torch.Generator().manual_seed(seed + rank))): independent draws "
            "with replacement need no split"
        )
    elif sampler["sampler"] not in TORCH_SAMPLERS:
        cause = (
            f"its sampler, {sampler['sampler']}, is not torch's: it hands the ranks the same samples (it does not "
            "split them by rank, or splits each rank's own order)"
        )
        fix = (
            f"split by rank inside {sampler['sampler']}: one order, drawn with the same seed on every rank, and "
            "each rank its own share of it (order[rank::world_size]); or give the DataLoader a DistributedSampler"
        )
    else:
        cause = (
            f"its sampler is a {sampler['sampler']}, not a DistributedSampler: every rank reads the whole data "
            "set" + (" (the same shuffle on every rank: the same seed)" if top["same_order"] else "")
        )
        fix = (
            "give the DataLoader sampler=DistributedSampler(dataset) (shuffle goes to the sampler, and the "
            "loader's shuffle= is left out), and call sampler.set_epoch(epoch) at the start of each epoch"
        )
    return Finding(
        ID,
        f"{observed}, from the DataLoader built at {short(where)}: {cause}",
        fix,
        where=where,
        evidence={
            "ranks": ranks,
            "epoch": found["pass"],
            "pairs": pairs,
            "sampler": sampler["sampler"],
            "distributed": dist,
        },
    )
