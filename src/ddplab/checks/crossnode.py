"""Cross-node preflight: what stops several machines from meeting, named in seconds instead of after a timeout.

1. Locally (about a second): how the own hostname and the rendezvous host resolve (a hostname mapped to 127.x makes
   gloo advertise loopback), which node hosts the store, the interface on the route to the endpoint against
   GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, stale NODE_RANK / MASTER_ADDR / MASTER_PORT; then whether the store port
   answers: "refused" means nothing listens yet (node 0 not started) and is waited for; no host at the address, or
   no answer at all within a few seconds (a firewall that drops packets), is named at once.
2. Through a small TCPStore on the rendezvous port itself (node 0 serves it before the real rendezvous, so the
   exchange also proves the port passes): every node publishes its facts (hostname, advertised address, interface,
   node rank, --nnodes, nproc, rdzv id/backend, versions, clock, its own local failures) and opens a listening socket
   on its advertised address; every node reads the others', compares them, and connects to every other node's
   advertised address (the collectives need the full mesh, not only the store).
3. One verdict per node and for the job: each finding names the node, the fact and the fix.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import time
from dataclasses import dataclass, field

import psutil

from ddplab.checks.preflight import Finding, interface_matches
from ddplab.launcher.nodes import Nodes

CONNECT_S = 3.0  # one connect attempt: a LAN answers in milliseconds, a dropping firewall never
UNANSWERED_S = 6.0  # no host / no answer this long: named (a refused port is waited for: node 0 may start later)
IFNAME_VARS = (("GLOO_SOCKET_IFNAME", "gloo"), ("NCCL_SOCKET_IFNAME", "nccl"))


@dataclass
class CrossNodeResult:
    findings: list[Finding]  # every node's problems, each naming its node, with the fix
    nodes: list[dict] = field(default_factory=list)  # per node: its facts and its verdict
    seconds: float = 0.0

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "fail"]


def _ipv4(name: str) -> list[str]:
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)})
    except (OSError, UnicodeError):
        return []


def machine_id() -> str:
    """Which machine and network namespace this process is in: nodes that share both reach each other through
    loopback, so a loopback or shared address is right between them (two nodes practised on one machine)."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id", "/etc/machine-id"):
        try:
            with open(path) as f:
                parts.append(f.read().strip())
            break
        except OSError:
            continue
    try:
        parts.append(str(os.stat("/proc/self/ns/net").st_ino))
    except OSError:
        parts.append(socket.gethostname())
    return ":".join(parts)


def _local_addresses() -> dict[str, str]:
    """IPv4 address -> interface name."""
    return {
        a.address: name for name, addrs in psutil.net_if_addrs().items() for a in addrs if a.family == socket.AF_INET
    }


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


@dataclass
class Local:
    """This node as the preflight sees it."""

    nodes: Nodes
    backend: str  # gloo | nccl | "" (a user's script: either)
    nproc: int
    sets_interface: bool  # ddplab's own ranks get GLOO/NCCL_SOCKET_IFNAME = the route's interface
    is_host: bool  # this node serves the store
    rdzv_backend: str = "c10d"
    node_rank: int | None = None  # None where the rendezvous assigns ranks (torchrun's c10d under `ddplab launch`)
    host_inferred: bool = False  # is_host guessed from the endpoint, as torch does: a failed bind falls back to client
    hostname: str = ""
    address: str = ""  # what the collectives advertise to the other nodes
    interface: str = ""

    def label(self) -> str:
        return node_label({"node_rank": self.node_rank, "hostname": self.hostname, "address": self.address})


def node_label(facts: dict) -> str:
    who = f"{facts['hostname']}, {facts['address']}"
    if facts.get("node_rank") is not None:
        return f"node {facts['node_rank']} ({who})"
    return f"node {facts['hostname']} ({facts['address']})"


def local_findings(me: Local, environ=None) -> list[Finding]:
    """Everything this node can know alone; fills in me.hostname/address/interface."""
    env = os.environ if environ is None else environ
    nodes, found = me.nodes, []
    mine = _local_addresses()
    me.hostname = socket.gethostname()
    own = _ipv4(me.hostname)
    route_if = nodes.interface
    # what the collectives advertise: the interface variable's address, else (ddplab's ranks) the route's, else
    # (gloo's default device, a user's script) what the hostname resolves to
    chosen = _chosen_interface(me, env, mine)
    if chosen:
        me.interface = chosen
        me.address = next((a for a, n in mine.items() if n == chosen), nodes.local_addr)
    elif me.sets_interface or not own:
        me.interface, me.address = route_if, nodes.local_addr
    else:
        me.address = own[0]
        me.interface = mine.get(own[0], "")

    # the loopback trap; with the endpoint on loopback every node is on this machine (nothing else reaches it), and
    # loopback is then the address that works between them
    on_one_machine = bool(_ipv4(nodes.host)) and all(_is_loopback(a) for a in _ipv4(nodes.host))
    if not own:
        found.append(
            Finding(
                "warn" if me.sets_interface else "fail",
                f"{me.label()}: hostname {me.hostname!r} does not resolve on this node: gloo's default "
                "device and torchrun name this machine by it",
                f"add '{nodes.local_addr} {me.hostname}' to /etc/hosts, or export GLOO_SOCKET_IFNAME={route_if}",
            )
        )
    elif all(_is_loopback(a) for a in own) and not on_one_machine:
        set_vars = [v for v, _ in IFNAME_VARS if env.get(v)]
        level = "warn" if me.sets_interface or "GLOO_SOCKET_IFNAME" in set_vars else "fail"
        why = (
            "ddplab's own ranks get GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME set, but a script started by another "
            "launcher would advertise it"
            if me.sets_interface
            else "gloo advertises that address to the other nodes (they then connect to themselves) and the run hangs "
            "or fails at the first collective"
        )
        found.append(
            Finding(
                level,
                f"{me.label()}: hostname {me.hostname!r} resolves to loopback {', '.join(own)} (/etc/hosts): {why}",
                f"on this node: export GLOO_SOCKET_IFNAME={route_if} NCCL_SOCKET_IFNAME={route_if}, or "
                f"map {me.hostname} to {nodes.local_addr} in /etc/hosts",
            )
        )
    elif not me.sets_interface and not chosen and not any(a in mine for a in own):
        found.append(
            Finding(
                "fail",
                f"{me.label()}: hostname {me.hostname!r} resolves to {', '.join(own)}, which "
                "is not an address of this machine (a stale /etc/hosts entry): gloo cannot "
                "bind it",
                f"map {me.hostname} to {nodes.local_addr} in /etc/hosts, or export GLOO_SOCKET_IFNAME={route_if}",
            )
        )

    # who hosts the store
    host_addrs = _ipv4(nodes.host)
    here = [a for a in host_addrs if a in mine and not _is_loopback(a)]
    if me.rdzv_backend == "c10d":
        if me.is_host and not here and not all(_is_loopback(a) for a in host_addrs):
            found.append(
                Finding(
                    "fail",
                    f"{me.label()} would serve the rendezvous store, but --rdzv-endpoint "
                    f"{nodes.host} ({', '.join(host_addrs) or 'unresolved'}) is not an address "
                    "of this machine: the store is served where nobody looks for it",
                    f"run --node-rank 0 on the machine at {nodes.host}, and another --node-rank here"
                    if me.node_rank is not None
                    else f"drop is_host from --rdzv-conf here; start the node at {nodes.host} too",
                )
            )
        elif here and not me.is_host:
            fix = (
                "give this machine --node-rank 0 (it hosts the store), and the others 1.."
                if me.node_rank is not None
                else "add --rdzv-conf is_host=1 on this node, or give its hostname in --rdzv-endpoint on every node"
            )
            why = (
                ""
                if me.node_rank is not None
                else f": torch decides by hostname ({me.hostname} -> {', '.join(own) or 'unresolved'}) which node hosts "
                f"it, and {nodes.host} does not match"
            )
            found.append(
                Finding(
                    "fail",
                    f"{me.label()}: --rdzv-endpoint {nodes.host} is this machine, but it will "
                    f"not serve the rendezvous store{why}; every node would wait for it",
                    fix,
                )
            )

    found += _interface_findings(me, env, mine)
    found += _stale_environment(me, env, host_addrs)
    return found


def _chosen_interface(me: Local, env, mine: dict[str, str]) -> str:
    """The interface the running library takes from its variable (the first that exists), or ""."""
    present = sorted(set(mine.values()))
    for var, library in IFNAME_VARS:
        if env.get(var) and (library == me.backend or (not me.backend and library == "gloo")):
            used, _ = interface_matches(var, env[var], present)
            return used[0] if used else ""
    return ""


def _interface_findings(me: Local, env, mine: dict[str, str]) -> list[Finding]:
    """An interface variable that names an interface that exists (preflight checks that) but does not reach the
    endpoint: loopback, or off the endpoint's network while the route goes elsewhere."""
    found, route_if = [], me.nodes.interface
    present = sorted(set(mine.values()) | set(psutil.net_if_addrs()))
    try:
        target = ipaddress.ip_address(_ipv4(me.nodes.host)[0])
    except (IndexError, ValueError):
        return found
    for var, library in IFNAME_VARS:
        value = env.get(var)
        if not value:
            continue
        used, _ = interface_matches(var, value, present)
        if not used:
            continue  # nothing here matches: preflight's own finding names it
        stats = psutil.net_if_addrs()
        reaching = [
            n
            for n in used
            if n == route_if
            or any(
                a.family == socket.AF_INET
                and a.netmask
                and target in ipaddress.ip_network(f"{a.address}/{a.netmask}", strict=False)
                for a in stats.get(n, [])
            )
        ]
        if reaching:
            continue
        running = library == me.backend or (not me.backend and library == "gloo")
        addrs = [a.address for n in used for a in stats.get(n, []) if a.family == socket.AF_INET]
        found.append(
            Finding(
                "fail" if running else "warn",
                f"{me.label()}: {var}={value} selects {', '.join(used)} "
                f"({', '.join(addrs) or 'no IPv4 address'}), which does not reach {me.nodes.host}: the "
                f"route there goes through {route_if}; {library} would advertise an address the other "
                "nodes cannot connect to",
                f"on this node: export {var}={route_if}",
            )
        )
    return found


def _stale_environment(me: Local, env, host_addrs: list[str]) -> list[Finding]:
    """Launcher variables left in the shell that disagree with the flags: scripts and other launchers read them."""
    found, label = [], me.label()
    checks = [
        ("NODE_RANK", str(me.node_rank) if me.node_rank is not None else None, "--node-rank"),
        ("MASTER_PORT", str(me.nodes.port), "--rdzv-endpoint's port"),
        ("MASTER_ADDR", None, "--rdzv-endpoint's host"),
    ]
    for var, expected, flag in checks:
        value = env.get(var)
        if value is None or value == "":
            continue
        if var == "MASTER_ADDR":
            if value == me.nodes.host or set(_ipv4(value)) & set(host_addrs):
                continue
        elif expected is None or value.strip() == expected:
            continue
        # torchrun overwrites it in every rank's environment (its agent sets MASTER_*; NODE_RANK it never reads), so
        # the run itself starts; a script or launcher that reads it from the shell (Lightning reads NODE_RANK) does not
        found.append(
            Finding(
                "warn",
                f"{label}: {var}={value} in the environment disagrees with {flag} "
                f"({expected or me.nodes.host}): torchrun's ranks get their own, but a script "
                f"or launcher that reads {var} from this shell joins the wrong node or port",
                f"on this node: unset {var} (or export {var}={expected or me.nodes.host})",
            )
        )
    return found


# ---- the store and the exchange -------------------------------------------------------------------------------


def probe_store(me: Local, wait: float, say=None) -> Finding | None:
    """None once HOST:PORT accepts a connection; else the finding. Refused is waited for up to `wait` s."""
    nodes, start = me.nodes, time.monotonic()
    unanswered_since, said = None, False
    while True:
        try:
            with socket.create_connection((nodes.host, nodes.port), timeout=CONNECT_S):
                return None
        except OSError as e:
            err = e
        now = time.monotonic()
        refused = isinstance(err, ConnectionRefusedError)
        if refused:
            unanswered_since = None
        else:
            unanswered_since = unanswered_since or start
        if not refused and now - unanswered_since >= UNANSWERED_S:
            return _unanswered(me, err, now - start)
        if now - start >= wait:
            return Finding(
                "fail",
                f"{me.label()}: nothing listens on {nodes.host}:{nodes.port} after {wait:.0f} s "
                "(connection refused): node 0 is not running, or --rdzv-endpoint names another "
                "machine or port",
                f"start node 0 (the machine at {nodes.host}) with the same --rdzv-endpoint {nodes.host}:{nodes.port}",
            )
        if say and not said:
            say(
                f"waiting for the rendezvous store on {nodes.host}:{nodes.port} "
                f"({'connection refused: node 0 not started yet?' if refused else socket_error_text(err)})"
            )
            said = True
        time.sleep(0.5 if refused else 0.2)


def socket_error_text(err: OSError) -> str:
    if isinstance(err, (socket.timeout, TimeoutError)):
        return "no answer"
    return err.strerror or str(err)


def _unanswered(me: Local, err: OSError, seconds: float) -> Finding:
    nodes = me.nodes
    if err.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        what = f"no host answers at {nodes.host} ({err.strerror}, for {seconds:.0f} s)"
    else:  # a silent drop: connect gets neither an answer nor a refusal
        what = (
            f"{nodes.host}:{nodes.port} gives no answer at all (each connect timed out after {CONNECT_S:.0f} s, "
            f"for {seconds:.0f} s): a firewall or security group drops the port, or no machine has that address"
        )
    return Finding(
        "fail",
        f"{me.label()}: cannot reach the rendezvous store: {what}",
        f"check --rdzv-endpoint (node 0's address as this node reaches it) and open TCP port {nodes.port} "
        "and the ephemeral ports between the nodes",
    )


def run(me: Local, env_fails: list[Finding] = (), wait: float | None = None, say=None) -> CrossNodeResult:
    """The whole cross-node preflight for this node: local findings, the store, the exchange."""
    start = time.monotonic()
    wait = float(me.nodes.join_timeout if wait is None else wait)
    local = local_findings(me)
    shared = [*local, *[f for f in env_fails if f.level == "fail"]]  # said to every node, with this node's name
    # a node that already fails waits only briefly for the store: long enough to tell the others, not the join window
    probe_wait = min(wait, UNANSWERED_S + CONNECT_S) if any(f.level == "fail" for f in shared) else wait
    unreachable = None if me.is_host else probe_store(me, probe_wait, say)
    if unreachable is not None:
        result = CrossNodeResult([*local, unreachable] if not any(f.level == "fail" for f in shared) else local)
    else:
        from ddplab.checks.exchange import exchange

        result = exchange(me, shared, wait, say)
    result.seconds = time.monotonic() - start
    return result


def own_ranks(nodes: Nodes, backend: str, nproc: int) -> Local:
    """This node for ddplab's own ranks (check, train): they get the route's interface; node rank 0 hosts."""
    return Local(nodes, backend, nproc, sets_interface=True, is_host=nodes.rank == 0, node_rank=nodes.rank)


def require(me: Local, env_fails: list[Finding] = ()) -> CrossNodeResult:
    """`ddplab train` / `ddplab launch` with several nodes: the same preflight; warnings are said, the first failure
    is a one-line error naming the node, the fact and the fix (the others are said before it)."""
    from ddplab.errors import DdplabError
    from ddplab.report import log

    result = run(me, env_fails, say=log)
    first = result.failed[0] if result.failed else None
    for f in result.findings:
        if f.level != "ok" and f is not first:
            log(f"preflight {f.level}: {f.what}\n      fix: {f.fix}")
    if first is not None:
        raise DdplabError(f"{first.what}: {first.fix}")
    return result


def for_launch(ns, nproc: int, max_nodes: int) -> CrossNodeResult | None:
    """The preflight for torchrun's options (`ddplab launch`) when they name several nodes; None for one node.
    nproc, max_nodes: torchrun's reading of --nproc-per-node and --nnodes (userscript.plan.Plan)."""
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname, parse_rendezvous_endpoint

    from ddplab.launcher.nodes import route_to

    if max_nodes < 2 or ns.standalone or not ns.rdzv_endpoint:
        return None
    host, port = parse_rendezvous_endpoint(ns.rdzv_endpoint, default_port=29400)
    static = ns.rdzv_backend == "static"
    conf = dict(item.split("=", 1) for item in (ns.rdzv_conf or "").split(",") if "=" in item)
    if static:
        is_host = ns.node_rank == 0
    elif "is_host" in conf:  # torch's RendezvousParameters.get_as_bool
        is_host = conf["is_host"].strip().lower() in ("1", "true", "t", "yes", "y")
    else:  # what torch's c10d backend does without it (c10d_rendezvous_backend.py, _create_tcp_store): a guess
        is_host = _matches_machine_hostname(host)  # that falls back to a client when the port is taken
    nodes = Nodes(max_nodes, ns.node_rank if static else 0, host, port, ns.rdzv_id or "none")
    nodes.local_addr, nodes.interface = route_to(host)
    me = Local(
        nodes,
        "",
        nproc,
        sets_interface=False,
        is_host=is_host,
        rdzv_backend=ns.rdzv_backend,
        node_rank=ns.node_rank if static else None,
        host_inferred=not static and "is_host" not in conf,
    )
    return require(me)
