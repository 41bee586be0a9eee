"""The error of a port the node cannot bind, named with its role.

A node listens on up to seven ports (beanstalk, RESP, their TLS twins, gRPC, the job lane,
the admin HTTP port); "Address already in use" alone does not say which one to change.
"""

from __future__ import annotations


class ListenError(OSError):
    """``role`` port ``host:port`` cannot be bound; ``reason`` says why."""

    def __init__(self, role: str, host: str, port: int | str, reason: str) -> None:
        where = f"{host}:{port}" if not host.startswith("unix:") else host
        super().__init__(f"cannot listen on the {role} port {where}: {reason}")
        self.role = role


def reason_of(exc: BaseException) -> str:
    """The OS's words for a failed bind (``Address already in use``), else the error's."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
