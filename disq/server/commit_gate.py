"""The group commit's gate under ``appendfsync always``: what a flush lets out waits for the
fsync of its records, and the loop goes on meanwhile.

A flush whose Ready wrote records (or that comes while an earlier one is held) does not send
its peer messages, route its deferred replies, wake its beanstalk sessions or write its
connections' replies: it takes them out (the Ready itself, each connection's gathered bytes)
into a :class:`Held` stamped with the AOF writer's ``bytes_written`` after its write, asks
the AOF service for an fsync up to that mark, and lets the connections go on reading and
running their commands. :meth:`CommitGate.release`, called when an fsync returns its
watermark, lets the held flushes out in the order they were taken: the connections' bytes,
then the Ready applied as :func:`~disq.core.node_core.apply_ready` applies it (its records
already written). So "records before messages" holds with "durable" for "written": a replica's
GOTJOB leaves after its LOADJOB is fsynced, the reply to an add after the originator's own
fsync, and every reply of a connection leaves in the order its commands ran.

Replies routed at a release can run the commands a connection queued behind its blocked one;
their output, and any bytes the connection gathered since its last flush, are not covered by
the fsync just done: they wait for the next flush (and its fsync), as the runtime's flush does
when routed replies logged records.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from disq.core.node_core import apply_ready
from disq.logging import get_logger

if TYPE_CHECKING:
    import asyncio

    from disq.core.beanstalk.model import Session
    from disq.core.disque.api import DeferredResult
    from disq.core.messages import Message
    from disq.core.node_core import NodeCore, Ready
    from disq.server.flow import Flushable


log: Any = get_logger("disq.node")


class GateHost(Protocol):
    """What the gate needs from the runtime."""

    core: NodeCore
    _dirty: list[Flushable]

    def send(self, peer: str, msgs: list[Message]) -> None: ...

    def route(self, token: int, result: DeferredResult) -> None: ...

    def wake(self, session: Session, result: Any) -> None: ...

    def links_flush(self) -> None: ...

    def schedule_flush(self) -> None: ...

    def logged_since_flush(self) -> bool: ...


# Messages that promise nothing about the sender's disk leave at once: a REPLJOB asks for a
# copy of a job its sender has not logged yet (the add is answered only after the copies'
# GOTJOBs and the sender's own fsync), and SWIM's probes and NEEDJOBS carry no job state.
# Holding them would put one more fsync on every add's path and slow failure detection.
# Imported with the first message: a standalone node loads no peer message (test_startup).
_free: tuple[type, ...] = ()


def split_free(messages: dict[str, list[Message]]) -> dict[str, list[Message]]:
    """Take the messages that may leave before the fsync out of ``messages`` (in place);
    return them, per peer, in their order."""
    global _free
    if not _free:
        from disq.core.messages import Ack, NeedJobs, Ping, PingReq, ReplJob

        _free = (ReplJob, Ping, Ack, PingReq, NeedJobs)
    FREE = _free
    free: dict[str, list[Message]] = {}
    for peer in list(messages):
        msgs = messages[peer]
        out = [m for m in msgs if isinstance(m, FREE)]
        if not out:
            continue
        free[peer] = out
        if len(out) == len(msgs):
            del messages[peer]
        else:
            messages[peer] = [m for m in msgs if not isinstance(m, FREE)]
    return free


def _written(records: list[bytes]) -> bool:
    return True  # the records were written when the flush was held


class Held:
    """One flush's output waiting for the fsync up to ``mark``."""

    __slots__ = ("mark", "outputs", "ready", "waiters")

    def __init__(
        self,
        mark: int,
        ready: Ready | None,
        outputs: list[tuple[Flushable, list[bytes], bool]],
        waiters: list[asyncio.Future[None]],
    ) -> None:
        self.mark = mark
        self.ready = ready
        self.outputs = outputs  # (connection, its replies, closing when taken)
        self.waiters = waiters  # calls answered once everything before is durable


class CommitGate:
    def __init__(self, host: GateHost) -> None:
        self.host = host
        self.held: deque[Held] = deque()

    def hold(
        self,
        mark: int,
        ready: Ready | None,
        conns: list[Flushable],
        waiters: list[asyncio.Future[None]],
    ) -> None:
        """Take one flush's output out until ``mark`` is durable; the connections read and
        run their queued commands on meanwhile."""
        outputs: list[tuple[Flushable, list[bytes], bool]] = []
        seen: set[int] = set()
        for conn in conns:
            if id(conn) in seen:
                continue
            seen.add(id(conn))
            outputs.append((conn, conn.take_output(), conn.closing))
            conn.after_output()
        self.held.append(Held(mark, ready, outputs, waiters))

    def release(self, durable: int) -> None:
        """Let out, in order, every held flush whose records are now durable."""
        held = self.held
        if not held or held[0].mark > durable:
            return
        host = self.host
        # Bytes gathered since the last flush are not covered: set them aside so that what
        # the routed replies add can be told apart (and put back in front of it).
        pending = host._dirty
        host._dirty = []
        aside: dict[int, list[bytes]] = {}
        for conn in pending:
            if id(conn) not in aside:
                aside[id(conn)] = conn.take_output()
        while held and held[0].mark <= durable:
            h = held.popleft()
            for conn, out, closing in h.outputs:
                conn.send_output(out, closing)
            if h.ready is not None:
                try:
                    apply_ready(h.ready, _written, host.send, host.route, host.wake)
                except Exception:
                    # A waiter or a door raised: a bug, but the node goes on serving (as
                    # the runtime's flush does).
                    log.exception("ready_apply_failed", ready=repr(h.ready))
                host.links_flush()
            for fut in h.waiters:
                if not fut.done():
                    fut.set_result(None)
        routed = host._dirty
        host._dirty = pending
        for conn in pending:
            earlier = aside.get(id(conn))
            if earlier:
                conn.restore_output(earlier)
                aside[id(conn)] = []
        logged = host.logged_since_flush()
        seen: set[int] = set()
        for conn in routed:
            if id(conn) in seen:
                continue
            seen.add(id(conn))
            if logged or id(conn) in aside:
                pending.append(conn)  # not all of its bytes are durable yet
            else:
                conn.flush()
        if pending or host.core.has_ready():
            host.schedule_flush()  # routed replies ran queued commands: their output next
