"""ddplab.ckptfile on real files: atomic writes, checksums, fallback, pruning, weights_only, failures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from ddplab import ckptfile
from ddplab.errors import DdplabError


def state(step: int) -> dict:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": step,
        "epoch": 0,
        "rng_torch": [torch.get_rng_state()],
        "rng_cuda": [None],
        "config": {"lr": 1e-3, "amp": "none"},
    }


def test_roundtrip_loads_with_weights_only_and_name_carries_checksum(tmp_path):
    saved = ckptfile.save(tmp_path, state(5), step=5, keep=3)
    assert ckptfile.NAME.match(saved.name)
    assert saved.name.split("-")[2].removesuffix(".pt") == ckptfile.digest(saved)[: ckptfile.HASH_CHARS]
    # weights_only=True is what load() uses; a plain torch.load with it must accept the file too.
    plain = torch.load(saved, weights_only=True)
    assert plain["step"] == 5 and plain["rng_torch"][0].dtype == torch.uint8
    found = ckptfile.latest(tmp_path)
    assert found.step == 5 and found.path == saved
    assert found.state["format"] == ckptfile.FORMAT
    assert found.state["optimizer"]["state"][0]["exp_avg"].shape == (2, 3)
    assert not list(tmp_path.glob(".*tmp")), "no temporary file may stay behind"


def test_keeps_the_newest_k(tmp_path):
    for step in (10, 20, 30, 40):
        ckptfile.save(tmp_path, state(step), step=step, keep=2)
    assert [s for s, _ in ckptfile.listed(tmp_path)] == [40, 30]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_latest_falls_back_to_previous_with_warning(tmp_path, damage):
    ckptfile.save(tmp_path, state(10), step=10, keep=3)
    newest = ckptfile.save(tmp_path, state(20), step=20, keep=3)
    data = newest.read_bytes()
    if damage == "truncate":  # what a crash in the middle of a non-atomic write leaves
        newest.write_bytes(data[: len(data) // 2])
    else:  # one flipped byte in the middle: the zip still opens, only the checksum can tell
        middle = len(data) // 2
        newest.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    warnings = []
    found = ckptfile.latest(tmp_path, warn=warnings.append)
    assert found.step == 10
    assert len(warnings) == 1 and newest.name in warnings[0] and "checksum mismatch" in warnings[0]


def test_every_checkpoint_damaged_is_a_one_line_error(tmp_path):
    path = ckptfile.save(tmp_path, state(10), step=10, keep=3)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(DdplabError, match="every checkpoint in .* is damaged"):
        ckptfile.latest(tmp_path)


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    """weights_only=True: a file carrying an arbitrary object cannot execute it, and is reported, not loaded."""
    evil = tmp_path / "step-00000001-0000000000000000.pt"
    torch.save({"format": ckptfile.FORMAT, "payload": subprocess.Popen}, evil)
    name = evil.with_name(f"step-00000001-{ckptfile.digest(evil)[: ckptfile.HASH_CHARS]}.pt")
    evil.rename(name)
    with pytest.raises(ValueError, match="weights_only"):
        ckptfile.load(name)


def test_unwritable_directory_names_the_path(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(DdplabError, match=f"{blocker}/ckpt is not writable"):
        ckptfile.prepare(blocker / "ckpt")


def test_failed_write_keeps_the_previous_checkpoint(tmp_path):
    """A real write failure (the file-size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC):
    the new checkpoint never appears, no temporary file stays, and the previous one still loads."""
    good = ckptfile.save(tmp_path, state(10), step=10, keep=3)
    script = textwrap.dedent(f"""
        import resource, signal, sys, torch
        from pathlib import Path
        from ddplab.errors import DdplabError
        from ddplab import ckptfile
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
        big = {{"model": {{"w": torch.zeros(1_000_000)}}, "step": 20}}
        try:
            ckptfile.save(Path({str(tmp_path)!r}), big, step=20, keep=3)
        except DdplabError as e:
            print(e)
            sys.exit(e.exit_code)
    """)
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert "could not write checkpoint step 20" in ran.stdout and f"{good.name} is intact" in ran.stdout
    assert [p.name for p in tmp_path.iterdir()] == [good.name]
    assert ckptfile.latest(tmp_path).step == 10


def test_atomic_save_replaces_in_one_step(tmp_path):
    target = tmp_path / "model.pt"
    ckptfile.atomic_save({"w": torch.ones(2)}, target)
    ckptfile.atomic_save({"w": torch.zeros(2)}, target)
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.zeros(2))
    assert sorted(os.listdir(tmp_path)) == ["model.pt"]


def test_a_file_another_rank_verified_is_read_memory_mapped_without_hashing(tmp_path):
    """On resume rank 0 verifies the checkpoint; the other ranks read the file it chose memory-mapped, unhashed (a
    copy of the whole checkpoint per rank in host memory, each hashed, before). Shown with a file whose name no
    longer carries its checksum: only the verifying read notices."""
    saved = ckptfile.save(tmp_path, state(7), step=7, keep=3)
    renamed = saved.with_name(f"step-{7:08d}-{'0' * ckptfile.HASH_CHARS}.pt")
    saved.rename(renamed)
    with pytest.raises(ValueError, match="checksum mismatch"):
        ckptfile.load(renamed)
    loaded = ckptfile.load(renamed, verified=True)
    assert loaded["step"] == 7 and loaded["model"]["weight"].shape == (2, 3)
