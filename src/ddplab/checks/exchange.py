"""The cross-node exchange (step 2 of checks/crossnode.py): facts through a small store on the rendezvous port,
compared on every node, and the full mesh of connections the collectives will need.

Node 0 serves the store (before the real rendezvous, on its port: the exchange also proves the port passes) for as
long as the others read it; the others wait until it is gone, so that their agents never meet it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import timedelta

from ddplab import faults
from ddplab.checks.crossnode import CONNECT_S, CrossNodeResult, Local, machine_id, node_label, socket_error_text
from ddplab.checks.preflight import Finding

PREFIX = "ddplab-preflight/"
CLOCK_SKEW_S = 5.0  # beyond this, logs of the nodes no longer line up


def _versions(node_rank) -> dict:
    import torch

    from ddplab import envinfo

    nccl = None
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # a build without NCCL
            nccl = None
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl, "driver": envinfo.nvidia_driver()}
    for name in faults.planted_versions(node_rank):  # tests: a node that differs, for real through the exchange
        versions[name] = f"{versions.get(name) or '0'}+planted"
    return versions


class _Listener:
    """A socket on the advertised address: others connect to it as the collectives will; it answers with its slot
    so that a connection that lands elsewhere (127.x: the other node itself) is seen for what it is."""

    def __init__(self, address: str):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.slot = 0
        self.error = ""
        try:
            self.sock.bind((address, 0))
            self.sock.listen(16)
            self.port = self.sock.getsockname()[1]
        except OSError as e:
            self.port, self.error = 0, e.strerror or str(e)
            return
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.sendall(f"ddplab {self.slot}\n".encode())
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def _connect(facts: dict) -> str:
    """ "" when the node at facts' advertised address answers as itself; else why not."""
    if not facts.get("listen_port"):
        return f"it has no listening socket ({facts.get('listen_error') or 'none'})"
    try:
        with socket.create_connection((facts["address"], facts["listen_port"]), timeout=CONNECT_S) as s:
            s.settimeout(CONNECT_S)
            got = s.recv(64).decode(errors="replace").split()
    except OSError as e:
        return socket_error_text(e)
    if got[-1:] != [str(facts["slot"])]:
        return "the connection reached another process (not that node)"
    return ""


def exchange(me: Local, local: list[Finding], wait: float, say=None) -> CrossNodeResult:
    """Publish this node's facts through a store on the rendezvous port, compare with every other node's, test the
    mesh. Node 0 serves the store for as long as the others read it."""
    from torch.distributed import TCPStore

    nodes = me.nodes
    try:
        try:
            store = TCPStore(
                nodes.host,
                nodes.port,
                is_master=me.is_host,
                wait_for_workers=False,
                timeout=timedelta(seconds=max(5.0, wait)),
            )
        except Exception:
            if not (me.is_host and me.host_inferred):
                raise
            # torch's c10d guessed "host" from the endpoint (two nodes on one machine both match 127.0.0.1) and,
            # like torch, falls back to a client when another node already serves the port
            me.is_host = False
            store = TCPStore(
                nodes.host, nodes.port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=wait)
            )
    except Exception as e:  # bind refused on the host, or the store vanished between probe and connect
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return CrossNodeResult(
            [
                Finding(
                    "fail",
                    f"{me.label()}: the preflight store on {nodes.host}:{nodes.port} failed: {first}",
                    "choose a free port in --rdzv-endpoint, the same on every node",
                ),
                *local,
            ]
        )
    listener = _Listener(me.address)
    try:
        return _exchange(store, me, local, listener, wait, say)
    finally:
        listener.close()
        del store  # node 0: the server goes with it, and the rendezvous takes the port


def _exchange(store, me: Local, local: list[Finding], listener: _Listener, wait: float, say) -> CrossNodeResult:
    nodes = me.nodes
    slot = int(store.add(PREFIX + "arrivals", 1))
    listener.slot = slot
    facts = {
        "slot": slot,
        "node_rank": me.node_rank,
        "hostname": me.hostname,
        "address": me.address,
        "machine": machine_id(),
        "interface": me.interface,
        "nnodes": nodes.count,
        "nproc": me.nproc,
        "rdzv_id": nodes.rdzv_id,
        "rdzv_backend": me.rdzv_backend,
        "backend": me.backend,
        "versions": _versions(me.node_rank),
        "clock": time.time(),
        "listen_port": listener.port,
        "listen_error": listener.error,
        "is_host": me.is_host,
        "problems": [vars(f) for f in local if f.level in ("fail", "warn")],
    }
    store.set(PREFIX + f"facts/{slot}", json.dumps(facts))
    every = {slot: facts}
    deadline, said = time.monotonic() + wait, False
    while True:
        arrived = int(store.add(PREFIX + "arrivals", 0))
        for other in range(1, arrived + 1):
            if other not in every:
                store.wait([PREFIX + f"facts/{other}"], timedelta_s(5))
                every[other] = json.loads(store.get(PREFIX + f"facts/{other}"))
                every[other]["clock_seen"] = time.time()
        if len(every) >= nodes.count or any(f["nnodes"] != nodes.count for f in every.values()):
            break  # all here, or one disagrees on how many to wait for: waiting longer would wait forever
        if time.monotonic() >= deadline:
            break
        if say and not said:
            say(f"{len(every)} of {nodes.count} nodes at the preflight; waiting for the others")
            said = True
        time.sleep(0.2)

    mesh = {str(s): _connect(f) for s, f in every.items() if s != slot}
    store.set(PREFIX + f"mesh/{slot}", json.dumps(mesh))
    meshes = {slot: mesh}
    for other in every:  # every node's view of the mesh, so each node can give the job's verdict
        if other != slot:
            try:
                store.wait([PREFIX + f"mesh/{other}"], timedelta_s(2 * CONNECT_S * len(every) + 5))
                meshes[other] = json.loads(store.get(PREFIX + f"mesh/{other}"))
            except Exception:  # that node left early: its own connections are unknown
                meshes[other] = {}
    store.add(PREFIX + "done", 1)
    until = time.monotonic() + 2 * CONNECT_S * len(every) + 10
    if me.is_host:  # the others still read from this store: it goes only once every node is done with it
        while int(store.add(PREFIX + "done", 0)) < int(store.add(PREFIX + "arrivals", 0)) and time.monotonic() < until:
            time.sleep(0.1)
    else:  # the real rendezvous must not meet node 0's preflight store (it goes away under it): wait until it is gone
        try:
            while time.monotonic() < until:
                store.check([PREFIX + "done"])
                time.sleep(0.1)
        except Exception:  # the server closed: node 0 is done
            pass
    return _compare(me, slot, every, meshes)


def timedelta_s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def _compare(me: Local, slot: int, every: dict[int, dict], meshes: dict[int, dict]) -> CrossNodeResult:
    """The job's findings, each naming its node, and one verdict per node."""
    nodes = me.nodes
    facts = [every[s] for s in sorted(every)]
    problems: dict[int, list[Finding]] = {s: [] for s in every}

    def blame(slot: int, level: str, what: str, fix: str) -> None:
        problems[slot].append(Finding(level, what, fix))

    for f in facts:  # each node's own local failures and warnings, as it found them
        for found in f["problems"]:
            blame(
                f["slot"],
                found["level"],
                found["what"] if found["what"].startswith("node ") else f"{node_label(f)}: {found['what']}",
                found["fix"],
            )
    ref = every[next((s for s in sorted(every) if every[s]["is_host"]), min(every))]  # the host's facts count
    counts = sorted({f["nnodes"] for f in facts})
    if len(counts) > 1 or len(facts) < nodes.count:
        arrived = len(facts)
        for f in facts:
            if f["nnodes"] != arrived:
                blame(
                    f["slot"],
                    "fail",
                    f"{node_label(f)} was started with --nnodes {f['nnodes']}, but {arrived} node(s) came "
                    f"({', '.join(node_label(o) for o in facts)})"
                    + (
                        f"; the others say --nnodes {', '.join(str(c) for c in counts if c != f['nnodes'])}"
                        if len(counts) > 1
                        else ""
                    )
                    + f": it waits for {f['nnodes'] - arrived} node(s) that never come"
                    if f["nnodes"] > arrived
                    else f"{node_label(f)} was started with --nnodes {f['nnodes']}, but {arrived} node(s) came",
                    "start every node with the same --nnodes, the number of machines "
                    f"(here --nnodes {arrived}, or start the missing node(s))",
                )
    for key, flag in (("rdzv_id", "--rdzv-id"), ("rdzv_backend", "--rdzv-backend"), ("backend", "the backend")):
        values = {f[key] for f in facts}
        if len(values) > 1:
            for f in facts:
                if f[key] != ref[key]:
                    blame(
                        f["slot"],
                        "fail",
                        f"{node_label(f)} has {flag} {f[key]!r}, {node_label(ref)} "
                        f"has {ref[key]!r}: the nodes would not meet in one job",
                        f"use the same {flag} on every node ({ref[key]!r})",
                    )
    seen: dict[int, dict] = {}
    for f in facts:
        if f["node_rank"] is not None and f["node_rank"] in seen:
            other = seen[f["node_rank"]]
            blame(
                f["slot"],
                "fail",
                f"{node_label(f)} and {node_label(other)} both have --node-rank {f['node_rank']}",
                "give each node its own --node-rank, 0..--nnodes-1",
            )
        seen.setdefault(f["node_rank"], f)
    for i, f in enumerate(facts):
        # one address for two nodes is right only where both share one machine's network namespace (two nodes
        # practised on one machine over loopback); on two machines the other node's traffic goes to the wrong one
        other = next(
            (o for o in facts[:i] if o["address"] == f["address"] and o.get("machine") != f.get("machine")), None
        )
        if other is not None:
            blame(
                f["slot"],
                "fail",
                f"{node_label(f)} and {node_label(other)} both have the advertised address {f['address']}",
                "each node must advertise its own address: set GLOO_SOCKET_IFNAME / "
                "NCCL_SOCKET_IFNAME to the interface on the nodes' network",
            )
    for name in ("torch", "cuda", "nccl", "driver"):
        for f in facts:
            a, b = f["versions"].get(name), ref["versions"].get(name)
            if a != b:
                strict = name == "torch" or (name in ("cuda", "nccl") and "nccl" in (me.backend, f["backend"]))
                blame(
                    f["slot"],
                    "fail" if strict else "warn",
                    f"{node_label(f)} has {name} {a}, {node_label(ref)} has {name} {b}",
                    f"install the same {name} on every node (pip install torch=={b} where it differs)"
                    if name == "torch"
                    else f"install the same {name} on every node",
                )
    for f in facts:
        if f["nproc"] != ref["nproc"]:
            blame(
                f["slot"],
                "warn",
                f"{node_label(f)} starts {f['nproc']} rank(s), {node_label(ref)} {ref['nproc']}: "
                "the world size is not nnodes x nproc",
                "give every node the same --nproc-per-node unless that is intended",
            )
        skew = abs((f["clock"] - f["clock_seen"]) if "clock_seen" in f else 0.0)
        if skew > CLOCK_SKEW_S:
            blame(
                f["slot"],
                "warn",
                f"{node_label(f)}'s clock is {skew:.0f} s off this node's: logs will not line up",
                "run NTP (chrony/systemd-timesyncd) on every node",
            )
    for src, mesh in meshes.items():
        for dst, why in mesh.items():
            if why and int(dst) in every:
                target = every[int(dst)]
                blame(
                    int(dst),
                    "fail",
                    f"{node_label(every[src])} cannot connect to {node_label(target)} at its advertised "
                    f"address {target['address']} ({why}): the collectives need every pair "
                    "of nodes to connect, not only the store",
                    f"on {target['hostname']}: export GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface on "
                    "the nodes' network, and let the nodes reach each other on every TCP port",
                )
    findings, verdicts = [], []
    for s in sorted(every):
        unique = []
        for p in problems[s]:
            if all(p.what != q.what for q in unique):
                unique.append(p)
        findings += unique
        fails = [p for p in unique if p.level == "fail"]
        f = every[s]
        verdicts.append(
            {
                "node": node_label(f),
                "node_rank": f["node_rank"],
                "hostname": f["hostname"],
                "address": f["address"],
                "interface": f["interface"],
                "nnodes": f["nnodes"],
                "nproc": f["nproc"],
                "versions": f["versions"],
                "this_node": s == slot,
                "verdict": "READY" if not fails else "NOT READY",
                "problems": [vars(p) for p in unique],
            }
        )
    return CrossNodeResult(findings, verdicts)
