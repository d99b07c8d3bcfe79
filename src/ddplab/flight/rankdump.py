"""Worker side of hang forensics: dump this rank's Flight Recorder on request, with no change to the user's script.

PyTorch records every collective in a ring buffer (TORCH_FR_BUFFER_SIZE entries) but dumps it by itself only for
NCCL on a watchdog timeout; gloo never dumps, and a blocked rank cannot be asked from Python: a signal handler runs
on the main thread, which sits in C++ (work.wait()) for as long as the hang lasts. So `install()` starts a daemon
thread that polls one file, DIR/request; when its content changes, the thread writes this rank's record to
DIR/rank<RANK>.json. The dump call releases nothing the main thread holds (the main thread waits with the GIL
released), which is what makes this work. The same record is written at exit (atexit), so a rank that dies of a
Python exception, or whose collective failed, leaves its last state behind.

Installed in every torchrun worker through ddplab/boot/sitecustomize.py on PYTHONPATH (see reader.worker_env), or by
calling install() first thing in a worker. Import-light on purpose: it runs at every worker's start-up and imports
neither torch nor ddplab's other modules; torch is touched only when a dump is asked for and only if the script
imported it already.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

DIR_ENV = "DDPLAB_FR_DIR"
OWNER_ENV = "DDPLAB_FR_OWNER"  # pid of the worker that installed: its children (DataLoader spawn) must not answer
REQUEST_FILE = "request"
POLL_S = 0.2  # one stat+read per poll; a request is answered within this plus the dump itself
# Dump functions, in the order they are read. PyTorch has had two recorders: ProcessGroupNCCL's own
# (_dump_nccl_trace_json, torch >= 2.5, CUDA builds only) and the generic one gloo writes to (_dump_fr_trace_json,
# torch >= 2.8, every build). Both are read and merged; the analysis drops duplicates.
DUMP_FUNCTIONS = ("_dump_fr_trace_json", "_dump_nccl_trace_json")

_installed = False
_uncaught: str | None = None


def install() -> bool:
    """Start the dump thread in this torchrun worker; False (doing nothing) anywhere else."""
    global _installed
    dump_dir = os.environ.get(DIR_ENV)
    rank = os.environ.get("RANK")
    # LOCAL_RANK marks a torchrun worker: the agent (torchrun itself) reads the same sitecustomize and must not dump.
    if _installed or not dump_dir or rank is None or "LOCAL_RANK" not in os.environ:
        return _installed
    owner = os.environ.get(OWNER_ENV)
    if owner and owner != str(os.getpid()):
        return False
    os.environ[OWNER_ENV] = str(os.getpid())
    _installed = True
    request = os.path.join(dump_dir, REQUEST_FILE)
    seen = _read(request)  # a request older than this worker (a restarted one) is not for it
    threading.Thread(target=_watch, args=(dump_dir, rank, request, seen), name="ddplab-fr-dump", daemon=True).start()
    previous_hook = sys.excepthook

    def remember(kind, value, tb):
        global _uncaught
        _uncaught = f"{kind.__name__}: {value}".strip().splitlines()[0][:500] if value is not None else kind.__name__
        previous_hook(kind, value, tb)

    sys.excepthook = remember
    atexit.register(_at_exit, dump_dir, rank, os.getpid())
    return True


def _at_exit(dump_dir: str, rank: str, owner: int) -> None:
    # A child made by os.fork() inherits atexit handlers; its record would overwrite the rank's own.
    if os.getpid() == owner:
        write_dump(dump_dir, rank, "exit")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _watch(dump_dir: str, rank: str, request: str, seen: str | None) -> None:
    while True:
        time.sleep(POLL_S)
        current = _read(request)
        if current and current != seen:
            seen = current
            write_dump(dump_dir, rank, current)


def collect(trigger: str) -> dict:
    """This process's record: what the Flight Recorder holds, or why there is none."""
    record: dict = {
        "rank": int(os.environ.get("RANK", -1)),
        "pid": os.getpid(),
        "trigger": trigger,
        "time": time.time(),
        "torch": None,
        "traces": {},
        "why": None,
        "uncaught": _uncaught,
    }
    torch = sys.modules.get("torch")  # importing torch here could race the main thread's own import of it
    if torch is None:
        record["why"] = "the script had not imported torch yet"
        return record
    record["torch"] = getattr(torch, "__version__", None)
    try:
        import torch._C._distributed_c10d as c10d
    except Exception as e:  # noqa: BLE001 - a torch built without distributed support
        record["why"] = f"torch.distributed is not available in this build ({e})"
        return record
    for name in DUMP_FUNCTIONS:
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        try:
            raw = fn()
            # Kept as torch's JSON text and spliced into the file as is: parsing and re-encoding up to a megabyte
            # of JSON would add to the dump's own cost (docs/flight.md), paid while a launcher waits.
            record["traces"][name] = _Raw(raw.decode() if isinstance(raw, bytes) else raw)
        except Exception as e:  # noqa: BLE001 - one recorder failing must not cost the other
            record["traces"][name] = {"error": f"{type(e).__name__}: {e}"}
    if not record["traces"]:
        record["why"] = (
            f"torch {record['torch']} has no Flight Recorder dump function "
            f"({' or '.join(DUMP_FUNCTIONS)}); gloo is recorded from torch 2.8"
        )
    return record


class _Raw(str):
    """A JSON text to write as it is."""


def _encode(record: dict) -> str:
    traces = record.pop("traces")
    head = json.dumps(record)[:-1]  # the object without its closing brace
    body = ", ".join(f"{json.dumps(name)}: {t if isinstance(t, _Raw) else json.dumps(t)}" for name, t in traces.items())
    return f'{head}, "traces": {{{body}}}}}'


def write_dump(dump_dir: str, rank: str, trigger: str) -> None:
    """Write the record to DIR/rank<RANK>.json atomically (a reader never sees half a file)."""
    try:
        record = collect(trigger)
    except Exception as e:  # noqa: BLE001 - a diagnostic must never take the rank down
        record = {
            "rank": int(rank),
            "pid": os.getpid(),
            "trigger": trigger,
            "time": time.time(),
            "traces": {},
            "why": f"dump failed: {type(e).__name__}: {e}",
            "uncaught": _uncaught,
        }
    path = os.path.join(dump_dir, f"rank{rank}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(_encode(record))
        os.replace(tmp, path)
    except OSError as e:
        sys.stderr.write(f"ddplab: could not write the Flight Recorder dump {path}: {e}\n")
