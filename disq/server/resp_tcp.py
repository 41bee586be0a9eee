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
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from disq.core.disque.api import DeferredResult
from disq.doors.disque import NodeApi, RespStats
from disq.doors.resp_door import RespDoor
from disq.server.flow import PENDING_HIGH_BYTES, FlowControlledProtocol, set_nodelay

if TYPE_CHECKING:
    from disq.server.flow import Flushable
    from disq.server.router import Waiter

DEFAULT_MAX_CLIENTS = 10_000  # Disque's maxclients default
_MAX_CLIENTS_ERR = b"-ERR max number of clients reached\r\n"


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

    __slots__ = ("connections", "max_clients", "new_token", "node", "stats")

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

    def protocol_factory(self) -> RespProtocol:
        """For ``loop.create_server(hub.protocol_factory, ...)``."""
        return RespProtocol(self)

    @property
    def connected_clients(self) -> int:
        return len(self.connections)

    def close_all(self) -> None:
        """Close every connection (shutdown); blocked commands are cancelled as they go."""
        for proto in list(self.connections):
            if proto.transport is not None:
                proto.transport.close()


class RespProtocol(FlowControlledProtocol[RespDoor]):
    __slots__ = ("hub",)

    def __init__(self, hub: RespHub) -> None:
        super().__init__()
        self.hub = hub

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
        set_nodelay(transport)

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
        r = door.deliver(result, token)
        if r:
            self.out.append(r)
        if door.blocked:  # a queued command blocked in turn, or ran ahead
            self._wait_tokens(door)
        self.hub.node.mark_dirty(self)

    def flush(self) -> None:
        """Count the bytes written (``net_output_bytes``), then the shared flush: one write
        of every gathered reply; close after QUIT and errors."""
        out = self.out
        if out and self.transport is not None:
            self.hub.stats.net_output_bytes += sum(map(len, out))
        super().flush()

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
        node = hub.node
        for token in door.pending_tokens:
            node.cancel(token)  # the router forgets it; the core drops the blocked command
        door.close()  # (a sync ADDJOB's cancel may broadcast a DELJOB)
        node.after_commands(None)
