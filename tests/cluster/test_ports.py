"""A restart keeps each recorded port while it is free: free means "a server here could listen on it".

Every server the cluster starts binds with SO_REUSEADDR (Go's net.Listen sets it; so does Python's
http.server), so a port whose last connections linger in TIME_WAIT (60 s after a server closed
them, e.g. the readiness probe's `Connection: close` requests) is free for it; only a live listener
takes a port. Calling such a port taken moved Prometheus, KWOK and the exporter to new ports on a
quick `down` then `up`.
"""

from __future__ import annotations

import socket
import time

from gpuaas.cluster.state import port_free


def _port_in_time_wait() -> int:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server closes first: its side of the connection goes to TIME_WAIT
    time.sleep(0.05)
    client.close()
    server.close()
    return port


def test_a_port_whose_connections_linger_in_time_wait_is_free() -> None:
    assert port_free(_port_in_time_wait())


def test_a_port_with_a_listener_is_taken() -> None:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, 0))
            listener.listen()
            assert not port_free(listener.getsockname()[1]), host
