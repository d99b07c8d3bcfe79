"""Whose collectives a rank waited for, from its trace: DDP's gradient buckets, or the script's own calls.

Every collective a rank starts is a `c10d::` op on its main thread (c10d::allreduce_, c10d::broadcast_, ...); the
work itself runs on the backend's threads (`gloo:`/`nccl:` ranges). A call made while DDP runs - inside its forward
(buffer broadcasts), inside backward (autograd hooks that all-reduce a full bucket), inside the reducer's end of
backward - is DDP's; any other is the script's own (a metric, a loss, a statistic of each parameter).
The exposed communication (profile.py: the time a collective ran while the rank computed nothing) is what the rank
sat waiting for: each exposed stretch belongs to the newest collective the main thread started before it, since a
rank waits for what it has asked for. Sizes come from the ops' recorded input shapes (record_shapes), in elements.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

OWNERS = ("ddp", "script")


@dataclass
class Collectives:
    """Per step, on one rank."""

    calls: dict = field(default_factory=lambda: dict.fromkeys(OWNERS, 0.0))  # owner -> calls per step
    exposed_ms: dict = field(default_factory=lambda: dict.fromkeys(OWNERS, 0.0))  # owner -> exposed ms per step
    ops: dict = field(default_factory=dict)  # the script's own: op name -> calls per step
    elements: list = field(default_factory=list)  # the script's own: elements per call (the window's calls)


def is_call(e: dict) -> bool:
    return e["name"].startswith("c10d::") and not e["name"].startswith("c10d::wait")


def elements(e: dict) -> int | None:
    """Elements the call moves, from its recorded input shapes ("Input Dims": [[dims of each tensor], ...])."""
    dims = (e.get("args") or {}).get("Input Dims")
    if not dims or not isinstance(dims[0], list):
        return None
    first = dims[0]
    tensors = first if first and isinstance(first[0], list) else [first]  # a TensorList, or one tensor
    return sum(math.prod(t) for t in tensors if isinstance(t, list))


def attribute(events: list, main, steps: list, ddp_spans: list, exposed: list) -> Collectives:
    """events: the trace's complete events; ddp_spans: (start, end) of DDP's forward, backward and reducer ranges on
    the main thread; exposed: the exposed-communication stretches (start, end) of every step."""
    n = max(len(steps), 1)
    in_steps = [(s["ts"], s["ts"] + s["dur"]) for s in steps]
    calls = sorted(
        (e for e in events if e["tid"] == main and is_call(e) and any(a <= e["ts"] < b for a, b in in_steps)),
        key=lambda e: e["ts"],
    )
    spans: list = []  # DDP's ranges merged: nested ones (a hook inside backward) are one stretch
    for a, b in sorted(ddp_spans):
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b))
        else:
            spans.append((a, b))
    starts = [a for a, _ in spans]

    def owner(e: dict) -> str:
        i = bisect.bisect_right(starts, e["ts"]) - 1
        return "ddp" if i >= 0 and e["ts"] < spans[i][1] else "script"

    result = Collectives()
    owners = [owner(e) for e in calls]
    for e, who in zip(calls, owners):
        result.calls[who] += 1 / n
        if who == "script":
            op = e["name"].removeprefix("c10d::").rstrip("_")
            result.ops[op] = result.ops.get(op, 0.0) + 1 / n
            size = elements(e)
            if size is not None:
                result.elements.append(size)
    times = [e["ts"] for e in calls]
    for a, b in exposed:
        i = bisect.bisect_right(times, a) - 1
        who = owners[i] if i >= 0 else "ddp"  # waited before any call of the step: the last step's DDP buckets
        result.exposed_ms[who] += (b - a) / 1000 / n
    return result


def mean(found: list[Collectives]) -> Collectives:
    """The ranks' mean, for the causes (calls and sizes are the same on every rank; waits differ)."""
    out = Collectives()
    for who in OWNERS:
        out.calls[who] = statistics.mean(c.calls[who] for c in found)
        out.exposed_ms[who] = statistics.mean(c.exposed_ms[who] for c in found)
    for c in found:
        for op, k in c.ops.items():
            out.ops[op] = max(out.ops.get(op, 0.0), k)
    out.elements = max((c.elements for c in found), key=len, default=[])
    return out


def sizes_text(sizes: list[int]) -> str:
    if not sizes:
        return "sizes not recorded"
    lo, hi = min(sizes), max(sizes)
    each = f"{lo:,} element(s)" if lo == hi else f"{lo:,} to {hi:,} elements (median {statistics.median(sizes):,.0f})"
    return f"{each} each"
