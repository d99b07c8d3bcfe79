"""`ddplab launch`'s sanitizer for real: DDP mistakes planted in a plain script (tests/scripts/sanitize_plant.py), 2
gloo ranks; each check finds its mistake with its evidence and nothing else is found; the same script written right,
and `ddplab new`'s template, are silent. Mistakes of different checks share a run (a run costs about 9 CPU seconds) where one cannot hide another:
the mistakes that make the ranks read the same data (no-sampler, rank0-sampler) leave nothing for params-diverge to
see (the same data, the same gradients, averaged or not). The other causes of params-diverge (no DDP, no_sync) and
rank0-sampler differ from the planted ones only in what the rank side records, tested in this process
(test_rankside.py) and by the reader on files (test_readout.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli

PLANT = Path(__file__).parent.parent / "scripts" / "sanitize_plant.py"


def line_of(text: str, path: Path = PLANT) -> str:
    """'PATH:LINE' of the first line of `path` holding `text`, as a finding names it."""
    lines = path.read_text().splitlines()
    return f"{path}:{next(i for i, line in enumerate(lines, 1) if text in line)}"


def launched(tmp_path: Path, *mistakes: str, flags: tuple[str, ...] = ()) -> dict:
    ran = cli(
        "launch",
        "--no-lint",
        "--json",
        *flags,
        str(PLANT),
        *mistakes,
        "--out",
        str(tmp_path),
        timeout=150,
        cwd=tmp_path,
    )
    # a failed run's report (a hang's: every rank's stack) is on stdout, as JSON: both, so that a failure seen once
    # in CI can be read
    assert ran.code == 0, ran.out[-8000:] + ran.err[-3000:]
    return ran.json()


def findings(result: dict) -> dict[str, dict]:
    found = result["sanitize"]["findings"]
    assert result["sanitize"]["off"] == {}, result["sanitize"]["off"]
    return {f["check"]: f for f in found}


def all_findings(result: dict) -> dict[str, list[dict]]:
    assert result["sanitize"]["off"] == {}, result["sanitize"]["off"]
    by_check: dict[str, list[dict]] = {}
    for f in result["sanitize"]["findings"]:
        by_check.setdefault(f["check"], []).append(f)
    return by_check


def same_samples(f: dict) -> None:
    """no-sampler: both ranks read every batch, in the same order, from the loader built without a sampler."""
    assert f["where"] == line_of("DataLoader(data, batch_size=16, shuffle=True)")
    pair = f["evidence"]["pairs"][0]
    assert f["evidence"]["ranks"] == [0, 1] and pair["share"] == 1.0 and pair["same_order"]
    assert pair["batches"] == 16 and pair["of"] == 256 and f["evidence"]["sampler"] == "RandomSampler"
    assert "read the same 16 batches, sample for sample and in the same order" in f["observed"]


def shared_write(f: dict, tmp_path: Path) -> None:
    """all-save: both ranks torch.save() the model to one path after the last step (3 epochs x 16 batches)."""
    assert f["evidence"]["path"] == str(tmp_path / "model.pt") and f["evidence"]["ranks"] == [0, 1]
    assert f["where"] == line_of("torch.save(model.state_dict(), path)")
    assert f["evidence"]["step"] == {"0": 48, "1": 48}
    assert f["code"] == "torch.save(model.state_dict(), path)"


def epoch_repeats(f: dict) -> None:
    """no-set-epoch: the DistributedSampler's second epoch (at step 8: 128 indices per rank / 16) repeats the first."""
    assert f["where"] == line_of("sampler = DistributedSampler(")
    assert f["evidence"]["ranks"] == [0, 1] and f["evidence"]["epochs"] == [0] and f["evidence"]["indices"] == 128
    assert f["evidence"]["second_epoch_at_step"] == 8
    assert "set_epoch() was never called" in f["observed"]


def params_diverge(f: dict) -> None:
    """module-forward: ddp.module(x) every step, so DDP averages nothing: every parameter differs after step 1."""
    assert f["evidence"]["step"] == 1 and f["evidence"]["ranks"] == [0, 1]
    assert f["evidence"]["differ"] == f["evidence"]["of"] == 4 and f["evidence"]["first"]["name"] == "0.weight"
    assert f["evidence"]["ddp_forwards"] == {"0": 0, "1": 0} and f["evidence"]["direct_forwards"] == {"0": 1, "1": 1}
    assert f["where"] == line_of("out = ddp.module(xb)")
    assert "call ddp_model(x)" in f["fix"]


def shared_log(f: dict, tmp_path: Path) -> None:
    """all-log: both ranks append to one train.log, opened before the first step."""
    assert f["evidence"]["path"] == str(tmp_path / "train.log") and f["evidence"]["mode"] == "appended to"
    assert "both appended to train.log" in f["observed"] and f["evidence"]["step"] == {"0": 0, "1": 0}
    assert f["where"] == line_of('log = open(os.path.join(args.out, "train.log"), "a")')


@pytest.mark.parametrize(
    "mistakes",
    [("no-sampler", "all-save", "all-log"), ("no-set-epoch", "module-forward")],
    ids=["same-samples+shared-write", "epoch-repeats+params-diverge"],
)
def test_planted_mistakes_are_found_with_their_evidence(tmp_path, mistakes, no_leftover_workers):
    result = launched(tmp_path, *mistakes)
    found = all_findings(result)
    assert result["status"] == "ok" and result["sanitize"]["ranks"] == [0, 1]
    if "no-sampler" in mistakes:
        assert sorted(found) == ["same-samples", "shared-write"] and len(found["same-samples"]) == 1, found
        same_samples(found["same-samples"][0])
        writes = {Path(f["evidence"]["path"]).name: f for f in found["shared-write"]}
        assert sorted(writes) == ["model.pt", "train.log"], writes
        shared_write(writes["model.pt"], tmp_path)
        shared_log(writes["train.log"], tmp_path)
    else:
        assert sorted(found) == ["epoch-repeats", "params-diverge"] and all(len(f) == 1 for f in found.values())
        epoch_repeats(found["epoch-repeats"][0])
        params_diverge(found["params-diverge"][0])


def test_the_same_script_written_right_is_silent(tmp_path, no_leftover_workers):
    """DistributedSampler, set_epoch, DDP, rank 0 saving: nothing found (the window is over at step 24, the end)."""
    result = launched(tmp_path, flags=("--sanitize-steps", "20"))
    assert findings(result) == {}
    assert result["sanitize"]["steps"] == 20 and result["sanitize"]["steps_seen"] == 20


def test_a_run_that_fails_on_a_shared_file_leads_with_it(tmp_path, no_leftover_workers):
    """Every rank saves to model.pt.tmp, then renames it: the second rename fails. The text output says what the
    sanitizer saw right after the verdict, before the failing rank's traceback; then lint's warning from the start of
    the run that foretold it (issue 42 point 5: the crash read "[os-error]" while lint had said [unguarded-save])."""
    ran = cli("launch", str(PLANT), "all-save-replace", "--out", str(tmp_path), timeout=150, cwd=tmp_path)
    assert ran.code == 1, ran.err[-3000:]
    lines = ran.out.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("ddplab launch: FAIL"))
    assert "FileNotFoundError" in lines[verdict]
    assert lines[verdict + 1].endswith("watched): the run failed on what the sanitizer saw")
    save = line_of('torch.save(model.state_dict(), path + ".tmp")')
    assert lines[verdict + 2] == (
        f"  1. [shared-write] ranks 0 and 1 both wrote model.pt.tmp (at {save}, from step "
        "24): the last writer wins, a reader can meet a half-written file, and a rename of "
        "the same temporary file fails on all ranks but one"
    )
    assert lines[verdict + 3].endswith(': torch.save(model.state_dict(), path + ".tmp")')
    assert lines[verdict + 4].startswith("       fix: write from one rank only")
    # the nearest of the script's two unguarded saves: the one whose file the failing rename reads
    assert lines[verdict + 5].startswith(f"  lint saw it before the run — sanitize_plant.py:{save.rsplit(':')[1]}: ")
    assert lines[verdict + 5].endswith("[unguarded-save]") and "if dist.get_rank() == 0" in lines[verdict + 6]
    assert "[unguarded-save]" not in "\n".join(lines[verdict + 7 :])  # line 74's save is another mistake


def test_a_folder_every_rank_makes_without_exist_ok_leads_the_failure(tmp_path, no_leftover_workers):
    """os.makedirs(folder) on every rank: all but the first raise FileExistsError. Said when the run fails on it (a
    script catching the error would pass, and hear nothing); os.makedirs(folder, exist_ok=True) on every rank is
    the silent run of test_the_same_script_written_right_is_silent."""
    ran = cli("launch", "--no-lint", str(PLANT), "all-mkdir", "--out", str(tmp_path), timeout=150, cwd=tmp_path)
    assert ran.code == 1, ran.err[-3000:]
    lines = ran.out.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("ddplab launch: FAIL"))
    assert "FileExistsError" in lines[verdict]
    assert lines[verdict + 1].endswith("watched): the run failed on what the sanitizer saw")
    assert lines[verdict + 2].startswith(
        f"  1. [shared-write] ranks 0 and 1 both made the folder ckpt (at {line_of('os.makedirs(folder)')}) without "
        "exist_ok: a folder is made once"
    )
    assert "exist_ok=True" in lines[verdict + 4]


def test_the_template_of_ddplab_new_runs_sanitized_and_clean(tmp_path, no_leftover_workers):
    made = cli("new", "train.py", cwd=tmp_path)
    assert made.code == 0, made.err
    ran = cli("launch", "--json", "train.py", "--epochs", "2", timeout=150, cwd=tmp_path)
    assert ran.code == 0, ran.err[-3000:]
    result = ran.json()
    assert findings(result) == {} and result["sanitize"]["ranks"] == [0, 1]
    assert result["sanitize"]["steps_seen"] == 50  # 2 epochs of 32 steps: the whole window watched


def test_a_replayed_pass_and_an_accumulation_off_by_one_are_named(tmp_path, no_leftover_workers):
    """cycle-moved: the steps read itertools.cycle(loader), whose first pass (8 batches a rank) is replayed from then
    on, batch for batch: every later epoch is the first one's order, though the loader is never iterated again; each
    batch is copied before its forward, as xb.to('cuda') is on a GPU, so the replay is told by its values.
    accum-off-by-one: no_sync() on the micro-batch the step follows, left before optimizer.step(): the step applies
    gradients DDP never averaged. Issue 39's round 7 (the first missed, the second named with another cause)."""
    result = launched(tmp_path, "cycle-moved", "accum-off-by-one")
    found = all_findings(result)
    assert sorted(found) == ["epoch-repeats", "params-diverge"] and all(len(f) == 1 for f in found.values()), found
    replay, diverge = found["epoch-repeats"][0], found["params-diverge"][0]
    assert replay["where"] == line_of("loader = DataLoader(data, batch_size=16, sampler=sampler)")
    evidence = replay["evidence"]
    assert evidence["ranks"] == [0, 1] and evidence["batches"] == 8
    # 2 micro-batches a step: the pass ends at step 4, its first batch is fed again in step 5
    assert evidence["ended_at_step"] == 4 and evidence["replayed_from_step"] == 5
    assert evidence["replays"] == [*range(8), *range(8)] and evidence["as"] == "values"
    assert "itertools.cycle(loader)" in replay["observed"] and "it = iter(loader) again" in replay["fix"]
    assert diverge["evidence"]["step"] == 1 and diverge["evidence"]["no_sync_backward"] == [0, 1]
    assert diverge["evidence"]["no_sync"] == [] and diverge["evidence"]["unaveraged"] == {}
    assert (
        "the last forward before the step ran with DDP's gradient sync off, inside ddp.no_sync()"
        in (diverge["observed"])
    )
    assert "(i + 1) % accum != 0" in diverge["fix"]


@pytest.mark.parametrize(
    ("mistake", "step", "unaveraged", "said"),
    [
        ("late-param", 1, {"scale": "added"}, "`scale` was added to the wrapped module after DDP() was built"),
        (
            "unfreeze",
            8,
            {"0.weight": "frozen", "0.bias": "frozen"},
            "`0.weight` did not require a gradient when DDP() was built and was unfrozen since",
        ),
    ],
)
def test_a_parameter_the_wrappers_reducer_never_averages_is_named_with_why(
    tmp_path, mistake, step, unaveraged, said, no_leftover_workers
):
    """A parameter inside the wrapped module that DDP does not average: added after DDP() was built (late-param), or
    frozen when it was built and unfrozen after step 2 (unfreeze: seen at the next digest, step 8). Issue 39's round
    7 named both as gradients changed after DDP's averaging, which they never had."""
    found = all_findings(launched(tmp_path, mistake))
    assert sorted(found) == ["params-diverge"] and len(found["params-diverge"]) == 1, found
    f = found["params-diverge"][0]
    assert f["evidence"]["step"] == step and f["evidence"]["unaveraged"] == unaveraged
    assert said in f["observed"] and "DDP averaged the gradients" not in f["observed"]
    assert ("wrap the model in DDP again" if mistake == "unfreeze" else "before wrapping the model in DDP") in f["fix"]


@pytest.mark.parametrize(
    ("mistake", "said", "not_said"),
    [
        ("rank0-load", "rank 0 loaded weights into the wrapped model after DDP's start-up broadcast (", "seed"),
        ("rank0-load-part", "rank 0 loaded weights into the wrapped model after DDP's start-up broadcast (", "seed"),
        ("reinit", "re-initialized in place with a seed of the rank's own", "loaded"),
    ],
)
def test_weights_changed_after_ddps_broadcast_are_named_by_what_changed_them(
    tmp_path, mistake, said, not_said, no_leftover_workers
):
    """The same averaged gradients, other weights: rank 0 loaded a checkpoint into the wrapped model after DDP() (the
    load seen, and where), or every rank re-initialized a layer with its own seed (no load seen: the change is said
    as what it can be). Round 16 of the sanitizer's first-sight tests found the second blamed on a load; round 18 a
    load into a part of the model (`model.module.encoder`, pretrained) not seen as one (rank0-load-part)."""
    found = all_findings(launched(tmp_path, mistake))
    assert sorted(found) == ["params-diverge"] and len(found["params-diverge"]) == 1, found
    f = found["params-diverge"][0]
    assert f["evidence"]["step"] == 1 and said in f["observed"] and not_said not in f["observed"], f["observed"]
    if mistake != "reinit":
        line = line_of_plant("model[0].load_state_dict(" if mistake == "rank0-load-part" else "model.load_state_dict(")
        assert f"sanitize_plant.py:{line})" in f["observed"] and f["where"].endswith(f"sanitize_plant.py:{line}")
    assert "before wrapping the model in DDP" in f["fix"]


def line_of_plant(text: str) -> int:
    return next(i for i, line in enumerate(PLANT.read_text().splitlines(), 1) if text in line)
