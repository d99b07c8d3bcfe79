"""Checkpoint files that never lose work (runtime: ddplab.resume, the recipes and any script share them).

- One file per checkpoint, `step-00000120-<sha256 prefix>.pt`: an ordinary torch.save file (torch.load reads it),
  whose name carries the checksum of its bytes, so the file and its checksum appear together or not at all.
- Written by global rank 0 only: to a temporary file, flushed and fsync'ed, then renamed into place (a rename is
  atomic), then the directory is fsync'ed. A crash at any moment leaves either the old set or the new set.
- The last `keep` are kept; older ones are deleted only after a newer one is safely in place.
- Loading checks the checksum and uses weights_only=True (a checkpoint file cannot run code); a truncated or
  corrupted latest file is skipped with a warning and the previous one is used.
- Everything stored is a tensor or a plain Python value, so weights_only loading accepts it.
- Where a rename is not atomic or not there at all - a bucket mounted as a folder (mountpoint-s3 has no rename;
  gcsfuse, s3fs and goofys copy then delete), found from /proc/mounts, or any folder where the rename fails - a
  commit marker takes its place: the data stays under its temporary name, then a small marker file,
  `step-00000120-<sha256 prefix>.commit`, is written last, naming the data file and its whole sha256. A checkpoint
  is a marker that parses and whose data matches it; data without a marker (a writer killed mid-write) is never one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddplab.errors import DdplabError

FORMAT = "ddplab.checkpoint/1"
NAME = re.compile(r"^step-(\d{8})-([0-9a-f]{16})\.pt$")
MARKER = re.compile(r"^step-(\d{8})-([0-9a-f]{16})\.commit$")
MARKER_FORMAT = "ddplab.commit/1"
# Buckets mounted as folders, as /proc/mounts shows them: a FUSE subtype (the type reads fuse.NAME), or for
# mountpoint-s3, which sets none, its source name (the type reads "fuse"). None renames atomically.
BUCKET_TYPES = frozenset({"fuse.gcsfuse", "fuse.s3fs", "fuse.goofys"})
BUCKET_SOURCES = frozenset({"mountpoint-s3"})
# A rename the file system refuses (rather than a disk that is full): the data is complete, a marker commits it.
# EPERM: an append-only folder (chattr +a), and FUSE file systems without rename; EXDEV, ENOSYS, EOPNOTSUPP: others.
RENAME_REFUSED = frozenset({errno.EPERM, errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EACCES})
_no_rename: set[Path] = set()  # folders where a rename failed once in this process: not tried again
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
        with contextlib.suppress(OSError):  # a folder that allows no deletion (append-only, a bucket) is writable
            probe.unlink()
    except OSError as e:
        raise DdplabError(
            f"checkpoint directory {directory} is not writable ({e.strerror or e}): choose a writable --checkpoint-dir"
        ) from None
    return directory


def listed(directory: Path) -> list[tuple[int, Path]]:
    """Checkpoints by name (renamed files and commit markers), newest first (a tie on step goes to the later one)."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name) or MARKER.match(p.name))]
    return sorted(found, key=lambda sp: (sp[0], sp[1].stat().st_mtime_ns), reverse=True)


def step_of(path: Path) -> int:
    """The step in a checkpoint's name (a file or a marker)."""
    m = NAME.match(path.name) or MARKER.match(path.name)
    if m is None:
        raise ValueError(f"{path.name} is not a checkpoint's name (step-NNNNNNNN-HASH.pt or .commit)")
    return int(m.group(1))


def bucket_mount(directory: Path, mounts: str | None = None) -> str | None:
    """'fuse.gcsfuse at /mnt/ckpt' when `directory` lies on a bucket mounted as a folder, else None. mounts: the
    text of /proc/mounts (read when not given; absent outside Linux)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    target = os.path.realpath(directory)
    best: tuple[str, str, str] | None = None  # the longest mount point that holds the folder
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        source, point, kind = (_unescape(f) for f in fields[:3])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[1])):
            best = (source, point, kind)
    if best is None:
        return None
    source, point, kind = best
    if kind in BUCKET_TYPES or (kind == "fuse" and source in BUCKET_SOURCES):
        return f"{kind if kind != 'fuse' else source} at {point}"
    return None


def _unescape(field: str) -> str:
    """/proc/mounts writes a space in a path as \\040 (octal), a tab as \\011, a backslash as \\134."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def renames(directory: Path) -> bool:
    """Whether checkpoints in `directory` are committed by an atomic rename (else by a marker)."""
    return directory not in _no_rename and bucket_mount(directory) is None


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
    # The time too: where the data keeps this name (a marker commits it), a later save of the same step in a
    # process with the same pid must not write over it (a bucket may refuse to overwrite an object).
    return path.with_name(f".{path.name}.{os.getpid()}-{time.time_ns():x}.tmp")


def atomic_save(obj: Any, path: Path) -> str:
    """Replace `path` with `obj` in one step: readers see the old file or the new one, never half of one."""
    tmp = _tmp_for(path)
    try:
        if not renames(path.parent):
            # A bucket: an object appears whole when its upload ends, never half of one; the rename would be a
            # copy and a delete (or refused).
            return _write(obj, path)
        sha = _write(obj, tmp)
        try:
            _publish(tmp, path)
        except OSError as e:
            if e.errno not in RENAME_REFUSED or path.exists():
                raise
            # A folder that refuses renames (append-only): the data is written again under its name.
            _no_rename.add(path.parent)
            with contextlib.suppress(OSError):  # where deletion is refused too, the copy stays
                tmp.unlink()
            return _write(obj, path)
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
    """Write checkpoint `step` safely, then prune to the newest `keep`. Call on global rank 0 only. Returns the
    checkpoint's path: the renamed file, or the commit marker where the folder cannot rename atomically."""
    before = listed(directory)
    tmp = _tmp_for(directory / f"step-{step:08d}.pt")
    committed = False  # a marker names tmp: it is the checkpoint's data now, never to be removed here
    try:
        sha = _write({"format": FORMAT, **state}, tmp)
        final = directory / f"step-{step:08d}-{sha[:HASH_CHARS]}.pt"
        try:
            if not renames(directory):
                raise OSError(errno.EOPNOTSUPP, "no atomic rename on a bucket mount")
            _publish(tmp, final)
        except OSError as e:
            if e.errno not in RENAME_REFUSED or not tmp.exists():
                raise
            _no_rename.add(directory)
            final = _commit(tmp, step, sha)
            committed = True
    except Exception as e:
        if not committed:
            with contextlib.suppress(OSError):
                tmp.unlink()
        intact = f"; the previous checkpoint {before[0][1].name} is intact" if before else ""
        raise DdplabError(
            f"could not write checkpoint step {step} to {directory} ({_why(e, directory)}): free "
            f"space or choose a writable --checkpoint-dir{intact}"
        ) from None
    # Removals may fail where the folder allows no deletion (an append-only folder, mountpoint-s3 without
    # --allow-delete): the checkpoints are safe either way, only more of them stay.
    for _, old in listed(directory)[keep:]:
        data = _marked_data(old) if MARKER.match(old.name) else None
        with contextlib.suppress(OSError):
            old.unlink()  # a marker before its data: never a marker whose data is gone
            if data is not None:
                data.unlink()
    named = {d.name for _, p in listed(directory) if MARKER.match(p.name) and (d := _marked_data(p)) is not None}
    for leftover in directory.glob(".step-*.tmp"):  # from a writer killed mid-write; never a complete checkpoint
        if leftover.name not in named:
            with contextlib.suppress(OSError):
                leftover.unlink()
    return final


def _commit(data: Path, step: int, sha: str) -> Path:
    """Written last, after the data reached the disk: the marker that makes `data` checkpoint `step`."""
    marker = data.parent / f"step-{step:08d}-{sha[:HASH_CHARS]}.commit"
    body = {"format": MARKER_FORMAT, "data": data.name, "sha256": sha, "bytes": data.stat().st_size}
    with open(marker, "w") as f:
        f.write(json.dumps(body))
        f.flush()
        os.fsync(f.fileno())
    with contextlib.suppress(OSError):  # a FUSE folder may not take fsync; the marker itself is on disk
        fd = os.open(data.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return marker


def _marker(path: Path) -> tuple[Path, str]:
    """(the data file, its sha256) a commit marker names; ValueError when the marker is torn or names no file here."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ValueError("its commit marker is unfinished or unreadable") from None
    if not isinstance(body, dict) or body.get("format") != MARKER_FORMAT:
        raise ValueError(f"it is not a {MARKER_FORMAT} marker")
    name, sha = body.get("data"), body.get("sha256")
    # Text from a file: a plain name in this folder, never a path elsewhere.
    if not isinstance(name, str) or not isinstance(sha, str) or os.path.basename(name) != name or name in ("", ".."):
        raise ValueError("its commit marker names no data file in this folder")
    if not sha.startswith(MARKER.match(path.name).group(2)):
        raise ValueError("its commit marker disagrees with its own name")
    data = path.parent / name
    if not data.is_file():
        raise ValueError(f"its data file {name} is missing")
    if isinstance(body.get("bytes"), int) and data.stat().st_size != body["bytes"]:
        raise ValueError(f"its data file {name} is truncated ({data.stat().st_size} of {body['bytes']} bytes)")
    return data, sha


def _marked_data(marker: Path) -> Path | None:
    try:
        return _marker(marker)[0]
    except ValueError:
        return None


def data_of(path: Path) -> Path:
    """The file holding a checkpoint's bytes: itself, or the data its commit marker names (ValueError if torn)."""
    return _marker(path)[0] if MARKER.match(path.name) else path


def load(path: Path, verified: bool = False) -> dict:
    """Verify the checksum in the name, then load with weights_only=True. Raises ValueError when damaged.

    verified: another rank has just checked this file; read it memory-mapped instead (the ranks of one machine then
    share one copy in the page cache rather than each holding and hashing the whole checkpoint)."""
    if MARKER.match(path.name):
        data, expected = _marker(path)
    elif m := NAME.match(path.name):
        data, expected = path, m.group(2)
    else:
        raise ValueError("its name is not step-NNNNNNNN-HASH.pt (or .commit), so it cannot be verified")
    if not verified:
        actual = digest(data)
        if not actual.startswith(expected):
            raise ValueError(
                f"checksum mismatch ({actual[:HASH_CHARS]} != {expected[:HASH_CHARS]}): the file is truncated or "
                "corrupted"
            )
    try:
        state = torch.load(data, map_location="cpu", weights_only=True, mmap=verified)
    except Exception as e:  # the checksum matched, so this is not damage: a file from elsewhere
        raise ValueError(f"torch.load(weights_only=True) refused it: {str(e).splitlines()[0]}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"it is not a {FORMAT} file")
    return state


def peek(path: Path) -> dict | None:
    """A quick look without reading the tensors (mmap) or checking the checksum; None when it does not load."""
    try:
        state = torch.load(data_of(path), map_location="cpu", weights_only=True, mmap=True)
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
