"""Several machines meeting through torchrun's c10d rendezvous."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import psutil

from ddplab.errors import DdplabError
from ddplab.ports import port_is_free


@dataclass
class Nodes:
    """Several machines meeting through torchrun's c10d rendezvous on HOST:PORT (served by node rank 0).

    The c10d store is unauthenticated: keep HOST:PORT on a private network, never on a public address.
    """

    count: int
    rank: int
    host: str
    port: int
    rdzv_id: str = "ddplab"
    local_addr: str = ""  # this node's address as the others reach it; found from the route to HOST when empty
    interface: str = ""
    join_timeout: int = 120  # seconds to wait for every node at a rendezvous (torchrun's default is 600)

    @classmethod
    def parse(cls, count: int, rank: int, endpoint: str, rdzv_id: str = "ddplab") -> Nodes:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DdplabError(
                f"--rdzv-endpoint {endpoint!r} is not HOST:PORT: use the address of node 0 and a "
                "free port on it, e.g. 10.0.0.1:29500"
            )
        if not 0 <= rank < count:
            raise DdplabError(f"--node-rank {rank} is outside 0..{count - 1}: number the nodes 0..--nnodes-1")
        nodes = cls(count, rank, host.strip("[]"), int(port), rdzv_id)
        nodes.local_addr, nodes.interface = route_to(nodes.host)
        if rank == 0 and not port_is_free(nodes.port, nodes.local_addr):
            raise DdplabError(
                f"port {nodes.port} on {nodes.local_addr} is already in use: node 0 serves the "
                "rendezvous there; choose another port in --rdzv-endpoint on every node"
            )
        return nodes

    def worker_env(self) -> dict[str, str]:
        env = {
            # a fresh store every rendezvous round: restart counts differ between agents (pytorch/pytorch#135712)
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):  # the interface that reaches the other nodes,
            if self.interface and var not in os.environ:  # not whatever the hostname resolves to
                env[var] = self.interface
        return env


def route_to(host: str) -> tuple[str, str]:
    """This machine's address and interface on the route to `host` (a UDP connect sends no packet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))
        except socket.gaierror as e:
            raise DdplabError(
                f"rendezvous host {host!r} does not resolve on this node ({e.strerror}): give node 0's "
                f"address in --rdzv-endpoint, or add {host} to this node's /etc/hosts"
            ) from None
        except OSError as e:
            raise DdplabError(
                f"no route to rendezvous host {host!r} ({e.strerror}): check the address of node 0 "
                "and this machine's network"
            ) from None
        addr = s.getsockname()[0]
    interface = next(
        (name for name, addrs in psutil.net_if_addrs().items() if any(a.address == addr for a in addrs)), ""
    )
    return addr, interface
