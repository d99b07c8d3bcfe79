"""`ddplab launch`'s sanitizer on a script in the style of many tutorials and projects (tests/scripts/
sanitize_styles.py): one launched process (--nproc-per-node 1) that starts its 2 gloo ranks with
torch.multiprocessing.spawn, training with a Trainer class from a helper module (sanitize_styles_trainer.py)
configured by a config dict. The mistakes sit in the config ({"sampler": False, "save_on": "every"}): every rank reads
the same samples, every rank saves checkpoint.pt - each named with its evidence at the helper module's line; the
launched process itself is not a rank. The same script with the dict written right is silent. One run each (module
scoped: about 10 CPU seconds a run)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psutil
import pytest

from tests.conftest import cli

SCRIPTS = Path(__file__).parent.parent / "scripts"
ENTRY, TRAINER = SCRIPTS / "sanitize_styles.py", SCRIPTS / "sanitize_styles_trainer.py"


def line_of(text: str, path: Path = TRAINER) -> str:
    lines = path.read_text().splitlines()
    return f"{path}:{next(i for i, line in enumerate(lines, 1) if text in line)}"


def launched(out: Path, *flags: str) -> dict:
    tag = uuid.uuid4().hex
    ran = cli(
        "launch", "--no-lint", "--json", "--nproc-per-node", "1", str(ENTRY), *flags, "--out", str(out),
        env={"DDPLAB_TEST_TAG": tag}, timeout=150, cwd=out,
    )  # fmt: skip
    left = []
    for p in psutil.process_iter():  # the spawned ranks are gone with the launch (no_leftover_workers, module scoped)
        try:
            if p.environ().get("DDPLAB_TEST_TAG") == tag and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    assert ran.code == 0 and not left, (left, ran.err[-3000:])
    result = ran.json()
    assert result["status"] == "ok" and result["sanitize"]["off"] == {}, result["sanitize"]
    return result


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    out = tmp_path_factory.mktemp("planted")
    return out, launched(out, "--planted")


@pytest.fixture(scope="module")
def right(tmp_path_factory):
    return launched(tmp_path_factory.mktemp("right"))


def test_the_spawned_ranks_are_watched_and_the_launched_process_is_not_a_rank(planted):
    """2 epochs x 16 batches of 16 (256 samples, no sampler) = 32 steps on each spawned rank: had the launched process
    written a rank0.json of its own (world size 1, no step), the same-samples finding would have nothing to compare."""
    _, result = planted
    assert result["nproc_per_node"] == 1
    assert result["sanitize"]["ranks"] == [0, 1] and result["sanitize"]["steps_seen"] == 32
    assert sorted(f["check"] for f in result["sanitize"]["findings"]) == ["same-samples", "shared-write"]


def test_the_config_dicts_missing_sampler_is_named_at_the_trainers_loader(planted):
    _, result = planted
    (f,) = [f for f in result["sanitize"]["findings"] if f["check"] == "same-samples"]
    assert f["where"] == line_of("shuffle=True, generator=shuffle)")
    assert f["code"].startswith('self.loader = DataLoader(data, batch_size=config["batch_size"], shuffle=True')
    pair = f["evidence"]["pairs"][0]
    assert f["evidence"]["ranks"] == [0, 1] and f["evidence"]["sampler"] == "RandomSampler"
    assert pair["share"] == 1.0 and pair["same_order"] and pair["batches"] == 16 and pair["of"] == 256
    assert "read the same 16 batches, sample for sample and in the same order" in f["observed"]


def test_the_trainers_save_on_every_rank_is_named_with_the_path(planted):
    out, result = planted
    (f,) = [f for f in result["sanitize"]["findings"] if f["check"] == "shared-write"]
    assert f["evidence"]["path"] == str(out / "checkpoint.pt") and f["evidence"]["ranks"] == [0, 1]
    assert f["evidence"]["step"] == {"0": 32, "1": 32}
    assert f["where"] == line_of('torch.save(self.model.module.state_dict(), os.path.join(self.out, "checkpoint.pt"))')
    assert "ranks 0 and 1 both wrote checkpoint.pt" in f["observed"]


def test_the_same_script_written_right_is_silent(right):
    """DistributedSampler with set_epoch, rank 0 saving: 2 epochs x 8 steps watched on both ranks, nothing found."""
    assert right["sanitize"]["findings"] == [] and right["sanitize"]["ranks"] == [0, 1]
    assert right["sanitize"]["steps_seen"] == 16
