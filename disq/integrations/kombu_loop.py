"""The kombu transport on an event loop (kombu's Hub: a Celery worker's ``asynloop``).

Why: without one, Celery runs its blocking ``synloop`` and a prefork pool guarded by
"putlocks": handing a task to a pool with no free process blocks the consumer's thread until
one frees up. With four 2-second tasks prefetched on one process, the worker's pidbox was
then read only when they were done: ``celery inspect active`` and ``revoke`` answered after
~8 s, not within Celery's 1 s window. On an event loop Celery keeps prefetched tasks in its
own semaphore and the loop stays free (kombu's Redis and SQS transports are asynchronous for
this reason).

How: the blocking GETJOB stays as it is (the transport's ``drain_events``, one wait over
every channel's queues, on the node), run by a thread of this connection, the *fetcher*.
What it brings is handed to the loop's thread, which delivers it (kombu's callbacks, the QoS
count: all in the loop's thread, as without the fetcher); a pipe wakes the loop (``add_reader``).
The fetcher fetches again only once the loop delivered its last batch, so each fetch's
room (the free prefetch slots) counts every message already delivered. A failure to reach
the cluster is raised in the loop's thread (kombu's connection error: Celery reconnects).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from kombu.exceptions import ConnectionError

log = structlog.get_logger("disq.kombu")

# A batch: (message payload, queue) pairs as the transport's _deliver takes them.
Batch = list[tuple[dict[str, Any], str]]
# How long one fetch waits before looking at the stop flag again (a GETJOB's longest wait
# is the transport's wait_s; this bounds the slot waits between).
FETCH_WAIT_S = 1.0
# After an unexpected error in the fetcher, the pause before it fetches again.
ERROR_PAUSE_S = 0.5


class Fetcher:
    """A thread that runs ``drain(timeout, deliver)`` (the transport's blocking fetch) and
    hands each batch to ``deliver`` in the thread that calls :meth:`on_readable` (the
    loop's), woken through the pipe ``fd``."""

    def __init__(
        self,
        drain: Callable[[float, Callable[[dict[str, Any], str], None]], None],
        deliver: Callable[[dict[str, Any], str], None],
    ) -> None:
        self._drain = drain
        self._deliver = deliver
        self._lock = threading.Lock()
        self._ready: Batch = []
        self._error: BaseException | None = None
        self._taken = threading.Event()  # the last batch was delivered: fetch again
        self._taken.set()
        self._stop = threading.Event()
        self.fd, self._wfd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._wfd, False)
        self._pid = os.getpid()
        self._loop: Any = None
        self._thread = threading.Thread(target=self._run, name="disq-kombu-fetcher", daemon=True)
        self._thread.start()

    # -- the fetcher's thread -------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._taken.wait()
            if self._stop.is_set():
                return
            batch: Batch = []
            try:
                self._drain(FETCH_WAIT_S, _appender(batch))
            except TimeoutError:
                pass
            except ConnectionError as exc:
                self._post(batch, exc)
                return  # the loop's thread raises it; Celery makes a new connection
            except Exception as exc:  # a bug, or the cluster's refusal: log, go on
                log.warning("disq.kombu.fetch_failed", error=repr(exc))
                self._post(batch, None)
                self._stop.wait(ERROR_PAUSE_S)
                continue
            self._post(batch, None)

    def _post(self, batch: Batch, error: BaseException | None) -> None:
        if not batch and error is None:
            return
        with self._lock:
            self._ready.extend(batch)
            self._error = self._error or error
            self._taken.clear()
        try:
            os.write(self._wfd, b"!")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (the loop has wake-ups pending) or closed (stopping)

    # -- the loop's thread ----------------------------------------------------------------
    def register(self, loop: Any) -> None:
        """Deliver from the loop (kombu's Hub) when the pipe is readable."""
        self._loop = loop
        loop.add_reader(self.fd, self.on_readable)

    def on_readable(self, *_args: Any) -> None:
        """Deliver what the fetcher brought (the loop calls this when the pipe is readable,
        :meth:`wait` when no loop runs)."""
        try:
            while os.read(self.fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            batch, self._ready = self._ready, []
            error, self._error = self._error, None
        try:
            for message, queue in batch:
                self._deliver(message, queue)
        finally:
            if error is None:
                self._taken.set()
        if error is not None:
            raise error

    def wait(self, timeout: float | None) -> bool:
        """Deliver what the fetcher brings within ``timeout`` (a drain_events on the same
        connection outside the loop): True when something was delivered."""
        import select

        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        with self._lock:
            something = bool(self._ready) or self._error is not None
        self.on_readable()
        return something

    def stop(self, join_s: float, put_back: Callable[[str], None]) -> None:
        """Stop fetching; the pipe is closed once the thread ended (within ``join_s``, a
        GETJOB's wait): else left open, never written to once closed. The jobs fetched and
        never delivered go to ``put_back`` (a NACK: else they come back after their RETRY)."""
        self._stop.set()
        self._taken.set()
        if os.getpid() != self._pid:
            return  # a forked child: the thread is the parent's
        if self._loop is not None:  # before the close: the number may be reused at once
            self._loop.remove_reader(self.fd)
            self._loop = None
        if self._thread is not threading.current_thread():
            self._thread.join(join_s)
        if not self._thread.is_alive():
            for fd in (self.fd, self._wfd):
                try:
                    os.close(fd)
                except OSError:
                    pass
        with self._lock:
            batch, self._ready = self._ready, []
        for message, _queue in batch:
            job_id = message["properties"]["delivery_info"].get("disq_job_id")
            try:
                if job_id:
                    put_back(job_id)
            except Exception as exc:  # the cluster out of reach: back after its RETRY
                log.warning("disq.kombu.put_back_failed", job=job_id, error=repr(exc))


def _appender(batch: Batch) -> Callable[[dict[str, Any], str], None]:
    def append(message: dict[str, Any], queue: str) -> None:
        batch.append((message, queue))

    return append


def reset_after_fork(transports: Iterable[Any]) -> None:
    """In a forked child (a pool process): the transports' locks anew, and no fetcher (its
    thread is the parent's). A lock the fetcher held at the fork would stay held here."""
    for t in list(transports):
        t._lock = threading.Lock()
        t._slot = threading.Condition()
        t._fetcher = None
