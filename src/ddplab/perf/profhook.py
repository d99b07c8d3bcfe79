"""Rank side of `--profile`: torch.profiler over a window of a script's steps, with no change to the script.

A "step" of a plain script is found without its cooperation: the end of each `optimizer.step()`, seen through
torch's global optimizer hook (torch.optim.optimizer.register_optimizer_step_post_hook, torch >= 2.0; GradScaler
and LR schedulers call the same step). Only the first optimizer that steps counts, so a script with two optimizers
still gets one step per iteration. The profiler starts at the end of step SKIP (warm-up: first-step allocations,
DDP's bucket rebuild, a compile), calls profiler.step() at the end of each of the next STEPS steps (each step is a
`ProfilerStep#N` range in the trace: from one optimizer step's end to the next's), then stops and writes
DIR/rank<RANK>.trace.json (Chrome/Perfetto format, the profiler's export_chrome_trace) and DIR/rank<RANK>.json
(what the trace cannot say: DDP's settings, data loaders, threads, cores).

Installed through ddplab/boot/sitecustomize.py like the Flight Recorder's dump thread: it imports nothing heavy at
start-up; the hook is attached the moment the script's `import torch` loads torch.optim. Outside the window it
costs one Python call per optimizer step.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
import tempfile
import time

from ddplab import afterimport

DIR_ENV = "DDPLAB_PROFILE_DIR"
CONFIG = "config.json"  # written by the caller before the ranks start: {"steps": N, "skip": S}; absent = off
DEFAULT_STEPS = 5
DEFAULT_SKIP = 3

_state: dict = {}


def install() -> bool:
    """Arm the hook in a torchrun worker when the caller asked for a profile; False (nothing done) otherwise."""
    folder = os.environ.get(DIR_ENV)
    if _state or not folder or "LOCAL_RANK" not in os.environ:
        return bool(_state)
    try:
        with open(os.path.join(folder, CONFIG), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    _state.update(
        folder=folder,
        rank=int(os.environ.get("RANK", "0")),
        steps=int(config.get("steps", DEFAULT_STEPS)),
        skip=int(config.get("skip", DEFAULT_SKIP)),
        count=0,
        optimizer=None,
        prof=None,
        pid=os.getpid(),
    )
    # At once when torch is already loaded (a ddplab worker calls install() late), else as the script imports it.
    afterimport.when_imported("torch.optim.optimizer", _attach, "--profile hook")
    return True


def _attach(optimizer_module) -> None:
    optimizer_module.register_optimizer_step_post_hook(_after_step)


def _after_step(optimizer, args, kwargs) -> None:
    s = _state
    if s["optimizer"] is None:
        s["optimizer"] = id(optimizer)
    elif s["optimizer"] != id(optimizer):
        return
    s["count"] += 1
    n = s["count"] - s["skip"]
    try:
        if n == 0:
            _start()
        elif 0 < n <= s["steps"] and s["prof"] is not None:
            if n < s["steps"]:
                s["prof"].step()
            else:
                _finish()
    except Exception as e:  # noqa: BLE001 - never stop the user's training
        sys.stderr.write(f"ddplab: --profile stopped: {e}\n")
        s["prof"] = None


def _start() -> None:
    import resource

    import torch
    from torch.profiler import ProfilerAction, ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        activities.append(ProfilerActivity.CUDA)
    s = _state
    # A schedule (always record) makes the profiler mark each step as a ProfilerStep#N range; none would not.
    # record_shapes: the sizes of the script's own collectives (perf/profile_comm.py), a few µs per op.
    s["prof"] = profile(activities=activities, schedule=lambda step: ProfilerAction.RECORD, record_shapes=True)
    _mark_post_forward(True)
    s["rusage0"] = resource.getrusage(resource.RUSAGE_SELF)
    s["t0"] = time.perf_counter()
    _without_kineto_lines(s["prof"].start)
    import atexit

    atexit.register(_abandon, os.getpid())


# Kineto's own log lines, "USDT:2026-12-05 12:22:16 28448:28448 SyncActivityProfilerHandler.cpp:52] profiler_start"
# (and STAGE:, INFO:), written by C++ on fd 2 as the profiler starts and stops: news to nobody running a script.
# KINETO_LOG_LEVEL cannot drop USDT lines without dropping kineto's errors too (USDT is its highest level).
KINETO_LINE = re.compile(r"^(USDT|STAGE|INFO):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] ")


def _without_kineto_lines(call) -> None:
    """call() with fd 2 caught in a file, then everything it caught written back but kineto's own log lines. The file
    lives in memory (memfd: no file of the ranks' in /tmp, which the sanitizer would see as both ranks writing one)."""
    sys.stderr.flush()
    saved = os.dup(2)
    memfd = getattr(os, "memfd_create", None)
    with open(memfd("ddplab-kineto"), "w+b") if memfd else tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            call()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not KINETO_LINE.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def _abandon(owner: int) -> None:
    """The script ended inside the window: stop the profiler before torch shuts down (a profiler still running at
    interpreter exit crashes it: SIGSEGV) and write no trace; the caller says the window was not reached."""
    prof = _state.get("prof")
    if prof is not None and os.getpid() == owner:
        _state["prof"] = None
        _without_kineto_lines(prof.stop)
        _mark_post_forward(False)


def _finish() -> None:
    import resource

    prof, s = _state["prof"], _state
    _without_kineto_lines(prof.stop)
    _mark_post_forward(False)
    wall = time.perf_counter() - s["t0"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    r0 = s["rusage0"]
    base = os.path.join(s["folder"], f"rank{s['rank']}")
    prof.export_chrome_trace(base + ".trace.json.tmp")
    os.replace(base + ".trace.json.tmp", base + ".trace.json")
    exported = time.perf_counter()
    facts = {
        "rank": s["rank"],
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        "pid": os.getpid(),
        "skip": s["skip"],
        "steps": s["steps"],
        "window_s": wall,
        "cpu_s": (usage.ru_utime - r0.ru_utime) + (usage.ru_stime - r0.ru_stime),
        "involuntary_switches": usage.ru_nivcsw - r0.ru_nivcsw,
        **_environment(),
        **_objects(),
    }
    facts["export_s"] = time.perf_counter() - exported + (exported - s["t0"] - wall)  # the step that pays for it
    with open(base + ".json.tmp", "w", encoding="utf-8") as f:
        json.dump(facts, f)
    os.replace(base + ".json.tmp", base + ".json")
    s["prof"] = None


def _mark_post_forward(on: bool) -> None:
    """Inside the window only: DDP's work after the module's forward (with find_unused_parameters=True, a search of
    the whole autograd graph every step) as a named range; torch has no range of its own for it."""
    from torch.autograd.profiler import record_function
    from torch.nn.parallel import DistributedDataParallel as DDP

    original = DDP.__dict__.get("_post_forward")
    if on and original is not None and "ddplab" not in _state:

        def _post_forward(self, output):
            with record_function("DistributedDataParallel._post_forward"):
                return original(self, output)

        _state["ddplab"] = original
        DDP._post_forward = _post_forward
    elif not on and "ddplab" in _state:
        DDP._post_forward = _state.pop("ddplab")


def _environment() -> dict:
    import torch

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cores = os.cpu_count() or 1
    return {
        "threads": torch.get_num_threads(),
        "cores": cores,
        "machine_cores": os.cpu_count() or cores,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cuda": torch.cuda.is_available(),
    }


def _objects() -> dict:
    """DDP's own account of its settings and what it found (its logging data), and the data loaders' settings:
    found once, at the end of the window, among the live objects (the script never hands them to ddplab)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    ddps, loaders = [], []
    for obj in gc.get_objects():
        kind = type(obj)  # not isinstance: it would ask lazy module proxies for __class__ (and warn)
        if issubclass(kind, DistributedDataParallel):
            ddps.append(obj)
        elif issubclass(kind, DataLoader):
            loaders.append(obj)
    out = {"ddp": [], "loaders": []}
    for ddp in ddps:
        entry = {
            "find_unused_parameters": bool(ddp.find_unused_parameters),
            "bucket_cap_bytes": int(getattr(ddp, "bucket_bytes_cap", 0)),
            "gradient_as_bucket_view": bool(ddp.gradient_as_bucket_view),
            "static_graph": bool(getattr(ddp, "static_graph", False)),
            "param_bytes": sum(p.numel() * p.element_size() for p in ddp.parameters() if p.requires_grad),
            "params": sum(1 for p in ddp.parameters() if p.requires_grad),
        }
        try:
            data = ddp._get_ddp_logging_data()  # private, present since torch 1.9: optional
            entry["unused_parameter_size"] = int(data.get("unused_parameter_size", 0))
            sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
            entry["bucket_sizes"] = [int(x) for x in str(sizes).split(",") if x.strip()]
            entry["comm_hook"] = data.get("comm_hook", "")
        except Exception:  # noqa: BLE001
            pass
        out["ddp"].append(entry)
    for loader in loaders:
        out["loaders"].append(
            {
                "num_workers": int(loader.num_workers),
                "pin_memory": bool(loader.pin_memory),
                "batch_size": loader.batch_size,
            }
        )
    del torch
    return out
