"""The SDK across ``fork()``: a blocking :class:`~disq.client.Client` closes its gRPC
channels before a fork and opens them again when next used, in the parent and in the child.

Why: gRPC's core runs threads (grpc.aio's poller, the channels' own), and a process forked
while they run gets a copy of gRPC's state that does not work: a call made in the child,
even on a new channel, hangs, and Celery's prefork pool (whose children are forked by a
thread of the parent while the parent consumes) logged "Other threads are currently calling
into gRPC, skipping fork() handlers" at every fork, and once lost a child to SIGSEGV. gRPC's
own fork support only helps when no thread is inside gRPC at that moment, which a client
with open channels never guarantees (the aio poller is always inside). So the SDK makes
that moment: ``os.register_at_fork`` hooks run in the thread that forks, before the fork,
and

* every live :class:`Client` stops admitting calls (:class:`CallGate`), waits for the calls
  in flight to end (at most ``FORK_WAIT_S``: a blocking GETJOB ends within its timeout),
  sends its queued acks and closes its channels. With no channel open, grpc.aio's poller
  thread ends, and gRPC's own fork handlers run cleanly; the client's loop thread, waiting
  in epoll, is no thread of gRPC's and stays.
* after the fork, in both processes, the clients admit calls again; the first call connects
  anew (a TCP connect: a millisecond or two), in the child on a loop thread of its own. The
  client keeps its view of the cluster. A client inherited by a child works there: gunicorn
  with ``--preload``, a Celery or Dramatiq worker's children.
* a process that forked once likely forks again (a pool replacing its children, an
  autoscaler): its clients close their channels whenever no call came for
  ``IDLE_CLOSE_S``, so a fork seldom finds anything to close and costs tens of
  microseconds more than a bare fork. A fork must be quick: billiard's pool appends a
  child before forking it, and its supervisor thread, running beside the thread that forks,
  takes a child whose fork has not returned for one that exited ("Thread 'Supervisor'
  crashed: KeyError(None)", celery/billiard#159).

What cannot be made safe is said, in the child, by :class:`ForkError`: a Client whose calls
did not end within ``FORK_WAIT_S`` (a GETJOB with no timeout, a stream left open), or an
:class:`~disq.client.AsyncClient` with open channels (it runs on the application's loop, which
a fork hook cannot drive). Then gRPC is unusable in the child, for every client: a call made
there would hang, so every client raises at once, naming the fix.

Costs: a fork waits for the calls in flight, and the next call reconnects. So the
integrations wait for jobs on the node's RESP port, not in a gRPC call
(disq/integrations/resp_calls.py): forks that waited out a Celery parent's GETJOB made
billiard's race above crash at every run of ``--autoscale`` with ``--max-tasks-per-child``.
That combination still meets the race at a worker's first scale-up when its supervisor and
autoscaler threads wake together (both start with the pool), whatever the fork costs.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from disq.client.errors import DisqError

# How long a fork waits for a client's calls in flight. A GETJOB's wait is its timeout (a
# worker's is 1 s); past this the fork goes on and the child cannot use gRPC (ForkError).
FORK_WAIT_S = 10.0


class ForkError(DisqError):
    """The process was forked while gRPC was running in the parent: gRPC cannot be used
    here. Make clients after the fork, or use :class:`disq.client.Client` (which closes its
    channels around ``fork()``) and no blocking call without a timeout across the fork."""

    reason = "FORKED"


class Forkable(Protocol):
    """What the hooks drive: a blocking Client."""

    def _fork_prepare(self) -> bool: ...

    def _fork_parent(self) -> None: ...

    def _fork_child(self) -> None: ...


class ChannelOwner(Protocol):
    """What the hooks ask of an AsyncClient: whether it has a channel open."""

    def _open_channels(self) -> int: ...

    def _fork_orphan(self) -> None: ...

    def adopt(self) -> None: ...


_CLIENTS: weakref.WeakSet[Forkable] = weakref.WeakSet()
_ASYNC: weakref.WeakSet[ChannelOwner] = weakref.WeakSet()
# The parent's channels, kept from the garbage collector in a child: freeing one runs
# gRPC's code on the state the fork copied, which may hang.
ORPHANS: list[object] = []
# In a child forked while gRPC ran in the parent: the reason, raised by every client.
_unusable: str | None = None
# This process has forked: its clients close their channels when idle (module docstring).
_forked = False
IDLE_CLOSE_S = 0.05


def register(client: Forkable) -> None:
    _CLIENTS.add(client)


def register_async(client: ChannelOwner) -> None:
    _ASYNC.add(client)


def usable() -> bool:
    return _unusable is None


def check_usable() -> None:
    """Raise :class:`ForkError` if this process cannot use gRPC (see the module docstring)."""
    if _unusable is not None:
        raise ForkError(_unusable)


def _before_fork() -> None:
    for client in list(_CLIENTS):
        client._fork_prepare()


def forked() -> bool:
    """Whether this process has forked (its clients then close their channels when idle)."""
    return _forked


def _after_fork_in_parent() -> None:
    global _forked
    _forked = True
    for client in list(_CLIENTS):
        client._fork_parent()


def _after_fork_in_child() -> None:
    global _unusable, _forked
    _forked = False
    parent = os.getppid()
    busy = [c for c in list(_ASYNC) if c._open_channels()]
    if busy:
        _unusable = (
            f"this process was forked from pid {parent} while a disq client there had gRPC "
            "channels open (an AsyncClient, or a Client whose calls did not end within "
            f"{FORK_WAIT_S:g} s): gRPC cannot be used in this process. Make the client after "
            "the fork (gunicorn: in post_fork or at app start, not at import with --preload), "
            "or use disq.client.Client, which closes its channels around fork(), without "
            "blocking calls that have no timeout"
        )
    for c in list(_ASYNC):
        if c in busy:
            c._fork_orphan()
        else:
            c.adopt()  # no channel of the parent's: usable here as a new one would be
    for client in list(_CLIENTS):
        client._fork_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


class CallGate:
    """Counts a client's calls in flight and holds new ones while the client closes its
    channels (before a fork, or idle in a process that forks).

    Reentrant per thread: a call that makes another one (an add that refreshes the view)
    is one call, so a fork waiting for the count to drop never waits on itself. One holder
    at a time (a fork waits for an idle close in progress, a few ms)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0
        self._held = False
        self._holder = threading.Lock()
        self._depth = threading.local()

    @contextmanager
    def call(self) -> Iterator[None]:
        depth: int = getattr(self._depth, "n", 0)
        if depth:
            self._depth.n = depth + 1
            try:
                yield
            finally:
                self._depth.n -= 1
            return
        with self._cond:
            while self._held:
                self._cond.wait()
            self._calls += 1
        self._depth.n = 1
        try:
            yield
        finally:
            self._depth.n = 0
            with self._cond:
                self._calls -= 1
                if not self._calls:
                    self._cond.notify_all()

    def hold(self, wait_s: float) -> bool:
        """Admit no new call; wait up to ``wait_s`` for those in flight. True when none is
        left (the caller may then close what they used). :meth:`release` ends it either
        way."""
        deadline = time.monotonic() + wait_s
        self._holder.acquire()
        with self._cond:
            self._held = True
            while self._calls:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def try_hold(self) -> bool:
        """Hold at once if no call is in flight and no one else holds; else False."""
        if not self._holder.acquire(blocking=False):
            return False
        with self._cond:
            if self._calls:
                self._holder.release()
                return False
            self._held = True
        return True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()
        self._holder.release()

    def reset_in_child(self) -> None:
        """A forked child has none of the parent's other threads: nothing in flight, and
        no lock held by a thread that is not there."""
        self._cond = threading.Condition()
        self._calls = 0
        self._held = False
        self._holder = threading.Lock()
        self._depth = threading.local()
