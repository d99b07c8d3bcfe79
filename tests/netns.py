"""Test hosts on one machine: network namespaces, each joined by a veth pair to a bridge in a namespace of its own
(the switch), each with its own hostname (a UTS namespace per command) and its own /etc/hosts (`ip netns exec`
bind-mounts /etc/netns/NAME/hosts over /etc/hosts). Needs root, `ip` and `unshare`.

Traffic stays between the namespaces this creates; nothing reaches any other network. Every namespace, link and
/etc/netns folder made here is removed on the way out, also when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from typing import NamedTuple

import pytest

SUBNET = "10.231.{n}.{host}"  # addresses exist only inside the namespaces made here
NETNS_ETC = "/etc/netns"


class Host(NamedTuple):
    ns: str
    addr: str
    name: str  # its hostname
    interface: str  # its one interface on the hosts' network


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _tag() -> int:
    return os.getpid() % 200 + 1


@contextlib.contextmanager
def hosts(count: int = 2, loopback: tuple[int, ...] = ()):
    """Yield [Host, ...]; hosts whose index is in `loopback` map their own hostname to 127.0.1.1 (the Debian
    default). Skip the test with the reason when namespaces cannot be made."""
    if shutil.which("ip") is None or shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("multi-host test needs root, iproute2's `ip` and `unshare` to create network namespaces")
    tag = _tag()
    switch = f"ddplab{tag}sw"
    made = [
        Host(f"ddplab{tag}h{i}", SUBNET.format(n=tag, host=i + 1), f"ddplab-node{i}", f"dl{tag}h{i}")
        for i in range(count)
    ]
    namespaces = [switch, *(h.ns for h in made)]
    etc_made = not os.path.isdir(NETNS_ETC)

    def clean() -> None:
        for name in namespaces:  # deleting a namespace deletes its links; it kills nothing: callers end processes
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        for h in made:
            shutil.rmtree(os.path.join(NETNS_ETC, h.ns), ignore_errors=True)
        if etc_made:
            with contextlib.suppress(OSError):
                os.rmdir(NETNS_ETC)

    try:
        for name in namespaces:
            _ip("netns", "add", name)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, h in enumerate(made):
            port = f"dl{tag}s{i}"
            _ip("link", "add", h.interface, "netns", h.ns, "type", "veth", "peer", "name", port, "netns", switch)
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", h.interface)
            _ip("-n", h.ns, "link", "set", h.interface, "up")
            _ip("-n", h.ns, "link", "set", "lo", "up")
            os.makedirs(os.path.join(NETNS_ETC, h.ns), exist_ok=True)
            lines = ["127.0.0.1 localhost"]
            lines += [f"{o.addr} {o.name}" for o in made if not (o is h and i in loopback)]
            if i in loopback:
                lines.append(f"127.0.1.1 {h.name}")
            with open(os.path.join(NETNS_ETC, h.ns, "hosts"), "w") as f:
                f.write("\n".join(lines) + "\n")
    except (subprocess.CalledProcessError, OSError) as e:
        clean()
        stderr = getattr(e, "stderr", b"") or b""
        pytest.skip(f"cannot create network namespaces here: {stderr.decode().strip() or e}")
    try:
        yield made
    finally:
        clean()


def two_hosts():
    return hosts(2)


def popen_in(host, argv: list[str], env: dict | None = None) -> subprocess.Popen:
    """Start argv on `host` (a Host, or a namespace's name), under the host's own hostname."""
    if isinstance(host, Host):
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host.name, *argv]
        host = host.ns
    return subprocess.Popen(
        ["ip", "netns", "exec", host, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
