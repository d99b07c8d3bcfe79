"""Where a stuck rank is: its Python stack read from outside (py-spy), which distributed call it waits in, and
one sentence for all ranks. A rank stuck in C++ (a TCPStore connect, a gloo recv) shows the Python call that got it
there; the script needs no cooperation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ddplab import inrank

STACK_TIMEOUT_S = 10.0

# Python calls a rank waits in for the others: name (py-spy's, qualified by class where there is one) -> kind.
WAIT_CALLS = {
    "init_process_group": "rendezvous",
    "new_group": "rendezvous",
    "init_device_mesh": "rendezvous",
    "rendezvous": "rendezvous",
    "destroy_process_group": "collective",
    "DistributedDataParallel.__init__": "collective",
    **{
        name: "collective"
        for name in (
            "all_reduce",
            "all_gather",
            "all_gather_into_tensor",
            "all_gather_object",
            "broadcast",
            "broadcast_object_list",
            "barrier",
            "monitored_barrier",
            "reduce",
            "reduce_scatter",
            "reduce_scatter_tensor",
            "gather",
            "gather_object",
            "scatter",
            "scatter_object_list",
            "all_to_all",
            "all_to_all_single",
            "send",
            "recv",
        )
    },
    # DDP all-reduces gradients inside backward(): a rank can wait there for a peer, or just be computing.
    "backward": "ddp",
    "DistributedDataParallel.forward": "ddp",
}
WAITING = ("rendezvous", "collective")
_LIBRARY_DIRS = tuple(p for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")} if p)


@dataclass
class RankStack:
    rank: int | None
    local_rank: int | None
    pid: int
    kind: str  # rendezvous | collective | ddp | teardown | running | unknown
    call: str | None  # the distributed call it waits in (init_process_group, all_reduce, ...)
    where: str | None  # its own code's innermost line: "train.py:23 in main"
    stack: str  # Python stack, outermost call first
    error: str | None = None  # why the stack could not be read
    native: str = ""  # for kind "teardown": what the C++ frames showed besides (look_inside)


def py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def dump_stack(pid: int) -> tuple[list[dict] | None, str | None]:
    """The main thread's frames (innermost first) of a live Python process, or (None, why not)."""
    threads, error = _dump(pid)
    if threads is None:
        return None, error
    return _main_thread(threads, pid).get("frames", []), None


def _main_thread(threads: list[dict], pid: int) -> dict:
    main = next((t for t in threads if t.get("thread_name") == "MainThread" or t.get("os_thread_id") == pid), None)
    return main or (threads[0] if threads else {})


def _dump(pid: int, native: bool = False) -> tuple[list[dict] | None, str | None]:
    """Every thread of a live Python process as py-spy gives it (frames innermost first; with `native`, the C/C++
    frames too), or (None, why not)."""
    exe = py_spy()
    if exe is None:
        return None, "py-spy is not installed (pip install py-spy)"
    try:
        out = subprocess.run(
            [exe, "dump", "--pid", str(pid), "--json", *(["--native"] if native else [])],
            capture_output=True,
            text=True,
            timeout=STACK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None, f"py-spy gave no stack within {STACK_TIMEOUT_S:g}s"
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["unknown error"])[-1]
        if "ermission" in why:
            why += " (py-spy needs ptrace rights: run as root, or set kernel.yama.ptrace_scope=0)"
        return None, f"py-spy: {why}"
    try:
        return json.loads(out.stdout), None
    except json.JSONDecodeError:
        return None, "py-spy printed no JSON"


# A process group's destructor in C++ (c10d::ProcessGroupGloo::~ProcessGroupGloo, ...): it joins the group's threads.
_GROUP_DESTRUCTOR = re.compile(r"c10d::(ProcessGroup\w*)::~\1\b")
# A thread asking for the GIL: pybind11's acquire from C++ (torch freeing a tensor's Python object), or CPython's own.
_GIL_WAIT = re.compile(r"gil_scoped_acquire|\btake_gil\b|PyEval_AcquireThread|PyGILState_Ensure")


def look_inside(stacks: list[RankStack]) -> list[RankStack]:
    """The ranks that wait in no distributed call of Python's, read again with their C++ frames (py-spy --native:
    about a second a rank, so only once a hang is confirmed). What the Python stack cannot show, and a native one
    can: a rank inside a process group's destructor, which joins the group's worker threads. Freed where the GIL is
    held (the last reference in a DDP model's reducer, the model freed after destroy_process_group()), it waits
    forever for a worker that itself waits for the GIL to free a tensor (docs/teardown.md)."""
    running = [s for s in stacks if s.kind == "running"]
    for s, (threads, _) in zip(running, _side_by_side(lambda pid: _dump(pid, native=True), [s.pid for s in running])):
        if threads:
            s.kind, s.call, s.native = _destroying(threads, s.pid) or (s.kind, s.call, s.native)
    return stacks


def _side_by_side(read, pids: list[int]) -> list:
    """read(pid) for every process at once (py-spy pauses each one it reads: be quick)."""
    if not pids:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(pids)))) as pool:
        return list(pool.map(read, pids))


def _destroying(threads: list[dict], pid: int) -> tuple[str, str, str] | None:
    """("teardown", the destructor's name, what else the stacks show) when the main thread is in a process group's
    destructor."""
    main = _main_thread(threads, pid)
    names = [f.get("name", "") for f in main.get("frames", [])]
    group = next((m[1] for m in map(_GROUP_DESTRUCTOR.search, names) if m), None)
    if group is None:
        return None
    seen = []
    if any("Reducer::~Reducer" in n for n in names):
        seen.append("freed with a DDP model's reducer")
    if any(_GIL_WAIT.search(f.get("name", "")) for t in threads if t is not main for f in t.get("frames", [])):
        seen.append("a thread of the process waits for the GIL")
    return "teardown", f"~{group}", "; ".join(seen)


def own_code(filename: str) -> bool:
    """A frame of the user's script: neither torch, the standard library, nor the bootstrap that started it."""
    return not _is_library(filename) and not _launcher_frame(filename)


def _is_library(filename: str) -> bool:
    return f"{os.sep}torch{os.sep}" in filename or filename.startswith(_LIBRARY_DIRS) or filename.startswith("<")


def classify(frames: list[dict]) -> tuple[str, str | None, str | None]:
    """(kind, call, where) for a stack, innermost frame first, as py-spy gives it."""
    user = next((i for i, f in enumerate(frames) if not _is_library(f.get("filename", ""))), len(frames))
    where = None
    if user < len(frames):
        f = frames[user]
        where = f"{Path(f['filename']).name}:{f.get('line')} in {f.get('name', '?').rsplit('.', 1)[-1]}"
    for frame in reversed(frames[:user]):  # outermost library call first: the API the script called
        name = frame.get("name", "")
        kind = WAIT_CALLS.get(name) or WAIT_CALLS.get(name.rsplit(".", 1)[-1])
        if kind:
            call = name.rsplit(".", 1)[0] if name.endswith(".__init__") else name.rsplit(".", 1)[-1]
            return kind, call, where
    if any("rendezvous" in f.get("name", "") for f in frames):  # the agent itself, waiting for other nodes
        return "rendezvous", "the launcher's rendezvous", where
    return "running", None, where


def format_stack(frames: list[dict]) -> str:
    """Outermost call first, from the script's own first frame: the bootstrap and runpy that started it under
    `ddplab launch` are not part of its story."""
    outer = list(reversed(frames))
    while outer and _launcher_frame(outer[0].get("filename", "")):
        outer.pop(0)
    return "\n".join(
        f'  File "{f.get("filename")}", line {f.get("line")}, in {f.get("name")}'
        for f in (outer or list(reversed(frames)))
    )


def _launcher_frame(filename: str) -> bool:
    """The bootstrap that started the script, or ddplab's modules inside the rank (ddplab.inrank): they stand
    between the user's line and torch's in a traceback, and are not where the user's code failed."""
    return (
        filename.endswith(f"launcher{os.sep}bootstrap.py") or "runpy" in filename or bool(_RANK_HOOKS.search(filename))
    )


_RANK_HOOKS = re.compile(rf"[\\/]ddplab[\\/](?:{inrank.MODULES})")


def describe(stacks: list[RankStack], endpoint: str | None) -> str:
    """Where the ranks are stuck, in one sentence a person can act on."""
    if not stacks:
        return "no worker process was found"
    read = [s for s in stacks if s.error is None]
    if not read:
        return f"the ranks' stacks could not be read ({stacks[0].error})"
    ending = [s for s in read if s.kind == "teardown"]
    if ending:
        return "; ".join(
            f"rank {s.rank} is stuck in the process group's destructor (c10d::{s.call[1:]}::{s.call}) at {s.where or '?'}"
            + (f" ({s.native})" if s.native else "")
            for s in ending
        ) + (
            ": the group outlived destroy_process_group() and was destroyed later, with the GIL held, so it waits "
            "for its own worker threads to end, one of which waits for the GIL"
            if any("GIL" in s.native for s in ending)
            else ": destroying a group joins its worker threads, and one of them does not end"
        )
    waiting = [s for s in read if s.kind in WAITING]
    calls = {s.call for s in waiting}
    who = "both ranks are" if len(read) == 2 else ("the rank is" if len(read) == 1 else f"all {len(read)} ranks are")
    if len(waiting) == len(read) and len(calls) == 1:
        call = calls.pop()
        if call == "init_process_group":
            at = f" the launcher serves on {endpoint}" if endpoint else ""
            return f"{who} inside init_process_group: they never reached the rendezvous{at}"
        if call == "the launcher's rendezvous":
            return f"the launcher is waiting in rendezvous at {endpoint or '?'} for the other nodes to join"
        return (
            f"{who} inside {call}: each waits for a peer that never sends (a rank on another node, or ranks "
            "that called different collectives or shapes before)"
        )
    if waiting:
        stuck = ", ".join(f"rank {s.rank} in {s.call} ({s.where or '?'})" for s in waiting)
        others = [s for s in read if s.kind not in WAITING]
        if others:
            away = ", ".join(f"rank {s.rank} at {s.where or '?'}" for s in others)
            return f"{stuck} waits for the others, but {away} never joined it"
        return f"the ranks wait in different calls: {stuck}"
    return "no rank is in a distributed call: " + ", ".join(f"rank {s.rank} at {s.where or '?'}" for s in read)


def read_all(targets: list[tuple[int, int | None, int | None]]) -> list[RankStack]:
    """The stacks of (pid, rank, local_rank) processes, read side by side."""
    dumps = _side_by_side(dump_stack, [pid for pid, _, _ in targets])
    result = []
    for (pid, rank, local_rank), (frames, error) in zip(targets, dumps):
        if frames is None:
            result.append(RankStack(rank, local_rank, pid, "unknown", None, None, "", error))
            continue
        kind, call, where = classify(frames)
        result.append(RankStack(rank, local_rank, pid, kind, call, where, format_stack(frames)))
    return result


def brief(stack: str) -> str:
    """A stack for a person (`ddplab launch` on a hang): the script's own frames as they are; torch's frames below
    them folded into one line of names."""
    out, inside = [], []
    for line in stack.splitlines():
        m = re.match(r'\s*File "(.*)", line \d+, in (.*)', line)
        if m and f"{os.sep}torch{os.sep}" in m.group(1):
            name = m.group(2).rsplit(".", 1)[-1]
            if name != "wrapper":  # torch's logging decorators
                inside.append(name)
            continue
        if inside:
            out.append(f"      in torch: {' > '.join(inside)}")
            inside = []
        out.append(f"    {line.strip()}")
    if inside:
        out.append(f"      in torch: {' > '.join(inside)}")
    return "\n".join(out)
