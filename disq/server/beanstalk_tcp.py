"""asyncio transport for the beanstalk door: bytes in, one write of all replies out.

This is the hot path. Per read: one parse of every complete command, one engine call per
command, and one ``transport.write`` of all the replies of that read (beanstalkd writes each
reply on its own). When the AOF is on, replies wait for the node's group commit instead.
Backpressure and hang-ups: :mod:`disq.server.flow`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from mypy_extensions import mypyc_attr

from disq.core.beanstalk.errors import LimitExceeded
from disq.doors.beanstalk_door import BeanstalkDoor, Replicator
from disq.logging import get_logger
from disq.server.flow import PENDING_HIGH_BYTES, FlowControlledProtocol, Flushable, set_nodelay

log = get_logger("disq.beanstalk")
REFUSED_LOG_EVERY_MS = 10_000  # a flood at the limit logs one line per this, with its count

if TYPE_CHECKING:
    from disq.core.beanstalk.core import BeanstalkCore
    from disq.core.beanstalk.model import Session


class BeanstalkHost(Protocol):
    """What the beanstalk transport needs from the runtime."""

    beanstalk: BeanstalkCore
    op_counts: list[int]
    sessions: dict[Session, BeanstalkProtocol]  # where the core's wake-ups go
    replicator: Replicator | None  # the node core, when the node is in a cluster

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def now_ms(self) -> int: ...

    def after_commands(self, conn: Flushable | None, now_ms: int) -> None: ...

    def check_timer(self, deadline_ms: int, now_ms: int) -> None: ...

    def stats_tail(self, now_ms: int) -> list[tuple[str, object]]: ...


@mypyc_attr(native_class=False)  # asyncio.Protocol is a Python class
class BeanstalkProtocol(FlowControlledProtocol[BeanstalkDoor]):
    __slots__ = ("node",)

    def __init__(self, node: BeanstalkHost) -> None:
        super().__init__()
        self.node = node

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        node = self.node
        try:
            self.door = BeanstalkDoor(node.beanstalk, node)
            # The node core replicates each put when beanstalk-replicate > 1.
            self.door.replicator = node.replicator
        except LimitExceeded:
            # The core's session bound (beanstalkd has none and accepts until its fd limit
            # runs out): the client sees its connection closed. Logged, but a flood at the
            # bound is one line per REFUSED_LOG_EVERY_MS with the count, not one per attempt.
            transport.close()
            _refused(node.now_ms(), len(node.sessions))
            return
        except Exception:
            # Anything else is a bug, not a limit: logged with its traceback, and only this
            # connection is lost.
            log.exception("beanstalk connection setup failed; connection closed")
            transport.close()
            return
        node.sessions[self.door.session] = self
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        door = self.door
        if door is None:
            return
        node = self.node
        now_ms = node.now_ms()
        out = self.out
        door.receive(data, now_ms, out)
        beanstalk = node.beanstalk
        if (
            beanstalk.wakeups
            or beanstalk.persist
            or beanstalk.cluster_events  # a replicated job changed: its holders must learn it
            or door.blocked  # a replicated put waits for its copies
            or door.closing
            or door.pending
        ):
            node.after_commands(self, now_ms)
            if door.pending_bytes > PENDING_HIGH_BYTES and not self.read_paused:
                self._pause_input()
            return
        # The common case, inlined (per-read overhead is what pipeline-1 clients see): no
        # wake-ups, no AOF, nothing for the cluster, nothing queued: write the replies now
        # and check the one timer.
        if out and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        hint = beanstalk.timer_hint_ms
        if hint >= 0:
            beanstalk.timer_hint_ms = -1
            node.check_timer(hint, now_ms)

    # ------------------------------------------------------------------ flow hooks
    def _loop(self) -> asyncio.AbstractEventLoop:
        return self.node.loop

    def _queued_bytes(self, door: BeanstalkDoor) -> int:
        return door.pending_bytes

    def _run_pending(self, door: BeanstalkDoor) -> None:
        now_ms = self.node.now_ms()
        door.run_pending(now_ms, self.out)
        self.node.after_commands(self, now_ms)

    def _door_closed(self, door: BeanstalkDoor) -> None:
        node = self.node
        node.sessions.pop(door.session, None)
        now_ms = node.now_ms()
        door.close(now_ms)
        node.after_commands(None, now_ms)


_refused_state = [0, -REFUSED_LOG_EVERY_MS]  # refused since the last line, time of that line


def _refused(now_ms: int, sessions: int) -> None:
    _refused_state[0] += 1
    if now_ms - _refused_state[1] >= REFUSED_LOG_EVERY_MS:
        log.warning(
            "beanstalk connections refused: session limit reached",
            refused=_refused_state[0],
            sessions=sessions,
        )
        _refused_state[0] = 0
        _refused_state[1] = now_ms
