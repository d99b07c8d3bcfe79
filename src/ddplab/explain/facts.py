"""What a matched message itself states: which rank, which collective, the sizes, the GPU, the port, the timeout.

A rule names the cause from the message's invariant words; the message also carries the particulars of this run in
fixed slots (torch's and gloo's format strings). Reading them out turns "a collective timed out" into "rank 1's
ALLREDUCE #808 (9801523 elements) waited 600020 ms against a 600000 ms timeout", and shows what only several lines
together say (ranks that timed out at different collectives; other processes on the GPU that ran out of memory).
Every reader is keyed on a format string, cited next to it; a slot the message does not hold is left out.
"""

from __future__ import annotations

import re

# ProcessGroupNCCL.cpp WorkNCCL's operator<< in the watchdog's "Watchdog caught collective operation timeout: ...
# ran for N milliseconds before timing out." (torch >= 1.9; NumelIn/NumelOut since 2.2), after "[Rank N]" (and
# "[PG ID n PG GUID g Rank N]" since 2.4)
WATCHDOG = re.compile(
    r"\[(?:PG[^\]\n]*?)?Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout:\s*"
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
    r"(?:, Timeout\(ms\)=(?P<timeout>\d+))?\) ran for (?P<ran>\d+) milliseconds"
)
# the same without the rank (a paste, an issue title)
WATCHDOG_BARE = re.compile(
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
    r"(?:, Timeout\(ms\)=(?P<timeout>\d+))?\) ran for (?P<ran>\d+) milliseconds"
)
# ProcessGroupWrapper's check (TORCH_DISTRIBUTED_DEBUG=DETAIL): "Detected mismatch between collectives on ranks.
# Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=N, OpType=X, TensorShape=[...], TensorDtypes=T,
# ...), but Rank 2 is running collective: CollectiveFingerPrint(...)"
FINGERPRINT = re.compile(
    r"Rank (?P<rank>\d+) is running collective: CollectiveFingerPrint\((?:SequenceNumber=(?P<seq>\d+), )?"
    r"OpType=(?P<op>\w+)(?:, TensorShape=\[(?P<shape>[^\]\n]*)\])?(?:, TensorDtypes=(?P<dtype>\w+))?"
)
# gloo/transport/tcp/pair.cc: "op.preamble.length <= op.nbytes. RECEIVED vs EXPECTED"
GLOO_SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (?P<got>\d+) vs (?P<want>\d+)")
# c10/cuda/CUDACachingAllocator.cpp: "Tried to allocate X. GPU n has a total capacity of T of which F is free."
# (torch >= 2.1); "Tried to allocate X (GPU n; T total capacity; A already allocated; F free; ...)" before
OOM_NEW = re.compile(
    r"Tried to allocate (?P<want>[\d.]+ \w+)\. GPU (?P<gpu>\d+) has a total capac\w* of (?P<total>[\d.]+ \w+) "
    r"of which (?P<free>[\d.]+ \w+) is free"
)
OOM_OLD = re.compile(
    r"Tried to allocate (?P<want>[\d.]+ \w+) \(GPU (?P<gpu>\d+); (?P<total>[\d.]+ \w+) total capacity;"
    r"(?:[^;)\n]*;)*? (?P<free>[\d.]+ \w+) free"
)
# the same message lists every process using that GPU: "Process 1234 has 10.00 GiB memory in use." (torch >= 2.1)
OOM_OTHER = re.compile(r"\bProcess (?P<pid>\d+) has (?P<used>[\d.]+ \w+) memory in use")
# DDP's reducer.cpp: "Parameter at index N with name X has been marked as ready twice."
READY_TWICE = re.compile(
    r"Parameter at index (?P<index>\d+)(?: with name (?P<name>\S+))? has been marked as ready twice"
)
# reducer.cpp: "Parameter indices which did not receive grad for rank R: 1 2 3" and, with
# TORCH_DISTRIBUTED_DEBUG=INFO/DETAIL, "Parameters which did not receive grad for rank R: a.weight, b.bias"
UNUSED = re.compile(
    r"Parameter(?:s| indices) which did not receive grad for rank (?P<rank>\d+): (?P<which>[^\n]+?)\s*$", re.M
)
# TCPStore / socket.cpp: "The server socket has failed to listen on any local network address. port: 29500, ...",
# "...failed to bind to [::]:29500 (errno: 98 - Address already in use)", "The client socket has timed out after
# 60000ms while trying to connect to (10.0.0.1, 29500)."
PORT = re.compile(r"\bport: (?P<port>\d+)\b|\[[^\]\n]*\]:(?P<bound>\d+) \(errno: 98\b")
CONNECT = re.compile(
    r"(?:timed out after (?P<after>\d+m?s) while trying to|has failed to) connect to \((?P<host>[^,()\n]+), (?P<port>\d+)\)"
)


def _count(n: str | None) -> str:
    return f"{int(n):,}" if n else ""


def _watchdog(text: str) -> list[str]:
    """Each reporting rank's collective, and whether the ranks agree on which one it was."""
    seen: dict[int, re.Match] = {}
    for m in WATCHDOG.finditer(text):
        seen.setdefault(int(m["rank"]), m)
    if not seen:
        m = WATCHDOG_BARE.search(text)
        return [_work(m)] if m else []
    ranks = sorted(seen)
    first = seen[ranks[0]]
    facts = [f"rank {ranks[0]}: {_work(first)}"]
    where = {(seen[r]["op"], seen[r]["seq"]) for r in ranks}
    if len(ranks) > 1 and len(where) == 1:
        facts.append(f"ranks {_ranks(ranks)} timed out in that same collective")
    elif len(where) > 1:
        # WorkNCCL's SeqNum counts one process group's collectives: ranks at different numbers in one group have
        # not issued the same sequence (one is behind: it skipped collectives, or is stuck before this one)
        facts.append(
            "the ranks timed out at different collectives ("
            + ", ".join(f"rank {r}: {seen[r]['op']} #{seen[r]['seq']}" for r in ranks)
            + "): if they are one process group's, the ranks did not issue the same sequence of collectives"
        )
    return facts


def _work(m: re.Match) -> str:
    size = f" of {_count(m['nin'])} element{'s' if m['nin'] != '1' else ''}" if m["nin"] else ""
    limit = f" against a {_count(m['timeout'])} ms timeout" if m["timeout"] else ""
    return f"{m['op']} #{m['seq']}{size} waited {_count(m['ran'])} ms{limit}"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)} ranks)"


def _fingerprints(text: str) -> list[str]:
    prints = list(FINGERPRINT.finditer(text))[:2]
    if len(prints) < 2:
        return []
    parts = []
    for m in prints:
        shape = f" of shape [{m['shape']}]" if m["shape"] is not None else ""
        dtype = f" ({m['dtype']})" if m["dtype"] else ""
        seq = f" #{m['seq']}" if m["seq"] else ""
        parts.append(f"rank {m['rank']} ran {m['op']}{seq}{shape}{dtype}")
    return ["; ".join(parts)]


def _gloo_sizes(text: str) -> list[str]:
    m = GLOO_SIZES.search(text)
    return [f"this rank received {_count(m['got'])} bytes where it expected {_count(m['want'])}"] if m else []


def _oom(text: str) -> list[str]:
    m = OOM_NEW.search(text) or OOM_OLD.search(text)
    if not m:
        return []
    facts = [f"GPU {m['gpu']}: tried to allocate {m['want']}, {m['free']} free of {m['total']}"]
    others = {o["pid"]: o["used"] for o in OOM_OTHER.finditer(text)}
    if len(others) > 1:
        # the allocator lists every process holding memory on that GPU: more than one is several processes
        # (often two ranks) sharing it
        listed = ", ".join(f"process {pid} holds {used}" for pid, used in others.items())
        facts.append(f"{len(others)} processes use this GPU ({listed}): two ranks on one GPU, or another job")
    return facts


def _ready_twice(text: str) -> list[str]:
    m = READY_TWICE.search(text)
    if not m:
        return []
    return [f"parameter {m['name'] + ' ' if m['name'] else ''}(index {m['index']}) got its gradient twice"]


def _unused(text: str) -> list[str]:
    facts = []
    for m in UNUSED.finditer(text):
        which = m["which"].strip()
        facts.append(f"rank {m['rank']}: no gradient for {which[:200]}{'...' if len(which) > 200 else ''}")
        if len(facts) == 2:
            break
    return facts


def _port(text: str) -> list[str]:
    m = PORT.search(text)
    return [f"port {m['port'] or m['bound']}"] if m else []


# the same from TCPStore before torch 1.12 (c10d's socket.cpp / Utils.hpp): "connect() timed out. Original timeout was
# 60000 ms."
CONNECT_OLD = re.compile(r"connect\(\) timed out\. Original timeout was (?P<ms>\d+) ms")


def _connect(text: str) -> list[str]:
    m = CONNECT.search(text)
    if not m:
        old = CONNECT_OLD.search(text)
        return [f"the connect to the store timed out after {_count(old['ms'])} ms"] if old else []
    after = f" after {m['after']}" if m["after"] else ""
    return [f"could not connect to {m['host'].strip()}:{m['port']}{after}"]


# torch's NCCL error: "NCCL error in: FILE:LINE, <result text>, NCCL version X.Y.Z"
NCCL_VERSION = re.compile(r"NCCL version (?P<version>(?P<major>\d+)\.(?P<minor>\d+)\.\d+)")


def _nccl_internal(text: str) -> list[str]:
    """The NCCL release the message names, where that release is known to misreport a failure's kind."""
    m = NCCL_VERSION.search(text)
    if not m:
        return []
    if (m["major"], m["minor"]) == ("2", "18"):
        # NVIDIA/nccl#1092 (sjeaugey, NCCL's maintainer): "With NCCL 2.18, all network errors will be erroneously
        # reported as 'Internal Error'"
        return [
            f'NCCL {m["version"]}: NCCL 2.18 reports network errors as "internal error" (NVIDIA/nccl#1092): read '
            "it as a failed connection between ranks; NCCL_DEBUG=WARN prints which"
        ]
    return [f"NCCL {m['version']}"]


# distributed_c10d.py _store_based_barrier: "Timed out initializing process group in store based barrier on rank
# {}, for key: {} (world_size={}, num_workers_joined={}, timeout={} error={})" (torch 1.x: "on rank: {}" and
# "worker_count={}"); TCPStore.cpp "Timed out after {} seconds waiting for clients. {}/{} clients joined."
BARRIER = re.compile(
    r"store based barrier on rank:? (?P<rank>\d+)[^\n]*?\(world_size=(?P<world>\d+), "
    r"(?:num_workers_joined|worker_count)=(?P<joined>\d+)"
)
CLIENTS = re.compile(r"waiting for clients\. (?P<joined>\d+)/(?P<world>\d+) clients joined")


def _joined(text: str) -> list[str]:
    """How many processes arrived against how many were expected: fewer is a rank missing, more is a launch that
    started the ranks twice."""
    m = BARRIER.search(text) or CLIENTS.search(text)
    if not m:
        return []
    joined, world = int(m["joined"]), int(m["world"])
    if joined > world:
        # the barrier key counts every process that called init_process_group with this store
        return [
            f"{joined} processes joined a group of world_size={world}: more processes were started than the world "
            "size says (two launchers starting the same ranks, e.g. srun -n N running a script that also spawns N "
            "processes, or a WORLD_SIZE too small)"
        ]
    return [f"{joined} of {world} processes arrived: {world - joined} never reached it"]


# torchrun's RendezvousConnectionError (elastic/rendezvous/c10d_rendezvous_backend.py) is raised by the first connect
# to the endpoint (_create_tcp_store) and by every later store call (_call_store): the inner exception, printed above
# it, says which
C10D_STORE = "The connection to the C10d store has failed"
FIRST_CONNECT = re.compile(
    r"_create_tcp_store|while trying to connect to|connect\(\) timed out|failed to connect|Connection refused"
)
LATER_CALL = re.compile(r"\b_call_store\b|\bnum_nodes_waiting\b|keep-alive heartbeat|failed to shutdown")


def _c10d_store(log: str) -> list[str]:
    """Which of the two the log shows, or that it shows neither (a bare paste of the exception)."""
    if C10D_STORE not in log or FIRST_CONNECT.search(log) or LATER_CALL.search(log):
        return []
    return [
        "the log holds the RendezvousConnectionError alone: torchrun raises it when the first connect to the endpoint "
        "fails (_create_tcp_store) and when a later store call fails (_call_store: the agent serving the store "
        "exited, e.g. another job on the same port finished first); the inner exception printed above it says which"
    ]


# gloo/transport/tcp/pair.cc: "Connection closed by peer [ADDR]:PORT" (EOF), "Read error [ADDR]:PORT: <strerror>"
GLOO_PEER = re.compile(
    r"(?P<what>Connection closed by peer|Read error|Read timeout) \[(?P<addr>[^\]\n]+)\]:(?P<port>\d+)"
)
# NCCL's socket.cc: "Call to recv from ADDR<PORT> failed : <strerror>", "socketProgress: Connection closed by remote
# peer HOST<PORT>" (ncclSocketToString prints an address as ip<port>)
NCCL_PEER = re.compile(
    r"Call to (?P<call>\w+) from (?P<addr>\S+?)<(?P<port>\d+)> failed ?: (?P<error>[^\n]+?)\s*$"
    r"|Connection closed by remote peer (?P<host>\S+?)<(?P<hport>\d+)>",
    re.M,
)


def _gloo_peer(text: str) -> list[str]:
    m = GLOO_PEER.search(text)
    return [f"the peer this rank lost: {m['addr']}:{m['port']} ({m['what'].lower()})"] if m else []


def _nccl_peer(text: str) -> list[str]:
    m = NCCL_PEER.search(text)
    if not m:
        return []
    if m["host"]:
        return [f"NCCL's connection to {m['host']}:{m['hport']} was closed by that peer"]
    return [f"NCCL's {m['call']} from {m['addr']}:{m['port']} failed: {m['error']}"]


# rule id -> its readers; a rule not listed states nothing this module reads
READERS = {
    "collective-timeout": (_watchdog,),
    "collective-mismatch": (_fingerprints,),
    "gloo-size-mismatch": (_gloo_sizes,),
    "cuda-oom": (_oom,),
    "ddp-ready-twice": (_ready_twice,),
    "unused-parameters": (_unused,),
    "port-in-use": (_port,),
    "master-unreachable": (_connect, _c10d_store),
    "nccl-internal-error": (_nccl_internal,),
    "rendezvous-incomplete": (_joined,),
    "peer-closed": (_gloo_peer,),
    "nccl-socket": (_nccl_peer,),
}


# readers of what several lines of the log say together, not the matched message alone
WHOLE_LOG = (_watchdog, _c10d_store)


def read(rule: str, message: str, log: str) -> list[str]:
    """What the message a finding of `rule` matched states (`message`: its lines; `log`: the whole text, for what
    several ranks' lines say together)."""
    facts: list[str] = []
    for reader in READERS.get(rule, ()):
        facts += reader(log if reader in WHOLE_LOG else message)
    return facts
