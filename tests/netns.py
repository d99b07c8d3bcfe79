"""Two test hosts on one machine: network namespaces joined by a veth pair (needs root and `ip`).

Traffic stays between the two namespaces this creates; nothing reaches any other network.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest

SUBNET = "10.231.{n}.{host}"  # addresses exist only inside the namespaces made here


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextlib.contextmanager
def two_hosts():
    """Yield ((ns_a, addr_a), (ns_b, addr_b)); skip the test with the reason when namespaces cannot be made."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("two-host test needs root and iproute2's `ip` to create network namespaces")
    tag = os.getpid() % 200 + 1
    ns = [f"ddplab{tag}a", f"ddplab{tag}b"]
    veth = [f"dl{tag}a", f"dl{tag}b"]
    addrs = [SUBNET.format(n=tag, host=1), SUBNET.format(n=tag, host=2)]
    try:
        for name in ns:
            _ip("netns", "add", name)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for name, dev, addr in zip(ns, veth, addrs):
            _ip("link", "set", dev, "netns", name)
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", name, "link", "set", dev, "up")
            _ip("-n", name, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, OSError) as e:
        for name in ns:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        stderr = getattr(e, "stderr", b"") or b""
        pytest.skip(f"cannot create network namespaces here: {stderr.decode().strip() or e}")
    try:
        yield list(zip(ns, addrs))
    finally:
        for name in ns:  # deleting a namespace kills nothing: callers end their processes first
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def popen_in(namespace: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", namespace, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
                            start_new_session=True)
