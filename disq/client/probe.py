"""What listens at an address that did not answer as disq's gRPC port.

gRPC says only that a channel never became ready, which reads as "not reachable" even when
the port answered, say because it is the node's RESP or beanstalk port. After such a failure
(never on a healthy path) one short TCP exchange tells the cases apart: nothing listens, or
something answers and its first bytes say what it is.
"""

from __future__ import annotations

import socket

PROBE_TIMEOUT_S = 1.0
# An inline command both text protocols answer at once, and that an HTTP server rejects
# with its status line; gRPC (HTTP/2) closes on it, or answers with binary frames.
_PROBE = b"PING\r\n"


def describe_address(addr: str, *, tls: bool = False) -> str:
    """One line on ``addr`` (host:port): what answers there, for an error message."""
    host, _, port_text = addr.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        return f"{addr}: not host:port"
    try:
        sock = socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S)
    except OSError as exc:
        return f"{addr}: nothing answers ({exc.strerror or exc})"
    try:
        sock.sendall(_PROBE)
        reply = sock.recv(64)
    except OSError:
        reply = b""
    finally:
        sock.close()
    what = _what(reply)
    if what is not None:
        return f"{addr}: answers, but is {what}, not disq's gRPC port (the nodes' --grpc-port)"
    if tls:
        return f"{addr}: accepts connections but did not answer gRPC over TLS (check tlsCa)"
    return (
        f"{addr}: accepts connections but does not answer as disq's gRPC port "
        "(a TLS port needs tlsCa; or a port of another service)"
    )


def _what(reply: bytes) -> str | None:
    if reply.startswith((b"+PONG", b"-")):
        return "a RESP (Disque/Redis) port"
    if reply.startswith((b"UNKNOWN_COMMAND", b"BAD_FORMAT")):
        return "a beanstalk port"
    if reply.startswith(b"HTTP/"):
        return "an HTTP port (the admin port?)"
    return None
