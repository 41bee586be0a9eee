"""asyncio transport for the beanstalk door: bytes in, one write of all replies out.

This is the hot path. Per read: one parse of every complete command, one engine call per
command, and one ``transport.write`` of all the replies of that read (beanstalkd writes each
reply on its own). When the AOF is on, replies wait for the node's group commit instead.
"""

from __future__ import annotations

import asyncio
import socket
from time import time as _time
from typing import TYPE_CHECKING

from disq.server.beanstalk_door import BeanstalkDoor

if TYPE_CHECKING:
    from disq.server.node import Node

# A blocked reserve holds later commands; past this many we stop reading, as beanstalkd does.
MAX_PENDING_COMMANDS = 10_000


class BeanstalkProtocol(asyncio.Protocol):
    __slots__ = ("door", "node", "out", "paused", "transport")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.out: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.door: BeanstalkDoor | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        node = self.node
        try:
            self.door = BeanstalkDoor(node.engine, node)
        except Exception:
            transport.close()  # connection limit reached
            return
        node.sessions[self.door.session] = self
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        door = self.door
        if door is None:
            return
        node = self.node
        now_ms = int(_time() * 1000)
        out = self.out
        door.receive(data, now_ms, out)
        engine = node.engine
        if engine.wakeups or engine.persist or door.closing or door.pending:
            node.after_commands(self, now_ms)
            if len(door.pending) > MAX_PENDING_COMMANDS and self.transport and not self.paused:
                self.paused = True
                self.transport.pause_reading()
            return
        # The common case, inlined (per-read overhead is what pipeline-1 clients see): no
        # wake-ups, no AOF, nothing queued: write the replies and check the one timer.
        if out and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        deadline_ms = engine.next_deadline_ms()
        if deadline_ms >= 0:
            node.check_timer(deadline_ms, now_ms)

    @property
    def closing(self) -> bool:
        return self.door is not None and self.door.closing

    def flush(self) -> None:
        """Write every reply gathered so far with one call; close after ``quit``."""
        out = self.out
        transport = self.transport
        if transport is None:
            out.clear()
            return
        if out:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        door = self.door
        if door is not None:
            if door.closing:
                transport.close()
            elif self.paused and len(door.pending) < MAX_PENDING_COMMANDS // 2:
                self.paused = False
                transport.resume_reading()

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading its commands.
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.paused:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        door = self.door
        self.transport = None
        if door is None:
            return
        self.door = None
        node = self.node
        node.sessions.pop(door.session, None)
        now_ms = node.now_ms()
        door.close(now_ms)
        node.after_commands(None, now_ms)
