"""Per-rank log files as torch's elastic launcher writes them: LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/std{out,err}.log."""

from __future__ import annotations

from pathlib import Path


def rank_logs(log_dir: Path) -> dict[int, Path]:
    """local rank -> its newest attempt's log folder."""
    found: dict[int, Path] = {}
    for folder in sorted(Path(log_dir).glob("*/attempt_*/*"), key=lambda p: int(p.parent.name.split("_")[-1])):
        if folder.is_dir() and folder.name.isdigit():
            found[int(folder.name)] = folder
    return found


def output_bytes(log_dir: Path) -> int:
    """Bytes every rank has written so far: their growth is the job's visible progress."""
    total = 0
    for path in Path(log_dir).glob("*/attempt_*/*/std*.log"):
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
