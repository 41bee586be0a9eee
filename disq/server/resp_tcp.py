"""asyncio transport for the RESP door (port 7711): bytes in, one write of all replies out.

Mirrors :mod:`disq.server.beanstalk_tcp`: per read, one parse of every complete command, one
core call per command, and the replies of that read gathered for one ``transport.write``.
The node decides when they leave (:meth:`RespNode.after_resp_commands`): at once, or after
the AOF records they depend on are written (group commit).

:class:`RespHub` is the node-wide part: the token counter, the registry of blocked
connections by token (how ``core.replies`` find their door), the live connections and the
port's counters. The node owns one hub and calls :meth:`RespHub.route_replies` whenever the
core may have answered a blocked command (after commands, ticks and peer messages).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Callable
from typing import Protocol

from disq.core.cluster_api import DeferredResult
from disq.server.disque_commands import NodeApi, RespStats
from disq.server.hangup import HANGUP_POLL_S, hung_up
from disq.server.resp_door import RespDoor

# Queued commands (behind a blocked GETJOB, or waiting for the client to read its replies)
# past this many bytes stop the reading of the socket; reading resumes below the low mark.
PENDING_HIGH_BYTES = 1 << 20
PENDING_LOW_BYTES = 256 << 10
DEFAULT_MAX_CLIENTS = 10_000  # Disque's maxclients default
_MAX_CLIENTS_ERR = b"-ERR max number of clients reached\r\n"


class RespNode(NodeApi, Protocol):
    """What the transport needs from the node on top of the commands' :class:`NodeApi`."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def after_resp_commands(self, proto: RespProtocol | None) -> None:
        """Called after a read (or a close) ran commands against the core.

        The node must: write the core's AOF records (``core.aof_out``) when persistence is
        on; route ``core.replies`` with :meth:`RespHub.route_replies` (repeat while the
        resumed commands produce more records or replies); then call ``flush()`` on
        ``proto`` (if not None and it has output or is closing) and on every protocol
        route_replies returned, only after the records they depend on are written; send
        ``core.outbox``; and re-arm the core's timer (``core.next_deadline_ms()``), which
        new jobs and blocked clients may have moved earlier."""
        ...


class RespHub:
    """The RESP port's shared state: tokens, blocked connections, connections, counters."""

    __slots__ = ("connections", "max_clients", "new_token", "node", "other", "registry", "stats")

    def __init__(
        self,
        node: RespNode,
        *,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        new_token: Callable[[], int] | None = None,
    ) -> None:
        self.node = node
        self.max_clients = max_clients
        # Tokens must be unique among every client of the core (RESP and others): a node
        # with several doors passes one shared counter.
        self.new_token: Callable[[], int] = (
            new_token if new_token is not None else itertools.count(1).__next__
        )
        self.registry: dict[int, RespProtocol] = {}  # token -> blocked connection
        self.connections: set[RespProtocol] = set()
        self.stats: RespStats = node.resp_stats
        # Tokens no RESP connection holds (the gRPC API's): offered here, True if taken.
        self.other: Callable[[int, DeferredResult], bool] | None = None

    def protocol_factory(self) -> RespProtocol:
        """For ``loop.create_server(hub.protocol_factory, ...)``."""
        return RespProtocol(self)

    @property
    def connected_clients(self) -> int:
        return len(self.connections)

    @property
    def blocked_clients(self) -> int:
        return len(self.registry)

    def route_reply(self, token: int, result: DeferredResult) -> RespProtocol | None:
        """Give a deferred result to the connection waiting on ``token``. Its replies (this
        one and those of the commands that waited behind it) are gathered, not written: the
        caller flushes the returned protocol. None: nobody waits on that token any more."""
        proto = self.registry.pop(token, None)
        if proto is None:
            if self.other is not None:
                self.other(token, result)
            return None
        proto.deliver(result, token)
        return proto

    def route_replies(self) -> list[RespProtocol]:
        """Route every entry of ``core.replies``; the protocols to flush, once each."""
        core = self.node.core
        touched: list[RespProtocol] = []
        while core.replies:
            replies = core.replies
            core.replies = []
            for token, result in replies:
                proto = self.route_reply(token, result)
                if proto is not None and proto not in touched:
                    touched.append(proto)
        return touched

    def close_all(self) -> None:
        """Close every connection (shutdown); blocked commands are cancelled as they go."""
        for proto in list(self.connections):
            if proto.transport is not None:
                proto.transport.close()


class RespProtocol(asyncio.Protocol):
    __slots__ = (
        "continue_scheduled",
        "door",
        "hub",
        "out",
        "read_paused",
        "transport",
        "watching_hangup",
        "write_paused",
    )

    def __init__(self, hub: RespHub) -> None:
        self.hub = hub
        self.out: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.door: RespDoor | None = None
        self.read_paused = False  # too much queued input
        self.write_paused = False  # the client is not reading its replies
        self.continue_scheduled = False
        self.watching_hangup = False

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
        self.door = RespDoor(hub.node, hub.new_token)
        hub.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        door = self.door
        if door is None:
            return
        self.hub.stats.net_input_bytes += len(data)
        r = door.feed(data)
        if r:
            self.out.append(r)
        self._after_commands(door)

    def _after_commands(self, door: RespDoor) -> None:
        if door.blocked:
            registry = self.hub.registry
            for token in door.pending_tokens:
                registry[token] = self
        if door.queued_bytes > PENDING_HIGH_BYTES and not self.read_paused:
            self.read_paused = True
            self._update_reading()
        self.hub.node.after_resp_commands(self)

    def deliver(self, result: DeferredResult, token: int | None = None) -> None:
        """A deferred reply (see :meth:`RespHub.route_reply`); output waits for flush()."""
        door = self.door
        if door is None:
            return
        r = door.deliver(result, token)
        if r:
            self.out.append(r)
        if door.blocked:  # a queued command blocked in turn, or ran ahead
            registry = self.hub.registry
            for t in door.pending_tokens:
                registry[t] = self

    @property
    def closing(self) -> bool:
        return self.door is not None and self.door.closing

    def flush(self) -> None:
        """Write every reply gathered so far with one call; close after QUIT and errors."""
        out = self.out
        transport = self.transport
        if transport is None:
            out.clear()
            return
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self.hub.stats.net_output_bytes += len(data)
            transport.write(data)
        door = self.door
        if door is None:
            return
        if door.closing:
            transport.close()
            return
        if self.read_paused and door.queued_bytes < PENDING_LOW_BYTES:
            self.read_paused = False
            self._update_reading()
        if door.runnable and not self.write_paused:
            self._schedule_continue()

    def _schedule_continue(self) -> None:
        # Let the loop serve other clients (and drain this socket) before the next batch.
        if not self.continue_scheduled:
            self.continue_scheduled = True
            self.hub.node.loop.call_soon(self._continue)

    def _continue(self) -> None:
        self.continue_scheduled = False
        door = self.door
        if door is None or self.write_paused or not door.runnable:
            return
        r = door.run_pending()
        if r:
            self.out.append(r)
        self._after_commands(door)

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.read_paused or self.write_paused:
            transport.pause_reading()
            if not self.watching_hangup:
                self.watching_hangup = True
                self._watch_hangup()
        else:
            transport.resume_reading()

    def _watch_hangup(self) -> None:
        """While we do not read, a client that goes away is not seen by the transport; its
        blocked GETJOB would still take a job. Poll for the hang-up until reading resumes."""
        transport = self.transport
        if transport is None or not (self.read_paused or self.write_paused):
            self.watching_hangup = False
            return
        if hung_up(transport):
            return
        self.hub.node.loop.call_later(HANGUP_POLL_S, self._watch_hangup)

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading and running its commands.
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update_reading()
        door = self.door
        if door is not None and door.runnable:
            self._schedule_continue()

    def connection_lost(self, exc: Exception | None) -> None:
        door = self.door
        self.transport = None
        if door is None:
            return
        self.door = None
        hub = self.hub
        hub.connections.discard(self)
        for token in door.pending_tokens:
            hub.registry.pop(token, None)
        door.close()  # cancels the blocked command: may broadcast a DELJOB (sync ADDJOB)
        hub.node.after_resp_commands(None)
