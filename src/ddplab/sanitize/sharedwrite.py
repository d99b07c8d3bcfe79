"""Check `shared-write`: several ranks wrote the same file - a checkpoint torn by two writers, a log whose lines
interleave, a rank reading a file another is rewriting.

Rank side: an audit hook (sys.addaudithook) on Python's "open" event, which every file opening in Python raises
(open(), os.open, pathlib's writes, numpy's), and torch.save given a path (torch opens that file in C++, where no
audit event is raised); a write is kept when the file is opened for writing and the call came from the
user's code (a frame outside the standard library, installed packages and ddplab; not inside an import, which
writes .pyc files): the absolute path, append or write, the user's line, the step. The run's own folders
(ddplab's, /dev, /proc, caches) are skipped. Python cannot remove an audit hook: after the window it returns at
its first test, for every audit event of the run (about 0.6 us each; a training step of the `ddplab new` template
raises 4, `builtins.id` from torch's optimizer).

Python's "os.mkdir" audit event (os.mkdir, os.makedirs, Path.mkdir) leaves each folder the user's code makes, unless
a caller between the two was given exist_ok=True.

Reader: a path written by more than one rank; a folder made without exist_ok by several ranks (on all but one the
call raised FileExistsError): said only when the run failed on it (a script may catch the error and go on).
"""

from __future__ import annotations

import functools
import os
import sys

from ddplab.sanitize import DIR_ENV, Finding, by_key, ranks_text, rankside, short
from ddplab.sanitize.userframe import is_user, where_outside_imports

ID = "shared-write"
PATHS = 256  # distinct paths kept per rank
SKIP_ROOTS = ("/dev/", "/proc/", "/sys/")
SKIP_PARTS = (
    f"{os.sep}__pycache__{os.sep}",
    f"{os.sep}.cache{os.sep}",
    f"{os.sep}.triton{os.sep}",
    f"{os.sep}torchinductor_",
)  # caches written by libraries, safe by design (unique temporary names)
OWN_DIRS = ("DDPLAB_FR_DIR", "DDPLAB_PROFILE_DIR")  # besides DIR_ENV's folder and the run folder holding it
WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class Observer(rankside.Observer):
    ID = ID

    def __init__(self, window):
        super().__init__(window)
        self.on = True
        self.writes: dict[str, dict] = {}
        self.dirs: dict[str, dict] = {}  # folders made without exist_ok
        self.undo: list = []
        own = [os.path.dirname(os.path.abspath(window.folder))]  # the launcher's run folder: flight, profile, notes
        own += [os.environ[v] for v in (DIR_ENV, *OWN_DIRS) if os.environ.get(v)]
        self.skip = tuple(os.path.join(os.path.abspath(p), "") for p in own) + SKIP_ROOTS
        self.listening = listening = [True]  # the audit hook's switch: a list cell, the cheapest test it can make
        fail = self.window.fail
        handlers = {"open": self._opened, "os.mkdir": self._made, "os.rename": self._renamed}.get

        def audit(event: str, args: tuple) -> None:
            # A closure, not a method: Python calls it for every audit event of the run (0.6 us against 2 us).
            if listening[0]:
                handler = handlers(event)
                if handler is not None:
                    try:
                        handler(*args)
                    except Exception as e:  # noqa: BLE001 - an audit hook's error would be the user's open()'s
                        listening[0] = False
                        fail(self, e)

        sys.addaudithook(audit)

    def attach(self, torch) -> None:
        save = torch.save
        obs = self

        @functools.wraps(save)
        def patched(obj, f, *args, **kwargs):
            if obs.on and isinstance(f, (str, bytes, os.PathLike)):
                obs.guarded(obs._opened, f, "wb", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            return save(obj, f, *args, **kwargs)

        torch.save = torch.serialization.save = patched
        self.undo += [(torch, "save", save, patched), (torch.serialization, "save", save, patched)]

    def _renamed(self, source, path, source_dir_fd, dir_fd) -> None:
        """os.rename's audit event (os.replace, Path.rename/replace, shutil.move): the destination is written as a
        whole, the atomic save (a temporary file of the rank's own, then os.replace onto the checkpoint's path)."""
        if dir_fd not in (None, -1) or isinstance(source, int):
            return
        self._opened(path, "w", os.O_WRONLY, source=os.path.abspath(os.fsdecode(source)))

    def _opened(self, path, mode, flags, source: str | None = None) -> None:
        if isinstance(path, int) or path is None:
            return
        flags = flags if isinstance(flags, int) else 0
        if not flags & WRITING and not (isinstance(mode, str) and any(c in mode for c in "wax+")):
            return
        full = os.path.abspath(os.fsdecode(path))
        if full.startswith(self.skip) or any(part in full for part in SKIP_PARTS):
            return
        seen = self.writes.get(full)
        if seen is not None:
            seen["count"] += 1
            return
        if len(self.writes) >= PATHS:
            return
        where = where_outside_imports(1)
        if where is not None:
            appending = bool(flags & os.O_APPEND) or (isinstance(mode, str) and "a" in mode)
            self.writes[full] = {
                "path": full,
                "mode": "a" if appending else "w",
                "where": where,
                "step": self.window.step,
                "count": 1,
            }
            if source is not None:
                self.writes[full]["from"] = source  # a rename onto the path: the file it moved there

    def _made(self, path, mode, dir_fd) -> None:
        """os.mkdir's audit event (os.makedirs and Path.mkdir call it): a folder this rank makes, unless a caller
        between the user's code and mkdir was given exist_ok=True (an existing folder is then no error)."""
        if isinstance(path, int) or path is None or dir_fd not in (None, -1):  # -1: no dir_fd (the event says so)
            return
        full = os.path.abspath(os.fsdecode(path))
        if full in self.dirs or len(self.dirs) >= PATHS or full.startswith(self.skip):
            return
        frame = sys._getframe(2)  # the frame that called os.mkdir (past this method and the audit hook)
        while frame is not None and not is_user(frame.f_code.co_filename):
            if frame.f_locals.get("exist_ok") is True:
                return
            frame = frame.f_back
        where = where_outside_imports(1)
        if where is not None:
            self.dirs[full] = {"path": full, "where": where, "step": self.window.step}

    def forked(self) -> None:
        self.writes, self.dirs = {}, {}  # the parent's writes: a forked rank that claimed them would share them

    def stop(self) -> None:
        self.on = self.listening[0] = False  # the audit hook stays (Python cannot remove one): one test per event
        self.restore(self.undo)
        self.undo = []

    def data(self) -> dict:
        return {"writes": list(self.writes.values()), "dirs": list(self.dirs.values())}


# ------------------------------------------------------------------------------------------------------ reader side
def judge(ranks: dict[int, dict], world: int) -> list[Finding]:
    gathered = by_key(ranks, "writes", "path")
    shared = {path for path, writes in gathered.items() if len(writes) > 1}
    # one finding per line of code and way of writing: `torch.save(state, f"ckpt_{epoch}.pt")` on every rank is one
    # mistake however many epochs' files it wrote
    grouped: dict[tuple, list[tuple[str, dict]]] = {}
    for path, writes in gathered.items():
        if len(writes) < 2 or all(w.get("from") in shared for w in writes.values()):
            continue  # renamed from one shared temporary file: that file's finding says it (the renames but one fail)
        lines = tuple(sorted({short(w["where"]) for w in writes.values()}))
        renamed = all(w.get("from") for w in writes.values())
        verb = "appended to" if all(w["mode"] == "a" for w in writes.values()) else "wrote"
        grouped.setdefault((lines, renamed, verb, tuple(sorted(writes))), []).append((path, writes))
    findings = []
    for (lines, renamed, verb, ranks_), paths in grouped.items():
        path, writes = paths[0]
        first = writes[ranks_[0]]
        when = f"from step {first['step']}" if first["step"] else "before the first optimizer step"
        every = "both" if len(ranks_) == 2 else "all"
        did = "renamed a file of their own onto" if renamed else verb
        shown = [_shown(p) for p, _ in paths[:3]]
        named = shown[0] if len(paths) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"
        if len(paths) > 3:
            named = f"{', '.join(shown)} and {len(paths) - 3} more"
        observed = f"ranks {ranks_text(list(ranks_))} {every} {did} {named} (at {', '.join(lines)}, {when})"
        if verb == "appended to":
            observed += ": their lines interleave in one file"
        elif renamed:
            observed += (
                ": each rank's save replaces the others', the last rename wins, and a rank reading it meanwhile "
                "gets whichever rank's file is there"
            )
        else:
            observed += ": the last writer wins, a reader can meet a half-written file, and a rename of the same "
            observed += "temporary file fails on all ranks but one"
        fix = (
            "write from one rank only: `if dist.get_rank() == 0:` (the global rank: LOCAL_RANK 0 exists on every "
            "machine), then dist.barrier() before any rank reads it; a file each rank needs of its own gets the "
            "rank in its name"
        )
        evidence = {
            "path": path,
            "ranks": list(ranks_),
            "mode": "renamed onto" if renamed else verb,
            "where": {r: w["where"] for r, w in writes.items()},
            "step": {r: w["step"] for r, w in writes.items()},
            "count": {r: w["count"] for r, w in writes.items()},
        }
        if len(paths) > 1:
            evidence["paths"] = [p for p, _ in paths]
        findings.append(Finding(ID, observed, fix, where=first["where"], evidence=evidence))
    return findings + _made_twice(ranks)


def _made_twice(ranks: dict[int, dict]) -> list[Finding]:
    """A folder made without exist_ok by several ranks: said when the run failed on it (readout.lead); a script that
    catches FileExistsError handled the race itself."""
    findings = []
    for path, made in by_key(ranks, "dirs", "path").items():
        if len(made) < 2:  # two ranks cannot both make one folder: on one of them mkdir raised FileExistsError
            continue
        ranks_ = sorted(made)
        first = made[ranks_[0]]
        lines = sorted({short(m["where"]) for m in made.values()})
        observed = (
            f"ranks {ranks_text(ranks_)} {'both' if len(ranks_) == 2 else 'all'} made the folder {_shown(path)} "
            f"(at {', '.join(lines)}) without exist_ok: a folder is made once, so on every rank but the first "
            "to get there the call raised FileExistsError (a test that it exists first only narrows the race)"
        )
        fix = (
            "os.makedirs(path, exist_ok=True) on every rank, or make it on global rank 0 only "
            "(`if dist.get_rank() == 0:`) and dist.barrier() before the others use it"
        )
        evidence = {
            "path": path,
            "ranks": ranks_,
            "where": {r: m["where"] for r, m in made.items()},
            "only_when_failed": True,
        }
        findings.append(Finding(ID, observed, fix, where=first["where"], evidence=evidence))
    return findings


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
