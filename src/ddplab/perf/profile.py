"""`--profile`: each rank's step split into its parts, the straggler named, the causes of lost speed ranked.

Read from the Chrome traces the ranks wrote (ddplab/perf/profhook.py) and the facts beside them. Definitions,
the same for every rank and every part, so that the parts stay within the whole:
- a step: a `ProfilerStep#N` range, from the end of one optimizer.step() to the end of the next;
- data wait: the DataLoader's `__next__` ranges; forward: `DistributedDataParallel.forward` (DDP's own range;
  `_post_forward` apart, where find_unused_parameters searches the graph); backward: autograd's
  `evaluate_function` ranges; optimizer: `Optimizer.step#` and `Optimizer.zero_grad#`;
- exposed communication: the time a collective was running (`gloo:`/`nccl:` ranges, on the backend's threads)
  while this rank computed none of the above: what the rank sat waiting for, slower ranks included;
- host syncs: main-thread time outside those parts in a stretch that holds a synchronising op (`.item()`:
  `aten::_local_scalar_dense`; on a GPU the CUDA runtime's synchronising calls, behind `.cpu()` and printing a
  tensor): a GPU's host waits there for the device, a CPU's spends it formatting and converting;
- other: the rest of the step (Python between the parts, the loss, logging).
Each part is a union of intervals clipped to the step, and the parts are taken in that order, each minus the
ones before it: they sum to the step exactly.

Holistic Trace Analysis was judged and not used: its breakdowns are built on GPU kernels (its temporal breakdown
keeps rows with a CUDA stream, breakdown_analysis.py:650 in 0.5.0), so a CPU/gloo trace has nothing to read, and it
requires pandas, plotly, jupyterlab and pytest at run time.
"""

from __future__ import annotations

import bisect
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ddplab.perf import profhook, profile_comm

PARTS = ("data", "forward", "ddp_post_forward", "backward", "optimizer", "comm_exposed", "host_sync", "other")
LABELS = {
    "data": "data wait",
    "forward": "forward",
    "ddp_post_forward": "DDP after forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "comm_exposed": "exposed comm",
    "host_sync": "host syncs",
    "other": "other",
}
SYNC_OPS = ("aten::_local_scalar_dense", "aten::item")
CUDA_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
DEFAULT_BUCKET_BYTES = 25 * 2**20  # DDP's bucket_cap_mb default
COMPUTE_PARTS = ("forward", "backward", "optimizer")  # a rank's own compute
CONSISTENT = 0.8  # a straggler is the busiest rank in at least this share of the profiled steps
MIN_SHARE = 0.05  # a cause worth less than this share of the step is not listed: below the run-to-run noise


@dataclass
class RankBreakdown:
    rank: int
    steps: int
    step_ms: float
    parts: dict  # part -> ms per step (PARTS)
    allreduces_per_step: float
    forwards_per_step: float
    trace: str
    busy_ms: list = field(default_factory=list)  # each step's time less its exposed communication
    collectives: profile_comm.Collectives = field(default_factory=profile_comm.Collectives)  # whose, how many


@dataclass
class Cause:
    key: str
    title: str
    evidence: str
    fix: str
    gain_ms: float  # expected time saved per step
    gain_share: float  # of the step


@dataclass
class Profile:
    folder: str
    ranks: list[RankBreakdown] = field(default_factory=list)
    straggler: int | None = None
    causes: list[Cause] = field(default_factory=list)
    plot: str | None = None
    problem: str | None = None  # why there is nothing to show
    parts_named: list[str] = field(default_factory=list)  # each part above MIN_SHARE: what it is, which cause

    def show(self, con) -> None:
        render(con, self)


def request(folder: Path, steps: int, skip: int = profhook.DEFAULT_SKIP) -> None:
    """Ask the ranks (before they start) to profile `steps` steps after `skip` warm-up steps."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / profhook.CONFIG).write_text(json.dumps({"steps": steps, "skip": skip}))


def analyse(folder: Path, plot: bool = True) -> Profile:
    folder = Path(folder)
    result = Profile(folder=str(folder))
    facts = {}
    for path in sorted(folder.glob("rank*.trace.json")):
        rank = int(path.name[4:].split(".")[0])
        meta = path.with_name(f"rank{rank}.json")
        try:
            facts[rank] = json.loads(meta.read_text())
            result.ranks.append(breakdown(json.loads(path.read_text()), rank, str(path)))
        except (OSError, ValueError, KeyError) as e:
            result.problem = f"rank {rank}'s trace could not be read: {e}"
    result.ranks.sort(key=lambda r: r.rank)
    if not result.ranks:
        config = json.loads((folder / profhook.CONFIG).read_text()) if (folder / profhook.CONFIG).exists() else {}
        result.problem = result.problem or (
            f"no rank wrote a trace: the script made fewer than {config.get('skip', 3) + config.get('steps', 5)} "
            "optimizer steps (warm-up + window), or never called optimizer.step(); lower --profile STEPS"
        )
        return result
    result.straggler = straggler(result.ranks)
    result.causes = causes(result.ranks, facts, result.straggler)
    result.parts_named = name_parts(result.ranks, result.causes)
    if plot:
        from ddplab.perf.profile_plot import breakdown_png

        result.plot = str(breakdown_png(result, folder / "breakdown.png"))
    return result


# ------------------------------------------------------------------------------------------------ one rank


def breakdown(trace: dict, rank: int, path: str = "") -> RankBreakdown:
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    if not steps:
        raise KeyError("no ProfilerStep ranges")
    main = steps[0]["tid"]
    names = {  # in the order they are taken: _post_forward runs inside DDP's forward range
        "data": lambda e: e["name"].startswith("enumerate(DataLoader)"),
        "ddp_post_forward": lambda e: e["name"] == "DistributedDataParallel._post_forward",
        "forward": lambda e: e["name"] == "DistributedDataParallel.forward",
        "backward": lambda e: e["name"].startswith("autograd::engine::evaluate_function"),
        "optimizer": lambda e: e["name"].startswith(("Optimizer.step#", "Optimizer.zero_grad#")),
    }
    spans = {part: [_span(e) for e in events if test(e)] for part, test in names.items()}
    comm = [_span(e) for e in events if e["name"].startswith(("gloo:", "nccl:")) and e["tid"] != main]
    # DDP's end of backward counts as backward, but not while the all-reduces it waits for still run (exposed)
    bursts = _reducer_bursts(events, main, [x for part in names for x in spans[part]])
    spans["backward"] += _subtract(bursts, _union(comm))
    syncs = [_span(e) for e in events if e["tid"] == main and _is_sync(e)]
    totals = dict.fromkeys(PARTS, 0.0)
    busy = []
    exposed_all: list = []
    for step in steps:
        window = [_span(step)]
        taken: list = []
        for part in names:
            mine = _subtract(_clip(spans[part], window), taken)
            totals[part] += _length(mine)
            taken = _union(taken + mine)
        exposed = _subtract(_clip(comm, window), taken)
        totals["comm_exposed"] += _length(exposed)
        exposed_all += exposed
        busy.append((step["dur"] - _length(exposed)) / 1000)
        taken = _union(taken + exposed)
        gaps = _subtract(window, taken)
        host = [g for g in gaps if any(s[0] < g[1] and s[1] > g[0] for s in syncs)]
        totals["host_sync"] += _length(host)
        totals["other"] += _length(gaps) - _length(host)
    n = len(steps)
    step_ms = sum(s["dur"] for s in steps) / n / 1000
    in_steps = lambda e: any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)  # noqa: E731
    calls = sum(1 for e in events if e["name"] == "c10d::allreduce_" and in_steps(e))
    forwards = sum(1 for e in events if names["forward"](e) and in_steps(e))
    reducer = [_span(e) for e in events if e["tid"] == main and e["name"].startswith("torch.distributed.ddp.")]
    ddp_spans = spans["forward"] + spans["ddp_post_forward"] + spans["backward"] + reducer
    return RankBreakdown(
        rank=rank,
        steps=n,
        step_ms=step_ms,
        parts={k: v / n / 1000 for k, v in totals.items()},
        allreduces_per_step=calls / n,
        forwards_per_step=forwards / n,
        trace=path,
        busy_ms=busy,
        collectives=profile_comm.attribute(events, main, steps, ddp_spans, exposed_all),
    )


def _reducer_bursts(events: list, main, named: list) -> list:
    """DDP's end of backward (Reducer::finalize_backward: one C++ call at the end of loss.backward(), after it has
    waited for the buckets' all-reduces): the averaged buckets are copied into each .grad (`reducer::
    copy_bucket_to_grad` ranges) and, with find_unused_parameters, the used-parameter map is read with .item() before
    each copy - DDP's own host reads, not the loop's. A burst: consecutive reducer ranges of the main thread with no
    part of the step (forward, backward, data, optimizer) starting between them, from the first operation the main
    thread ran after the part before it (the wait itself is left to the exposed communication)."""
    reducer = sorted(
        _span(e) for e in events if e["tid"] == main and e["name"].startswith("torch.distributed.ddp.reducer::")
    )
    starts = sorted(a for a, _ in named)
    ends = sorted(b for _, b in named)
    ops = sorted(e["ts"] for e in events if e["tid"] == main and not e["name"].startswith("ProfilerStep#"))
    bursts: list = []
    for a, b in reducer:
        i = bisect.bisect_left(starts, bursts[-1][1]) if bursts else 0
        if bursts and not (i < len(starts) and starts[i] < a):  # no part of the step starts in between
            bursts[-1] = (bursts[-1][0], max(bursts[-1][1], b))
            continue
        before = ends[bisect.bisect_right(ends, a) - 1] if ends and ends[0] <= a else a
        first = ops[bisect.bisect_left(ops, before)]  # exists: the reducer range itself is one
        bursts.append((min(a, first), b))
    return bursts


def _is_sync(e: dict) -> bool:
    # .item() is aten::_local_scalar_dense; .cpu() of a device tensor and printing one end in a CUDA runtime call
    # that blocks the host until the device is done (CPU-only traces have none of those).
    return e["name"] in SYNC_OPS or (e.get("cat") == "cuda_runtime" and e["name"] in CUDA_SYNCS)


def _span(e: dict) -> tuple[float, float]:
    return (e["ts"], e["ts"] + e["dur"])


def _union(spans: list) -> list:
    out: list = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _clip(spans: list, window: list) -> list:
    ((lo, hi),) = window
    return _union([(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi])


def _subtract(spans: list, taken: list) -> list:
    out = []
    for a, b in _union(spans):
        for c, d in taken:
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out


def _length(spans: list) -> float:
    return sum(b - a for a, b in spans)


# ------------------------------------------------------------------------------------------------ the run


def straggler(ranks: list[RankBreakdown]) -> int | None:
    """The rank the others wait for: the one busiest (its step less its exposed communication) in most steps.
    A rank slowed by its own work is the busiest in (nearly) every step; one that the OS happened to deschedule
    once is not: a rank busiest in fewer than CONSISTENT of the steps is no straggler, whatever its mean."""
    if len(ranks) < 2:
        return None
    n = min(len(r.busy_ms) for r in ranks)
    if n == 0:
        return None
    firsts = [max(ranks, key=lambda r: r.busy_ms[i]).rank for i in range(n)]
    top = max(set(firsts), key=firsts.count)
    return top if firsts.count(top) >= CONSISTENT * n else None


def causes(ranks: list[RankBreakdown], facts: dict, slow: int | None) -> list[Cause]:
    """Every cause the profile shows, with its fix and expected gain (ms per step), most gain first."""
    step = statistics.median(r.step_ms for r in ranks)
    mean = {p: statistics.mean(r.parts[p] for r in ranks) for p in PARTS}
    any_facts = next(iter(facts.values()), {})
    ddp = (any_facts.get("ddp") or [{}])[0]
    loaders = any_facts.get("loaders") or []
    out: list[Cause] = []
    slow_part = None  # the part of a step in which the straggler exceeds the others most

    def add(key, title, evidence, fix, gain):
        out.append(Cause(key, title, evidence, fix, gain, gain / step if step else 0.0))

    if loaders:
        workers = min(entry["num_workers"] for entry in loaders)
        if workers == 0:
            fix = (
                "DataLoader(..., num_workers=N, persistent_workers=True) with N >= 1 (up to this rank's cores): "
                "batches are then made while the model trains"
                + (", and pin_memory=True on a GPU" if any_facts.get("cuda") else "")
            )
        else:
            fix = (
                f"the loader has {workers} worker(s) and still keeps the step waiting: more workers, a larger "
                "prefetch_factor, or a cheaper __getitem__ (decode/resize once, ahead of training)"
            )
        add(
            "data",
            "slow data loading",
            f"the step waits {mean['data']:.2f} ms for the next batch (num_workers={workers})",
            fix,
            mean["data"],
        )
    if slow is not None:
        others = [r for r in ranks if r.rank != slow]
        wait = statistics.median(r.parts["comm_exposed"] for r in others)
        mine = next(r for r in ranks if r.rank == slow)
        extra = max(
            ((p, mine.parts[p] - statistics.median(r.parts[p] for r in others)) for p in PARTS if p != "comm_exposed"),
            key=lambda kv: kv[1],
        )
        slow_part = extra[0]
        # What the others wait per step: the straggler's excess over the others' median, step by step, and its
        # median (one step the OS took from a rank does not make a cause).
        n = min(len(r.busy_ms) for r in ranks)
        excess = [mine.busy_ms[i] - statistics.median(r.busy_ms[i] for r in others) for i in range(n)]
        gain = max(statistics.median(excess), 0.0) if excess else 0.0
        add(
            "straggler",
            f"rank {slow} is slower than the others",
            f"the other rank(s) wait {wait:.2f} ms per step in communication for rank {slow}, whose "
            f"{LABELS[extra[0]]} takes {extra[1]:.2f} ms more than theirs"
            + (" (compute)" if slow_part in COMPUTE_PARTS else ""),
            f"find what rank {slow} does that the others do not (code under `if rank == {slow}`, uneven data, "
            "logging or checkpointing on one rank, another process on its core or GPU) and spread or remove it",
            gain,
        )
    if mean["host_sync"] > 0:
        add(
            "host_sync",
            "host syncs in the loop",
            f"{mean['host_sync']:.2f} ms per step around .item()/.cpu()/printing a tensor",
            "keep the loss on the device: accumulate it as a tensor and call .item() or print "
            "only every N steps (on a GPU each sync stalls the queue of kernels)",
            mean["host_sync"],
        )
    comm_cost = mean["comm_exposed"]
    buckets = len(ddp.get("bucket_sizes") or []) or None
    calls = statistics.mean(r.allreduces_per_step for r in ranks)
    forwards = statistics.mean(r.forwards_per_step for r in ranks)
    if ddp and buckets and ddp.get("bucket_cap_bytes", DEFAULT_BUCKET_BYTES) < DEFAULT_BUCKET_BYTES:
        ideal = max(1, -(-ddp["param_bytes"] // DEFAULT_BUCKET_BYTES))
        if buckets > 2 * ideal:
            add(
                "buckets",
                "gradient buckets too small",
                f"bucket_cap_mb={ddp['bucket_cap_bytes'] / 2**20:g} "
                f"cuts {ddp['param_bytes'] / 2**20:.1f} MiB of gradients into {buckets} all-reduces per step "
                f"(the default 25 MiB: {ideal}); each pays the collective's fixed latency",
                "leave bucket_cap_mb at its default (25) or raise it; gradient_as_bucket_view=True saves a copy per "
                "bucket, static_graph=True lets DDP order buckets by the gradients' real arrival",
                comm_cost * (1 - ideal / buckets),
            )
    if ddp.get("find_unused_parameters") and ddp.get("unused_parameter_size", 1) == 0:
        extra_calls = max(calls - forwards * (buckets or 1), 0)
        add(
            "unused",
            "find_unused_parameters=True with no unused parameter",
            f"DDP searched the autograd graph after every forward ({mean['ddp_post_forward']:.2f} ms per step) and "
            "found nothing unused; the flag also costs an extra all-reduce of the used-parameter map",
            "DistributedDataParallel(..., find_unused_parameters=False) (the default)",
            mean["ddp_post_forward"] + (comm_cost / calls * extra_calls if calls else 0.0),
        )
    if forwards > 1.5 and buckets and calls >= forwards * buckets - 0.5:
        add(
            "no_sync",
            "gradient accumulation without no_sync",
            f"{forwards:.0f} forward/backward passes per optimizer step and {calls:.0f} all-reduces: every micro-"
            "batch all-reduces its gradients, only the last one needs to",
            "wrap every micro-batch but the last in `with model.no_sync():` (or set "
            "model.require_backward_grad_sync = False for them)",
            comm_cost * (1 - 1 / forwards),
        )
    _communication(add, ranks, ddp, {c.key for c in out}, step)
    threads, cores = any_facts.get("threads", 1), any_facts.get("cores", 1)
    local = any_facts.get("local_world_size", 1)
    if threads * local > cores:
        busy = mean["forward"] + mean["backward"] + mean["optimizer"]
        over = threads * local / cores
        add(
            "threads",
            "more CPU threads than cores",
            f"{local} rank(s) x {threads} intra-op threads on {cores} "
            f"cores ({over:.1f}x oversubscribed): threads wait for each other and for the core",
            f"OMP_NUM_THREADS={max(cores // local, 1)} (cores / ranks on this machine) or "
            f"torch.set_num_threads({max(cores // local, 1)})",
            busy * (1 - 1 / over),
        )
    by_key = {c.key: c for c in out}
    if "straggler" in by_key:
        # One cause, not two: a rank slower in its own compute on an oversubscribed machine (the OS shares the cores
        # unevenly between the ranks' threads), or slower in the host syncs every rank makes (printing on a busy
        # machine: whichever rank's output waits longer lags).
        owner = "threads" if slow_part in COMPUTE_PARTS else "host_sync" if slow_part == "host_sync" else None
        if owner in by_key:
            lagging = by_key["straggler"]
            _fold(
                out, lagging, by_key[owner], f"it also makes {lagging.title} ({lagging.gain_ms:.2f} ms per step)", step
            )
    if "threads" in by_key and "ddp_comm" in by_key and not any_facts.get("cuda"):
        # On CPU ranks gloo's all-reduce runs on threads that queue for the same oversubscribed cores, and each rank's
        # compute stalls unevenly, so the ranks wait for each other at the all-reduce: the same cause, said once.
        waited = by_key["ddp_comm"]
        said = f"the ranks also wait {2 * waited.gain_ms:.2f} ms per step for DDP's all-reduce"
        _fold(out, waited, by_key["threads"], said, step)
    out = [c for c in out if c.gain_share >= MIN_SHARE]
    return sorted(out, key=lambda c: -c.gain_ms)


def _fold(out: list[Cause], part: Cause, into: Cause, said: str, step: float) -> None:
    """`part` is an effect of `into`: one cause in the list, with the larger of the two gains."""
    out.remove(part)
    into.evidence += f"; {said}"
    into.gain_ms = max(into.gain_ms, part.gain_ms)
    into.gain_share = into.gain_ms / step if step else 0.0


EVERY_N = 10  # "reduce every N steps": the gain counted for it


def _communication(add, ranks: list[RankBreakdown], ddp: dict, named: set, step: float) -> None:
    """The exposed communication, by whose collectives it waited for (profile_comm): the script's own calls, and
    DDP's gradient buckets when no more precise cause (small buckets, unused-parameter search, accumulation
    without no_sync, a straggler) has named it already."""
    comm = profile_comm.mean([r.collectives for r in ranks])
    own, k = comm.exposed_ms["script"], comm.calls["script"]
    if k > 0 and own > 0:
        ops = ", ".join(f"{op} x{n:.0f}" for op, n in sorted(comm.ops.items(), key=lambda kv: -kv[1]))
        batch = k >= 2
        add(
            "own_collectives",
            f"the script's own collectives: {k:.0f} per step",
            f"besides DDP's {comm.calls['ddp']:.0f} gradient all-reduce(s), the script itself calls {ops} per step "
            f"(not DDP: outside its forward and backward), {profile_comm.sizes_text(comm.elements)}; the ranks wait "
            f"{own:.2f} ms per step for them, and each call pays the collective's fixed latency",
            (
                "batch them into one tensor: torch.stack (or torch.cat of flattened tensors), one all_reduce, then "
                "index the result; "
                if batch
                else ""
            )
            + f"or reduce only every N steps (e.g. {EVERY_N}), or only the values that are logged, when they are",
            own * (1 - 1 / k) if batch else own * (1 - 1 / EVERY_N),
        )
    waited = comm.exposed_ms["ddp"]
    if waited > 0 and not named & {"buckets", "unused", "no_sync", "straggler"}:
        buckets = len(ddp.get("bucket_sizes") or []) or round(comm.calls["ddp"]) or 1
        grads = f" ({ddp['param_bytes'] / 2**20:.1f} MiB of gradients)" if ddp.get("param_bytes") else ""
        add(
            "ddp_comm",
            "DDP's gradient all-reduce is not hidden behind backward",
            f"{comm.calls['ddp']:.0f} all-reduce(s) per step in {buckets} bucket(s){grads}; the ranks wait "
            f"{waited:.2f} ms per step for them after their backward (the gain counted: half of it, an estimate; "
            "all of it if fully hidden)",
            "more compute per byte sent: a larger batch per rank, or gradient accumulation with no_sync; fewer bytes: "
            "a compression hook (ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)); a faster link "
            "(NCCL on GPUs); gradient_as_bucket_view=True and static_graph=True let buckets start sooner",
            waited / 2,
        )


COVERS = {  # which causes explain a part of the step
    "data": {"data"},
    "comm_exposed": {"own_collectives", "ddp_comm", "buckets", "unused", "no_sync", "straggler"},
    "host_sync": {"host_sync"},
    "ddp_post_forward": {"unused"},
    "forward": {"threads"},
    "backward": {"threads"},
    "optimizer": {"threads"},
    "other": set(),
}
WHAT = {  # a part no cause explains: what it is
    "forward": "the model's own compute (the work itself: a smaller model or batch, or faster kernels, shrink it)",
    "backward": "the model's own compute (gradients: about twice the forward's work)",
    "optimizer": "the optimizer's update (a fused or foreach optimizer, fewer parameter tensors, shrink it)",
    "ddp_post_forward": "DDP's bookkeeping after forward",
    "other": "Python between the parts: the loss, logging, metrics, the loop itself (the traces show which op)",
    "data": "waiting for the next batch",
    "host_sync": "host syncs (.item(), .cpu(), printing a tensor)",
    "comm_exposed": "waiting for collectives",
}


def name_parts(ranks: list[RankBreakdown], found: list[Cause]) -> list[str]:
    """Each part worth MIN_SHARE of the step or more, with the cause above that explains it or, where none does,
    what it is: no large share of the step goes unnamed."""
    step = statistics.median(r.step_ms for r in ranks)
    keys = [c.key for c in found]
    lines = []
    for part in PARTS:
        ms = statistics.mean(r.parts[part] for r in ranks)
        if not step or ms / step < MIN_SHARE:
            continue
        by = [i + 1 for i, key in enumerate(keys) if key in COVERS[part]]
        what = f"cause {', '.join(map(str, by))} above" if by else WHAT[part]
        lines.append(f"{LABELS[part]} {100 * ms / step:.0f} %: {what}")
    return lines


def render(con, p: Profile) -> None:
    if p.problem and not p.ranks:
        con.print(f"profile: {p.problem}", markup=False)
        return
    from ddplab import report

    columns = [
        report.Column("rank"),
        report.Column("step ms"),
        *[report.Column(LABELS[k], drop=1 if k == "ddp_post_forward" else 0) for k in PARTS],
    ]
    rows = [
        [
            str(r.rank) + (" (straggler)" if r.rank == p.straggler else ""),
            f"{r.step_ms:.2f}",
            *[f"{r.parts[k]:.2f}" for k in PARTS],
        ]
        for r in p.ranks
    ]
    con.print(f"profile: ms per step over {p.ranks[0].steps} steps, each part apart (they sum to the step)")
    table, _ = report.fit_table(con.width, columns, rows, box=None)
    con.print(table)
    if not p.causes:
        con.print("causes: none worth more than 5 % of the step")
    for i, c in enumerate(p.causes, 1):
        speedup = 1 / max(1 - c.gain_share, 1e-6)
        con.print(f"{i}. {c.title}: {c.evidence}", markup=False)
        con.print(f"   fix: {c.fix}", markup=False)
        con.print(
            f"   expected gain: {c.gain_ms:.2f} ms per step ({100 * c.gain_share:.0f} % of it, {speedup:.2f}x)",
            markup=False,
        )
    if p.parts_named:
        con.print("the step's parts above 5 %: " + "; ".join(p.parts_named), markup=False)
    con.print(f"traces (ui.perfetto.dev, chrome://tracing, TensorBoard): {p.folder}/rank*.trace.json", markup=False)
    if p.plot:
        con.print(f"picture: {p.plot}", markup=False)
