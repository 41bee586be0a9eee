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
from disq.server.hangup import HANGUP_POLL_S, hung_up

if TYPE_CHECKING:
    from disq.server.node import Node

# Queued commands (behind a blocked reserve, or waiting for the client to read its replies)
# past this many bytes stop the reading of the socket; reading resumes below the low mark.
PENDING_HIGH_BYTES = 1 << 20
PENDING_LOW_BYTES = 256 << 10


class BeanstalkProtocol(asyncio.Protocol):
    __slots__ = (
        "continue_scheduled",
        "door",
        "node",
        "out",
        "read_paused",
        "transport",
        "watching_hangup",
        "write_paused",
    )

    def __init__(self, node: Node) -> None:
        self.node = node
        self.out: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.door: BeanstalkDoor | None = None
        self.read_paused = False  # too much queued input
        self.write_paused = False  # the client is not reading its replies
        self.continue_scheduled = False
        self.watching_hangup = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        node = self.node
        try:
            self.door = BeanstalkDoor(node.engine, node)
            if node.cluster is not None:
                self.door.replicator = node.cluster  # replicates when beanstalk-replicate > 1
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
            if door.pending_bytes > PENDING_HIGH_BYTES and not self.read_paused:
                self.read_paused = True
                self._update_reading()
            return
        # The common case, inlined (per-read overhead is what pipeline-1 clients see): no
        # wake-ups, no AOF, nothing queued: write the replies and check the one timer.
        if out and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        hint = engine.timer_hint_ms
        if hint >= 0:
            engine.timer_hint_ms = -1
            node.check_timer(hint, now_ms)

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
        if door is None:
            return
        if door.closing:
            transport.close()
            return
        if self.read_paused and door.pending_bytes < PENDING_LOW_BYTES:
            self.read_paused = False
            self._update_reading()
        if door.runnable and not self.write_paused:
            self._schedule_continue()

    def _schedule_continue(self) -> None:
        # Let the loop serve other clients (and drain this socket) before the next batch.
        if not self.continue_scheduled:
            self.continue_scheduled = True
            self.node.loop.call_soon(self._continue)

    def _continue(self) -> None:
        self.continue_scheduled = False
        door = self.door
        if door is None or self.write_paused or not door.runnable:
            return
        now_ms = int(_time() * 1000)
        door.run_pending(now_ms, self.out)
        self.node.after_commands(self, now_ms)

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
        reserved jobs would wait for their TTR. Poll for the hang-up (what beanstalkd asks
        epoll for) until reading resumes."""
        transport = self.transport
        if transport is None or not (self.read_paused or self.write_paused):
            self.watching_hangup = False
            return
        if hung_up(transport):
            return
        self.node.loop.call_later(HANGUP_POLL_S, self._watch_hangup)

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
        node = self.node
        node.sessions.pop(door.session, None)
        now_ms = node.now_ms()
        door.close(now_ms)
        node.after_commands(None, now_ms)
