"""The sanitizer's rank side in this process, on real torch objects (a 1-process gloo group for DDP): what it records,
that every hook is gone once the window is over, and that an error inside a check costs the user's code nothing.
The write audit hook (sharedwrite) is left to tests/sanitize/test_launch_sanitize.py: Python cannot remove one, and
this process would keep it."""

from __future__ import annotations

import contextlib
import itertools
import json

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, dataloader

from ddplab.sanitize import rankside, samebatch, userframe
from ddplab.sanitize.samebatch import _samples, fingerprints

HOOKED = [
    (DataLoader, "__init__"),
    (DataLoader, "__iter__"),
    (dataloader._BaseDataLoaderIter, "__next__"),
    (DistributedSampler, "__init__"),
    (DistributedSampler, "__iter__"),
    (DistributedSampler, "set_epoch"),
    (DDP, "__init__"),
]


@pytest.fixture
def window(tmp_path):
    """A window over 3 steps with the checks that patch torch; afterwards nothing of it is left, whatever happened."""
    originals = {(owner, name): owner.__dict__[name] for owner, name in HOOKED}
    made = []

    def make(steps: int = 3, checks=("samebatch", "epochorder", "paramsync")):
        w = rankside.Window(str(tmp_path), steps, checks)
        w.attach(torch)
        made.append(w)
        return w

    yield make
    for w in made:
        if w.handle is not None:
            w.handle.remove()
        for observer in w.observers:
            observer.stop()
    for (owner, name), original in originals.items():
        setattr(owner, name, original)


def test_the_window_watches_its_steps_then_every_hook_is_gone(tmp_path, window, one_process_group):
    originals = {(owner, name): owner.__dict__[name] for owner, name in HOOKED}
    w = window(steps=3)
    assert all(owner.__dict__[name] is not originals[owner, name] for owner, name in HOOKED)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:  # 4 batches: the window ends after the third step
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    assert w.step == 3 and not w.open and w.handle is None
    still = [f"{owner.__name__}.{name}" for owner, name in HOOKED if owner.__dict__[name] is not originals[owner, name]]
    # once per epoch: they wait for the second epoch (a sampler built anew at that line each epoch is watched too)
    assert still == ["DistributedSampler.__init__", "DistributedSampler.__iter__", "DistributedSampler.set_epoch"]
    assert not model._forward_pre_hooks and not model.module._forward_pre_hooks and not model._forward_hooks
    list(loader)  # the second epoch, set_epoch never called
    assert DistributedSampler.__dict__["__iter__"] is originals[DistributedSampler, "__iter__"]
    assert DistributedSampler.__dict__["set_epoch"] is originals[DistributedSampler, "set_epoch"]
    assert DistributedSampler.__dict__["__init__"] is originals[DistributedSampler, "__init__"]

    w.written()  # the file is written by a short thread of the rank's
    record = json.loads((tmp_path / "rank0.json").read_text())
    assert record["steps"] == 3 and record["closed"] and record["off"] == {}
    (batches,) = record["checks"]["same-samples"]["loaders"]
    assert batches["trained"] and batches["sampler"] == "DistributedSampler" and __file__ in batches["where"]
    samples = [_samples(p) for p in batches["passes"]]  # the hex of 64-bit words
    assert [(p["batches"], len(s)) for p, s in zip(batches["passes"], samples)] == [(3, 48)]  # none after the window
    assert len(set(samples[0])) == 48 and all(0 <= s < 1 << 64 for s in samples[0])
    (order,) = record["checks"]["epoch-repeats"]["samplers"]
    assert [(p["epoch"], p["n"]) for p in order["passes"]] == [(0, 64), (0, 64)]
    assert order["passes"][0]["order"] == order["passes"][1]["order"] and order["shuffle"]
    checks = record["checks"]["params-diverge"]["checks"]
    assert [c["step"] for c in checks] == [1, 2, 3] and record["checks"]["params-diverge"]["sharded"] is None
    assert [p[0] for p in checks[0]["params"]] == ["weight", "bias"] and all(p[4] for p in checks[0]["params"])
    assert [(c["ddp_forwards"], c["direct_forwards"], c["no_sync"]) for c in checks] == [(1, 0, False)] * 3
    assert checks[0]["params"][0][2] != checks[1]["params"][0][2]  # the step changed the weights
    optimizer.step()
    assert w.step == 3  # the step hook is gone


def test_a_forward_around_the_wrapper_and_no_sync_are_seen(window, one_process_group):
    w = window(steps=2, checks=("paramsync",))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.module(torch.randn(2, 4)).sum().backward()  # around the wrapper
    optimizer.step()
    with model.no_sync():
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    first, second = w.observers[0].data()["checks"]
    assert (first["ddp_forwards"], first["direct_forwards"], first["no_sync"]) == (0, 1, False)
    assert first["direct_where"] == f"{__file__}:{_line('model.module(torch.randn(2, 4))')}"
    assert (second["ddp_forwards"], second["direct_forwards"], second["no_sync"]) == (1, 0, True)
    assert second["where"] == f"{__file__}:{_line('optimizer.step()', after='with model.no_sync()')}"


def test_a_loaders_subset_is_recorded_with_its_size_and_indices(window):
    from torch.utils.data import Subset

    w = window(steps=1, checks=("samebatch",))
    data = TensorDataset(torch.randn(10, 2))
    DataLoader(Subset(data, [3, 1, 2]), batch_size=2)
    DataLoader(Subset(data, torch.tensor([3, 1, 4])), batch_size=2)
    DataLoader(data, batch_size=2)
    first, second, whole = w.observers[0].data()["loaders"]
    assert (first["subset"]["len"], first["subset"]["of"]) == (3, 10) and first["subset"]["crc"] != second["subset"][
        "crc"
    ]
    assert "subset" not in whole


def test_a_loader_whose_sampler_draws_with_replacement_says_so(window):
    from torch.utils.data import RandomSampler, WeightedRandomSampler

    w = window(steps=1, checks=("samebatch",))
    data = TensorDataset(torch.randn(10, 2))
    DataLoader(data, batch_size=2, sampler=WeightedRandomSampler(torch.ones(10), 10))
    DataLoader(data, batch_size=2, sampler=RandomSampler(data, replacement=True))
    DataLoader(data, batch_size=2, shuffle=True)
    weighted, drawn, shuffled = w.observers[0].data()["loaders"]
    assert weighted["replacement"] and drawn["replacement"] and "replacement" not in shuffled


@pytest.mark.parametrize("hold", [1, 3, 64])
def test_batches_are_read_as_they_came_however_many_wait_and_only_a_stepped_loader_is_a_training_one(
    window, one_process_group, monkeypatch, hold
):
    """Batches wait to be read (their fingerprints taken in one go, not between steps one by one): what is read is
    what the loader yielded, whether 1, 3 or 64 of them wait and whatever the script then does to its own batch
    (its dict or list given other tensors); a loader is a training one once an optimizer step followed one of its
    batches, and an evaluation loader read after the last step is none."""
    from ddplab.sanitize import samebatch

    monkeypatch.setattr(samebatch, "HOLD", hold)
    w = window(steps=50, checks=("samebatch",))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=g)
    train = DataLoader([{"x": x[i], "y": i} for i in range(40)], batch_size=4)
    evaluation = DataLoader(TensorDataset(x[:8] + 1), batch_size=4)
    model = DDP(torch.nn.Linear(6, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in train:
        model(batch["x"]).sum().backward()
        optimizer.step()
        batch["x"] = torch.zeros(4, 6)  # the script's own dict, changed after its batch was seen
    for (xb,) in evaluation:
        xb.mul_(1)
    trained, evaluated = w.observers[0].data()["loaders"]
    (passed,) = trained["passes"]
    assert _samples(passed) == fingerprints(torch, x, 1024) and passed["batches"] == 10
    assert _samples(evaluated["passes"][0]) == fingerprints(torch, x[:8] + 1, 1024)
    assert trained["trained"] and not evaluated["trained"]


def test_a_loaders_later_batches_are_read_as_its_first_until_their_tensor_changes_shape(window):
    """A loader's later batches are read the way its first was (the same place in the batch) while the tensor there
    keeps its shape past the batch dimension; a batch where it changed (sequences padded per batch) is looked at
    anew: either way what is fingerprinted is the batch's largest tensor, as fingerprints() reads it."""
    w = window(steps=50, checks=("samebatch",))
    g = torch.Generator().manual_seed(0)
    widths = (8, 8, 2, 8)  # the third batch's second tensor shrank: its first is the largest there
    batches = [(torch.randn(4, 3, generator=g), torch.randn(4, n, generator=g)) for n in widths]
    for _ in DataLoader(batches, batch_size=None):
        pass
    (passed,) = w.observers[0].data()["loaders"][0]["passes"]
    assert _samples(passed) == [f for b in batches for f in fingerprints(torch, b, 1024)]
    assert fingerprints(torch, batches[2], 1024) == fingerprints(torch, batches[2][0], 1024)


def test_a_parameter_beside_the_wrapped_model_is_named_by_the_users_variable(window, one_process_group):
    """A learnable temperature kept beside the DDP model (CLIP's logit_scale) and given to the optimizer: no module
    holds it, so its name is the variable the user's code holds it in (the finding said `parameter #2`)."""
    w = window(steps=1, checks=("paramsync",))
    model = DDP(torch.nn.Linear(4, 1))
    logit_scale = torch.nn.Parameter(torch.tensor(2.0))
    optimizer = torch.optim.SGD([*model.parameters(), logit_scale], lr=0.1)
    (model(torch.randn(2, 4)).sum() * logit_scale).backward()
    optimizer.step()
    (check,) = w.observers[0].data()["checks"]
    assert [(p[0], p[4]) for p in check["params"]] == [("weight", True), ("bias", True), ("logit_scale", False)]
    assert len(check["grads"]) == 3 and all(isinstance(g, int) for g in check["grads"])  # the gradients applied

    class Trainer:  # the temperature held by a trainer object: named by its attribute
        def __init__(self):
            self.model = DDP(torch.nn.Linear(4, 1))
            self.temp = torch.nn.Parameter(torch.tensor(2.0))
            self.optimizer = torch.optim.SGD([*self.model.parameters(), self.temp], lr=0.1)

        def step(self):
            (self.model(torch.randn(2, 4)).sum() * self.temp).backward()
            self.optimizer.step()

    w = window(steps=1, checks=("paramsync",))
    Trainer().step()
    (check,) = w.observers[0].data()["checks"]
    assert [p[0] for p in check["params"]] == ["weight", "bias", "self.temp"]


def test_the_forward_hooks_count_only_before_the_digested_steps(window, one_process_group):
    """Digests after steps 1, 2 and N: the hooks that explain a difference are on for the forwards before those
    steps only (a hooked module leaves PyTorch's fast call path, a cost on every forward)."""
    w = window(steps=6, checks=("paramsync",))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hooked, hooks_before = [], len(global_hooks()) - 2
    for _ in range(6):
        handles = {h.id for h in w.observers[0].handles}
        hooked.append(bool(handles) and handles <= set(global_hooks()))
        model.module(torch.randn(2, 4)).sum().backward()  # around the wrapper, every step
        optimizer.step()
    assert hooked == [True, True, False, False, False, True]
    assert not w.observers[0].handles and len(global_hooks()) == hooks_before
    checks = w.observers[0].data()["checks"]
    assert [(c["step"], c["ddp_forwards"], c["direct_forwards"]) for c in checks] == [(1, 0, 1), (2, 0, 1), (6, 0, 1)]


def test_parameters_are_digested_every_fourfold_step_so_a_late_or_short_run_is_compared(window, one_process_group):
    """Steps 1, 2, 8, 32... and N: an LR scheduler stepped on rank 0 only first changes the rate at step 8, a run of
    48 steps never reaches a window of 50; each is compared at a step both ranks digested."""
    w = window(steps=10, checks=("paramsync",))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        optimizer.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    checks = w.observers[0].data()["checks"]
    assert [(c["step"], c["ddp_forwards"]) for c in checks] == [(1, 1), (2, 1), (8, 1), (10, 1)]
    from ddplab.sanitize.paramsync import digested

    assert digested(50) == {1, 2, 8, 32, 50} and digested(3) == {1, 2, 3} and digested(200) == {1, 2, 8, 32, 128, 200}


def global_hooks() -> list:
    """The handles' ids of every global module forward hook now installed."""
    from torch.nn.modules import module

    return [*module._global_forward_pre_hooks, *module._global_forward_hooks]


def test_a_watched_model_can_be_copied_and_pickled_and_its_copy_is_not_counted(window, one_process_group):
    """No hook of the sanitizer's sits on the user's modules: an EMA's copy.deepcopy(model) or torch.save(model)
    copies what the module holds, and a hook of an observer's would drag the observer (and its lock) along."""
    import copy
    import io

    w = window(steps=2, checks=("paramsync",))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ema = torch.optim.swa_utils.AveragedModel(model.module)  # copy.deepcopy of the wrapped module
    twin = copy.deepcopy(model.module)
    torch.save(model.module, io.BytesIO())
    model(torch.randn(2, 4)).sum().backward()
    twin(torch.randn(2, 4))  # another module: neither the wrapper nor the module it wraps
    ema(torch.randn(2, 4))
    optimizer.step()
    (first,) = w.observers[0].data()["checks"]
    assert (first["ddp_forwards"], first["direct_forwards"]) == (1, 0)


def test_a_log_format_that_names_the_rank_makes_each_ranks_line_a_text_of_its_own(window):
    """logging.basicConfig(format=f"[rank {rank}] %(message)s") on every rank, or a filter's %(rank)s: the same
    message is another line on each rank's console. The clock (%(asctime)s) is no rank's own."""
    import logging
    import sys

    w = window(steps=2, checks=("sameprint",))
    log = logging.getLogger("ddplab-test-sameprint-format")
    log.propagate, log.level, handler = False, logging.INFO, logging.StreamHandler(sys.stderr)
    log.addHandler(handler)
    texts = {}
    try:
        for case, fmt, extra in [
            ("f-string", "[rank {r}] %(asctime)s %(message)s", None),
            ("field", "%(asctime)s {r}%(rank)s %(message)s", True),
            ("clock", "%(asctime)s.%(msecs)03d %(relativeCreated)d %(message)s", None),
        ]:
            for r in (0, 1):
                handler.setFormatter(logging.Formatter(fmt.format(r="" if extra else r)))
                log.info("epoch %d done", 3, extra={"rank": r} if extra else None)
                (site,) = [s for s in w.observers[0].data()["sites"] if s["example"] == "epoch 3 done"]
                texts[case, r] = site["texts"][-1]
                w.observers[0].sites.clear()
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            for _ in range(2):
                log.info("epoch %d done", 3)  # the same line, the same text: the clock is not part of it
            (site,) = w.observers[0].data()["sites"]
            assert len(site["texts"]) == 1 and site["example"] == "epoch 3 done"
            w.observers[0].sites.clear()
        w.close()
    finally:
        log.removeHandler(handler)
    assert texts["f-string", 0] != texts["f-string", 1]
    assert texts["field", 0] != texts["field", 1]
    assert texts["clock", 0] == texts["clock", 1]


def test_prints_and_log_records_on_the_console_from_the_users_code_are_kept_by_line_and_text(window, tmp_path):
    import builtins
    import dis
    import logging
    import os
    import sys
    import zlib

    original_print = builtins.print
    w = window(steps=2, checks=("sameprint",))
    log = logging.getLogger("ddplab-test-sameprint")
    log.propagate, log.level, handler = False, logging.INFO, logging.StreamHandler(sys.stderr)
    log.addHandler(handler)
    quiet = logging.getLogger("ddplab-test-sameprint-null")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    try:
        print("Starting training")  # kept, with its text
        print("loss", 0.5, sep="=")
        print(torch.ones(1))  # kept, no text: print's formatting of a tensor is not done twice
        with open(tmp_path / "log.txt", "w") as f:
            print("to a file", file=f)  # a rank's own file
        saved, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115
        print("silenced on this rank")
        sys.stdout.close()
        sys.stdout = saved
        dis.dis("x = 1")  # the standard library's print
        log.info("config %s", 1)  # kept: a StreamHandler on the console emitted it
        log.debug("below the level")
        quiet.warning("to a NullHandler")
        sites = {
            int(s["where"].rpartition(":")[2]) - _line('print("Starting training")'): s
            for s in w.observers[0].data()["sites"]
        }
        w.close()
        print("after the window")
        assert builtins.print is original_print and logging.Handler.__dict__["handle"].__module__ == "logging"
    finally:
        log.removeHandler(handler)
    crc = [zlib.crc32(t.encode()) for t in ("Starting training\n", "loss=0.5\n", "config 1")]
    assert {k: (s["count"], s["texts"]) for k, s in sites.items()} == {
        0: (1, [crc[0]]),
        1: (1, [crc[1]]),
        2: (1, []),
        10: (1, [crc[2]]),
    }
    assert all(s["where"].startswith(__file__) for s in sites.values())


def test_forwards_are_counted_before_each_digested_step_only_and_zero_is_sharded(tmp_path, window, one_process_group):
    """The checks are called at the steps they ask for: params-diverge's hooks go on the step before each digested
    one (here 1, 2 and 6) and count its forwards; ZeroRedundancyOptimizer is known when it is built."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    w = window(steps=6, checks=("paramsync",))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    for _ in range(7):
        optimizer.zero_grad()
        model(x).sum().backward()
        model(x)  # a second forward in each step: counted where the hooks are on
        optimizer.step()
    w.written()
    checks = json.loads((tmp_path / "rank0.json").read_text())["checks"]["params-diverge"]["checks"]
    assert [(c["step"], c["ddp_forwards"], c["direct_forwards"]) for c in checks] == [(1, 2, 0), (2, 2, 0), (6, 2, 0)]
    (group,) = checks[0]["optimizer"]["groups"]  # the settings the reader compares when parameters differ
    assert checks[0]["optimizer"]["class"] == "SGD" and group["lr"] == 0.1 and group["momentum"] == 0

    zero = window(steps=3, checks=("paramsync",))
    ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    assert zero.observers[0].data()["sharded"].startswith("ZeroRedundancyOptimizer")


def test_a_module_beside_the_wrapper_is_named_by_the_users_name_for_it(window, one_process_group):
    """A head the optimizer steps but no DDP wrapper holds: its parameters are named by the variable (or the
    attribute) the user's code holds it by, not bare `weight` (which the wrapped model has too)."""

    class Trainer:
        def __init__(self):
            self.model = DDP(torch.nn.Linear(4, 4))
            self.head = torch.nn.Linear(4, 1)
            self.optimizer = torch.optim.SGD([*self.model.parameters(), *self.head.parameters()], lr=0.1)

        def step(self, x):
            self.optimizer.zero_grad()
            self.head(self.model(x)).sum().backward()
            self.optimizer.step()

    w = window(steps=1, checks=("paramsync",))
    trainer = Trainer()
    trainer.step(torch.randn(8, 4))
    (digest,) = w.observers[0].data()["checks"]
    names = [(p[0], p[4]) for p in digest["params"]]
    assert names == [("weight", True), ("bias", True), ("self.head.weight", False), ("self.head.bias", False)]

    w = window(steps=1, checks=("paramsync",))
    proj = torch.nn.Linear(4, 4)  # held by a local variable of this function
    optimizer = torch.optim.SGD([*trainer.model.parameters(), *proj.parameters()], lr=0.1)
    optimizer.zero_grad()
    proj(trainer.model(torch.randn(8, 4))).sum().backward()
    optimizer.step()
    (digest,) = w.observers[0].data()["checks"]
    assert [p[0] for p in digest["params"]][2:] == ["proj.weight", "proj.bias"]


def test_a_loader_is_known_by_the_sampler_inside_its_batch_sampler(window):
    """`DataLoader(batch_sampler=BatchSampler(DistributedSampler(...)))`: the loader's own `sampler` is then an
    unused SequentialSampler; what draws the indices is the DistributedSampler inside, and it is the one recorded
    (its rank, replicas and seed: a seed per rank is named as such)."""
    from torch.utils.data import BatchSampler

    w = window(steps=3, checks=("samebatch",))
    data = TensorDataset(torch.arange(64.0).view(64, 1))
    inner = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=7)
    DataLoader(data, batch_sampler=BatchSampler(inner, batch_size=8, drop_last=False))
    DataLoader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=2, rank=0, shuffle=False))
    given, plain = w.observers[0].data()["loaders"]
    assert given["sampler"] == "DistributedSampler" and given["shuffles"]
    assert given["distributed"] == {"rank": 1, "num_replicas": 2, "shuffle": True, "seed": 7}
    assert plain["sampler"] == "DistributedSampler" and plain["distributed"]["rank"] == 0 and "shuffles" not in plain


def test_the_window_moves_to_the_optimizer_of_the_ddp_model_from_one_trained_before_it(window, one_process_group):
    """Rank 0 alone trains a throwaway model before DDP() (a checkpoint to resume from): its optimizer stepped first,
    and the other ranks never ran it. When the DDP model's optimizer steps, the window follows it from its step 1,
    so every rank digests the same optimizer; a second optimizer of a DDP model (a GAN's) changes nothing."""
    w = window(steps=4, checks=("paramsync",))
    scratch = torch.nn.Linear(4, 1)
    first = torch.optim.SGD(scratch.parameters(), lr=0.1)
    for _ in range(3):
        first.zero_grad()
        scratch(torch.randn(8, 4)).sum().backward()
        first.step()
    assert w.step == 3
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    other = DDP(torch.nn.Linear(4, 1))
    other_optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        other_optimizer.zero_grad()
        (model(torch.randn(8, 4)).sum() + other(torch.randn(8, 4)).sum()).backward()
        optimizer.step()
        other_optimizer.step()  # a second optimizer of a DDP model: not followed
        first.step()  # the throwaway one again: passed over for good
    assert w.step == 2 and w.open
    digests = w.observers[0].data()["checks"]
    assert [c["step"] for c in digests] == [1, 2] and all(p[4] for c in digests for p in c["params"])


def test_an_optimizer_rebuilt_after_a_warm_up_carries_on_the_count(window, one_process_group):
    """A warm-up optimizer trains the DDP model, is dropped, and a new one is built (after unfreezing): the window
    follows the new one from the step count reached, and keeps the warm-up's digests (sanitizer round 15: clipping on
    rank 0 during the warm-up was otherwise dropped and the divergence put down to a load on rank 0)."""
    import gc

    w = window(steps=8, checks=("paramsync",))
    model = DDP(torch.nn.Linear(4, 1))
    warm_up = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        warm_up.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        warm_up.step()
    del warm_up
    gc.collect()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(5):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    assert w.step == 8 and not w.open
    assert [c["step"] for c in w.observers[0].data()["checks"]] == [1, 2, 8]


def test_set_epoch_calls_are_recorded_and_one_made_inside_the_loop_is_late(window):
    w = window(steps=3, checks=("epochorder",))
    data = TensorDataset(torch.arange(64.0).view(64, 1))
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    for epoch in range(2):
        for i, _ in enumerate(loader):
            if i == 0:
                sampler.set_epoch(epoch)  # the order of this epoch was drawn already
    (record,) = w.observers[0].data()["samplers"]
    assert record["set_epoch"] == [0, 1] and [p["epoch"] for p in record["passes"]] == [0, 0]
    late = record["late"]
    assert late["epoch"] == 0 and late["n"] == 64 and 0 < late["left"] < 64 and late["where"].startswith(__file__)

    on_time = window(steps=3, checks=("epochorder",))
    _epochs_after_set_epoch(DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0), data)
    (record,) = on_time.observers[0].data()["samplers"]
    assert record["set_epoch"] == [0, 1] and record["late"] is None


def _epochs_after_set_epoch(sampler, data, epochs: int = 2) -> None:
    """Two epochs read as they should be: set_epoch(epoch), then the loop over the DataLoader."""
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        list(loader)


def test_a_subclass_set_epoch_is_watched_for_the_values_it_swallows(window):
    """A DistributedSampler subclass whose own set_epoch() never calls DistributedSampler's: the values the script
    gave it are recorded (DistributedSampler's wrapper never sees them), and its method is its own again after."""

    class Quiet(DistributedSampler):
        def set_epoch(self, epoch):
            self.asked_for = epoch  # and nothing else: the sampler's epoch stays 0

    own = Quiet.__dict__["set_epoch"]
    w = window(steps=3, checks=("epochorder",))
    data = TensorDataset(torch.arange(64.0).view(64, 1))
    _epochs_after_set_epoch(Quiet(data, num_replicas=1, rank=0, shuffle=True, seed=0), data)
    (record,) = w.observers[0].data()["samplers"]
    assert record["set_epoch"] == [] and record["asked"] == [0, 1] and [p["epoch"] for p in record["passes"]] == [0, 0]
    assert record["override"]["name"].endswith("Quiet.set_epoch") and record["override"]["where"].startswith(__file__)
    w.observers[0].stop()
    assert Quiet.__dict__["set_epoch"] is own


def test_a_sampler_built_anew_each_epoch_is_watched_past_the_window_until_its_second_pass(window):
    """The window closes inside the first epoch; the sampler the next epoch builds at the same line is still watched
    (its pass is the one to compare), then every hook goes."""
    originals = {name: DistributedSampler.__dict__[name] for name in ("__init__", "__iter__", "set_epoch")}
    w = window(steps=3, checks=("epochorder",))
    data = TensorDataset(torch.arange(64.0).view(64, 1))
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)  # no set_epoch: epoch 0
        for (x,) in DataLoader(data, batch_size=8, sampler=sampler):  # 8 steps: the window ends in the first epoch
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
    assert not w.open
    first, second = w.observers[0].data()["samplers"]
    assert first["where"] == second["where"] and first["passes"][0]["order"] == second["passes"][0]["order"]
    assert all(DistributedSampler.__dict__[name] is original for name, original in originals.items())


def test_writes_on_the_console_streams_from_the_users_code_are_kept_by_line_and_text(window):
    """sys.stdout.write(...) on every rank is the same noise as a print: the console streams stand behind a stand-in
    for the window, which sees the user's writes (not print's own, nor logging's; tqdm.write's as the user's) and is
    gone with the window."""
    import logging
    import sys
    import zlib

    from tqdm import tqdm

    before = (sys.stdout, sys.stderr)
    w = window(steps=2, checks=("sameprint",))
    assert sys.stdout is not before[0] and sys.stdout.fileno is not None  # the stream's own attributes pass through
    first = _line('sys.stdout.write("== epoch 0 ==")')
    sys.stdout.write("== epoch 0 ==")  # kept
    sys.stdout.write("\n")  # whitespace alone: nothing
    sys.stderr.writelines(["warn", "ing\n"])  # kept, as one text
    print("a print")  # kept once, as a print (its writes are print's own)
    logging.getLogger("ddplab-test-write").warning("a record")  # logging's own write: not the user's line
    tqdm.write("== epoch 1 ==")  # kept at this line: tqdm writes the text it was given
    tqdm.write(" ")  # whitespace alone: nothing
    sites = {int(s["where"].rpartition(":")[2]) - first: s for s in w.observers[0].data()["sites"]}
    w.close()
    assert (sys.stdout, sys.stderr) == before
    crc = [zlib.crc32(t.encode()) for t in ("== epoch 0 ==", "warning\n", "a print\n", "== epoch 1 ==")]
    assert {k: (s["count"], s["texts"]) for k, s in sites.items()} == {
        0: (1, [crc[0]]),
        2: (1, [crc[1]]),
        3: (1, [crc[2]]),
        5: (1, [crc[3]]),
    }


def test_a_tqdm_bar_drawn_on_the_console_by_the_users_code_is_kept_as_a_line(window, tmp_path):
    import tqdm.std
    from tqdm import tqdm as bar
    from tqdm import trange

    original = tqdm.std.tqdm.__dict__["__init__"]
    w = window(steps=2, checks=("sameprint",))
    first = _line('list(bar(range(3), desc="epoch 0", disable=False))')
    list(bar(range(3), desc="epoch 0", disable=False))  # kept: drawn on stderr
    list(trange(2, disable=False))  # kept: tqdm's own trange, at this line
    list(bar(range(3), disable=True))  # draws nothing
    with open(tmp_path / "bars.txt", "w") as f:
        list(bar(range(3), file=f))  # a file of its own
    sites = {int(s["where"].rpartition(":")[2]) - first: s for s in w.observers[0].data()["sites"]}
    w.close()
    assert tqdm.std.tqdm.__dict__["__init__"] is original
    assert {k: s["count"] for k, s in sites.items()} == {0: 1, 1: 1}
    assert sites[0]["example"] == "a tqdm progress bar, epoch 0, 3 steps"


def test_pprint_on_the_console_from_the_users_code_is_kept_as_a_line(window, tmp_path):
    """pprint(cfg) writes the dict's pieces, none of them a text the user handed over (sanitizer round 16 missed a
    config pprinted on every rank): the printer is watched, by its method, so a `from pprint import pprint` taken
    before the window and a PrettyPrinter of one's own count too; its writes are not counted again."""
    import io
    import pprint
    import zlib
    from pprint import pprint as early

    original = pprint.PrettyPrinter.pprint
    cfg = {"model": {"d": 8, "layers": [1, 2, 3]}, "lr": 0.1}
    w = window(steps=2, checks=("sameprint",))
    first = _line("early(cfg)")
    early(cfg)  # kept
    pprint.PrettyPrinter(indent=4).pprint(cfg)  # kept, with its own format
    pprint.pp(cfg)  # kept, at this line (pprint's pp between)
    pprint.pprint(cfg, stream=io.StringIO())  # a stream of its own: nothing
    sites = {int(s["where"].rpartition(":")[2]) - first: s for s in w.observers[0].data()["sites"]}
    w.close()
    assert pprint.PrettyPrinter.pprint is original
    texts = [pprint.pformat(cfg), pprint.pformat(cfg, indent=4), pprint.pformat(cfg, sort_dicts=False)]
    assert {k: (s["count"], s["texts"]) for k, s in sites.items()} == {
        k: (1, [zlib.crc32((t + "\n").encode())]) for k, t in enumerate(texts)
    }


def test_a_parameter_digest_reads_every_value():
    """A difference in one value of 100,000 (a sample of 256 would miss it), in any float dtype, changes the digest."""
    from ddplab.sanitize.paramsync import _digests

    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        a = torch.randn(100, 1000).to(dtype)
        b = a.clone()
        b[37, 501] = b[37, 501] * 1.5 + 1
        (n, bits_a, sum_a), (_, bits_b, _) = _digests(torch, [a, b])
        assert n == 100_000 and bits_a != bits_b and abs(sum_a - a.double().sum().item()) < 1e-6 * a.numel()
        assert _digests(torch, [a.t()])[0][1] == bits_a  # the same values, another layout: the same digest


def _line(text: str, after: str | None = None) -> int:
    lines = open(__file__).read().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines) if i >= start and text in line and "_line(" not in line) + 1


def test_an_error_inside_a_check_turns_it_off_with_one_line_and_the_script_goes_on(window, capsys):
    class Odd(torch.Tensor):  # a library's tensor type that refuses an operation the fingerprint uses
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func == torch.Tensor.shape.__get__:  # read of every tensor of a batch, to pick the one to read
                raise RuntimeError("Odd tensors cannot be counted\nsecond line")
            return super().__torch_function__(func, types, args, kwargs or {})

    original = DataLoader.__dict__["__iter__"]
    w = window(steps=5, checks=("samebatch",))
    loader = DataLoader(list(range(6)), batch_size=2, collate_fn=lambda b: torch.ones(2, 3).as_subclass(Odd))
    batches = list(loader)
    assert len(batches) == 3 and all(type(b) is Odd for b in batches)
    assert capsys.readouterr().err == (
        "ddplab: sanitizer check same-samples off: RuntimeError: Odd tensors cannot be counted\n"
    )
    assert w.off == {"same-samples": "RuntimeError: Odd tensors cannot be counted"} and w.observers == []
    assert DataLoader.__dict__["__iter__"] is original


def test_fingerprints_tell_samples_apart_row_by_row_from_the_largest_tensor():
    x = torch.randn(8, 3, 32, 32)
    labels = torch.zeros(8, dtype=torch.long)  # alike in every sample: not the tensor to read
    a = fingerprints(torch, (labels, x), 1024)
    assert len(a) == 8 and len(set(a)) == 8
    assert fingerprints(torch, {"y": labels, "x": x[[2, 5]]}, 1024) == [a[2], a[5]]
    assert fingerprints(torch, x.to(torch.bfloat16), 3) == fingerprints(torch, x.to(torch.bfloat16)[:3], 1024)
    assert fingerprints(torch, ["text", torch.tensor(1.0)], 1024) == []
    assert fingerprints(torch, torch.eye(4).to_sparse(), 1024) == []


def test_user_code_is_what_is_neither_python_nor_a_package_nor_ddplab():
    assert userframe.is_user(__file__)
    assert not userframe.is_user(torch.__file__) and not userframe.is_user(json.__file__)
    assert not userframe.is_user(rankside.__file__) and not userframe.is_user("<frozen importlib._bootstrap>")
    assert userframe.where(1).startswith(f"{__file__}:")
    # a package from another environment (PYTHONPATH), or `pip install --user`'s folder
    other = [
        "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py",
        "/usr/lib/python3/dist-packages/x.py",
    ]
    assert not any(userframe.is_user(p) for p in other)


def test_warnings_raised_through_a_wrapper_name_the_line_they_would_without_it():
    """torch's DDP.__init__ warns with stacklevel=2 (`broadcast_buffers` is deprecated): under the sanitizer's
    wrapper it named ddplab's file; call_through puts it back on the user's line, with the user's filters."""
    import warnings

    def library(x):
        warnings.warn("for the caller", FutureWarning, stacklevel=2)
        warnings.warn("about the library itself", UserWarning, stacklevel=1)
        return x + 1

    def wrapper(x):
        return userframe.call_through(library, x)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert wrapper(1) == 2
        warnings.simplefilter("ignore", UserWarning)
        assert wrapper(1) == 2
    line = _line("        assert wrapper(1) == 2")
    assert [(w.filename, w.lineno, str(w.message)) for w in seen] == [
        (__file__, line, "for the caller"),
        (__file__, _line('warnings.warn("about the library itself"'), "about the library itself"),
        (__file__, line + 2, "for the caller"),
    ]
    with warnings.catch_warnings(), pytest.raises(FutureWarning, match="for the caller"):
        warnings.simplefilter("error", FutureWarning)
        wrapper(1)


def test_a_script_that_never_imports_torch_writes_its_record_with_every_check_on(tmp_path):
    """The checks attach when the script imports torch; one that never does (a launched helper script) still leaves
    its record at exit, with nothing turned off."""
    w = rankside.Window(str(tmp_path), 5, ("samebatch", "epochorder", "paramsync", "placement", "sameprint"))
    try:
        w.write(wait=True)
    finally:
        for observer in w.observers:
            observer.stop()
    record = json.loads((tmp_path / f"rank{w.rank}.json").read_text())
    assert record["off"] == {} and record["checks"]["same-samples"] == {"loaders": []}


@pytest.mark.parametrize("config", [None, '{"steps": 0}', "{not json"])
def test_nothing_is_installed_without_a_window_to_watch(tmp_path, monkeypatch, config):
    """`ddplab launch --sanitize-steps 0` writes no config; a rank then installs nothing (nor does a torn one)."""
    monkeypatch.setenv("DDPLAB_SANITIZE_DIR", str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("DDPLAB_SANITIZE_OWNER", raising=False)
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    assert rankside.install() is False and rankside._window is None


def test_a_step_hook_registered_after_the_windows_outlives_it(window):
    """The window closes from inside torch's loop over the global step hooks; with another hook after its own (a
    profiler's, the script's), removing its own would make that loop raise in the user's step. It stays, idle."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    w = window(steps=2, checks=())
    seen = []
    later = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: seen.append(w.step))
    try:
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(4):
            optimizer.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            optimizer.step()  # raised "OrderedDict mutated during iteration" at step 2
    finally:
        later.remove()
    assert seen == [1, 2, 2, 2] and not w.open and w.handle is not None  # closed at step 2, counting no more
    model_alone = torch.nn.Linear(4, 1)
    alone, optimizer = window(steps=1, checks=()), torch.optim.SGD(model_alone.parameters(), lr=0.1)
    model_alone(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    assert not alone.open and alone.handle is None  # the last hook: removed


def test_an_uncaught_error_keeps_its_traceback_while_the_console_stands_in(tmp_path):
    """Python prints an uncaught error from C with no Python frame left: the stand-in passes it on (it asked for its
    caller's frame there once, and the traceback was lost: "lost sys.stderr")."""
    import subprocess
    import sys

    code = (
        "from ddplab.sanitize import rankside\n"
        f"window = rankside.Window({str(tmp_path)!r}, 50, ('sameprint',))\n"
        "raise RuntimeError('planted at the top level')\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1, ran.stderr
    assert "Traceback (most recent call last)" in ran.stderr, ran.stderr
    assert ran.stderr.rstrip().endswith("RuntimeError: planted at the top level"), ran.stderr


def test_a_pass_replayed_from_a_cache_is_seen_and_a_reshuffled_cache_is_not(window, one_process_group):
    """itertools.cycle(loader) feeds the model the very batches of the pass that ended, in its order, with no new pass
    begun: every later epoch is the first one's order (issue 39, round 7). A list of batches fed in another order
    each epoch, or a loader that does not shuffle (its order repeats on purpose), says nothing."""
    original = DDP.__dict__["forward"]
    w = window(steps=40, checks=("samebatch",))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    cycled = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, num_replicas=1, rank=0, seed=0))
    plain = DataLoader(data, batch_size=16)
    cached = DataLoader(data, batch_size=16, shuffle=True)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(batches):
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    train(itertools.islice(itertools.cycle(cycled), 12))  # 4 batches, then 8 of them again
    train(itertools.islice(itertools.cycle(plain), 12))
    batches = list(cached)
    for order in ([2, 0, 3, 1], [1, 3, 0, 2], [3, 2, 1, 0]):
        train([batches[i] for i in order])
    assert w.step == 36 and w.open
    observer = w.observers[0]
    data_seen = observer.data()
    (replay,) = samebatch.judge({0: data_seen}, 1)
    assert replay.check == "epoch-repeats" and replay.where == f"{__file__}:{_line('cycled = DataLoader(')}"
    assert replay.evidence["replays"] == [0, 1, 2, 3, 0, 1, 2, 3] and replay.evidence["batches"] == 4
    assert replay.evidence["ended_at_step"] == 4 and replay.evidence["replayed_from_step"] == 5
    assert replay.evidence["as"] == "tensors" and "its very batches" in replay.observed
    first, second, third = data_seen["loaders"]
    assert "replays" not in second and not second.get("shuffles")  # shuffle=False: not watched for replays
    assert third["replays"][:4] == [2, 0, 3, 1] and third["trained"]  # fed again, in orders of its own
    observer.stop()
    assert DDP.__dict__["forward"] is original


def test_a_replayed_pass_moved_before_each_forward_is_seen_by_its_values(window, one_process_group):
    """On a GPU the script's xb.to('cuda') makes a new tensor every step (here xb.clone()): the replay of a cached pass
    is told by its values, compared only for a forward whose batch no loader yielded. A loop over its own loader,
    each batch copied the same way, says nothing."""
    w = window(steps=40, checks=("samebatch",))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    cycled = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, num_replicas=1, rank=0, seed=0))
    looped = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, num_replicas=1, rank=0, seed=1))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(batches):
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x.clone()), y).backward()
            optimizer.step()

    train(itertools.islice(itertools.cycle(cycled), 12))  # 4 batches, then 8 of them again, each a new tensor
    for epoch in range(3):
        looped.sampler.set_epoch(epoch)
        train(looped)
    observer = w.observers[0]
    data_seen = observer.data()
    (replay,) = samebatch.judge({0: data_seen}, 1)
    assert replay.evidence["as"] == "values"
    assert replay.where == f"{__file__}:{_line('cycled = DataLoader(', after='def test_a_replayed_pass_moved')}"
    assert replay.evidence["replays"] == [0, 1, 2, 3, 0, 1, 2, 3] and replay.evidence["replayed_from_step"] == 5
    assert "the same values, copied anew" in replay.observed
    assert "replays" not in data_seen["loaders"][1] and data_seen["loaders"][1]["trained"]
    observer.stop()


def test_a_backward_in_no_sync_and_parameters_ddp_does_not_average_are_recorded(window, one_process_group):
    """The step after a backward inside no_sync() left before optimizer.step() (accumulation off by one), and the
    parameters no wrapper's reducer averages, with why: added to the module after DDP() was built, frozen when it
    was built and unfrozen since; a model wrapped again after unfreezing is averaged whole."""
    w = window(steps=3, checks=("paramsync",))
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    net[0].requires_grad_(False)
    model = DDP(net)
    net.scale = torch.nn.Parameter(torch.ones(1))
    net[0].requires_grad_(True)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(inside_no_sync: bool) -> None:
        with model.no_sync() if inside_no_sync else contextlib.nullcontext():
            (model(torch.randn(2, 4)) * net.scale).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    step(True)
    step(False)
    model = DDP(net)  # a new reducer: it averages every parameter that requires a gradient now
    step(False)
    checks = w.observers[0].data()["checks"]
    assert [(c["no_sync"], c["no_sync_backward"]) for c in checks] == [(False, True), (False, False), (False, False)]
    names = [p[0] for p in checks[0]["params"]]
    assert {names[int(i)]: why for i, why in checks[0]["unaveraged"].items()} == {
        "0.weight": "frozen",
        "0.bias": "frozen",
        "scale": "added",
    }
    assert checks[1]["unaveraged"] == checks[0]["unaveraged"] and checks[2]["unaveraged"] == {}

    # frozen when DDP() was built, unfrozen later and handed to the optimizer with add_param_group: the names (and
    # which parameters a wrapper holds) are found again for the optimizer's grown list
    w = window(steps=2, checks=("paramsync",))
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    net[0].requires_grad_(False)
    model = DDP(net)
    optimizer = torch.optim.SGD(net[1].parameters(), lr=0.1)
    for unfreeze in (False, True):
        if unfreeze:
            net[0].requires_grad_(True)
            optimizer.add_param_group({"params": net[0].parameters()})
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    first, second = w.observers[0].data()["checks"]
    assert [p[0] for p in first["params"]] == ["1.weight", "1.bias"]
    assert [(p[0], p[4]) for p in second["params"]][2:] == [("0.weight", True), ("0.bias", True)]
    assert sorted(second["unaveraged"].values()) == ["frozen", "frozen"]
