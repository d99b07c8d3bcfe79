"""What a careful engineer reads from a failure log when no rule knows the error: which rank failed first and how,
the exception, the last frame in the user's own code, which layer printed it and the one setting that makes that
layer say more. explain gives it with every answer, so that no log gets an empty one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddplab import inrank

FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)(?:, in (.+))?')
# Frames that are not the user's: the interpreter, installed packages, torch, ddplab's launcher and readers, and its
# modules inside the rank (ddplab.inrank; diagnose/ and dist.py: where older versions had them, for their logs).
LIBRARY_PATH = re.compile(
    r"site-packages|dist-packages|^<frozen |^<string>$|/lib/python3[.\d]*/|[\\/]torch[\\/]"
    rf"|[\\/]ddplab[\\/](?:launcher|explain|lint|diagnose|dist\.py|{inrank.MODULES})"
    r"|[\\/]bin[\\/](?:torchrun|accelerate|deepspeed|lightning|python[\d.]*)$"
)  # launchers' scripts
EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*?(?:Error|Exception|Interrupt|Exit|Warning|Timeout\w*)):?\s?(.*)$")
# Errors Python itself raises about the code (not about data, devices or other processes).
PYTHON_CODE_ERRORS = (
    "SyntaxError",
    "IndentationError",
    "TabError",
    "NameError",
    "UnboundLocalError",
    "AttributeError",
    "TypeError",
    "ImportError",
    "ModuleNotFoundError",
    "KeyError",
    "IndexError",
    "ValueError",
    "ZeroDivisionError",
    "AssertionError",
    "RecursionError",
    "NotImplementedError",
    "FileNotFoundError",
)

# Which layer printed an error, from its text or the innermost frames (first match wins, most specific first),
# and the one setting that makes that layer say more.
LAYERS: tuple[tuple[str, re.Pattern, str], ...] = (
    (
        "NCCL",
        re.compile(r"NCCL|nccl|ProcessGroupNCCL"),
        "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET (NCCL prints each step of its set-up and the transport it chose; "
        "NCCL_DEBUG_SUBSYS=ALL for everything)",
    ),
    (
        "CUDA",
        re.compile(r"CUDA|cuda|cuDNN|cudnn|CUBLAS|cublas|device-side assert"),
        "CUDA_LAUNCH_BLOCKING=1 (the error is reported at the call that caused it, not a later one)",
    ),
    (
        "gloo",
        re.compile(r"gloo|Gloo"),
        "TORCH_DISTRIBUTED_DEBUG=DETAIL (checks every collective's shapes and order across ranks before gloo runs it) "
        "and TORCH_CPP_LOG_LEVEL=INFO",
    ),
    (
        "the store",
        re.compile(r"TCPStore|FileStore|\b[Ss]tore\b|rendezvous|Rendezvous|c10d_rendezvous|socket"),
        "TORCH_CPP_LOG_LEVEL=INFO (TCPStore logs every connect and retry) and LOGLEVEL=INFO (torchrun's rendezvous)",
    ),
    (
        "FSDP",
        re.compile(r"[\\/]fsdp[\\/]|FullyShardedDataParallel|fully_shard|FSDP"),
        "TORCH_DISTRIBUTED_DEBUG=DETAIL (FSDP checks its parameters and collectives across ranks)",
    ),
    (
        "DDP",
        re.compile(r"nn[\\/]parallel[\\/]distributed\.py|DistributedDataParallel|[Rr]educer|reducer\.cpp"),
        "TORCH_DISTRIBUTED_DEBUG=DETAIL (DDP names the parameters that got no gradient and checks shapes across ranks)",
    ),
    (
        "the elastic launcher",
        re.compile(r"torch[\\/]distributed[\\/]elastic|torchrun|ChildFailedError"),
        "LOGLEVEL=INFO (torchrun says what its agent does: rendezvous, restarts, why it stopped the workers)",
    ),
    (
        "c10d",
        re.compile(r"distributed_c10d\.py|c10d|ProcessGroup"),
        "TORCH_DISTRIBUTED_DEBUG=DETAIL and TORCH_SHOW_CPP_STACKTRACES=1 (the C++ frame that raised it)",
    ),
)
NATIVE = (
    "native code",
    "TORCH_SHOW_CPP_STACKTRACES=1 (the C++ frames of the exception) and PYTHONFAULTHANDLER=1 (the Python "
    "frame of a crash)",
)
PYTHON = ("Python (the user's code)", "nothing to turn on: the traceback names the line; fix it there")


@dataclass
class Frame:
    file: str
    line: int
    function: str | None
    code: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" in {self.function}" if self.function else "")


@dataclass
class Reading:
    rank: int | None  # the rank that failed first, when the log says
    how: str | None  # its exit code's meaning
    exception: str | None  # "RuntimeError: ..." (type and message)
    exception_type: str | None
    user_frame: Frame | None  # the last frame in the user's own code
    layer: str  # NCCL, CUDA, gloo, the store, FSDP, DDP, the elastic launcher, c10d, native code, Python
    more: str  # the one setting that makes that layer say more
    user_code_error: bool = False  # a plain Python error in the user's own code
    attempts: int = 1  # elastic restarts seen in the log + 1
    closest: str | None = None  # the catalogue entry closest to the error, when a catalogue exists


def frames(lines: list[str]) -> list[Frame]:
    found = []
    for i, line in enumerate(lines):
        m = FRAME.match(line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not FRAME.match(lines[i + 1]) else None
            found.append(Frame(m.group(1), int(m.group(2)), m.group(3), code or None))
    return found


def is_user(frame: Frame) -> bool:
    return not LIBRARY_PATH.search(frame.file)


def read(
    block: list[str],
    rank: int | None,
    how: str | None,
    error: str | None,
    attempts: int = 1,
    involved: set[str] | None = None,
) -> Reading:
    """The reading of one rank's last traceback (`block`: its lines without prefixes, ending at its error line)."""
    error = error or next((line.strip() for line in reversed(block) if EXCEPTION.match(line.strip())), None)
    kind = None
    if error:
        m = EXCEPTION.match(error)
        kind = m.group(1).rsplit(".", 1)[-1] if m else None
    stack = frames(block)
    user = [f for f in stack if is_user(f)]
    last_user = user[-1] if user else None
    innermost_is_user = bool(stack) and is_user(stack[-1])
    user_code_error = kind in PYTHON_CODE_ERRORS and innermost_is_user
    layer, more = _layer(error or "", stack, user_code_error, how)
    return Reading(
        rank=rank,
        how=how,
        exception=error,
        exception_type=kind,
        user_frame=last_user,
        layer=layer,
        more=more,
        user_code_error=user_code_error,
        attempts=attempts,
        closest=_closest(error, involved),
    )


def _layer(error: str, stack: list[Frame], user_code_error: bool, how: str | None) -> tuple[str, str]:
    if user_code_error:
        return PYTHON
    for name, pattern, more in LAYERS:  # the message itself says most
        if pattern.search(error):
            return name, more
    for frame in reversed(stack):  # then the innermost library frame
        if is_user(frame):
            continue
        for name, pattern, more in LAYERS:
            if pattern.search(frame.file):
                return name, more
        break
    if not error and how and ("SIG" in how):
        return NATIVE
    if error.startswith("what():") or "terminate called" in error:
        return NATIVE
    if stack and is_user(stack[-1]):
        return PYTHON
    return ("Python", "PYTHONFAULTHANDLER=1 and TORCH_SHOW_CPP_STACKTRACES=1 (where it stopped, Python and C++)")


def _closest(error: str | None, involved: set[str] | None = None) -> str | None:
    """The catalogue's nearest entry, when the message catalogue (ddplab.explain.catalogue) exists: only from the
    layers the log involves (NCCL's sources only for a log that mentions NCCL; `involved` None: all)."""
    if not error:
        return None
    try:
        from ddplab.explain import catalogue
    except ImportError:
        return None
    closest = getattr(catalogue, "closest", None)
    try:
        sources = None if involved is None else tuple(s for s in catalogue.SOURCES if s != "nccl" or "nccl" in involved)
        found = closest(error, sources=sources) if callable(closest) else None
    except Exception:  # a catalogue problem must not take explain down with it
        return None
    return str(found) if found else None
