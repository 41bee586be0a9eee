"""Per connection state of the RESP commands, and the handler signature."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from disq.core.disque.api import PENDING, DeferredResult, Pending
from disq.doors.disque.admin import AdminState

if TYPE_CHECKING:
    from disq.doors.disque.node_api import NodeApi

Deferred = Callable[[DeferredResult], bytes]


class Client:
    """One connection's state: authentication, name, and the command it is blocked on."""

    __slots__ = (
        "addr",
        "admin",
        "authenticated",
        "cid",
        "closing",
        "ctime_ms",
        "deferred",
        "fd",
        "kill",
        "laddr",
        "last_cmd",
        "last_ms",
        "lib_name",
        "lib_ver",
        "monitor",
        "name",
        "new_token",
        "node",
        "outbox",
        "outbox_bytes",
        "pending_token",
        "protocol",
        "unix_path",
        "wake",
    )

    def __init__(
        self, node: NodeApi, new_token: Callable[[], int], admin: AdminState | None = None
    ) -> None:
        self.node = node
        # Node-wide CLIENT/MONITOR/SLOWLOG/LATENCY state; a door built without a hub (unit
        # tests) gets its own.
        self.admin = admin if admin is not None else AdminState()
        # Set by the transport on connect (CLIENT LIST, MONITOR and SLOWLOG show them).
        self.cid = 0
        self.addr = b"?:0"
        self.laddr = b"?:0"
        self.fd = -1
        self.unix_path: bytes | None = None  # the listening socket's path for a UNIX client
        self.ctime_ms = 0
        self.last_ms = 0  # the last command's clock reading (CLIENT LIST idle=)
        self.last_cmd = "NULL"  # its name (cmd=)
        self.monitor = False  # MONITOR: the connection only streams from now on
        self.outbox: list[bytes] = []  # MONITOR lines the transport has not taken yet
        self.outbox_bytes = 0
        self.wake: Callable[[], None] | None = None  # the transport: flush the outbox soon
        self.kill: Callable[[], None] | None = None  # the transport: close the socket now
        self.new_token = new_token  # unique across every door of the node
        self.authenticated = False  # only consulted while a password is set
        self.closing = False  # QUIT, SHUTDOWN or a protocol error: close after the replies
        self.name: bytes | None = None
        self.lib_name: bytes | None = None
        self.lib_ver: bytes | None = None
        self.pending_token: int | None = None
        self.deferred: Deferred | None = None
        # 2 (RESP2, every connection starts so) or 3 after HELLO 3: the handlers whose reply
        # differs in RESP3 consult it; every other reply is the same bytes in both.
        self.protocol = 2

    def monitor_peer(self) -> bytes:
        """The client as a MONITOR line names it: ``ip:port``, or ``unix:path``."""
        if self.unix_path is not None:
            return b"unix:" + self.unix_path
        return self.addr

    def block(self, token: int, deferred: Deferred) -> Pending:
        self.pending_token = token
        self.deferred = deferred
        return PENDING

    def unblock(self) -> tuple[int | None, Deferred | None]:
        """Forget the blocked command; its (token, deferred). A method, not two attribute
        writes at the caller: there mypy narrows both attributes to None for the rest of the
        function, and mypyc compiles what mypy believes (a command run in between blocks
        again and sets them)."""
        blocked = self.pending_token, self.deferred
        self.pending_token = None
        self.deferred = None
        return blocked

    def take_deferred(self, result: DeferredResult) -> bytes:
        """The deferred reply of the blocked command, which unblocks the connection."""
        deferred = self.deferred
        self.deferred = None
        self.pending_token = None
        if deferred is None:
            return b""
        return deferred(result)


Handler = Callable[[Client, list[bytes], int], "bytes | Pending"]
