"""Checkpoint files that never lose work (runtime: ddplab.resume, the recipes and any script share them).

- One file per checkpoint, `step-00000120-<sha256 prefix>.pt`: an ordinary torch.save file (torch.load reads it),
  whose name carries the checksum of its bytes, so the file and its checksum appear together or not at all.
- Written by global rank 0 only: to a temporary file, flushed and fsync'ed, then renamed into place (a rename is
  atomic), then the directory is fsync'ed. A crash at any moment leaves either the old set or the new set.
- The last `keep` are kept; older ones are deleted only after a newer one is safely in place.
- Loading checks the checksum and uses weights_only=True (a checkpoint file cannot run code); a truncated or
  corrupted latest file is skipped with a warning and the previous one is used.
- Everything stored is a tensor or a plain Python value, so weights_only loading accepts it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddplab.errors import DdplabError

FORMAT = "ddplab.checkpoint/1"
NAME = re.compile(r"^step-(\d{8})-([0-9a-f]{16})\.pt$")
HASH_CHARS = 16  # 64 bits of sha256: a damaged file that still matches is out of reach
CHUNK = 1 << 22


@dataclass(frozen=True)
class Found:
    path: Path
    step: int
    state: dict


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def prepare(directory: Path) -> Path:
    """Create the directory and prove it is writable now, before any training time is spent."""
    probe = directory / f".probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise DdplabError(
            f"checkpoint directory {directory} is not writable ({e.strerror or e}): choose a writable --checkpoint-dir"
        ) from None
    return directory


def listed(directory: Path) -> list[tuple[int, Path]]:
    """Checkpoint files by name, newest first (a tie on step goes to the later file)."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name))]
    return sorted(found, key=lambda sp: (sp[0], sp[1].stat().st_mtime_ns), reverse=True)


def _write(obj: Any, tmp: Path) -> str:
    """torch.save into `tmp`, flushed to disk; returns the sha256 of what was written."""
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        return digest(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_save(obj: Any, path: Path) -> str:
    """Replace `path` with `obj` in one step: readers see the old file or the new one, never half of one."""
    tmp = _tmp_for(path)
    try:
        sha = _write(obj, tmp)
        _publish(tmp, path)
    except Exception as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise DdplabError(
            f"could not write {path} ({_why(e, path.parent)}): free space or choose a writable "
            "--checkpoint-dir" + ("; the previous one is intact" if path.exists() else "")
        ) from None
    return sha


def _why(e: Exception, directory: Path) -> str:
    """The cause in a few words. torch.save reports a failed write as RuntimeError("... unexpected pos ..."), not
    OSError, so the free space is added: a full disk is the usual reason."""
    text = getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0]
    with contextlib.suppress(OSError):
        text += f"; {shutil.disk_usage(directory).free / 2**20:,.0f} MiB free there"
    return text


def _publish(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)
    fd = os.open(final.parent, os.O_RDONLY)  # the rename itself reaches the disk only when the directory does
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(directory: Path, state: dict, step: int, keep: int) -> Path:
    """Write checkpoint `step` safely, then prune to the newest `keep`. Call on global rank 0 only."""
    before = listed(directory)
    tmp = _tmp_for(directory / f"step-{step:08d}.pt")
    try:
        sha = _write({"format": FORMAT, **state}, tmp)
        final = directory / f"step-{step:08d}-{sha[:HASH_CHARS]}.pt"
        _publish(tmp, final)
    except Exception as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        intact = f"; the previous checkpoint {before[0][1].name} is intact" if before else ""
        raise DdplabError(
            f"could not write checkpoint step {step} to {directory} ({_why(e, directory)}): free "
            f"space or choose a writable --checkpoint-dir{intact}"
        ) from None
    for _, old in listed(directory)[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()
    for leftover in directory.glob(".step-*.tmp"):  # from a writer killed mid-write; never a complete checkpoint
        with contextlib.suppress(OSError):
            leftover.unlink()
    return final


def load(path: Path, verified: bool = False) -> dict:
    """Verify the checksum in the name, then load with weights_only=True. Raises ValueError when damaged.

    verified: another rank has just checked this file; read it memory-mapped instead (the ranks of one machine then
    share one copy in the page cache rather than each holding and hashing the whole checkpoint)."""
    m = NAME.match(path.name)
    if m is None:
        raise ValueError("its name is not step-NNNNNNNN-HASH.pt, so it cannot be verified")
    if not verified:
        actual = digest(path)[:HASH_CHARS]
        if actual != m.group(2):
            raise ValueError(f"checksum mismatch ({actual} != {m.group(2)}): the file is truncated or corrupted")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=verified)
    except Exception as e:  # the checksum matched, so this is not damage: a file from elsewhere
        raise ValueError(f"torch.load(weights_only=True) refused it: {str(e).splitlines()[0]}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"it is not a {FORMAT} file")
    return state


def peek(path: Path) -> dict | None:
    """A quick look without reading the tensors (mmap) or checking the checksum; None when it does not load."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return None
    return state if isinstance(state, dict) else None


def latest(directory: Path, warn: Callable[[str], None] = lambda msg: None) -> Found | None:
    """The newest checkpoint that verifies and loads; each damaged newer one is reported through `warn`."""
    damaged = []
    for step, path in listed(directory):
        try:
            state = load(path)
        except (ValueError, OSError) as e:
            damaged.append(path)
            warn(f"checkpoint {path} is unusable ({e}); falling back to the previous one")
            continue
        return Found(path, step, state)
    if damaged:
        raise DdplabError(
            f"every checkpoint in {directory} is damaged ({', '.join(p.name for p in damaged)}): "
            "start again without --resume in an empty --checkpoint-dir"
        )
    return None
