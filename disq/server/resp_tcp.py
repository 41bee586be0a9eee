"""asyncio transport for the RESP door (port 7711): bytes in, one write of all replies out.

Mirrors :mod:`disq.server.beanstalk_tcp`: per read, one parse of every complete command, one
core call per command, and the replies of that read gathered for one ``transport.write``.
The node decides when they leave (:meth:`RespNode.after_commands`): with its flush, after
the AOF records they depend on are written (group commit). Backpressure and hang-ups:
:mod:`disq.server.flow`.

A blocked command's token waits in the node's one reply router (``RespNode.wait_reply``);
the router calls the connection back with the deferred result. :class:`RespHub` is what is
left node-wide for this port: the live connections, the client limit and the counters.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from mypy_extensions import mypyc_attr

from disq.core.disque.api import DeferredResult
from disq.doors.disque import NodeApi, RespStats
from disq.doors.disque.admin import MONITOR_MAX_OUTPUT_BYTES, AdminState, set_logger
from disq.doors.disque.table import command_table
from disq.doors.resp_door import RespDoor
from disq.logging import get_logger
from disq.server.flow import PENDING_HIGH_BYTES, FlowControlledProtocol, set_nodelay

if TYPE_CHECKING:
    from disq.server.flow import Flushable
    from disq.server.router import Waiter

DEFAULT_MAX_CLIENTS = 10_000  # Disque's maxclients default
_MAX_CLIENTS_ERR = b"-ERR max number of clients reached\r\n"
IDLE_CHECK_S = 1.0  # Redis's clientsCron looks at each client about once a second


def set_keepalive(sock: Any, seconds: int) -> None:
    """Redis's anetKeepAlive: SO_KEEPALIVE, the first probe after ``seconds`` idle, then one
    every ``seconds / 3``, dead after 3 unanswered. TCP sockets only; 0: leave it off."""
    if seconds <= 0 or sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, seconds)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, seconds // 3))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


log = get_logger("disq.resp")
set_logger(get_logger("disq.resp.admin"))


def _format_addr(addr: tuple[Any, ...]) -> bytes:
    """formatAddr: ``ip:port``, IPv6 as ``[ip]:port``."""
    host, port = str(addr[0]), int(addr[1])
    text = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return text.encode()


class RespNode(NodeApi, Protocol):
    """What the transport needs from the node on top of the commands' :class:`NodeApi`."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def new_token(self) -> int: ...

    def wait_reply(self, token: int, waiter: Waiter) -> None:
        """Call ``waiter(token, result)`` when the core answers ``token``, after the records
        the answer depends on are written."""
        ...

    def cancel(self, token: int) -> None:
        """Nobody waits on ``token`` any more."""
        ...

    def after_commands(self, conn: Flushable | None = None) -> None:
        """A read (or a close) ran commands: ``conn.flush()`` comes with the node's flush,
        once the records the replies depend on are written."""
        ...

    def mark_dirty(self, conn: Flushable) -> None:
        """A routed reply gave ``conn`` output: flush it with the current flush."""
        ...


class RespHub:
    """The RESP port's shared state: connections, the client limit, counters."""

    __slots__ = (
        "_idle_timer",
        "_pause_timer",
        "admin",
        "connections",
        "idle_timeout_s",
        "keepalive_s",
        "max_clients",
        "new_token",
        "node",
        "stats",
    )

    def __init__(
        self,
        node: RespNode,
        *,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        new_token: Callable[[], int] | None = None,
    ) -> None:
        self.node = node
        self.max_clients = max_clients
        # Tokens must be unique among every client of the core (RESP, gRPC, beanstalk): the
        # node core's one counter.
        self.new_token: Callable[[], int] = new_token if new_token is not None else node.new_token
        self.connections: set[RespProtocol] = set()
        self.stats: RespStats = node.resp_stats
        self.keepalive_s = 0  # tcp-keepalive: set on each accepted socket
        self.idle_timeout_s = 0  # timeout: idle clients are closed after this; 0: never
        self._idle_timer: asyncio.TimerHandle | None = None
        # CLIENT/MONITOR/SLOWLOG/LATENCY state shared by the port's connections, and the
        # command table they dispatch through: rename-command is applied here, once (a node
        # without a config file, or a test's fake node, has no renames).
        renames = getattr(node, "command_renames", ())
        self.admin = AdminState(command_table(renames))
        self.admin.load_config(node)
        self.admin.on_pause = self._on_pause
        self._pause_timer: asyncio.TimerHandle | None = None

    def set_idle_timeout(self, seconds: int) -> None:
        """``timeout`` (at start and by CONFIG SET): close clients idle that long."""
        self.idle_timeout_s = seconds
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if seconds > 0:
            self._idle_timer = self.node.loop.call_later(IDLE_CHECK_S, self._close_idle)

    def _close_idle(self) -> None:
        # Redis's clientsCronHandleTimeout: a client blocked in a command (GETJOB) has that
        # command's own timeout and is not closed for idling.
        loop = self.node.loop
        limit = loop.time() - self.idle_timeout_s
        for proto in list(self.connections):
            door = proto.door
            # A MONITOR only receives (Redis exempts it, a replica-flagged client, too).
            if (
                door is not None
                and not door.blocked
                and not door.client.monitor
                and proto.last_active < limit
            ):
                if proto.transport is not None:
                    proto.transport.close()
        self._idle_timer = loop.call_later(IDLE_CHECK_S, self._close_idle)

    def _on_pause(self, end_ms: int) -> None:
        """CLIENT PAUSE set (or UNPAUSE cleared, ``end_ms`` 0) the pause: wake every
        connection when it ends, as Disque's clientsArePaused() does from its cron."""
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        if end_ms == 0:
            self._pause_over()
            return
        delay_s = max(0, end_ms - self.node.now_ms()) / 1000
        self._pause_timer = self.node.loop.call_later(delay_s, self._pause_check)

    def _pause_check(self) -> None:
        self._pause_timer = None
        admin = self.admin
        now = self.node.now_ms()
        if admin.paused(now):  # the loop's timer may run early (runtime.py's _on_timer)
            delay_s = max(1, admin.pause_end_ms - now) / 1000
            self._pause_timer = self.node.loop.call_later(delay_s, self._pause_check)
            return
        self._pause_over()

    def _pause_over(self) -> None:
        # The commands that arrived during the pause run now (unblockPostponedClients).
        for proto in list(self.connections):
            door = proto.door
            if door is not None and door.runnable and not proto.write_paused:
                proto._schedule_continue()

    def protocol_factory(self) -> RespProtocol:
        """For ``loop.create_server(hub.protocol_factory, ...)``."""
        return RespProtocol(self)

    @property
    def connected_clients(self) -> int:
        return len(self.connections)

    def close_all(self) -> None:
        """Close every connection (shutdown); blocked commands are cancelled as they go."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        for proto in list(self.connections):
            if proto.transport is not None:
                proto.transport.close()


@mypyc_attr(native_class=False)  # asyncio.Protocol is a Python class
class RespProtocol(FlowControlledProtocol[RespDoor]):
    __slots__ = ("hub", "last_active")

    def __init__(self, hub: RespHub) -> None:
        super().__init__()
        self.hub = hub
        self.last_active = hub.node.loop.time()  # the last read or reply (timeout)

    # ------------------------------------------------------------------ asyncio
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tr: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop's: no subclass
        self.transport = tr
        hub = self.hub
        if len(hub.connections) >= hub.max_clients:
            # acceptCommonHandler: tell the client why, then close.
            hub.stats.rejected_connections += 1
            tr.write(_MAX_CLIENTS_ERR)
            tr.close()
            return
        hub.stats.connections_received += 1
        self.door = door = RespDoor(hub.node, hub.new_token, admin=hub.admin)
        hub.connections.add(self)
        self._register_client(door, tr)
        set_nodelay(transport)
        if hub.keepalive_s:
            set_keepalive(transport.get_extra_info("socket"), hub.keepalive_s)

    def _register_client(self, door: RespDoor, tr: asyncio.Transport) -> None:
        """Give the client its id and addresses (CLIENT LIST, MONITOR, SLOWLOG) and the two
        ways the node reaches this socket unasked: MONITOR lines and CLIENT KILL."""
        client = door.client
        hub = self.hub
        hub.admin.register(client, hub.node.now_ms())
        sock = tr.get_extra_info("socket")
        if sock is not None:
            client.fd = sock.fileno()
        peer = tr.get_extra_info("peername")
        local = tr.get_extra_info("sockname")
        if isinstance(peer, tuple):
            client.addr = _format_addr(peer)
            if isinstance(local, tuple):
                client.laddr = _format_addr(local)
        elif isinstance(local, str):  # a UNIX socket: Redis shows path:0
            path = local.encode("utf-8", "surrogateescape")
            client.unix_path = path
            client.addr = client.laddr = path + b":0"
        client.wake = self._wake
        client.kill = self._kill

    def _wake(self) -> None:
        # MONITOR lines waiting in the client's outbox: flush this connection soon.
        self.hub.node.after_commands(self)

    def _kill(self) -> None:
        # CLIENT KILL or a MONITOR past its output limit: close now, drop unsent output.
        tr = self.transport
        if tr is not None:
            tr.abort()

    def data_received(self, data: bytes) -> None:
        door = self.door
        if door is None:
            return
        self.hub.stats.net_input_bytes += len(data)
        self.last_active = self.hub.node.loop.time()
        r = door.feed(data)
        if r:
            self.out.append(r)
        self._after_commands(door)

    def _after_commands(self, door: RespDoor) -> None:
        if door.blocked:
            self._wait_tokens(door)
        if door.queued_bytes > PENDING_HIGH_BYTES and not self.read_paused:
            self._pause_input()
        self.hub.node.after_commands(self)

    def _wait_tokens(self, door: RespDoor) -> None:
        wait = self.hub.node.wait_reply
        for token in door.pending_tokens:
            wait(token, self.deliver)

    def deliver(self, token: int, result: DeferredResult) -> None:
        """A deferred reply, from the node's router; the output waits for flush()."""
        door = self.door
        if door is None:
            return
        # A client unblocked now starts idling now, not when it sent its GETJOB (Redis).
        self.last_active = self.hub.node.loop.time()
        r = door.deliver(result, token)
        if r:
            self.out.append(r)
        if door.blocked:  # a queued command blocked in turn, or ran ahead
            self._wait_tokens(door)
        self.hub.node.mark_dirty(self)

    def take_output(self) -> list[bytes]:
        """The gathered replies, then the MONITOR lines waiting in the client's outbox."""
        out = super().take_output()
        door = self.door
        if door is not None and door.client.outbox:
            client = door.client
            out.extend(client.outbox)
            client.outbox.clear()
            client.outbox_bytes = 0
        return out

    def send_output(self, out: list[bytes], closing: bool) -> None:
        """Count the bytes (``net_output_bytes``), the shared write (close after QUIT and
        errors), then a MONITOR that does not read is closed, as Redis's output-buffer limits
        do."""
        if out and self.transport is not None:
            self.hub.stats.net_output_bytes += sum(map(len, out))
        super().send_output(out, closing)
        door = self.door
        tr = self.transport
        if (
            door is not None
            and door.client.monitor
            and tr is not None
            and tr.get_write_buffer_size() > MONITOR_MAX_OUTPUT_BYTES
        ):
            log.warning("monitor_output_limit", addr=door.client.addr.decode("latin-1"))
            self.hub.admin.unregister(door.client)
            tr.abort()

    # ------------------------------------------------------------------ flow hooks
    def _loop(self) -> asyncio.AbstractEventLoop:
        return self.hub.node.loop

    def _queued_bytes(self, door: RespDoor) -> int:
        return door.queued_bytes

    def _run_pending(self, door: RespDoor) -> None:
        r = door.run_pending()
        if r:
            self.out.append(r)
        self._after_commands(door)

    def _door_closed(self, door: RespDoor) -> None:
        hub = self.hub
        hub.connections.discard(self)
        hub.admin.unregister(door.client)
        node = hub.node
        for token in door.pending_tokens:
            node.cancel(token)  # the router forgets it; the core drops the blocked command
        door.close()  # (a sync ADDJOB's cancel may broadcast a DELJOB)
        node.after_commands(None)
