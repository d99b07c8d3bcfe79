"""Hang forensics per collective, from PyTorch's Flight Recorder: which collective each rank last called and last
completed (sequence number, op, shapes, dtype), and one line saying where the ranks part ways.

Launcher side (no torch import). The workers record because worker_env() sets TORCH_FR_BUFFER_SIZE, and answer
dump requests through rankdump.py, which ddplab/boot/sitecustomize.py installs (put on their PYTHONPATH by worker_env()
too):

    env.update(flight.worker_env(dump_dir))          # before the workers start
    ...                                              # the watchdog decides the run hangs
    dumps = flight.request_dumps(dump_dir, ranks=range(world_size), timeout=5)
    report = flight.analyse(dumps, world_size, stacks={rank: "train.py:88 in load_batch"})
    print(flight.render(report)); json.dumps(report.to_dict())

After a run that failed instead of hanging, read_dumps(dump_dir) returns what each rank wrote at exit, and
analyse(dumps, world_size, errors={rank: its last error line}) adds what the launcher saw of ranks that died
without a record (a gloo size mismatch ends its rank in std::terminate).
What a Flight Recorder entry holds is described in docs/flight.md; the field names are PyTorch's
(torch/csrc/distributed/c10d/FlightRecorderDetail.hpp, dump format version 2.x).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ddplab.flight import rankdump

# Entries per rank when the user set none. PyTorch's tutorial suggests 2000, but a dump's cost grows faster than
# its size (benchmarks/flight_dump_cost.py, torch 2.13 CPU: 9 ms for 256 entries, 182 ms for 2000; docs/flight.md),
# every rank pays it at exit, and
# the analysis needs only the last collectives of each rank: 256 hold about ten DDP steps of bucketed all-reduces.
BUFFER_SIZE = 256
# The ranks' start-up folder: its sitecustomize.py installs rankdump (and --profile's hook) in each worker. Put on
# their PYTHONPATH by path, never imported: it is an entry point, in the top layer with the CLI.
BOOT_DIR = Path(__file__).resolve().parents[1] / "boot"

# PyTorch's dtype names in the dump (c10 ScalarType names) -> the torch.<dtype> names users write.
DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "ComplexHalf": "complex32",
}
# Backends and versions spell one op differently (gloo:all_reduce, nccl:allreduce, _allgather_base): one key each.
OP_ALIASES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_base": "reduce_scatter_tensor",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "allreduce_coalesced": "all_reduce_coalesced",
}
# Ops whose every rank passes the same input shapes; for the others (gather, scatter, all_to_all, ...) shapes
# legitimately differ between ranks, so only op and dtype are compared.
SAME_SHAPE_OPS = {
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_reduce_coalesced",
    "barrier",
}
# gloo's own text when a rank receives another size than it posted (third_party/gloo/gloo/transport/tcp/pair.cc);
# the rank dies in std::terminate, so it leaves no record and only this text says what happened.
GLOO_SIZE_MISMATCH = "Received data size doesn't match expected size"
# How long the ranks that outlive a failed one get to leave their record before the launcher ends them (settle):
# most fail in their own collective within a fraction of a second; a blocked one costs the run this much more.
SETTLE_S = 2.0


def worker_env(
    dump_dir: str | os.PathLike, environ: dict[str, str] | None = None, buffer_size: int = BUFFER_SIZE
) -> dict[str, str]:
    """Variables to add to the workers' environment so each records its collectives and answers dump requests.

    Not TORCH_NCCL_TRACE_BUFFER_SIZE, the older name: torch 2.13 warns about it in every rank, and the torch
    versions that read only that name (2.5, 2.6) record NCCL with 2000 entries by default and gloo not at all.
    """
    environ = os.environ if environ is None else environ
    Path(dump_dir).mkdir(parents=True, exist_ok=True)
    path = [str(BOOT_DIR), *[p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {
        "TORCH_FR_BUFFER_SIZE": environ.get("TORCH_FR_BUFFER_SIZE") or str(buffer_size),
        rankdump.DIR_ENV: str(dump_dir),
        "PYTHONPATH": os.pathsep.join(path),
    }


def read_dumps(dump_dir: str | os.PathLike) -> dict[int, dict]:
    """Each rank's latest record in dump_dir (from a request or from its exit), by rank."""
    found = {}
    for path in Path(dump_dir).glob("rank*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            found[int(record["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a file being replaced right now, or not ours
    return dict(sorted(found.items()))


def request_dumps(dump_dir: str | os.PathLike, ranks, timeout: float = 5.0) -> dict[int, dict]:
    """Ask every worker to dump its Flight Recorder now; wait up to `timeout` s for `ranks`; return all records.

    A rank that does not answer in time (dead, or its main thread holding the interpreter lock) is absent from the
    result; analyse() says so.
    """
    dump_dir = Path(dump_dir)
    request = uuid.uuid4().hex
    tmp = dump_dir / f"{rankdump.REQUEST_FILE}.{request}.tmp"
    tmp.write_text(request, encoding="utf-8")
    os.replace(tmp, dump_dir / rankdump.REQUEST_FILE)
    wanted = set(ranks)
    deadline = time.monotonic() + timeout
    while True:
        dumps = read_dumps(dump_dir)
        answered = {r for r, d in dumps.items() if d.get("trigger") in (request, "exit")}
        if wanted <= answered or time.monotonic() >= deadline:
            # A record from an earlier request is stale: its rank did not answer this one (dead, or stuck holding
            # the interpreter lock), and analyse() says so.
            return {r: d for r, d in dumps.items() if r in answered}
        time.sleep(0.1)


def settle(dump_dir: str | os.PathLike, ranks: dict[int, int], within: float = SETTLE_S) -> None:
    """One rank failed and the launcher is about to end the others (`ranks`: global rank -> pid, every rank on
    this node). Ask each one still running for its record, then give them until `within` s to end on their own: a
    rank whose peer died usually fails in its own collective a moment later, and the record it writes as it exits
    says so ("failed") where one taken now would say "in progress". A rank still running then (blocked, or slow to
    fail) keeps the record it gave on request."""
    import psutil

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    survivors = {rank: pid for rank, pid in ranks.items() if running(pid)}
    if not survivors:
        return
    deadline = time.monotonic() + within
    request_dumps(dump_dir, list(survivors), timeout=within)
    while any(running(pid) for pid in survivors.values()) and time.monotonic() < deadline:
        time.sleep(0.05)


@dataclass
class Collective:
    seq: int  # collective_seq_id: the n-th collective this rank called in this process group, from 1
    op: str  # all_reduce, broadcast, ...
    group: str  # process group: "default_pg", or its name/description
    inputs: str  # "float32[1024]", several tensors joined by ", "
    outputs: str
    state: str  # completed | failed | in progress (see _state)

    def text(self) -> str:
        return f"{self.op} #{self.seq}{_in(self.group)} {self.inputs}".rstrip()


@dataclass
class RankFlight:
    rank: int
    recorded: bool  # a record arrived from this rank
    trigger: str | None = None  # "request" (asked while running) or "exit" (written as it ended)
    entries: int = 0  # collectives in its record
    last_started: Collective | None = None  # the last collective it called (in the group the verdict is about)
    last_completed: Collective | None = None
    error: str | None = None  # its uncaught exception or the error the launcher saw
    why: str | None = None  # why its record holds nothing
    where: str | None = None  # its Python position, when the caller passed stacks


@dataclass
class FlightReport:
    available: bool  # False: no Flight Recorder data; the caller falls back to stacks
    why: str | None  # why not available
    verdict: str | None  # one cross-rank line
    kind: str  # mismatch | not_called | aborted | failed | all_in | none_in | no_record | unavailable
    seq: int | None = None  # the collective the verdict is about
    op: str | None = None
    group: str | None = None
    waiting: list[int] = field(default_factory=list)  # ranks inside that collective
    missing: list[int] = field(default_factory=list)  # ranks that have not called it / left no record
    also: list[str] = field(default_factory=list)  # verdicts on other process groups where ranks are uneven
    ranks: list[RankFlight] = field(default_factory=list)
    first_kept: int | None = None  # the verdict's group: the earliest collective every rank still holds, when not #1

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------------------------
# reading one record


def _shapes(sizes, dtypes) -> str:
    sizes, dtypes = sizes or [], dtypes or []
    parts = []
    for i, shape in enumerate(sizes):
        dtype = dtypes[i] if i < len(dtypes) else (dtypes[-1] if dtypes else "?")
        parts.append(f"{DTYPES.get(dtype, str(dtype).lower())}[{', '.join(str(s) for s in shape)}]")
    return ", ".join(parts)


def _op(profiling_name: str) -> str:
    name = str(profiling_name).rsplit(":", 1)[-1]  # "gloo:all_reduce" -> "all_reduce"
    return OP_ALIASES.get(name, name)


def _group(entry: dict) -> str:
    pg = entry.get("process_group") or ["?", ""]
    name, desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    return desc if name in ("0", "") and desc else (f"{name}:{desc}" if desc and desc != "undefined" else name)


def _completed(entry: dict) -> bool:
    # NCCL moves state to "completed"; gloo keeps "scheduled" and retires the entry when its work ends.
    return entry.get("state") == "completed" or bool(entry.get("retired"))


def collectives(record: dict) -> dict[str, dict[int, dict]]:
    """A record's collectives (not point-to-point), by process group and sequence number; both recorders merged."""
    groups: dict[str, dict[int, dict]] = {}
    for trace in (record.get("traces") or {}).values():
        for entry in (trace or {}).get("entries") or []:
            if entry.get("is_p2p") or not entry.get("collective_seq_id"):
                continue
            seqs = groups.setdefault(_group(entry), {})
            seq = int(entry["collective_seq_id"])
            if seq not in seqs or _completed(entry):
                seqs[seq] = entry
    return groups


def _collective(entry: dict) -> Collective:
    return Collective(
        seq=int(entry["collective_seq_id"]),
        op=_op(entry.get("profiling_name", "?")),
        group=_group(entry),
        inputs=_shapes(entry.get("input_sizes"), entry.get("input_dtypes")),
        outputs=_shapes(entry.get("output_sizes"), entry.get("output_dtypes")),
        state="completed" if _completed(entry) else str(entry.get("state") or "scheduled"),
    )


def _signature(entry: dict) -> tuple:
    op = _op(entry.get("profiling_name", "?"))
    shapes = tuple(map(tuple, entry.get("input_sizes") or [])) if op in SAME_SHAPE_OPS else None
    return op, tuple(entry.get("input_dtypes") or []), shapes


# ----------------------------------------------------------------------------------------------------------------
# the cross-rank view


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _first_disagreement(seqs_by_rank: dict[int, dict[int, dict]]):
    for seq in sorted(set().union(*[set(s) for s in seqs_by_rank.values()])):
        present = {r: s[seq] for r, s in seqs_by_rank.items() if seq in s}
        if len(present) > 1 and len({_signature(e) for e in present.values()}) > 1:
            return seq, present
    return None


def analyse(
    dumps: dict[int, dict],
    world_size: int | None = None,
    stacks: dict[int, str] | None = None,
    errors: dict[int, str] | None = None,
) -> FlightReport:
    """The per-rank and cross-rank view of the records request_dumps/read_dumps returned.

    world_size: ranks expected (a rank without a record is then named); stacks: each rank's Python position
    ("train.py:88 in load_batch"), quoted next to the rank that has not called the collective; errors: what the
    launcher knows about a rank that ended (its last error line), added to the rank's own uncaught exception.
    """
    stacks, errors = stacks or {}, errors or {}
    all_ranks = sorted(set(dumps) | set(range(world_size or 0)) | set(errors))
    by_rank = {r: collectives(d) for r, d in dumps.items()}
    flights = {r: RankFlight(rank=r, recorded=r in dumps, where=stacks.get(r)) for r in all_ranks}
    for r, f in flights.items():
        d = dumps.get(r) or {}
        f.trigger = None if not d else ("exit" if d.get("trigger") == "exit" else "request")
        f.entries = sum(len(s) for s in by_rank.get(r, {}).values())
        f.error = errors.get(r) or d.get("uncaught")
        f.why = d.get("why") or next((t["error"] for t in (d.get("traces") or {}).values() if "error" in t), None)
    ranks_list = [flights[r] for r in all_ranks]

    if not any(f.entries for f in ranks_list):
        why = next((f.why for f in ranks_list if f.why), None) if dumps else None
        if not dumps:
            why = "no rank wrote a Flight Recorder record (is the ddplab bootstrap on the workers' PYTHONPATH?)"
        elif why is None:
            why = (
                "the Flight Recorder holds no collective: TORCH_FR_BUFFER_SIZE unset or 0, no collective called "
                "yet, or a torch that records NCCL only (gloo is recorded from torch 2.8)"
            )
        return FlightReport(available=False, why=why, verdict=None, kind="unavailable", ranks=ranks_list)

    # The group to talk about: the first one where ranks disagree, else one where some rank is behind, else the
    # default group.
    groups = sorted({g for s in by_rank.values() for g in s}, key=lambda g: (g != "default_pg", g))
    report = _mismatch(groups, by_rank)
    if report is None:
        uneven = _uneven_groups(groups, by_rank, dumps)
        chosen = uneven[0] if uneven else groups[0]
        report = _progress(chosen, _members(chosen, by_rank, dumps), flights, all_ranks, dumps)
        report.also = [_progress(g, _members(g, by_rank, dumps), flights, all_ranks, dumps).verdict for g in uneven[1:]]
    chosen = report.group

    for r, f in flights.items():
        groups_of_r = by_rank.get(r, {})
        # The verdict's group; for a rank outside it, the group of its newest entry.
        g = (
            chosen
            if chosen in groups_of_r
            else max(
                groups_of_r,
                key=lambda k: max(e.get("time_created_ns", 0) for e in groups_of_r[k].values()),
                default=None,
            )
        )
        if g is None:
            continue
        all_seqs = {m: s.get(g, {}) for m, s in by_rank.items()}
        seqs = all_seqs[r]
        f.last_started = _collective(seqs[max(seqs)])
        f.last_started.state = _state(r, max(seqs), all_seqs, flights, all_ranks, g)
        done = [s for s in seqs if _state(r, s, all_seqs, flights, all_ranks, g) == "completed"]
        f.last_completed = _collective(seqs[max(done)]) if done else None
    report.ranks = ranks_list
    # Each rank keeps its last BUFFER_SIZE collectives: past that, "the first disagreement" is the first one kept.
    firsts = [min(s[chosen]) for s in by_rank.values() if s.get(chosen)]
    if firsts and max(firsts) > 1:
        report.first_kept = max(firsts)
    return report


def _members(g: str, by_rank: dict[int, dict], dumps: dict[int, dict]) -> dict[int, dict[int, dict]]:
    """Group g's collectives per member rank. Every rank with a record is in the default group, even one that has
    not called a collective yet; a subgroup's members are the ranks that recorded it."""
    members = dumps if g == "default_pg" else [r for r, s in by_rank.items() if g in s]
    return {r: by_rank[r].get(g, {}) for r in members}


def _mismatch(groups: list[str], by_rank: dict[int, dict]) -> FlightReport | None:
    """The first collective where ranks passed different ops, dtypes or shapes, in the first group that has one."""
    for g in groups:
        found = _first_disagreement({r: s[g] for r, s in by_rank.items() if g in s})
        if not found:
            continue
        seq, present = found
        sigs: dict[str, list[int]] = {}
        for r, e in present.items():
            sig = f"{_op(e['profiling_name'])} {_shapes(e.get('input_sizes'), e.get('input_dtypes'))}".rstrip()
            sigs.setdefault(sig, []).append(r)
        detail = "; ".join(f"{_ranks(rs)} {sig}" for sig, rs in sorted(sigs.items(), key=lambda kv: kv[1]))
        return FlightReport(
            True,
            None,
            f"ranks disagree at #{seq}{_in(g)}: {detail}",
            "mismatch",
            seq=seq,
            op=_op(present[min(present)]["profiling_name"]),
            group=g,
            waiting=sorted(r for r, e in present.items() if not _completed(e)),
        )
    return None


def _uneven_groups(groups: list[str], by_rank: dict[int, dict], dumps: dict[int, dict]) -> list[str]:
    """Groups whose ranks stopped at different collectives, the likeliest cause first.

    The cause is where ranks that are in no collective at all keep others waiting; a laggard that itself waits in
    another group is a consequence. Groups whose laggards are all idle come first, then those with some.
    """

    def busy(r):  # inside a collective of any group
        return any(not _completed(s[max(s)]) for s in by_rank.get(r, {}).values() if s)

    def idle_laggards(g):
        seqs = _members(g, by_rank, dumps)
        top = max(max(s, default=0) for s in seqs.values())
        laggards = [r for r, s in seqs.items() if max(s, default=0) < top]
        idle = [r for r in laggards if not busy(r)]
        return (len(idle) < len(laggards), not idle)

    uneven = [g for g in groups if len({max(s, default=0) for s in _members(g, by_rank, dumps).values()}) > 1]
    return sorted(uneven, key=idle_laggards)


def _state(
    r: int, seq: int, seqs: dict[int, dict[int, dict]], flights: dict[int, RankFlight], all_ranks: list[int], group: str
) -> str:
    """completed | failed | in progress, for rank r's collective `seq`.

    A collective that ends in an error is retired too, so a retired entry alone does not mean success: the last
    entry of a rank that ended with an error counts as failed unless every rank of the group is known to have
    called that collective (only then could it have completed).
    """
    entry = seqs[r][seq]
    if not _completed(entry):
        return "in progress"
    f = flights[r]
    if f.trigger == "exit" and f.error and seq == max(seqs[r]):
        members = all_ranks if group == "default_pg" else [m for m, s in seqs.items() if s]
        called = {m for m, s in seqs.items() if s and max(s) >= seq}
        if not set(members) <= called:
            return "failed"
    return "completed"


def _in(group: str) -> str:
    return "" if group == "default_pg" else f" in group {group}"


def _progress(
    g: str,
    seqs: dict[int, dict[int, dict]],
    flights: dict[int, RankFlight],
    all_ranks: list[int],
    dumps: dict[int, dict],
) -> FlightReport:
    """No disagreement: say who is behind in group g, and who waits for them."""
    last = {r: max(s) if s else 0 for r, s in seqs.items()}
    top = max(last.values())
    entry = next(s[top] for s in seqs.values() if top in s)
    target = f"{_op(entry['profiling_name'])} #{top}{_in(g)}"
    state = {r: _state(r, top, seqs, flights, all_ranks, g) for r, s in last.items() if s == top}
    inside = sorted(r for r, st in state.items() if st == "in progress")
    failed = sorted(r for r, st in state.items() if st == "failed")
    passed = sorted(r for r, st in state.items() if st == "completed")
    behind = sorted(r for r, s in last.items() if s < top)
    silent = sorted(r for r in all_ranks if r not in dumps)
    report = FlightReport(
        True,
        None,
        None,
        "",
        seq=top,
        op=_op(entry["profiling_name"]),
        group=g,
        waiting=inside + failed,
        missing=behind + silent,
    )

    def side(ranks, what):
        return f"{_ranks(ranks)} {what}" if ranks else None

    ref = "it" if behind else target  # "it" only after a phrase that named the collective
    waits = side(inside, f"{'waits' if len(inside) == 1 else 'wait'} in {ref}")
    completed = side(passed, f"completed {ref}")
    errors = sorted({flights[r].error for r in failed if flights[r].error})
    one = len(failed) == 1
    broke = side(
        failed,
        f"{'was' if one else 'were'} in {ref} when {'it' if one else 'they'} failed "
        f"({_short(errors[0]) if errors else 'no error text'})",
    )
    mismatch_abort = [r for r in all_ranks if GLOO_SIZE_MISMATCH in (flights[r].error or "")]
    if mismatch_abort:
        # gloo's transport aborts the rank that received a size other than it expected, in std::terminate: it
        # leaves no record, and its peer's entry is the one collective where the sizes could differ.
        report.kind = "aborted"
        shapes = "; ".join(f"rank {r} {_collective(seqs[r][top]).inputs}" for r in sorted(last) if last[r] == top)
        report.verdict = (
            f"{_ranks(mismatch_abort)} aborted in {target}: it received another data size than it "
            f'expected (gloo: "{GLOO_SIZE_MISMATCH}"), so the ranks passed tensors of different '
            f"sizes to it; recorded: {shapes}"
        )
        return report
    alike: dict[str, list[int]] = {}  # ranks behind in the same way share one phrase
    for r in behind:
        f = flights[r]
        nxt = next((s[last[r] + 1] for s in seqs.values() if last[r] + 1 in s), entry)
        how = f"{_op(nxt['profiling_name'])} #{last[r] + 1}{_in(g)}"
        after = f"last: {_collective(seqs[r][last[r]]).text()}" if last[r] else "no collective before it"
        if f.trigger == "exit":
            after += f"; it exited{': ' + f.error if f.error else ''}"
        if f.where:
            after += f"; it is in {f.where}"
        alike.setdefault(f"{how} ({after})", []).append(r)
    parts = [f"{_ranks(rs)} {'has' if len(rs) == 1 else 'have'} not called {what}" for what, rs in alike.items()]
    for r in silent:
        f = flights[r]
        parts.append(f"rank {r} left no record ({'it ended: ' + f.error if f.error else 'dead, or it did not answer'})")
    if parts:
        report.kind = "not_called" if behind else "no_record"
        report.verdict = "; ".join(parts + [p for p in (waits, broke, completed) if p])
    elif failed and not inside:
        report.kind = "failed"
        report.verdict = f"{_ranks(failed)} failed in {target} ({_short(errors[0]) if errors else 'no error text'})"
    elif inside:
        report.kind = "all_in"
        report.verdict = (
            f"every rank is in {target} and none completed it: they called it alike, so the wait is "
            f"in the transport (a peer or the network), not in the script"
        )
    else:
        report.kind = "none_in"
        report.verdict = f"every rank completed {target} and none is inside a collective: " + _elsewhere(flights)
    return report


def _elsewhere(flights: dict[int, RankFlight]) -> str:
    """Where the ranks are instead, from what is known: their stacks (a hang), or how they ended (a failure)."""
    where = {r: f.where for r, f in flights.items() if f.where}
    if where:
        return "the ranks are somewhere else: " + ", ".join(f"rank {r} at {w}" for r, w in sorted(where.items()))
    errors = sorted({f.error for f in flights.values() if f.error})
    if errors:
        return f"the failure is outside the collectives ({_short(errors[0])})"
    if all(f.trigger == "exit" for f in flights.values() if f.recorded):
        return "the ranks ended after their last collective"
    return "the ranks are somewhere else (no stacks were read)"


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render(report: FlightReport) -> str:
    """The report as text: one line per rank, then the verdict."""
    if not report.available:
        return f"Flight Recorder: not available: {report.why}"
    lines = ["Flight Recorder (last collective per rank):"]
    for f in report.ranks:
        if not f.recorded:
            lines.append(f"  rank {f.rank}: no record{': ' + f.error if f.error else ''}")
            continue
        started = f.last_started.text() + f" ({f.last_started.state})" if f.last_started else "none"
        done = f.last_completed.text() if f.last_completed else "none"
        extra = f"  [{f.where}]" if f.where else ""
        lines.append(f"  rank {f.rank}: last called {started}; last completed {done}{extra}")
    lines.append(f"  => {report.verdict}")
    if report.first_kept is not None:
        lines.append(
            f"  (the records start at #{report.first_kept}: each rank keeps its last collectives only, so the ranks "
            f"may have parted before it; TORCH_FR_BUFFER_SIZE (ddplab: {BUFFER_SIZE}) keeps more)"
        )
    lines += [f"  also: {v}" for v in report.also]
    return "\n".join(lines)
