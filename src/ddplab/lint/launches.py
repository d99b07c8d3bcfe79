"""What a project's own launch instructions say: its shell scripts, Slurm files and docs (README, docs/*.md) name the
launcher and the number of machines. Some mistakes depend on them and not on the code: one checkpoint writer per
machine is the only writer on one machine, the global rank is the local one there, and a `--local_rank` flag is
what the legacy `torch.distributed.launch` passes. A reviewer reads those commands before calling such a line
wrong; lint does too. Nothing here runs anything: the text is only searched."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

# the folder the instructions live in: the first one up from the script's that holds one of these (at most 2 up)
PROJECT_MARKERS = (".git", "setup.py", "pyproject.toml")  # and a README in any case: readme.md, README.rst
SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch", ".md", ".rst")
# a project's texts: enough for its scripts/ and docs/, bounded for a script in a big folder (/tmp, a home folder)
MAX_FILES, MAX_FOLDERS, MAX_BYTES, MAX_DEPTH = 300, 100, 256 * 1024, 3
SKIP_DIRS = {".git", "__pycache__", "node_modules", "site-packages", "build", "dist", "data", "datasets"}
README_SUFFIXES = ("", ".md", ".rst", ".txt", ".markdown")

LEGACY = re.compile(r"torch\.distributed\.launch\b")
ELASTIC = re.compile(r"\btorchrun\b|torch\.distributed\.run\b")
# a machine count: torchrun/launch's --nnodes (also `--nnodes=1:4`, elastic), Slurm's --nodes / -N
NODES = re.compile(r"(?:--nnodes|#SBATCH\s+--nodes|#SBATCH\s+-N)[= ]*[\"']?([^\s\"'\\;]+)")
# a machine's number among several: `--node_rank=$NODE_RANK`, `--node-rank 1` (0 alone is also one machine's)
NODE_RANK = re.compile(r"--node[_-]rank[= ]*[\"']?([^\s\"'\\;]+)")
SCRIPT_NAME = re.compile(r"[\w./-]+\.py\b")


@dataclass(frozen=True)
class Launches:
    legacy: str = ""  # "file:line" of a `torch.distributed.launch` command
    elastic: str = ""  # of a torchrun / `torch.distributed.run` command
    machines: str = ""  # of a launch on several machines (a machine count other than 1, or a variable)
    one_machine: str = ""  # of a launch whose machine count is 1 or not given

    @property
    def only_one_machine(self) -> str:
        """Where a launch is seen on one machine, when none is seen on several: "" otherwise."""
        return "" if self.machines else self.one_machine


def of_script(script: Path) -> Launches:
    """The launch commands of the project around `script`; those that name the script, when some do. Nothing for
    a script that is not a file (source handed over as text)."""
    if not script.is_file():
        return Launches()
    root, marked = _project_root(script.resolve().parent)
    commands = _commands(root, marked)
    mine = [c for c in commands if script.name in c[1]]
    named = {os.path.basename(n) for _, text in commands for n in SCRIPT_NAME.findall(text)}
    # a command naming another script (`torchrun eval.py`) says nothing of this one; one naming none (`$SCRIPT`,
    # a README's prose) may be about it
    chosen = mine or [c for c in commands if not (named & {os.path.basename(n) for n in SCRIPT_NAME.findall(c[1])})]
    found: dict[str, str] = {}
    for where, text in chosen:
        kind = "legacy" if LEGACY.search(text) else "elastic" if ELASTIC.search(text) else ""
        if kind:
            found.setdefault(kind, where)
        counts = NODES.findall(text)
        if any(n not in ("1", "1:1") for n in counts) or any(n != "0" for n in NODE_RANK.findall(text)):
            found.setdefault("machines", where)
        elif kind or counts:
            found.setdefault("one_machine", where)
    return Launches(**found)


def on_one_machine(right_there: str):
    """A rule's doubt: a mistake of several machines is possible only where the project launches on one (and on no
    more): `right_there` says why the line is right on one machine."""

    def doubt(finding, seen) -> str:
        where = seen.launches.only_one_machine
        return f"the project's launch is on one machine ({where}), where {right_there}" if where else ""

    return doubt


def _project_root(folder: Path) -> tuple[Path, bool]:
    """The first folder up from the script's (at most 2 up) with a README or a project file; else the script's own
    (False: with no mark of a project, its folders that are projects of their own are not read: a script alone in
    /tmp or a home folder is not any neighbour's)."""
    for candidate in [folder, *list(folder.parents)[:2]]:
        if _is_project(candidate):
            return candidate, True
    return folder, False


def _is_project(folder: Path) -> bool:
    return any((folder / m).exists() for m in PROJECT_MARKERS) or _readmes(folder)


@functools.lru_cache(maxsize=16)
def _commands(root: Path, marked: bool) -> tuple[tuple[str, str], ...]:
    """("file:line", command) for each line of the project's texts that launches something or counts machines, its
    shell continuation lines (`\\` at the end) joined."""
    out = []
    for path in _texts(root, marked):
        try:
            text = path.read_bytes()[:MAX_BYTES].decode("utf-8", errors="replace")
        except OSError:
            continue
        lines, start, joined = text.splitlines(), 0, ""
        for number, line in enumerate(lines, 1):
            if not joined:
                start = number
            joined += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
            if line.rstrip().endswith("\\"):
                continue
            if LEGACY.search(joined) or ELASTIC.search(joined) or NODES.search(joined):
                out.append((f"{path.relative_to(root)}:{start}", joined))
            joined = ""
    return tuple(out)


def _texts(root: Path, marked: bool) -> list[Path]:
    found: list[Path] = []
    for visited, (folder, dirs, files) in enumerate(os.walk(root)):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIP_DIRS
            and not d.startswith(".")
            and depth < MAX_DEPTH
            and (marked or not _is_project(Path(folder) / d))
        )
        found += [Path(folder) / f for f in sorted(files) if f.lower().endswith(SUFFIXES) or _is_readme(f)]
        if len(found) >= MAX_FILES or visited >= MAX_FOLDERS:
            return found[:MAX_FILES]
    return found


def _is_readme(name: str) -> bool:
    """README, README.md, readme.rst, README.zh-CN.md: a text named so, not any file whose name begins so (a
    `readme_try.log` in /tmp made /tmp a project, every clone and note under it its launch instructions)."""
    return name.lower().startswith("readme") and Path(name).suffix.lower() in README_SUFFIXES


def _readmes(folder: Path) -> bool:
    try:
        return any(_is_readme(p.name) and p.is_file() for p in folder.iterdir())
    except OSError:
        return False
