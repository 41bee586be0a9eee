"""Per connection state of the RESP commands, and the handler signature."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from disq.core.disque.api import PENDING, DeferredResult, Pending

if TYPE_CHECKING:
    from disq.doors.disque.node_api import NodeApi

Deferred = Callable[[DeferredResult], bytes]


class Client:
    """One connection's state: authentication, name, and the command it is blocked on."""

    __slots__ = (
        "authenticated",
        "closing",
        "deferred",
        "lib_name",
        "lib_ver",
        "name",
        "new_token",
        "node",
        "pending_token",
    )

    def __init__(self, node: NodeApi, new_token: Callable[[], int]) -> None:
        self.node = node
        self.new_token = new_token  # unique across every door of the node
        self.authenticated = False  # only consulted while a password is set
        self.closing = False  # QUIT, SHUTDOWN or a protocol error: close after the replies
        self.name: bytes | None = None
        self.lib_name: bytes | None = None
        self.lib_ver: bytes | None = None
        self.pending_token: int | None = None
        self.deferred: Deferred | None = None

    def block(self, token: int, deferred: Deferred) -> Pending:
        self.pending_token = token
        self.deferred = deferred
        return PENDING

    def take_deferred(self, result: DeferredResult) -> bytes:
        """The deferred reply of the blocked command, which unblocks the connection."""
        deferred = self.deferred
        self.deferred = None
        self.pending_token = None
        if deferred is None:
            return b""
        return deferred(result)


Handler = Callable[[Client, list[bytes], int], "bytes | Pending"]
