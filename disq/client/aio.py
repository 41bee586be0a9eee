"""``AsyncClient``: the asyncio SDK. Give it one or more seed addresses (gRPC ports); it
learns the cluster with Hello and hides it.

How it chooses a node, and what a failed call means: disq/client/failover.py (the view and
the rule every path shares). The view is refreshed every ``refresh_s`` and after failures;
an address the cluster stops listing (a node restarted at a new address, a forgotten node)
is dropped, seeds excepted.

What it retries: every call whose effect is safe to repeat (reads, acks, nacks, WORKING,
pause) moves to the next node when the transport fails. An add is retried only when it
certainly did not leave (the channel to that node was not even connected); once sent, a lost
answer is an :class:`IndeterminateError`, never a silent second copy.

Batching: concurrent ``add_job`` calls to the same node within one loop iteration travel as
one AddJobs call (each caller still gets its own id or error); ``ack_nowait`` queues acks per
node and sends them as one Ack per node per iteration. Acks go to the node that created the
job (its id names it), where the job surely is, falling back to any node (Disque's dummy acks
make that correct).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncGenerator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, Unpack, cast

import grpc
import grpc.aio

from disq.client import forking
from disq.client.adds import AddOptions, fill_add
from disq.client.errors import (
    AuthError,
    DisqError,
    IndeterminateError,
    LeavingError,
    UnavailableError,
    ids_or_errors,
)
from disq.client.failover import (
    DEFAULT_ADDR,
    Failover,
    NodeAddr,
    NodeSet,
    NotSent,
    refusal,
    send_with_failover,
)
from disq.client.inspection import AsyncInspectionMixin
from disq.client.policies import AsyncPoliciesMixin
from disq.client.results import AsyncResultsMixin
from disq.client.routes import AsyncRoutesMixin
from disq.client.schedules import AsyncSchedulesMixin
from disq.client.schedules import Schedule as Schedule  # re-exported: disq.client.aio.Schedule
from disq.client.starting import wrap_stub
from disq.proto_gen import api_pb2, api_pb2_grpc
from disq.tls import PemSource, client_tls

T = TypeVar("T")

PASSWORD_KEY = "disq-password"
MAX_BATCH = 1000  # adds or acks in one call
_FOREVER_S = 365 * 86400.0  # "block until jobs come", asked for explicitly


@dataclass(frozen=True, slots=True)
class Job:
    """A job as GetJobs and QPeek give it."""

    id: str
    queue: str
    body: bytes
    nacks: int = 0
    additional_deliveries: int = 0
    retry_s: int = 0
    # A keyed job's idempotency key, None for one added without: a schedule's tick job
    # carries schedule:<name>:<tick as Unix seconds>, which tells the ticks apart.
    idempotency_key: str | None = None
    # The add's headers ({} if none): the same dict type whatever the door that added it.
    headers: dict[str, bytes] = field(default_factory=dict)

    @property
    def node_prefix(self) -> str:
        """The first 8 hex characters of the id of the node that created the job."""
        return self.id[2:10]


@dataclass(slots=True)
class _AddBatch:
    """add_job calls of one loop iteration: their requests and their callers' futures."""

    request: api_pb2.AddJobsRequest
    futures: list[asyncio.Future[str]] = field(default_factory=list)
    deadline_s: float = 0.0


def _job(j: api_pb2.QueuedJob) -> Job:
    return Job(
        j.id,
        j.queue,
        j.body,
        j.nacks,
        j.additional_deliveries,
        j.retry_s,
        j.idempotency_key or None,
        dict(j.headers) if j.headers else {},
    )


class AsyncClient(
    AsyncRoutesMixin,
    AsyncSchedulesMixin,
    AsyncInspectionMixin,
    AsyncResultsMixin,
    AsyncPoliciesMixin,
):
    """The asyncio client. Use ``async with AsyncClient("host:7710") as c:``, or call
    :meth:`close`. Every call has a deadline (``timeout_s``); only a get with
    ``timeout_s=None`` blocks until jobs come. Exchanges, publish, purge: routes.py;
    schedules: schedules.py; SHOW, queues, JSCAN, events, INFO: inspection.py."""

    def __init__(
        self,
        addresses: str | Sequence[str] = DEFAULT_ADDR,
        *,
        password: str | None = None,
        timeout_s: float = 5.0,
        connect_timeout_s: float = 1.0,
        refresh_s: float = 10.0,
        discover: bool = True,
        rng: random.Random | None = None,
        tls: bool = False,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        tls_server_name: str | None = None,
    ) -> None:
        forking.check_usable()
        self._pid = os.getpid()
        # TLS (docs/sdk.md): on with ``tls=True`` or any tls_* file (a path, or PEM bytes);
        # ``tls_ca`` verifies the nodes (default: the system's roots), ``tls_cert``/``tls_key``
        # is the client certificate of nodes that require one. Plaintext by default.
        tls_config = client_tls(
            tls=tls, ca=tls_ca, cert=tls_cert, key=tls_key, server_name=tls_server_name
        )
        self.view = NodeSet(
            addresses,
            rng=rng or random.Random(),
            tls=tls_config,
            refresh_s=refresh_s,
            discover=discover,
        )
        self.seeds = self.view.seeds
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._metadata = ((PASSWORD_KEY, password),) if password else None
        self._refreshing: asyncio.Task[None] | None = None
        self._add_batch: _AddBatch | None = None
        self._acks: dict[str, list[str]] = {}
        self._flush_scheduled = False
        self._inflight: set[asyncio.Task[Any]] = set()
        self._closed = False
        forking.register_async(self)

    @property
    def last_node(self) -> str | None:
        """The node that answered the last unrouted call: tried first while it answers."""
        return self.view.last_node

    @last_node.setter
    def last_node(self, addr: str | None) -> None:
        self.view.last_node = addr

    @property
    def discover(self) -> bool:
        return self.view.discover

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Send queued acks, then close every channel."""
        if self._closed:
            return
        await self.flush()
        self._closed = True
        for n in self.view.by_addr.values():
            if n.channel is not None:
                await n.channel.close()
                n.channel = n.stub = None

    # -- fork (disq/client/forking.py) ----------------------------------------------------------
    async def suspend(self) -> None:
        """Send queued acks and close every channel, staying open: the next call opens
        them again (on the loop it runs on). For a fork, with no call in flight."""
        await self.flush()
        for n in self.view.by_addr.values():
            if n.channel is not None:
                await n.channel.close()
                n.channel = n.stub = None

    def adopt(self) -> None:
        """In a forked child, with no channel left open by the parent (suspend): this
        process's client now."""
        self._pid = os.getpid()

    def mark_closed(self) -> None:
        self._closed = True

    def _open_channels(self) -> int:
        return sum(1 for n in self.view.by_addr.values() if n.channel is not None)

    def _fork_orphan(self) -> None:
        """In a child forked with this client's channels open: never touch them (closing or
        freeing one runs gRPC's copied state); calls raise ForkError."""
        for n in self.view.by_addr.values():
            if n.channel is not None:
                forking.ORPHANS.append(n.channel)
                n.channel = n.stub = None

    # ------------------------------------------------------------------ nodes
    def nodes(self) -> list[NodeAddr]:
        """What the client knows of the cluster (a copy of its view)."""
        known = self.view.by_addr.values()
        return [NodeAddr(n.addr, n.node_id, n.priority, n.down_until) for n in known]

    @property
    def cluster_size(self) -> int:
        """How many nodes the last HELLO listed (before one: the seeds), failing ones too;
        ``hello()`` counts as one with discovery off."""
        return self.view.cluster_size

    def _stub(self, n: NodeAddr) -> Any:
        if n.stub is None:
            forking.check_usable()
            if os.getpid() != self._pid:
                raise forking.ForkError(
                    f"this AsyncClient was made in process {self._pid}, before a fork: make a "
                    "new client in this process (or use disq.client.Client, which survives "
                    "fork())"
                )
            n.channel = self.view.open_aio_channel(n.addr)
            # Unary calls are asked again while the node is starting (starting.py).
            n.stub = wrap_stub(api_pb2_grpc.QueueStub(n.channel))  # type: ignore[no-untyped-call]
        return n.stub

    async def _maybe_refresh(self) -> None:
        if not self.view.refresh_due():
            return
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        """Hello on the first node that answers: its list replaces the priorities."""
        view = self.view
        view.refreshed_at = time.monotonic()
        for n in view.candidates():
            try:
                r = await self._stub(n).Hello(
                    api_pb2.HelloRequest(), timeout=self.connect_timeout_s, metadata=self._metadata
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    raise AuthError(exc.details() or "NOAUTH", node=n.addr) from exc
                view.mark_down(n)
                continue
            for channel in view.learn(n, r):
                self._spawn(channel.close())
            return
        # Nobody answered: keep the view; the calls will report it.

    # ------------------------------------------------------------------ calling
    async def _call(
        self,
        method: str,
        request: Any,
        *,
        timeout_s: float | None = None,
        prefer: str | None = None,
    ) -> Any:
        """A call that is safe to repeat: tried on each node until one answers."""
        if self._closed:
            raise UnavailableError("client is closed")
        await self._maybe_refresh()
        wait_s = self.timeout_s if timeout_s is None else timeout_s

        async def send(n: NodeAddr) -> Any:
            try:
                return await getattr(self._stub(n), method)(
                    request, timeout=wait_s, metadata=self._metadata
                )
            except grpc.aio.AioRpcError as exc:
                # Connected and no answer in time: the node has the call, another would wait
                # as long. Not connected when the deadline passed (an address that drops
                # packets: a node moved away, a cut): it never left, the next node may take it.
                if (
                    exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                    and n.channel is not None
                    and n.channel.get_state() == grpc.ChannelConnectivity.READY
                    and refusal(exc, n.addr) is None
                ):
                    raise UnavailableError(
                        f"{method}: no answer from {n.addr} in time", node=n.addr
                    ) from None
                raise

        # LEAVING is raised here: a read or an ack is the node's to refuse.
        return await send_with_failover(
            self.view, send, what=method, repeatable=True, prefer=prefer, leaving_moves=False
        )

    # ------------------------------------------------------------------ adding
    async def add_job(self, queue: str, body: bytes | str, **options: Unpack[AddOptions]) -> str:
        """ADDJOB; the job's id. Sync by default: the id comes once ``replicate`` nodes hold
        a copy (NoReplError if not within ``repl_timeout_ms``). Concurrent adds are batched.
        The options are :class:`~disq.client.adds.AddOptions`: a delay is ``delay_s``
        (Disque's DELAY) or ``delay_ms`` (to the millisecond); with ``idempotency_key``,
        repeating the add (same queue, within the nodes' window) answers the first job's id
        and adds nothing: safe to retry after an IndeterminateError."""
        if self._closed:
            raise UnavailableError("client is closed")
        await self._maybe_refresh()
        batch = self._add_batch
        if batch is None:
            batch = self._add_batch = _AddBatch(api_pb2.AddJobsRequest())
        try:
            fill_add(batch.request.jobs.add(), queue, body, options)
        except (TypeError, ValueError):
            del batch.request.jobs[-1]  # a bad argument: nothing joins the batch
            raise
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        batch.futures.append(fut)
        batch.deadline_s = max(batch.deadline_s, batch.request.jobs[-1].timeout_ms / 1000)
        if len(batch.futures) >= MAX_BATCH:
            self._add_batch = None
            self._spawn(self._send_batch(batch))
        else:
            self._schedule_flush()
        return await fut

    async def add_jobs(self, jobs: Iterable[dict[str, Any]]) -> list[str | DisqError]:
        """Many adds in as few calls as possible: each dict holds add_job's arguments
        (``queue``, ``body`` and any option). One id or error per job, in order."""
        if self._closed:
            raise UnavailableError("client is closed")
        await self._maybe_refresh()
        out: list[str | DisqError] = []
        request = api_pb2.AddJobsRequest()
        add = request.jobs.add
        deadline_ms = 0
        for j in jobs:
            msg = add()
            options = dict(j)
            try:
                queue, body = options.pop("queue"), options.pop("body")
            except KeyError as exc:
                raise TypeError(f"add_jobs: a job without {exc.args[0]!r}") from None
            fill_add(msg, queue, body, cast(AddOptions, options))
            deadline_ms = max(deadline_ms, msg.timeout_ms)
            if len(request.jobs) == MAX_BATCH:
                out.extend(await self._send_adds(request, deadline_ms / 1000))
                request = api_pb2.AddJobsRequest()
                add = request.jobs.add
        if len(request.jobs):
            out.extend(await self._send_adds(request, deadline_ms / 1000))
        return out

    async def _send_batch(self, batch: _AddBatch) -> None:
        """The batched add_job calls: one AddJobs, then each caller's id or error."""
        try:
            results = await self._send_adds(batch.request, batch.deadline_s)
        except asyncio.CancelledError:
            for fut in batch.futures:
                _fail(fut, IndeterminateError("add cancelled after it was sent"))
            raise
        for fut, res in zip(batch.futures, results, strict=True):
            if fut.done():
                continue
            if isinstance(res, str):
                fut.set_result(res)
            else:
                fut.set_exception(res)

    async def _send_adds(
        self,
        request: api_pb2.AddJobsRequest,
        wait_s: float,
        refused: frozenset[str] = frozenset(),
    ) -> list[str | DisqError]:
        """One AddJobs on the first node whose channel is connected (failover.py); an id or
        an error per job. A transport failure gives every job the same error (see the module
        docstring for when that is IndeterminateError)."""
        deadline = wait_s + self.timeout_s

        async def send(n: NodeAddr) -> list[str | DisqError]:
            stub = await self._connected_stub(n)
            r = await stub.AddJobs(request, timeout=deadline, metadata=self._metadata)
            return ids_or_errors(r.results, n.addr)

        try:
            results = await send_with_failover(self.view, send, what="add", refused=refused)
        except forking.ForkError:
            raise  # this client's own state, not the call's outcome
        except DisqError as err:
            return [err] * len(request.jobs)
        leaving = [i for i, res in enumerate(results) if isinstance(res, LeavingError)]
        if not leaving:
            return results
        addr = str(cast(LeavingError, results[leaving[0]]).node)  # the node that answered
        if self.view.others_than(refused | {addr}):
            # The node is draining (SIGTERM, CLUSTER LEAVING): those jobs were not added
            # there, so they move to the next node, and the client's home moves too.
            self.view.leaving(self.view.node(addr))
            retry = api_pb2.AddJobsRequest()
            retry.jobs.extend(request.jobs[i] for i in leaving)
            moved = await self._send_adds(retry, wait_s, refused | {addr})
            for i, res in zip(leaving, moved, strict=True):
                results[i] = res
        return results

    async def _connected_stub(self, n: NodeAddr) -> Any:
        """``n``'s stub once its channel is connected, waited for up to connect_timeout_s:
        NotSent if it is not, so that a call that must not run twice certainly never left."""
        stub = self._stub(n)
        ch = n.channel
        if ch.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
            return stub
        try:
            await asyncio.wait_for(ch.channel_ready(), self.connect_timeout_s)
        except (TimeoutError, grpc.aio.AioRpcError):
            raise NotSent("not reachable") from None
        return stub

    # ------------------------------------------------------------------ batching
    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self._flush_scheduled = False
        batch, self._add_batch = self._add_batch, None
        if batch is not None:
            self._spawn(self._send_batch(batch))
        acks, self._acks = self._acks, {}
        for prefix, ids in acks.items():
            for start in range(0, len(ids), MAX_BATCH):
                self._spawn(self._send_acks(prefix, ids[start : start + MAX_BATCH]))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def flush(self) -> None:
        """Wait until every queued add and ack has been sent and answered."""
        if self._flush_scheduled:
            self._flush_now()
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    # ------------------------------------------------------------------ getting
    async def get_jobs(
        self,
        queues: str | Sequence[str],
        *,
        count: int = 1,
        timeout_s: float | None = 1.0,
        nohang: bool = False,
        with_counters: bool = True,
        in_order: bool = False,
    ) -> list[Job]:
        """GETJOB: up to ``count`` jobs; [] when none came within ``timeout_s``. Blocks until
        jobs come only with ``timeout_s=None``. ``in_order``: a queue's jobs before the next
        queue's (Disque takes one per queue per pass)."""
        qs = [queues] if isinstance(queues, str) else list(queues)
        wait_ms = 0 if timeout_s is None else max(1, int(timeout_s * 1000))
        req = api_pb2.GetJobsRequest(
            queues=qs,
            count=count,
            nohang=nohang,
            timeout_ms=wait_ms,
            with_counters=with_counters,
            in_order=in_order,
        )
        # The call's deadline leaves the node time to answer "nothing" after its own wait.
        deadline = _FOREVER_S if timeout_s is None else timeout_s + self.timeout_s
        r = await self._call("GetJobs", req, timeout_s=deadline)
        return [_job(j) for j in r.jobs]

    async def stream_jobs(
        self, queues: str | Sequence[str], *, count: int = 16, with_counters: bool = True
    ) -> AsyncGenerator[list[Job], None]:
        """Jobs as they come, for a long-lived consumer; reconnects to another node when its
        node goes away. Stop by breaking out of the loop."""
        qs = [queues] if isinstance(queues, str) else list(queues)
        req = api_pb2.GetJobsRequest(queues=qs, count=count, with_counters=with_counters)
        while not self._closed:
            await self._maybe_refresh()
            served = False
            # The loop of send_with_failover, around a stream: a node lost mid-stream is set
            # aside and the next one streams; a refusal ends it.
            way = Failover(self.view, what="StreamJobs", repeatable=True, leaving_moves=False)
            for n in way.order():
                call = self._stub(n).StreamJobs(req, metadata=self._metadata)
                with way.trying(n):
                    try:
                        async for resp in call:
                            served = True
                            self.view.answered(n)
                            yield [_job(j) for j in resp.jobs]
                    finally:
                        call.cancel()
                    return  # the server ended the stream
            if not served:
                raise way.exhausted()

    # ------------------------------------------------------------------ acking and friends
    async def ack(self, *ids: str) -> int:
        """ACKJOB at the node that created the jobs; how many were known there."""
        return await self._by_origin("Ack", ids)

    async def fast_ack(self, *ids: str) -> int:
        return await self._by_origin("FastAck", ids)

    async def nack(self, *ids: str, delay_s: float = 0) -> int:
        """NACK: queue the jobs again, counting a failed attempt: at once, or once
        ``delay_s`` has passed (on every node that holds them; no new delivery counted)."""
        return await self._by_origin("Nack", ids, delay_ms=max(0, round(delay_s * 1000)))

    async def _by_origin(self, method: str, ids: Sequence[str], delay_ms: int = 0) -> int:
        groups: dict[str, list[str]] = {}
        for job_id in ids:
            groups.setdefault(job_id[2:10], []).append(job_id)
        total = 0
        for prefix, group in groups.items():
            req: Any = api_pb2.JobIds(ids=group)
            if delay_ms:
                req = api_pb2.NackRequest(ids=group, delay_ms=delay_ms)
            r = await self._call(method, req, prefer=prefix)
            total += r.count
        return total

    def ack_nowait(self, *ids: str) -> None:
        """Queue acks: sent with every other queued ack for the same node, one call per node
        per loop iteration (:meth:`flush` waits for them). Failures are retried on other
        nodes, then dropped: the job comes back after its retry time, which is safe."""
        for job_id in ids:
            self._acks.setdefault(job_id[2:10], []).append(job_id)
        self._schedule_flush()

    async def _send_acks(self, prefix: str, ids: list[str]) -> None:
        try:
            await self._call("Ack", api_pb2.JobIds(ids=ids), prefer=prefix)
        except DisqError:
            pass  # see ack_nowait: an unacked job is delivered again, never lost

    async def working(self, job_id: str) -> int:
        """WORKING: postpone the job's next delivery; its retry time in seconds."""
        r = await self._call("Working", api_pb2.JobId(id=job_id), prefer=job_id[2:10])
        return int(r.retry_s)

    async def qpeek(self, queue: str, count: int = 10) -> list[Job]:
        r = await self._call("QPeek", api_pb2.QPeekRequest(queue=queue, count=count))
        return [_job(j) for j in r.jobs]

    async def hello(self) -> api_pb2.HelloResponse:
        r: api_pb2.HelloResponse = await self._call("Hello", api_pb2.HelloRequest())
        self.view.learn_ports(r)  # with discovery off too
        return r

    async def _call_node(
        self, node: str, method: str, request: Any, *, timeout_s: float | None = None
    ) -> Any:
        """One call to one node (its gRPC address), never retried elsewhere: for what is per
        node (its jobs, its event log, its INFO). ``timeout_s``: its deadline, default the
        client's ``timeout_s``."""
        n = self.view.node(node)
        wait_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            return await getattr(self._stub(n), method)(
                request, timeout=wait_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            err = refusal(exc, n.addr)
            raise err or UnavailableError(f"{method}: {n.addr} did not answer") from None


def _fail(fut: asyncio.Future[Any], err: BaseException) -> None:
    if not fut.done():
        fut.set_exception(err)
