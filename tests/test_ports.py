"""The port probe asks as PyTorch's store binds (SO_REUSEADDR): TIME_WAIT is free, a listener is busy."""

from __future__ import annotations

import socket

import psutil

from ddplab.ports import free_port, port_is_free


def _time_wait_port() -> int:
    """A loopback port whose only trace is a connection in TIME_WAIT, as a store's port right after its run.

    The side that closes first keeps TIME_WAIT: here the server's accepted connection, on the listening port. The
    listener sets SO_REUSEADDR as the store does (and the accepted connection inherits it): Linux lets a new bind
    past a TIME_WAIT socket only when both have it.
    """
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server side closes first: (127.0.0.1:port) enters TIME_WAIT once the client closes too
    client.recv(1)  # the FIN arrived
    client.close()
    listener.close()
    return port


def _states(port: int) -> set[str]:
    return {c.status for c in psutil.net_connections("tcp4") if c.laddr and c.laddr.port == port}


def test_time_wait_port_is_free_as_the_store_binds_it():
    port = _time_wait_port()
    assert psutil.CONN_TIME_WAIT in _states(port), _states(port)
    with socket.socket() as plain:  # the old probe: a bind without SO_REUSEADDR is refused here ...
        try:
            plain.bind(("127.0.0.1", port))
            refused = False
        except OSError:
            refused = True
    assert refused, "no TIME_WAIT effect on this kernel: the test would prove nothing"
    assert port_is_free(port)  # ... while the store (SO_REUSEADDR) binds it
    assert port_is_free(port, "")


def test_listening_port_is_busy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert not port_is_free(port)
        assert not port_is_free(port, "")
    assert port_is_free(port)


def test_free_port_is_free():
    assert port_is_free(free_port())
