"""Is a TCP port free? Asked the way PyTorch's rendezvous store will bind it.

TCPStore's server sets SO_REUSEADDR before bind (torch/csrc/distributed/c10d/socket.cpp, SocketListenOp; libuv's
uv_tcp_bind for the libuv store), as does ddplab's own loopback store (launcher.agent._loopback_store). With it, a port whose
last connections sit in TIME_WAIT (a run that ended seconds ago; Linux also asks SO_REUSEADDR of the old socket,
which the old store had) binds fine; without it, a probe calls that port busy and a re-run moves to another port
for nothing. A port with a listening socket fails both ways. So the probe sets SO_REUSEADDR too.
"""

from __future__ import annotations

import socket


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether the store could bind HOST:PORT now ("" = every interface, as torchrun's store binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing uses now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
