"""The sanitizer's reader on observation files written by hand, in the format each rank writes (rankside.Window.write):
every check finds its mistake from the numbers alone, and stays silent on the numbers a correct script leaves."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddplab.sanitize import readout

SCRIPT = "/home/me/proj/train.py"


def observed(
    folder: Path,
    per_rank: dict[int, dict],
    steps: int = 50,
    seen: int = 50,
    world: int | None = None,
    off: dict | None = None,
) -> Path:
    """DIR/config.json and DIR/rank<R>.json as `ddplab launch` and the ranks write them."""
    folder.mkdir(parents=True, exist_ok=True)
    readout.request(folder, steps)
    for rank, checks in per_rank.items():
        (folder / f"rank{rank}.json").write_text(
            json.dumps(
                {
                    "rank": rank,
                    "world_size": world or len(per_rank),
                    "local_rank": rank,
                    "pid": 100 + rank,
                    "window": steps,
                    "steps": seen,
                    "closed": seen >= steps,
                    "checks": checks,
                    "off": off or {},
                }
            )
        )
    return folder


def loader(
    samples_per_pass: list[list[int]],
    where: str = f"{SCRIPT}:40",
    sampler: str = "RandomSampler",
    distributed: dict | None = None,
    trained: bool = True,
    iterable: bool = False,
) -> dict:
    return {
        "loaders": [
            {
                "where": where,
                "sampler": sampler,
                "iterable": iterable,
                "distributed": distributed,
                "trained": trained,
                "passes": [{"batches": len(s) // 16, "samples": s} for s in samples_per_pass],
            }
        ]
    }


def only(report, check: str):
    assert [f.check for f in report.findings] == [check], [f.observed for f in report.findings]
    return report.findings[0]


# ------------------------------------------------------------------------------------------------ same-samples
def test_same_samples_in_the_same_order_name_the_loader_its_sampler_and_the_fix(tmp_path):
    same = list(range(1000, 1256))
    report = readout.read(
        observed(tmp_path, {0: {"same-samples": loader([same])}, 1: {"same-samples": loader([same])}})
    )
    f = only(report, "same-samples")
    assert f.evidence["ranks"] == [0, 1] and f.evidence["pairs"][0]["share"] == 1.0
    assert "read the same 16 batches, sample for sample and in the same order" in f.observed
    assert "RandomSampler, not a DistributedSampler" in f.observed and f.where == f"{SCRIPT}:40"
    assert "DistributedSampler(dataset)" in f.fix and "set_epoch" in f.fix


def test_per_rank_shuffles_of_the_whole_data_set_overlap_in_part(tmp_path):
    a, b = list(range(0, 300)), list(range(150, 450))  # each rank reads its own order of the same pool
    f = only(
        readout.read(observed(tmp_path, {0: {"same-samples": loader([a])}, 1: {"same-samples": loader([b])}})),
        "same-samples",
    )
    assert "150 of the 300 samples rank 0 read were also read by rank 1 (50 %)" in f.observed


def test_overlapping_samples_are_counted_out_of_the_rank_that_read_fewer(tmp_path):
    """data[local_rank::1] sliced by hand: rank 0 reads 300 samples, rank 1 the 299 after the first; the sentence
    says the share of the smaller rank's samples and names that rank ("299 of the 299 samples rank 0 read" was
    rank 1's count under rank 0's number)."""
    a, b = list(range(0, 300)), list(range(1, 300))
    f = only(
        readout.read(observed(tmp_path, {0: {"same-samples": loader([a])}, 1: {"same-samples": loader([b])}})),
        "same-samples",
    )
    assert "299 of the 299 samples rank 1 read were also read by rank 0 (100 %)" in f.observed


@pytest.mark.parametrize(
    "replicas, said, fix",
    [
        (2, "rank=0 on more than one rank", "rank=dist.get_rank()"),
        # DistributedSampler(data, num_replicas=1, rank=0): rank 0 everywhere is what num_replicas=1 allows
        (1, "num_replicas=1 for 2 ranks", "num_replicas=dist.get_world_size()"),
    ],
)
def test_a_distributed_sampler_given_rank_0_everywhere_is_named(tmp_path, replicas, said, fix):
    same = list(range(64))
    ranks = {
        r: {
            "same-samples": loader(
                [same],
                sampler="DistributedSampler",
                distributed={"rank": 0, "num_replicas": replicas, "shuffle": True, "seed": 0},
            )
        }
        for r in (0, 1)
    }
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert said in f.observed and fix in f.fix


@pytest.mark.parametrize(
    "seeds, said",
    [
        ((0, 1), "another seed on each rank (rank 0: 0, rank 1: 1)"),  # DistributedSampler(data, seed=rank)
        ((7, 7), "the data sets themselves differ from rank to rank"),  # a file list shuffled per rank
    ],
)
def test_distributed_samplers_that_overlap_say_why(tmp_path, seeds, said):
    a, b = list(range(0, 300)), list(range(150, 450))  # each rank's share of another order
    ranks = {
        r: {
            "same-samples": loader(
                [(a, b)[r]],
                sampler="DistributedSampler",
                distributed={"rank": r, "num_replicas": 2, "shuffle": True, "seed": seeds[r]},
            )
        }
        for r in (0, 1)
    }
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert said in f.observed and "not a DistributedSampler" not in f.observed


def test_a_sampler_of_the_scripts_own_that_does_not_split_is_named_as_such(tmp_path):
    same = list(range(64))  # a bucketing batch sampler that hands every rank the same batches
    ranks = {r: {"same-samples": loader([same], sampler="ShardedBuckets")} for r in (0, 1)}
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert "its sampler, ShardedBuckets, is not torch's" in f.observed and "not a DistributedSampler" not in f.observed
    assert "split by rank inside ShardedBuckets" in f.fix


def test_subsets_each_rank_picked_at_random_overlap_and_say_so(tmp_path):
    """np.random.seed(rank); Subset(data, permutation[: n // world]): each rank reads half of the data set, not all
    of it (the finding said "every rank reads the whole data set"), and the halves overlap."""
    a, b = list(range(0, 120)), list(range(60, 180))
    ranks = {
        r: {"same-samples": loader([(a, b)[r]], sampler="SequentialSampler")} for r in (0, 1)
    }  # fmt: skip
    for r, data in ranks.items():
        data["same-samples"]["loaders"][0]["subset"] = {"len": 120, "of": 240, "crc": 1000 + r}
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert "a Subset with other indices on each rank (120 of the 240 samples on each)" in f.observed
    assert "every rank reads the whole data set" not in f.observed and "perm[rank::world_size]" in f.fix


def test_a_subset_picked_per_rank_under_agreeing_distributed_samplers_is_named(tmp_path):
    """A curriculum's easy Subset picked with an unseeded jitter on each rank, split by a DistributedSampler that is
    right: the samplers agree, the Subsets differ - said as such, not as 'the data sets differ' in general; and a
    loader built anew each epoch at that line is one finding."""
    a, b = list(range(0, 120)), list(range(60, 180))
    dist = {"num_replicas": 2, "shuffle": True, "seed": 0}
    ranks = {}
    for r in (0, 1):
        data = loader([(a, b)[r]], sampler="DistributedSampler", distributed={"rank": r, **dist})
        data["loaders"][0]["subset"] = {"len": 120, "of": 240, "crc": 1000 + r}
        data["loaders"].append(json.loads(json.dumps(data["loaders"][0])))  # the next epoch's loader, same line
        ranks[r] = {"same-samples": data}
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert "but what they split is a Subset with other indices on each rank (120 of the 240 samples" in f.observed
    assert "dist.broadcast_object_list" in f.fix and f.evidence["loaders"] == 2


def test_an_iterable_dataset_read_in_full_by_every_rank(tmp_path):
    same = list(range(64))
    ranks = {r: {"same-samples": loader([same], sampler="_InfiniteConstantSampler", iterable=True)} for r in (0, 1)}
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert "IterableDataset" in f.observed and "islice" in f.fix


def test_a_weighted_sampler_drawing_the_same_samples_on_every_rank_is_named(tmp_path):
    """WeightedRandomSampler under DDP, the same seed on every rank: its draws repeat samples on each rank (by design,
    with replacement: the "constant data" test took them for samples that tell nothing) and are the same draws on
    both ranks."""
    draws = [1000 + (i * 7) % 97 for i in range(320)]  # 97 distinct samples, each drawn 3-4 times
    ranks = {r: {"same-samples": loader([draws], sampler="WeightedRandomSampler")} for r in (0, 1)}
    for data in ranks.values():
        data["same-samples"]["loaders"][0]["replacement"] = True
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert "read the same 20 batches, sample for sample and in the same order" in f.observed
    assert "WeightedRandomSampler, drawing with replacement" in f.observed and "indices[rank::world_size]" in f.fix


@pytest.mark.parametrize("case", ["own seeds", "constant data"])
def test_samplers_with_replacement_are_silent_when_the_ranks_draw_independently(tmp_path, case):
    """Independent draws with replacement (a seed per rank) share samples by chance: no mistake."""
    import random

    pools = {r: random.Random(r) for r in (0, 1)}
    draws = {r: [1000 + pools[r].randrange(40) for _ in range(320)] for r in (0, 1)}
    if case == "constant data":
        draws = {r: [7] * 320 for r in (0, 1)}
    ranks = {r: {"same-samples": loader([draws[r]], sampler="WeightedRandomSampler")} for r in (0, 1)}
    for data in ranks.values():
        data["same-samples"]["loaders"][0]["replacement"] = True
    assert readout.read(observed(tmp_path, ranks)).findings == []


def test_distributed_samplers_that_agree_yet_give_the_same_samples_in_order_say_the_samples_ignore_the_indices(
    tmp_path,
):
    """Data made in __getitem__ from numpy, a worker_init_fn seeding by worker id: other indices on each rank, the
    same samples in the same order (a data set built in another order on each rank would not keep the order)."""
    same = list(range(5000, 5320))
    ranks = {
        r: {
            "same-samples": loader(
                [same],
                sampler="DistributedSampler",
                distributed={"rank": r, "num_replicas": 2, "shuffle": True, "seed": 0},
            )
        }
        for r in (0, 1)
    }
    f = only(readout.read(observed(tmp_path, ranks)), "same-samples")
    assert "the samples do not follow the indices" in f.observed and "worker_init_fn" in f.observed
    assert "the data sets themselves differ" not in f.observed and "dist.get_rank()" in f.fix


@pytest.mark.parametrize("case", ["disjoint", "padding", "constant data", "evaluation loader", "second epoch"])
def test_same_samples_silent_where_nothing_is_shared(tmp_path, case):
    a, b = list(range(0, 128)), list(range(128, 256))
    if case == "padding":  # a DistributedSampler pads the last rank with a repeat of the first index
        b = b[:-1] + [0]
    elif case == "constant data":  # every sample alike: the fingerprints tell nothing
        a, b = [7] * 128, [7] * 128
    ranks = {0: {"same-samples": loader([a])}, 1: {"same-samples": loader([b])}}
    if case == "evaluation loader":  # read in full on every rank, but no optimizer step followed its batches
        ranks = {r: {"same-samples": loader([a], trained=False)} for r in (0, 1)}
    elif case == "second epoch":  # set_epoch reshuffles: epoch 2 of rank 0 holds samples of epoch 1 of rank 1
        ranks = {0: {"same-samples": loader([a, b])}, 1: {"same-samples": loader([b, list(range(256, 384))])}}
    assert readout.read(observed(tmp_path, ranks)).findings == []


# ------------------------------------------------------------------------------------------------ epoch-repeats
def sampler(orders: list[int], epochs: list[int], shuffle: bool = True) -> dict:
    return {
        "samplers": [
            {
                "where": f"{SCRIPT}:38",
                "shuffle": shuffle,
                "seed": 0,
                "passes": [
                    {"epoch": e, "n": 128, "order": o, "step": 8 * i} for i, (o, e) in enumerate(zip(orders, epochs))
                ],
            }
        ]
    }


def test_an_epoch_repeating_the_last_ones_order_names_set_epoch(tmp_path):
    ranks = {r: {"epoch-repeats": sampler([111, 111], [0, 0])} for r in (0, 1)}
    f = only(readout.read(observed(tmp_path, ranks)), "epoch-repeats")
    assert "gave the second epoch the very order of the first (128 indices, on ranks 0 and 1)" in f.observed
    assert "its epoch stayed 0: set_epoch() was never called, or given 0 every time" in f.observed
    assert f.where == f"{SCRIPT}:38" and "sampler.set_epoch(epoch)" in f.fix
    assert f.evidence["second_epoch_at_step"] == 8


def test_an_epoch_that_stays_at_another_value_says_set_epoch_was_given_it_every_time(tmp_path):
    ranks = {r: {"epoch-repeats": sampler([111, 111], [3, 3])} for r in (0, 1)}  # sampler.set_epoch(start_epoch)
    f = only(readout.read(observed(tmp_path, ranks)), "epoch-repeats")
    assert "its epoch stayed 3: set_epoch() was given the same value every time" in f.observed
    assert "never called" not in f.observed


def test_the_set_epoch_calls_a_rank_saw_say_why_the_order_repeated(tmp_path):
    """What each rank records of set_epoch() (its values; the first call made while a pass still had indices left)
    replaces the guess from the epochs alone."""

    def with_calls(given, late=None, other=None):
        data = sampler([111, 111], [0, 0])
        data["samplers"][0].update({"set_epoch": given, "late": late})
        if other is not None:
            data["samplers"].append(other)
        return {r: {"epoch-repeats": data} for r in (0, 1)}

    said = {}
    val = {
        "where": f"{SCRIPT}:52",
        "shuffle": False,
        "seed": 0,
        "passes": [{"epoch": 0, "n": 32, "order": 5, "step": 8}],
        "set_epoch": [0, 1],
        "late": None,
    }
    cases = {
        "never": with_calls([]),
        "constant": with_calls([0, 0, 0]),
        "late": with_calls([0, 1], late={"epoch": 0, "left": 96, "n": 128, "where": f"{SCRIPT}:71"}),
        "another sampler": with_calls([], other=val),
    }
    for case, ranks in cases.items():
        f = only(readout.read(observed(tmp_path / case, ranks)), "epoch-repeats")
        said[case] = (f.observed.split("(128 indices, on ranks 0 and 1): ")[1], f.fix)
    assert said["never"][0] == "set_epoch() was never called on it, so every epoch trains on the same order"
    assert said["constant"][0].startswith("set_epoch() was given 0 every time")
    assert said["late"][0].startswith(
        f"set_epoch(0) was called at {SCRIPT}:71 after the epoch's loop had begun (96 of its 128 indices still"
    )
    assert "before the loop over the DataLoader starts, not inside it" in said["late"][1]
    assert said["another sampler"][0].startswith(
        f"set_epoch() was never called on it, but was on the DistributedSampler built at {SCRIPT}:52 (not "
        "shuffling, 32 indices a pass)"
    )
    assert "on this sampler too" in said["another sampler"][1]


@pytest.mark.parametrize("calls, named", [([0, 0], True), ([1, 1], False), ([0, 1], True)])
def test_two_passes_with_no_set_epoch_between_are_one_epoch_read_twice(tmp_path, calls, named):
    """The training loader read again within an epoch (to measure it) repeats the order on purpose: silent where
    set_epoch() is called, only not between the two passes; never called at all, or called between, it is named."""
    data = sampler([111, 111], [0, 0])
    record = data["samplers"][0]
    for one_pass, before in zip(record["passes"], calls):
        one_pass["calls"] = before
    record.update({"calls": max(calls), "set_epoch": [0] * max(calls), "late": None})
    ranks = {r: {"epoch-repeats": data} for r in (0, 1)}
    assert [f.check for f in readout.read(observed(tmp_path, ranks)).findings] == ["epoch-repeats"] * named


@pytest.mark.parametrize(
    "orders,epochs,shuffle", [([111, 222], [0, 1], True), ([111, 111], [0, 0], False), ([111], [0], True)]
)
def test_epoch_order_silent_with_set_epoch_without_shuffle_or_one_epoch(tmp_path, orders, epochs, shuffle):
    ranks = {r: {"epoch-repeats": sampler(orders, epochs, shuffle)} for r in (0, 1)}
    assert readout.read(observed(tmp_path, ranks)).findings == []


@pytest.mark.parametrize("set_on_new", [False, True])
def test_a_sampler_built_anew_each_epoch_without_set_epoch_repeats_the_order(tmp_path, set_on_new):
    """A DistributedSampler built again at the same line each epoch starts at epoch 0 each time: one sampler's pass
    after another's, the same order, named; the new one given set_epoch(epoch) before its loop draws another."""

    def built(step: int, order: int, epoch: int) -> dict:
        calls = int(set_on_new and step > 0)
        return {
            "where": f"{SCRIPT}:61",
            "shuffle": True,
            "seed": 0,
            "passes": [{"epoch": epoch, "n": 128, "order": order, "step": step, "calls": calls}],
            "calls": calls,
            "set_epoch": [epoch] * calls,
            "late": None,
        }

    each = [built(0, 111, 0), built(16, 222 if set_on_new else 111, int(set_on_new)), built(32, 333, 2)]
    ranks = {r: {"epoch-repeats": {"samplers": each}} for r in (0, 1)}
    findings = readout.read(observed(tmp_path, ranks)).findings
    if set_on_new:
        assert findings == []
        return
    f = only(readout.read(observed(tmp_path, ranks)), "epoch-repeats")
    assert f.where == f"{SCRIPT}:61" and f.evidence["second_epoch_at_step"] == 16
    assert "a new DistributedSampler is built there for each epoch (3 in the window)" in f.observed
    assert (
        "before its loop: each starts at epoch 0, so every epoch" in f.observed
        and "build the sampler (and its DataLoader) once" in f.fix
    )


@pytest.mark.parametrize("measured", [False, True])
def test_set_epoch_called_once_before_the_epochs_is_named_unless_the_repeat_trained_nothing(tmp_path, measured):
    """A resumed run calls set_epoch(start_epoch) once, before its epoch loop: every epoch after repeats the order,
    though set_epoch() was called. A pass that trained nothing (the training loader read again to measure it: the
    next pass starts at the same step) is one epoch read twice, as before."""
    steps, orders, calls = ([0, 16, 16], [111, 111, 222], [1, 1, 2]) if measured else ([0, 16, 32], [111] * 3, [1] * 3)
    record = {
        "where": f"{SCRIPT}:38",
        "shuffle": True,
        "seed": 0,
        "passes": [
            {"epoch": 3 + (c - 1), "n": 128, "order": o, "step": st, "calls": c}
            for o, st, c in zip(orders, steps, calls)
        ],
        "calls": max(calls),
        "set_epoch": [3, 4][: max(calls)],
        "late": None,
    }
    ranks = {r: {"epoch-repeats": {"samplers": [record]}} for r in (0, 1)}
    findings = readout.read(observed(tmp_path, ranks)).findings
    if measured:
        assert findings == []
        return
    (f,) = findings
    assert "set_epoch(3) was called once, before the passes, and not again for each epoch" in f.observed
    assert "for epoch in range(start_epoch, epochs): sampler.set_epoch(epoch)" in f.fix


def test_two_samplers_built_together_on_one_line_are_two_not_one_rebuilt(tmp_path):
    """`sa, sb = DistributedSampler(a), DistributedSampler(b)`: one line, two samplers built before either's first
    pass. set_epoch() called on sa only: sb repeats its order, and the cause names sa, not a sampler rebuilt."""

    def made(seq: int, orders: list[int], set_epoch: list[int], n: int) -> dict:
        passes = [
            {"seq": seq + 2 + 2 * i, "epoch": e, "n": n, "order": o, "step": 8 * i, "calls": len(set_epoch) and i + 1}
            for i, (o, e) in enumerate(zip(orders, set_epoch or [0] * len(orders)))
        ]
        return {
            "where": f"{SCRIPT}:23",
            "seq": seq,
            "shuffle": True,
            "seed": 0,
            "passes": passes,
            "calls": len(set_epoch),
            "set_epoch": set_epoch,
            "late": None,
        }

    samplers = [made(1, [111, 222], [0, 1], 64), made(2, [333, 333], [], 32)]
    f = only(
        readout.read(observed(tmp_path, {r: {"epoch-repeats": {"samplers": samplers}} for r in (0, 1)})),
        "epoch-repeats",
    )
    assert "(32 indices, on ranks 0 and 1)" in f.observed and "built there for each epoch" not in f.observed
    assert f"set_epoch() was never called on it, but was on the DistributedSampler built at {SCRIPT}:23" in f.observed


def test_a_subclass_set_epoch_that_never_passes_the_value_on_is_named(tmp_path):
    data = sampler([111, 111], [0, 0])
    data["samplers"][0].update(
        {"set_epoch": [], "asked": [0, 1], "override": {"name": "LoggingSampler.set_epoch", "where": f"{SCRIPT}:12"}}
    )
    f = only(readout.read(observed(tmp_path, {r: {"epoch-repeats": data} for r in (0, 1)})), "epoch-repeats")
    assert (
        f"set_epoch() was called with 0, 1, but the sampler's epoch stayed 0: LoggingSampler.set_epoch (at "
        f"{SCRIPT}:12) replaces DistributedSampler.set_epoch and never passes the value on" in f.observed
    )
    assert "super().set_epoch(epoch) in LoggingSampler.set_epoch" in f.fix


# ------------------------------------------------------------------------------------------------ params-diverge
def check(
    step: int,
    crcs: list[int],
    in_ddp: bool = True,
    ddps: int = 1,
    ddp_forwards: int = 1,
    direct: int = 0,
    no_sync: bool = False,
) -> dict:
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    return {
        "step": step,
        "where": f"{SCRIPT}:61",
        "ddps": ddps,
        "ddp_forwards": ddp_forwards,
        "direct_forwards": direct,
        "direct_where": f"{SCRIPT}:58" if direct else None,
        "no_sync": no_sync,
        "params": [[n, 16, crc, float(crc) / 10, in_ddp] for n, crc in zip(names, crcs)],
    }


def params(*checks: dict, sharded: str | None = None) -> dict:
    return {"params-diverge": {"checks": list(checks), "sharded": sharded}}


def test_parameters_that_differ_after_step_1_name_the_first_one_and_the_bypassed_wrapper(tmp_path):
    ranks = {
        0: params(check(1, [1, 2, 3, 4], ddp_forwards=0, direct=1)),
        1: params(check(1, [1, 9, 3, 8], ddp_forwards=0, direct=1)),
    }
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert f.observed.startswith(
        "after optimizer step 1, ranks 0 and 1 hold different parameters: 2 of 4 differ "
        "(first `0.bias`, 16 values: sum 0.2 on rank 0, 0.9 on rank 1)"
    )
    assert "without the DDP wrapper (none through it), e.g. ddp_model.module(x) at" in f.observed
    assert f.where == f"{SCRIPT}:58" and "call ddp_model(x)" in f.fix
    assert f.evidence["differing"] == ["0.bias", "2.bias"] and f.evidence["step"] == 1


@pytest.mark.parametrize(
    "kind,words,fix",
    [
        ("no ddp", "no DistributedDataParallel holds the parameters", "wrap the model"),
        (
            "no_sync",
            "require_backward_grad_sync set False (on ranks 0 and 1)",
            "no_sync() only around the accumulation",
        ),
        ("outside", "`0.weight` is stepped by the optimizer but is not inside the DDP-wrapped module", "every trained"),
        ("unexplained", "DDP ran every forward, yet the parameters differ", "the same on every rank (one seed"),
        # clip_grad_norm_ under `if rank == 0:`: the gradients the step applied differ though DDP averaged them
        ("grads differ", "the ones the step applied differ between the ranks (first `0.weight`)", "clip_grad_norm_"),
        # weights changed after DDP() on each rank its own way: the same gradients, the same settings, other weights
        ("grads same", "differed before the step", "before wrapping the model in DDP"),
        ("lr by rank", "the optimizers differ: `lr` of param group 0 is 0.1 on rank 0, 0.2 on rank 1", "never by"),
        ("optimizer class", "the optimizer is SGD on rank 0, Adam on rank 1", "the same way on every rank"),
    ],
)
def test_parameters_that_differ_are_explained_by_what_the_ranks_saw(tmp_path, kind, words, fix):
    extra = {
        "no ddp": {"ddps": 0, "in_ddp": False, "ddp_forwards": 0},
        "no_sync": {"no_sync": True},
        "outside": {},
        "unexplained": {},
        "grads differ": {},
        "grads same": {},
        "lr by rank": {},
        "optimizer class": {},
    }[kind]
    ranks = {0: params(check(2, [1, 2, 3, 4], **extra)), 1: params(check(2, [5, 2, 3, 4], **extra))}
    for rank, data in ranks.items():  # each optimizer's settings as the rank saw them
        settings = {"class": "SGD", "groups": [{"lr": 0.1, "momentum": 0.9, "nesterov": False}]}
        if kind == "lr by rank":
            settings["groups"][0]["lr"] = 0.1 * (rank + 1)
        if kind == "optimizer class":
            settings["class"] = ["SGD", "Adam"][rank]
        data["params-diverge"]["checks"][0]["optimizer"] = settings
        if kind.startswith("grads"):  # the bit sums of the gradients the step applied, per parameter
            data["params-diverge"]["checks"][0]["grads"] = [7 + (rank if kind == "grads differ" else 0), 8, 9, 10]
    if kind == "outside":  # the first parameter is not inside the DDP wrapper (an extra head stepped by the optimizer)
        for r in ranks.values():
            r["params-diverge"]["checks"][0]["params"][0][4] = False
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert words in f.observed and fix in f.fix


def test_parameter_sums_that_differ_in_the_seventh_digit_are_shown_apart(tmp_path):
    """A deep copy stepped without DDP after one small step: the sums differ by a few units of the 7th digit, which
    6 digits showed as one number on both ranks ("sum -2.32155 on rank 0, -2.32155 on rank 1")."""
    ranks = {r: params(check(1, [1, 2, 3, 4], ddp_forwards=0, direct=1)) for r in (0, 1)}
    for r, value in ((0, -2.3215512), (1, -2.3215547)):
        entry = ranks[r]["params-diverge"]["checks"][0]["params"][0]
        entry[2], entry[3] = entry[2] + r, value
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert "sum -2.3215512 on rank 0, -2.3215547 on rank 1" in f.observed


def test_parameters_compared_at_the_first_step_where_they_differ(tmp_path):
    ranks = {
        0: params(check(1, [1, 2, 3, 4]), check(2, [5, 6, 7, 8]), check(50, [9, 9, 9, 9])),
        1: params(check(1, [1, 2, 3, 4]), check(2, [5, 6, 7, 0]), check(50, [0, 0, 0, 0])),
    }
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert f.evidence["step"] == 2 and f.evidence["differing"] == ["2.bias"]


def test_optimizers_stepping_other_parameters_of_one_wrapped_model_are_named(tmp_path):
    """add_param_group under `if rank == 0:`: rank 0 steps the 4 parameters of the DDP-wrapped model, rank 1 the first
    3 (rank 1 never updates `2.bias`); before, the other number of parameters read as a pipeline's stages: silent."""
    ranks = {0: params(check(1, [1, 2, 3, 4])), 1: params(check(1, [1, 2, 3, 4]))}
    del ranks[1]["params-diverge"]["checks"][0]["params"][3]
    for rank, data in ranks.items():
        data["params-diverge"]["checks"][0]["optimizer"] = {"class": "Adam", "groups": [{"lr": 0.1}] * (2 - rank)}
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert "the optimizers step different parameters of the same DDP-wrapped model: 4 on rank 0, 3 on rank 1" in (
        f.observed
    )
    assert "in 2 param groups on rank 0, 1 on rank 1" in f.observed and "(first `2.bias`, 16 values)" in f.observed
    assert "add_param_group on every rank" in f.fix and f.evidence["only_on"] == {"rank": 0, "names": ["2.bias"]}
    # neither rank's parameters held by DDP, or neither a part of the other's: the stages of a pipeline, silent
    for in_ddp, other in ((False, None), (True, ["3.weight", 32, 5, 0.5, True])):
        ranks = {0: params(check(1, [1, 2, 3, 4], in_ddp=in_ddp)), 1: params(check(1, [1, 2, 3, 4], in_ddp=in_ddp))}
        if other:
            ranks[1]["params-diverge"]["checks"][0]["params"][3] = other
        else:
            del ranks[1]["params-diverge"]["checks"][0]["params"][3]
        assert readout.read(observed(tmp_path / f"{in_ddp}", ranks)).findings == []


def test_an_optimizer_setting_that_changed_on_some_ranks_during_the_run_names_the_scheduler(tmp_path):
    """StepLR stepped under `if rank == 0:`: the rates agree after step 2, differ after step 8; the finding says the
    setting changed during the run (a scheduler), not that the optimizer was built another way."""
    ranks = {r: params(check(2, [1, 2, 3, 4]), check(8, [5, 6, 7, 8 + r])) for r in (0, 1)}
    for r, data in ranks.items():
        first, later = data["params-diverge"]["checks"]
        first["optimizer"] = {"class": "SGD", "groups": [{"lr": 0.1}]}
        later["optimizer"] = {"class": "SGD", "groups": [{"lr": [0.05, 0.1][r]}]}
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert "`lr` of param group 0 is 0.05 on rank 0, 0.1 on rank 1" in f.observed
    assert "they agreed after step 2: the setting changed on some ranks only during the run" in f.observed
    assert "step the LR scheduler" in f.fix


def test_weights_not_broadcast_by_a_script_that_averages_the_gradients_itself_say_so(tmp_path):
    """No DDP: the script all_reduces every gradient itself (the gradients the step applied agree) but broadcast only
    part of a model each rank initialized its own way: the weights differed before the step, not 'nothing averaged
    the gradients'."""
    ranks = {0: params(check(1, [1, 2, 3, 4], in_ddp=False, ddps=0)), 1: params(check(1, [1, 2, 7, 8], False, 0))}
    for data in ranks.values():
        data["params-diverge"]["checks"][0]["grads"] = [11, 12, 13, 14]
        data["params-diverge"]["checks"][0]["optimizer"] = {"class": "SGD", "groups": [{"lr": 0.1}]}
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert "the gradients the step applied were the same on every rank" in f.observed
    assert "(`2.weight` was not broadcast)" in f.observed and "dist.broadcast(p, src=0)" in f.fix
    ranks[1]["params-diverge"]["checks"][0]["grads"] = [91, 92, 99, 94]  # none averaged: nothing was
    f = only(readout.read(observed(tmp_path / "b", ranks)), "params-diverge")
    assert "no DistributedDataParallel holds the parameters the optimizer steps: nothing averaged" in f.observed
    # the gradients of the parameters that stayed equal agree, those of the differing ones do not: the script's own
    # all_reduce covers one part of the model (its encoder) and skips the rest
    ranks[1]["params-diverge"]["checks"][0]["grads"] = [11, 12, 99, 94]
    f = only(readout.read(observed(tmp_path / "c", ranks)), "params-diverge")
    assert (
        "the script averages gradients itself (the gradients of `0.weight` and 1 other were the same on every "
        "rank), but not those of `2.weight` and the other differing ones: its own all_reduce skips them"
    ) in f.observed
    assert "optimizer.param_groups" in f.fix


def test_ranks_that_digested_different_optimizers_are_not_compared(tmp_path):
    """Rank 0's window ended on a model it trained alone before DDP() (no wrapper held its parameters), rank 1's
    digests are the DDP model's: the numbers are of two different optimizers, and say nothing about divergence."""
    ranks = {
        0: params(check(1, [1, 2, 3, 4], in_ddp=False, ddps=0)),
        1: params(check(1, [5, 6, 7, 8], in_ddp=True, ddps=1)),
    }
    assert readout.read(observed(tmp_path, ranks)).findings == []


def test_a_step_skipped_on_some_ranks_is_told_by_their_forwards_before_it(tmp_path):
    """`if loss.item() > limit: continue` before optimizer.step(): the rank that skipped ran two forwards (and
    backwards) through DDP before its step, the other one; the gradients applied differ."""
    ranks = {r: params(check(1, [1, 2, 3 + r, 4], ddp_forwards=1 + r)) for r in (0, 1)}
    for r, data in ranks.items():
        data["params-diverge"]["checks"][0]["grads"] = [7, 8, 9 + r, 10]
        data["params-diverge"]["checks"][0]["optimizer"] = {"class": "SGD", "groups": [{"lr": 0.1}]}
    f = only(readout.read(observed(tmp_path, ranks)), "params-diverge")
    assert "different numbers of forwards through the wrapper before this step (1 on rank 0, 2 on rank 1)" in (
        f.observed
    )
    assert "skipped optimizer.step()" in f.observed and "on every rank" in f.fix


@pytest.mark.parametrize("case", ["equal", "sharded", "one rank", "other models"])
def test_parameters_silent_when_equal_sharded_seen_on_one_rank_or_of_other_models(tmp_path, case):
    ranks = {0: params(check(1, [1, 2, 3, 4])), 1: params(check(1, [1, 2, 3, 4]))}
    if case == "sharded":  # FSDP: each rank holds its own shard, different by design
        ranks = {0: params(check(1, [1, 2, 3, 4]), sharded="FSDP"), 1: params(check(1, [5, 6, 7, 8]), sharded="FSDP")}
    elif case == "other models":  # a pipeline's stages: as many parameters, of other sizes (no DDP, by design)
        ranks = {0: params(check(1, [1, 2, 3, 4], ddps=0)), 1: params(check(1, [5, 6, 7, 8], ddps=0))}
        for p, size in zip(ranks[1]["params-diverge"]["checks"][0]["params"], (32, 2, 8, 1)):
            p[1] = size
    elif case == "one rank":
        ranks = {0: ranks[0]}
    assert readout.read(observed(tmp_path, ranks, world=2)).findings == []


# ------------------------------------------------------------------------------------------------ every-rank-print
def prints(*sites: tuple[int, int, list[int], str | None]) -> dict:
    """Lines of code that printed: (line, how often, crc32s of the texts, an example)."""
    return {
        "every-rank-print": {
            "sites": [{"where": f"{SCRIPT}:{n}", "count": c, "texts": t, "example": e} for n, c, t, e in sites]
        }
    }


def test_the_same_text_printed_by_every_rank_is_noise_named_with_its_lines(tmp_path):
    ranks = {
        r: prints((12, 1, [7], "Starting training"), (30, 50, [8, 9], "epoch 0"), (31, 2, [20 + r], "r"))
        for r in range(3)
    }
    f = only(readout.read(observed(tmp_path, ranks)), "every-rank-print")
    assert f.minor and f.where == f"{SCRIPT}:12" and "if dist.get_rank() == 0:" in f.fix
    assert f.observed == (
        "each of the 3 ranks printed the same text at 2 lines of code (/home/me/proj/train.py:12, "
        "/home/me/proj/train.py:30), e.g. 'Starting training': 3 copies of each on the console (noise, minor)"
    )
    assert [line["count"] for line in f.evidence["lines"]] == [{0: 1, 1: 1, 2: 1}, {0: 50, 1: 50, 2: 50}]


@pytest.mark.parametrize(
    "case", ["texts of their own", "own values that coincide", "a rank printed nothing there", "a rank wrote nothing"]
)
def test_prints_are_silent_unless_every_rank_printed_the_same_text(tmp_path, case):
    ranks = {0: prints((12, 1, [7], "x")), 1: prints((12, 1, [7], "x"))}
    if case == "texts of their own":  # print(f"rank {rank}: loss {loss}"), or a tensor's print (no text kept)
        ranks = {
            0: prints((12, 5, [1, 2], "rank 0"), (13, 1, [], None)),
            1: prints((12, 5, [3, 4], "rank 1"), (13, 1, [], None)),
        }
    elif case == "own values that coincide":  # each rank's own loss, 'loss 0.0000' on both once it saturates
        ranks = {0: prints((12, 4, [1, 0], "loss 1.0000")), 1: prints((12, 4, [2, 0], "loss 2.0000"))}
    elif case == "a rank printed nothing there":  # `if rank == 0:` around it, or rank 1 printed elsewhere
        ranks[1] = prints((14, 1, [7], "x"))
    assert readout.read(observed(tmp_path, ranks, world=3 if case == "a rank wrote nothing" else 2)).findings == []


# ------------------------------------------------------------------------------------------------ shared-write
def writes(*entries: tuple[str, str, str, int]) -> dict:
    return {
        "shared-write": {
            "writes": [{"path": p, "mode": m, "where": w, "step": s, "count": 1} for p, m, w, s in entries]
        }
    }


def test_a_file_written_by_both_ranks_is_named_with_the_lines_and_the_step(tmp_path):
    model = str(tmp_path / "model.pt")
    ranks = {
        r: writes((model, "w", f"{SCRIPT}:88", 32), (str(tmp_path / f"log.rank{r}.txt"), "a", f"{SCRIPT}:20", 0))
        for r in (0, 1)
    }
    f = only(readout.read(observed(tmp_path / "sanitize", ranks)), "shared-write")
    assert f"ranks 0 and 1 both wrote {model} (at {SCRIPT}:88, from step 32)" in f.observed
    assert f.evidence["path"] == model and f.evidence["ranks"] == [0, 1]
    assert "dist.get_rank() == 0" in f.fix


def test_one_line_writing_a_file_per_epoch_on_every_rank_is_one_finding(tmp_path):
    """`torch.save(state, f"ckpt_{epoch}.pt")` on every rank: one mistake, said once with the files it wrote; the
    run that failed on the last of them still puts it first."""
    paths = [str(tmp_path / f"ckpt_{e}.pt") for e in range(4)]
    ranks = {r: writes(*[(p, "w", f"{SCRIPT}:43", 16 * (e + 1)) for e, p in enumerate(paths)]) for r in (0, 1)}
    report = readout.read(observed(tmp_path / "sanitize", ranks))
    f = only(report, "shared-write")
    assert f"both wrote {paths[0]}, {paths[1]}, {paths[2]} and 1 more (at {SCRIPT}:43, from step 16)" in f.observed
    assert f.evidence["paths"] == paths and f.evidence["path"] == paths[0]
    readout.lead(report, "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt_3.pt.tmp'")
    assert report.leading


def _save_atomically(folder: str, work: str, rank: int) -> None:
    """A rank forked off this test (the write audit hook is the child's: Python cannot remove one) that saves the
    way an atomic save does - a temporary file of its own, then os.replace onto the checkpoint's path - once from
    its own temporary file, once from one every rank shares; then writes its record as a rank does."""
    from ddplab.sanitize import rankside

    w = rankside.Window(folder, 3, checks=("sharedwrite",))
    w.rank = rank
    mine = os.path.join(work, f"ckpt.{rank}.tmp")
    with open(mine, "wb") as f:
        f.write(b"weights")
    os.replace(mine, os.path.join(work, "checkpoint.pt"))
    with open(os.path.join(work, "shared.tmp"), "wb") as f:
        f.write(b"weights")
    os.replace(os.path.join(work, "shared.tmp"), os.path.join(work, "model.pt"))  # the second rank's would fail
    w.write(wait=True)


def test_a_file_every_rank_renames_its_own_file_onto_is_a_shared_write(tmp_path):
    """os.rename's audit event (os.replace, Path.replace, shutil.move): every rank's temporary file is its own, the
    path they all replace is one. A rename from a temporary file the ranks share is that file's finding alone."""
    import multiprocessing

    folder, work = tmp_path / "run" / "sanitize", tmp_path / "work"
    work.mkdir()
    readout.request(folder, 3)
    for rank in (0, 1):
        child = multiprocessing.get_context("fork").Process(
            target=_save_atomically, args=(str(folder), str(work), rank)
        )
        child.start()
        child.join(60)
        if child.is_alive():  # a hard deadline, and nothing left behind
            child.kill()
            child.join()
        assert child.exitcode == 0
    found = {Path(f.evidence["path"]).name: f for f in readout.read(folder).findings}
    assert sorted(found) == ["checkpoint.pt", "shared.tmp"], found
    f = found["checkpoint.pt"]
    assert "ranks 0 and 1 both renamed a file of their own onto" in f.observed and "last rename wins" in f.observed
    assert f.evidence["mode"] == "renamed onto" and f.where.startswith(f"{__file__}:")
    assert f.code == 'os.replace(mine, os.path.join(work, "checkpoint.pt"))'


def test_a_log_appended_to_by_every_rank_interleaves(tmp_path):
    log = str(tmp_path / "train.log")
    ranks = {r: writes((log, "a", f"{SCRIPT}:20", 0)) for r in (0, 1, 2)}
    f = only(readout.read(observed(tmp_path / "sanitize", ranks)), "shared-write")
    assert "ranks 0, 1 and 2 all appended to" in f.observed and "before the first optimizer step" in f.observed
    assert "their lines interleave" in f.observed


def test_a_folder_two_ranks_made_is_said_only_when_the_run_failed_on_it(tmp_path):
    folder = str(tmp_path / "checkpoints")
    ranks = {
        r: {"shared-write": {"writes": [], "dirs": [{"path": folder, "where": f"{SCRIPT}:9", "step": 8}]}}
        for r in (0, 1)
    }
    report = readout.read(observed(tmp_path / "sanitize", ranks))
    assert report.findings == [] and len(report.held) == 1  # a passed run: the script caught FileExistsError
    readout.lead(report, f"FileNotFoundError: [Errno 2] No such file or directory: '{tmp_path}/other'")
    assert report.findings == [] and not report.leading  # failed on something else
    readout.lead(report, "FileExistsError: [Errno 17] File exists: 'checkpoints'")
    (f,) = report.findings
    assert report.leading and f.check == "shared-write" and f.where == f"{SCRIPT}:9"
    assert "both made the folder" in f.observed and "without exist_ok" in f.observed and "exist_ok=True" in f.fix


def test_rank_0_alone_writing_is_silent(tmp_path):
    ranks = {0: writes((str(tmp_path / "model.pt"), "w", f"{SCRIPT}:88", 32)), 1: writes()}
    assert readout.read(observed(tmp_path / "sanitize", ranks)).findings == []


# ------------------------------------------------------------------------------------------------ the report
def test_no_config_means_the_sanitizer_was_off(tmp_path):
    assert readout.read(tmp_path) is None
    readout.request(tmp_path, 0)
    assert readout.read(tmp_path) is None and not (tmp_path / "config.json").exists()


def test_a_torn_or_foreign_file_is_skipped_and_a_check_a_rank_turned_off_is_kept(tmp_path):
    observed(tmp_path, {0: {}, 1: {}}, off={"same-samples": "RuntimeError: boom"}, seen=3)
    (tmp_path / "rank2.json").write_text('{"rank": 2, "checks": {')
    report = readout.read(tmp_path)
    assert report.ranks == [0, 1] and report.steps_seen == 3 and report.findings == []
    assert report.off == {"rank 0: same-samples": "RuntimeError: boom", "rank 1: same-samples": "RuntimeError: boom"}


def test_a_finding_whose_file_the_failure_names_leads_the_report(tmp_path):
    tmp = str(tmp_path / "model.pt.tmp")
    ranks = {
        r: {**writes((tmp, "w", f"{SCRIPT}:70", 24)), **{"epoch-repeats": sampler([111, 111], [0, 0])}} for r in (0, 1)
    }
    report = readout.read(observed(tmp_path / "sanitize", ranks))
    assert [f.check for f in report.findings] == ["epoch-repeats", "shared-write"] and not report.leading
    readout.lead(report, f"FileNotFoundError: [Errno 2] No such file or directory: '{tmp}' -> '{tmp[:-4]}'")
    assert report.leading and [f.check for f in report.findings] == ["shared-write", "epoch-repeats"]
    text = readout.render(report)
    assert text.splitlines()[0] == (
        "  sanitizer (ranks 0 and 1, optimizer steps 1-50 watched): the run failed on what the sanitizer saw"
    )
    assert text.splitlines()[1].startswith("  1. [shared-write] ranks 0 and 1 both wrote ")


def test_render_is_empty_when_nothing_was_found_and_quotes_the_line_when_there_is_one(tmp_path):
    assert readout.render(None) == "" and readout.render(readout.SanitizeReport(50, [0, 1], 50)) == ""
    script = tmp_path / "train.py"
    script.write_text("import torch\nloader = DataLoader(data, shuffle=True)\n")
    same = list(range(64))
    ranks = {r: {"same-samples": loader([same], where=f"{script}:2")} for r in (0, 1)}
    text = readout.render(readout.read(observed(tmp_path / "sanitize", ranks, seen=12)))
    assert "(ranks 0 and 1, optimizer steps 1-12 watched): 1 DDP mistake seen" in text
    assert ":2: loader = DataLoader(data, shuffle=True)" in text and "       fix: give the DataLoader" in text
