"""``Client``: the blocking SDK, the same methods as :class:`AsyncClient` without ``await``.

It runs one AsyncClient on a private event loop in a daemon thread, so both clients share one
implementation (discovery, failover, batching, error mapping). Calls from several threads
are safe and are batched together the way concurrent coroutines are. It survives
``fork()``, in the parent and in the child: it closes its channels before the fork and
opens them when next used (:mod:`disq.client.forking`).

``add_job`` is the exception: while adds come one at a time they run on the caller's thread
over grpc's sync channel (:mod:`disq.client.blocking_add`), with the async client's view of
the cluster, so a lone producer does not pay a hop to the loop thread per add; once adds
overlap (several threads), they go to the loop and are batched as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeVar, Unpack

from disq.client import forking
from disq.client.adds import AddOptions
from disq.client.aio import AsyncClient, Job
from disq.client.blocking_add import BlockingAdder
from disq.client.errors import DisqError, UnavailableError
from disq.client.failover import DEFAULT_ADDR, NodeAddr, send_with_failover_sync
from disq.client.policies import SyncPoliciesMixin
from disq.client.results import SyncResultsMixin
from disq.client.routes import SyncRoutesMixin
from disq.client.schedules import Schedule
from disq.proto_gen import api_pb2

T = TypeVar("T")


class Client(SyncRoutesMixin, SyncResultsMixin, SyncPoliciesMixin):
    def __init__(self, addresses: str | Sequence[str] = DEFAULT_ADDR, **options: Any) -> None:
        forking.check_usable()
        self._gate = forking.CallGate()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._idle_timer: asyncio.TimerHandle | None = None  # on the loop (forking.py)
        self._resume: threading.Event | None = None  # a parked loop's, during a fork
        # A call went to the loop since its channels were last closed: it may have opened
        # some, or queued work that will. Set inside the gate, cleared by a close.
        self._used = True
        loop = self._start_loop()
        try:
            self._aio: AsyncClient = asyncio.run_coroutine_threadsafe(
                _make(addresses, options), loop
            ).result()
        except BaseException:
            self._stop_loop()  # bad options (TLS files, ...): no thread left behind
            raise
        self._adder = BlockingAdder(
            self._aio.view,
            metadata=self._aio._metadata,
            timeout_s=self._aio.timeout_s,
            connect_timeout_s=self._aio.connect_timeout_s,
            refresh=self._refresh,
            add_on_loop=self._add_on_loop,
            gate=self._gate,
        )
        forking.register(self)

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=_serve, args=(loop,), name="disq-client")
        self._thread.daemon = True
        self._thread.start()
        return loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        submitted = False
        try:
            with self._gate.call():
                future = asyncio.run_coroutine_threadsafe(coro, self._running_loop())
                submitted = self._used = True
                return future.result()
        finally:
            if not submitted:
                coro.close()  # refused (closed, forked): never "was never awaited"
            elif forking.forked():
                self._close_when_idle()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop thread, started anew in a forked child (the parent's thread is not
        there); called inside the gate, so no fork runs meanwhile."""
        forking.check_usable()
        if self._closed:
            raise UnavailableError("client is closed")
        if self._loop is None:
            return self._start_loop()
        return self._loop

    # -- fork (disq/client/forking.py) ----------------------------------------------------------
    def _fork_prepare(self) -> bool:
        """Before a fork: no call in flight, acks sent, channels closed, and the loop thread
        parked in a threading wait until the fork is done, so nothing it runs meanwhile (a
        timer, a refresh) opens a channel. A thread waiting there is no thread of gRPC's,
        and with no channel open gRPC's poller thread has ended. False when calls did not
        end in time (the child then cannot use gRPC)."""
        if not self._gate.hold(forking.FORK_WAIT_S):
            return False
        self._adder.suspend()
        loop = self._loop
        if loop is None or self._closed or not self._used:
            # Nothing went to the loop since its channels closed (idle, in a process that
            # forks): no channel is open and none will be; the fork costs nothing more.
            return True
        asyncio.run_coroutine_threadsafe(self._aio.suspend(), loop).result()
        parked, self._resume = threading.Event(), threading.Event()
        resume = self._resume

        def park() -> None:
            parked.set()
            resume.wait()

        loop.call_soon_threadsafe(park)
        parked.wait()
        self._used = False
        return True

    def _fork_parent(self) -> None:
        if self._resume is not None:
            self._resume.set()
            self._resume = None
        self._gate.release()

    def _fork_child(self) -> None:
        self._gate.reset_in_child()
        self._resume = None
        if self._loop is not None:
            # The parent's loop: its thread is not in this process, and its epoll set is
            # the parent's too. Never run, closed or freed here; the next call starts one.
            forking.ORPHANS.append(self._loop)
            self._loop = self._thread = None
        self._adder.adopt()
        self._aio.adopt()

    def _close_when_idle(self) -> None:
        """In a process that forks: close the channels once no call came for
        forking.IDLE_CLOSE_S, so that the next fork finds nothing to close and takes no
        longer than a fork (the next call connects again: a millisecond or two)."""
        loop = self._loop
        if loop is None or self._closed:
            return
        try:
            loop.call_soon_threadsafe(self._arm_idle_close, loop)
        except RuntimeError:
            pass  # closed meanwhile (idle already, or a fork): nothing to arm

    def _arm_idle_close(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = loop.call_later(forking.IDLE_CLOSE_S, self._idle_close, loop)

    def _idle_close(self, loop: asyncio.AbstractEventLoop) -> None:
        self._idle_timer = None
        if self._loop is not loop or self._closed or not self._gate.try_hold():
            return  # in use: the call in flight arms the timer again when it ends
        loop.create_task(self._suspend_idle())

    async def _suspend_idle(self) -> None:
        try:
            self._adder.suspend()
            await self._aio.suspend()
            self._used = False
        finally:
            self._gate.release()

    @property
    def last_node(self) -> str | None:
        """The address of the node that answered last (the client's home for adds)."""
        return self._aio.last_node

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _refresh(self) -> None:
        self._run(self._aio._maybe_refresh())

    def _add_on_loop(self, queue: str, body: bytes | str, **options: Unpack[AddOptions]) -> str:
        return self._run(self._aio.add_job(queue, body, **options))

    def close(self) -> None:
        if self._closed:
            return
        self._adder.close()  # first: an add racing the close fails fast, never hangs
        with self._gate.call():
            if self._closed:
                return
            if self._loop is not None and forking.usable():
                asyncio.run_coroutine_threadsafe(self._aio.close(), self._loop).result()
                self._stop_loop()
            self._aio.mark_closed()
            self._closed = True

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()  # _serve closes the loop

    @property
    def aio(self) -> AsyncClient:
        """The AsyncClient underneath (its loop is the client's thread, not yours)."""
        return self._aio

    def nodes(self) -> list[NodeAddr]:
        return self._aio.nodes()

    def cluster_size(self) -> int:
        """How many nodes the last HELLO listed (before one: the seeds); no call made."""
        return self._aio.cluster_size

    def add_job(self, queue: str, body: bytes | str, **options: Unpack[AddOptions]) -> str:
        """AsyncClient.add_job's options and errors; runs on the calling thread."""
        try:
            return self._adder.add_job(queue, body, **options)
        finally:
            if forking.forked():
                self._close_when_idle()  # the adder's channels close with the loop's

    def add_candidates(self, prefer: str | None = None) -> list[NodeAddr]:
        """The nodes ``add_job`` would try, in its order (the view refreshed first when due;
        ``prefer``: a job's node id prefix first, as its ack goes), for a call made outside
        this client (the integrations' RESP path, :mod:`disq.integrations.resp_calls`). The
        client's own records: read them, do not keep them."""
        return self._adder.view().candidates(prefer)

    def send_with_failover(
        self, send: Callable[[NodeAddr], T], *, what: str, repeatable: bool = False
    ) -> T:
        """``send(n)`` on the nodes in ``add_job``'s order until one answers, with its rule
        for what a failure means and its marks (:func:`~disq.client.failover.
        send_with_failover_sync`), on the calling thread: for a call made outside this
        client (the integrations' RESP path), so that both paths choose the same nodes and
        set aside the same dead ones."""
        view = self._adder.view()
        return send_with_failover_sync(view, send, what=what, repeatable=repeatable)

    def add_jobs(self, jobs: Iterable[dict[str, Any]]) -> list[str | DisqError]:
        return self._run(self._aio.add_jobs(list(jobs)))

    def get_jobs(self, queues: str | Sequence[str], **options: Any) -> list[Job]:
        return self._run(self._aio.get_jobs(queues, **options))

    def stream_jobs(self, queues: str | Sequence[str], **options: Any) -> Iterator[list[Job]]:
        """The stream is one call for as long as it is open: a fork waits for it to close
        (at most forking.FORK_WAIT_S; then the child cannot use gRPC)."""
        with self._gate.call():
            agen = self._aio.stream_jobs(queues, **options)
            try:
                while True:
                    try:
                        yield self._run(_next(agen))
                    except StopAsyncIteration:
                        return
            finally:
                self._run(agen.aclose())

    def ack(self, *ids: str) -> int:
        return self._run(self._aio.ack(*ids))

    def fast_ack(self, *ids: str) -> int:
        return self._run(self._aio.fast_ack(*ids))

    def nack(self, *ids: str, delay_s: float = 0) -> int:
        return self._run(self._aio.nack(*ids, delay_s=delay_s))

    def ack_nowait(self, *ids: str) -> None:
        with self._gate.call():
            self._used = True
            self._running_loop().call_soon_threadsafe(self._aio.ack_nowait, *ids)
        if forking.forked():
            self._close_when_idle()  # the acks are sent first: suspend() flushes them

    def flush(self) -> None:
        self._run(self._aio.flush())

    def working(self, job_id: str) -> int:
        return self._run(self._aio.working(job_id))

    def show(self, job_id: str) -> dict[str, Any] | None:
        return self._run(self._aio.show(job_id))

    def add_schedule(
        self, name: str, spec: str, queue: str, body: bytes | str, **options: Any
    ) -> bool:
        return self._run(self._aio.add_schedule(name, spec, queue, body, **options))

    def delete_schedule(self, name: str) -> bool:
        return self._run(self._aio.delete_schedule(name))

    def pause_schedule(self, name: str) -> bool:
        return self._run(self._aio.pause_schedule(name))

    def resume_schedule(self, name: str) -> bool:
        return self._run(self._aio.resume_schedule(name))

    def list_schedules(self) -> list[str]:
        return self._run(self._aio.list_schedules())

    def show_schedule(self, name: str) -> Schedule | None:
        return self._run(self._aio.show_schedule(name))

    def qlen(self, queue: str, *, node: str | None = None) -> int:
        return self._run(self._aio.qlen(queue, node=node))

    def qstat(self, queue: str, *, node: str | None = None) -> dict[str, Any] | None:
        return self._run(self._aio.qstat(queue, node=node))

    def qpeek(self, queue: str, count: int = 10) -> list[Job]:
        return self._run(self._aio.qpeek(queue, count))

    def queues(self, *, minlen: int | None = None) -> list[str]:
        return self._run(self._aio.queues(minlen=minlen))

    def pause(self, queue: str, state: str | None = None, *, bcast: bool = False) -> str:
        return self._run(self._aio.pause(queue, state, bcast=bcast))

    def hello(self) -> api_pb2.HelloResponse:
        return self._run(self._aio.hello())

    def scan_jobs(
        self, node: str, *, queue: str = "", states: Sequence[str] = (), page: int = 1000
    ) -> list[api_pb2.JobInfo]:
        return self._run(self._aio.scan_jobs(node, queue=queue, states=states, page=page))

    def scan_page(self, cursor: int = 0, **options: Any) -> tuple[int, list[api_pb2.JobInfo]]:
        """AsyncClient.scan_page's options (queue, states, count, node), as get_jobs takes
        get_jobs's."""
        return self._run(self._aio.scan_page(cursor, **options))

    def read_events(
        self, node: str, from_seq: int = 0, *, max_events: int = 1000, since_ms: int = 0
    ) -> api_pb2.ReadEventsResponse:
        return self._run(
            self._aio.read_events(node, from_seq, max_events=max_events, since_ms=since_ms)
        )

    def info(self, section: str = "", *, node: str | None = None) -> dict[str, str]:
        return self._run(self._aio.info(section, node=node))


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The client's loop thread: run until stopped (a close, a fork, an idle close), then
    close the loop in its own thread."""
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _make(addresses: str | Sequence[str], options: dict[str, Any]) -> AsyncClient:
    return AsyncClient(addresses, **options)  # created on the client's own loop


async def _next(agen: AsyncGenerator[list[Job], None]) -> list[Job]:
    return await agen.__anext__()
