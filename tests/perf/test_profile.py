"""`ddplab launch --profile`: planted slowdowns in plain scripts (tests/scripts/profile_plant.py), run for real at 2
CPU ranks; the top cause named must be the planted one, with its fix. Parts of a step must sum to the step."""

import json
from pathlib import Path

import pytest

from tests.conftest import cli

PLANT = str(Path(__file__).parent.parent / "scripts" / "profile_plant.py")
TOP = {
    "loader": "data",
    "rank": "straggler",
    "item": "host_sync",
    "buckets": "buckets",
    "unused": "unused",
    "nosync": "no_sync",
    "threads": "threads",
    "stats": "own_collectives",
}


def profiled(tmp_path, plant: str, *extra: str, steps: int = 5) -> dict:
    ran = cli(
        "launch",
        "--profile",
        str(steps),
        "--no-lint",
        "--json",
        "--log-dir",
        str(tmp_path),
        PLANT,
        plant,
        "--steps",
        str(steps + 6),
        *extra,
        timeout=300,
    )
    assert ran.code == 0, ran.err[-3000:]
    return ran.json()


def top_code_cause(p: dict) -> dict:
    """The first cause that is not a straggler: on a loaded machine a rank can lag for real (another process on its
    core), ahead of the planted cause; that lag is the machine's, the planted cause is the code's."""
    return next((c for c in p["causes"] if c["key"] != "straggler"), {"key": None})


def check_whole(result: dict, tmp_path: Path) -> dict:
    """Every rank's parts sum to its step; the traces are Chrome traces; the picture is a PNG."""
    assert result["log_dir"] == str(tmp_path)
    return check_profile(result["profile"])


def check_profile(p: dict) -> dict:
    assert p["problem"] is None
    assert [r["rank"] for r in p["ranks"]] == [0, 1]
    for r in p["ranks"]:
        assert all(v >= 0 for v in r["parts"].values())
        assert sum(r["parts"].values()) == pytest.approx(r["step_ms"], rel=1e-6)
        assert r["steps"] == 5
        check_chrome_trace(Path(r["trace"]))
    assert Path(p["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return p


def check_chrome_trace(path: Path, steps: int = 5) -> None:
    """The Trace Event Format (the JSON form chrome://tracing, Perfetto and TensorBoard's profiler read): an object
    with traceEvents; complete events carry name, ph, ts, dur, pid, tid; steps are marked."""
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    complete = [e for e in events if e.get("ph") == "X"]
    for e in complete:
        assert isinstance(e["name"], str) and isinstance(e["ts"], (int, float)) and e["dur"] >= 0
        assert "pid" in e and "tid" in e
    assert sum(e["name"].startswith("ProfilerStep#") for e in complete) == steps
    assert {e["ph"] for e in events} <= set("BEXiIPCMbnesftsO")  # the phases the format defines


def check_top_cause(p: dict, plant: str) -> None:
    top = top_code_cause(p)
    assert top["key"] == TOP[plant], p["causes"]
    assert top["fix"] and 0 < top["gain_ms"] and 0 < top["gain_share"] < 1
    fix_words = {"loader": "num_workers", "buckets": "bucket_cap_mb", "stats": "batch them into one tensor"}[plant]
    assert fix_words in top["fix"]
    assert p["parts_named"], p
    return top


@pytest.mark.parametrize("plant", ["buckets", "stats"])  # loader: in test_text_output_names_cause_fix_and_kept_folder
def test_planted_slowdown_is_the_top_cause(tmp_path, plant, no_leftover_workers):
    p = check_whole(profiled(tmp_path, plant), tmp_path)
    top = check_top_cause(p, plant)
    if plant == "stats":  # all-reduces each parameter tensor's norm after each step: 12 tensors, 12 scalars
        assert top["title"] == "the script's own collectives: 12 per step", top
        assert "allreduce x12 per step" in top["evidence"] and "1 element(s) each" in top["evidence"], top


@pytest.mark.slow
@pytest.mark.parametrize("plant", ["rank", "item", "unused", "nosync", "threads"])
def test_planted_slowdown_is_the_top_cause_slow(tmp_path, plant, no_leftover_workers):
    p = check_whole(profiled(tmp_path, plant), tmp_path)
    if plant == "rank":
        assert p["causes"][0]["key"] == "straggler" and p["straggler"] == 1, p["causes"]
    else:
        assert top_code_cause(p)["key"] == TOP[plant], p["causes"]


def test_text_output_names_cause_fix_and_kept_folder(no_leftover_workers):
    """One run of the loader planting, three readings: its text output; its kept folder's profile (the analysis the
    text and --json render, read again here: the top cause and its fix, parts that sum to the step, Chrome traces, the
    picture); then that folder given again as --log-dir to a script with too few steps, which must say so (it would
    not if the first run's traces were analysed again; they were once nested under profile/profile instead)."""
    import shutil

    from ddplab.perf.profile import analyse
    from ddplab.report import to_jsonable

    ran = cli("launch", "--profile", "--no-lint", PLANT, "loader", "--steps", "10", timeout=300)
    assert ran.code == 0, ran.err[-3000:]
    kept = Path(ran.out.strip().splitlines()[-1].removeprefix("  logs: "))
    try:
        assert "1. slow data loading" in ran.out and "fix: DataLoader(" in ran.out
        assert "USDT:" not in ran.out + ran.err and "profiler_start" not in ran.out + ran.err  # kineto's own lines
        assert (kept / "profile" / "rank0.trace.json").exists()  # a profiled run keeps its folder
        p = to_jsonable(analyse(kept / "profile", plot=False))
        p["plot"] = str(kept / "profile" / "breakdown.png")  # the run's own picture
        check_top_cause(check_profile(p), "loader")

        again = cli(
            "launch",
            "--nproc",
            "1",  # one rank: what is read again, and where the new traces go, is the same for any number
            "--profile",
            "50",
            "--no-lint",
            "--json",
            "--log-dir",
            str(kept),
            PLANT,
            "none",
            "--steps",
            "4",
            timeout=300,
        )
        assert again.code == 0, again.err[-3000:]
        assert "fewer than 53 optimizer steps" in again.json()["profile"]["problem"]
        assert not (kept / "profile" / "profile").exists() and not (kept / "flight" / "flight").exists()
    finally:
        shutil.rmtree(kept, ignore_errors=True)


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_bad_profile_steps_is_one_line_exit_2(value):
    ran = cli("launch", f"--profile={value}", PLANT, "none", timeout=120)
    assert ran.code == 2 and "Traceback" not in ran.err
    assert "--profile" in ran.err


def test_script_arguments_named_profile_stay_the_scripts(tmp_path, no_leftover_workers):
    """`--profile` after the script is the script's own argument: no profile is taken, the script gets it (one rank
    is enough to see it)."""
    ran = cli(
        "launch", "--nproc", "1", "--no-lint", "--json", "--log-dir", str(tmp_path), PLANT, "--profile", timeout=300
    )
    assert ran.code == 1  # the plant script has no --profile option: argparse in the rank says so
    assert ran.json()["profile"] is None


def _rank(rank, busy, wait=1.0):
    from ddplab.perf.profile import PARTS, RankBreakdown

    parts = dict.fromkeys(PARTS, 0.0)
    parts["backward"], parts["comm_exposed"] = sum(busy) / len(busy), wait
    return RankBreakdown(
        rank=rank,
        steps=len(busy),
        step_ms=sum(parts.values()),
        parts=parts,
        allreduces_per_step=1,
        forwards_per_step=1,
        trace="",
        busy_ms=busy,
    )


def test_a_straggler_is_busiest_in_most_steps_not_in_one():
    from ddplab.perf.profile import causes, straggler

    # Rank 1's mean is higher only because the OS took one step from it: no straggler.
    assert straggler([_rank(0, [5, 4, 6, 4, 5]), _rank(1, [4, 5, 40, 5, 4])]) is None
    ranks = [_rank(0, [5, 6, 5, 6, 5], wait=20), _rank(1, [25, 26, 60, 25, 24])]
    assert straggler(ranks) == 1
    found = causes(ranks, {0: {}, 1: {}}, 1)
    assert found[0].key == "straggler" and found[0].gain_ms == pytest.approx(20)  # the median excess, not the mean


def test_a_straggler_lagging_in_the_host_syncs_every_rank_makes_is_that_cause():
    from ddplab.perf.profile import causes

    ranks = [_rank(0, [5, 6, 5, 6, 5], wait=20), _rank(1, [25, 26, 60, 25, 24])]
    for r, sync in zip(ranks, (4.0, 24.0)):  # both ranks print; rank 1's printing waits longer
        r.parts["host_sync"], r.parts["backward"] = sync, r.parts["backward"] - sync
    found = causes(ranks, {0: {}, 1: {}}, 1)
    assert [c.key for c in found] == ["host_sync"] and "rank 1 is slower" in found[0].evidence
    assert found[0].gain_ms == pytest.approx(20)


def test_oversubscribed_cpu_ranks_waiting_at_ddps_all_reduce_is_one_cause():
    """On CPU ranks with more threads than cores, the ranks' wait at DDP's all-reduce is the oversubscription's effect
    (gloo's threads queue for the same cores; CI once ranked the wait above its cause): one cause, with both waits."""
    from ddplab.perf.profile import causes

    ranks = [_rank(0, [5, 6, 5, 6, 5], wait=20), _rank(1, [6, 5, 6, 5, 6], wait=20)]
    for r in ranks:
        r.collectives.calls["ddp"], r.collectives.exposed_ms["ddp"] = 1.0, 20.0
    cpu = {"threads": 8, "cores": 2, "local_world_size": 2, "cuda": False}
    found = causes(ranks, {0: cpu, 1: cpu}, None)
    assert [c.key for c in found] == ["threads"], found
    assert "wait 20.00 ms per step for DDP's all-reduce" in found[0].evidence
    assert found[0].gain_ms == pytest.approx(10)  # the all-reduce's (half its wait) exceeds the compute's share
    gpu = {**cpu, "cuda": True}  # NCCL's all-reduce does not queue for the CPU's cores: two causes
    assert {c.key for c in causes(ranks, {0: gpu, 1: gpu}, None)} == {"threads", "ddp_comm"}


def _x(name, ts, dur, tid=1):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_ddps_own_reads_at_the_end_of_backward_are_not_host_syncs():
    """find_unused_parameters: Reducer::finalize_backward reads the used-parameter map with .item() before copying
    each bucket into .grad (seen in real traces: select, item, reducer::copy_bucket_to_grad, ...), after waiting for
    the all-reduce. That is DDP's backward; a .item() of the loop's own is a host sync."""
    from ddplab.perf.profile import breakdown

    events = [
        _x("ProfilerStep#1", 0, 1000),
        _x("DistributedDataParallel.forward", 10, 100),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 120, 100),
        _x("gloo:all_reduce", 200, 300, tid=2),  # the wait: exposed communication
        _x("aten::as_strided", 520, 200),
        _x("aten::item", 730, 5),
        _x("torch.distributed.ddp.reducer::copy_bucket_to_grad", 740, 20),
        _x("aten::item", 765, 5),
        _x("torch.distributed.ddp.reducer::copy_bucket_to_grad", 775, 20),
        _x("aten::item", 850, 5),  # the loop's own, e.g. print(loss.item())
        _x("Optimizer.step#SGD.step", 900, 50),
    ]
    b = breakdown({"traceEvents": events}, 0)
    ms = {k: v * 1000 for k, v in b.parts.items()}  # microseconds here
    assert ms["comm_exposed"] == pytest.approx(280) and ms["backward"] == pytest.approx(100 + 275)
    assert ms["host_sync"] == pytest.approx(900 - 795)  # the gap around the loop's own .item() only
    assert sum(ms.values()) == pytest.approx(1000)


def test_train_profile_breaks_down_the_recipes_steps(no_leftover_workers):
    import shutil

    ran = cli(
        "train",
        "mlp",
        "--nproc",
        "2",
        "--profile",
        "4",
        "--max-steps",
        "12",
        "--samples",
        "4000",
        "--json",
        timeout=300,
    )
    assert ran.code == 0, ran.err[-3000:]
    p = ran.json()["profile"]
    try:
        assert p["problem"] is None and [r["rank"] for r in p["ranks"]] == [0, 1]
        for r in p["ranks"]:
            assert r["steps"] == 4 and sum(r["parts"].values()) == pytest.approx(r["step_ms"], rel=1e-6)
            assert r["parts"]["forward"] > 0 and r["parts"]["backward"] > 0  # DDP's and autograd's own ranges
            check_chrome_trace(Path(r["trace"]), steps=4)
    finally:
        shutil.rmtree(p["folder"], ignore_errors=True)


def _c10d(ts, elements=1):
    return {**_x("c10d::allreduce_", ts, 2), "args": {"Input Dims": [[[elements]], [], [], [], [], []]}}


def test_the_scripts_own_collectives_are_told_from_ddps_counted_sized_and_named():
    """A step as the trace of a script that all-reduces a statistic of each parameter after optimizer.step() shows
    it (seen in real traces: a c10d::allreduce_ on the main thread per call, the gloo work on the backend's thread,
    the rank idle while it waits): DDP's own call inside backward stays DDP's; the three after the step are the
    script's, their waits are theirs; the cause names how many, how large, and the fix."""
    from ddplab.perf.profile import breakdown, causes, name_parts

    events = [
        _x("ProfilerStep#1", 0, 1000),
        _x("DistributedDataParallel.forward", 10, 100),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 120, 100),
        {**_c10d(150, 4096)},  # DDP's bucket, from its autograd hook
        _x("gloo:all_reduce", 150, 150, tid=2),
        _x("Optimizer.step#SGD.step", 300, 50),
        _c10d(400),
        _x("gloo:all_reduce", 402, 150, tid=2),
        _c10d(560),
        _x("gloo:all_reduce", 562, 150, tid=2),
        _c10d(720),
        _x("gloo:all_reduce", 722, 150, tid=2),
    ]
    b = breakdown({"traceEvents": events}, 0)
    c = b.collectives
    assert c.calls == {"ddp": 1, "script": 3} and c.ops == {"allreduce": 3} and c.elements == [1, 1, 1]
    assert c.exposed_ms["script"] * 1000 == pytest.approx(3 * 150) and c.exposed_ms["ddp"] * 1000 == pytest.approx(80)
    found = causes([b], {0: {"ddp": [{"bucket_sizes": [4096]}]}}, None)
    own = next(x for x in found if x.key == "own_collectives")
    assert own.title == "the script's own collectives: 3 per step"
    assert "allreduce x3 per step" in own.evidence and "1 element(s) each" in own.evidence
    assert own.fix.startswith("batch them into one tensor") and "every N steps" in own.fix
    assert own.gain_ms * 1000 == pytest.approx(3 * 150 * 2 / 3)  # batched: one call's wait is left
    named = name_parts([b], found)
    assert any(line.startswith("exposed comm") and "cause" in line for line in named), named
    assert all(float(line.split(" %")[0].split()[-1]) >= 5 for line in named)  # only parts worth 5 % or more


def test_every_part_worth_5_percent_is_named_even_without_a_cause():
    from ddplab.perf.profile import name_parts

    r = _rank(0, [50, 50], wait=0.0)
    r.parts["other"], r.step_ms = 10.0, 60.0  # 17 % of the step in Python between the parts
    assert name_parts([r], []) == [
        "backward 83 %: the model's own compute (gradients: about twice the forward's work)",
        "other 17 %: Python between the parts: the loss, logging, metrics, the loop itself (the traces show which op)",
    ]


def test_ddps_own_exposed_all_reduce_is_named_when_nothing_else_explains_it():
    from ddplab.perf.profile import breakdown, causes

    events = [
        _x("ProfilerStep#1", 0, 1000),
        _x("DistributedDataParallel.forward", 10, 100),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 120, 200),
        _c10d(150, 1 << 20),  # DDP's one bucket, from its hook inside backward
        _x("gloo:all_reduce", 152, 700, tid=2),  # runs far past backward's end: the rank waits 532 µs
        _x("Optimizer.step#SGD.step", 900, 50),
    ]
    b = breakdown({"traceEvents": events}, 0)
    assert b.collectives.calls == {"ddp": 1, "script": 0}
    found = causes([b], {0: {"ddp": [{"bucket_sizes": [1 << 22], "param_bytes": 1 << 22}]}}, None)
    assert [c.key for c in found] == ["ddp_comm"]
    assert "1 all-reduce(s) per step in 1 bucket(s) (4.0 MiB of gradients)" in found[0].evidence
    assert found[0].gain_ms * 1000 == pytest.approx(532 / 2)
