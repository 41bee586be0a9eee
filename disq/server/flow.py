"""Flow control shared by the TCP doors (beanstalk and RESP): backpressure and hang-ups.

Each connection gathers the replies of a read in ``out`` and writes them with one
``transport.write`` (:meth:`FlowControlledProtocol.flush`). Two things stop it from reading:

- too much queued input (commands behind a blocked reserve or GETJOB, or waiting for the
  client to read its replies): reading stops past :data:`PENDING_HIGH_BYTES` queued and
  resumes below :data:`PENDING_LOW_BYTES`;
- a client that does not read its replies (asyncio's ``pause_writing``): reading and the
  running of its queued commands stop until ``resume_writing``.

While a socket is not read, asyncio does not notice the client going away, and whatever the
connection holds (reserved jobs, a blocked GETJOB) would wait; so the hang-up is polled for
instead (:func:`hung_up`), as beanstalkd asks epoll for it.

Queued commands that may run again run in a later loop iteration (``_continue``), so other
clients are served (and this socket drained) between batches.

A door subclasses :class:`FlowControlledProtocol` and fills in the hooks: ``_loop``,
``_queued_bytes``, ``_run_pending`` and ``_door_closed``.
"""

from __future__ import annotations

import asyncio
import asyncio.protocols  # named so mypyc declares the module of the base class below
import select
import socket
from typing import Generic, Protocol, TypeVar

from mypy_extensions import mypyc_attr

# Queued commands past this many bytes stop the reading of the socket; reading resumes below
# the low mark.
PENDING_HIGH_BYTES = 1 << 20
PENDING_LOW_BYTES = 256 << 10
HANGUP_POLL_S = 0.2  # how often a connection that is not read is checked for a hang-up
_HANGUP = select.POLLRDHUP | select.POLLHUP | select.POLLERR


class Flushable(Protocol):
    """A connection whose gathered replies the runtime writes after its group commit."""

    @property
    def closing(self) -> bool: ...

    def flush(self) -> None: ...

    def take_output(self) -> list[bytes]: ...

    def restore_output(self, out: list[bytes]) -> None: ...

    def send_output(self, out: list[bytes], closing: bool) -> None: ...

    def after_output(self) -> None: ...


class FlowDoor(Protocol):
    """What flow control reads of a door (attributes or properties)."""

    @property
    def closing(self) -> bool:
        """The connection closes once its replies are written (quit, protocol errors)."""
        ...

    @property
    def runnable(self) -> bool:
        """Queued commands could run now (nothing blocks them)."""
        ...


D = TypeVar("D", bound=FlowDoor)


def hung_up(transport: asyncio.BaseTransport) -> bool:
    """True (and the transport aborted) if the peer has hung up."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), _HANGUP)
    if poller.poll(0):
        transport.abort()  # type: ignore[attr-defined]
        return True
    return False


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Replies leave at once (each read's are gathered into one write already)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@mypyc_attr(native_class=False)  # asyncio.Protocol is a Python class
class FlowControlledProtocol(asyncio.protocols.Protocol, Generic[D]):
    """One connection of a TCP door: its door, its gathered replies and its flow control.

    Subclasses set ``transport`` and ``door`` in ``connection_made``, append replies to
    ``out``, stop reading with :meth:`_pause_input` once the door's queued bytes pass
    :data:`PENDING_HIGH_BYTES`, and have the node call :meth:`flush`."""

    __slots__ = (
        "continue_scheduled",
        "door",
        "out",
        "read_paused",
        "transport",
        "watching_hangup",
        "write_paused",
    )

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.door: D | None = None
        self.read_paused = False  # too much queued input
        self.write_paused = False  # the client is not reading its replies
        self.continue_scheduled = False
        self.watching_hangup = False

    # ------------------------------------------------------------------ hooks
    def _loop(self) -> asyncio.AbstractEventLoop:
        """The loop to schedule continues and hang-up polls on."""
        raise NotImplementedError

    def _queued_bytes(self, door: D) -> int:
        """Bytes of the commands ``door`` holds queued."""
        raise NotImplementedError

    def _run_pending(self, door: D) -> None:
        """Run ``door``'s queued commands (it is runnable), then hand over to the node as
        after a read (which flushes)."""
        raise NotImplementedError

    def _door_closed(self, door: D) -> None:
        """The connection is gone (``self.door`` already None): close ``door``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ output
    @property
    def closing(self) -> bool:
        return self.door is not None and self.door.closing

    def flush(self) -> None:
        """Write every reply gathered so far with one call; close when the door is closing;
        resume reading below the low mark; run what is queued in a later iteration."""
        self.send_output(self.take_output(), self.closing)
        self.after_output()

    def take_output(self) -> list[bytes]:
        """The replies gathered so far, taken out (the group commit holds them until their
        records are durable: disq.server.commit_gate)."""
        out = self.out
        self.out = []
        return out

    def restore_output(self, out: list[bytes]) -> None:
        """Put taken replies back in front of those gathered since."""
        self.out[:0] = out

    def send_output(self, out: list[bytes], closing: bool) -> None:
        """Write taken replies with one call; ``closing``: the door was closing when they
        were taken (after QUIT or an error), so the connection closes behind them."""
        transport = self.transport
        if transport is None:
            return
        if out:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        if closing:
            transport.close()

    def after_output(self) -> None:
        """Replies taken: read again below the low mark, run what is queued later."""
        door = self.door
        if door is None or door.closing:
            return
        if self.read_paused and self._queued_bytes(door) < PENDING_LOW_BYTES:
            self.read_paused = False
            self._update_reading()
        if door.runnable and not self.write_paused:
            self._schedule_continue()

    def _schedule_continue(self) -> None:
        # Let the loop serve other clients (and drain this socket) before the next batch.
        if not self.continue_scheduled:
            self.continue_scheduled = True
            self._loop().call_soon(self._continue)

    def _continue(self) -> None:
        self.continue_scheduled = False
        door = self.door
        if door is None or self.write_paused or not door.runnable:
            return
        self._run_pending(door)

    # ------------------------------------------------------------------ input
    def _pause_input(self) -> None:
        """The door's queued bytes passed the high mark: stop reading (flush resumes)."""
        self.read_paused = True
        self._update_reading()

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
        reserved jobs would wait for their TTR, its blocked GETJOB would still take a job.
        Poll for the hang-up (what beanstalkd asks epoll for) until reading resumes."""
        transport = self.transport
        if transport is None or not (self.read_paused or self.write_paused):
            self.watching_hangup = False
            return
        if hung_up(transport):
            return
        self._loop().call_later(HANGUP_POLL_S, self._watch_hangup)

    # ------------------------------------------------------------------ asyncio
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
        self._door_closed(door)
