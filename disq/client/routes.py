"""The SDK's exchanges, bindings, queue declarations, publish and purge (issue 29), shared by
:class:`~disq.client.AsyncClient` and :class:`~disq.client.Client` as mixins (aio.py stays
within its size).

The cluster keeps one routes table (every node holds all of it), so a declare or a bind on
any node is seen by every client of every node; ``publish`` routes on the node it reaches.
Queues are per node, so ``purge_queue`` asks every node the client knows and sums.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Unpack

from disq.client.adds import AddOptions, fill_add
from disq.client.calls import OnLoop, PublishCalls
from disq.client.errors import (
    DisqError,
    LeavingError,
    UnavailableError,
    ids_or_errors,
)
from disq.client.failover import NodeAddr, send_with_failover
from disq.proto_gen import api_pb2


@dataclass(frozen=True, slots=True)
class Routes:
    """The cluster's routes table as one node holds it (``list_routes``)."""

    exchanges: dict[str, str] = field(default_factory=dict)  # name -> type
    bindings: list[tuple[str, str, str]] = field(default_factory=list)  # (exchange, queue, key)
    queues: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (expires_ms,
    # message_ttl_ms)


class AsyncRoutesMixin:
    """The routes methods of AsyncClient."""

    async def declare_exchange(
        self: PublishCalls, name: str, type: str = "direct", *, passive: bool = False
    ) -> None:
        """Declare an exchange (direct, fanout or topic) for every node. Redeclaring with
        another type raises PreconditionFailedError; an unsupported type
        InvalidArgumentError. ``passive``: only check it exists (NotFoundError otherwise)."""
        req = api_pb2.DeclareExchangeRequest(name=name, type=type, passive=passive)
        await self._call("DeclareExchange", req)

    async def delete_exchange(self: PublishCalls, name: str) -> bool:
        """The exchange and its bindings; True if it existed."""
        r = await self._call("DeleteExchange", api_pb2.ExchangeName(name=name))
        return bool(r.found)

    async def declare_queue(
        self: PublishCalls, name: str, *, expires_ms: int = 0, message_ttl_ms: int = 0
    ) -> None:
        """A queue's options. ``expires_ms`` > 0 makes it transient (RabbitMQ's x-expires):
        deleted with its bindings and jobs on every node unless declared again within that
        time (each call renews the lease). ``message_ttl_ms`` > 0 caps the TTL of what
        ``publish`` adds to it."""
        req = api_pb2.DeclareQueueRequest(
            name=name, expires_ms=expires_ms, message_ttl_ms=message_ttl_ms
        )
        await self._call("DeclareQueue", req)

    async def delete_queue(self: PublishCalls, name: str) -> int:
        """Remove the queue's declaration and bindings and purge its queued jobs on every
        node; the number of jobs purged (a node that does not answer is skipped here, and
        purges when it learns the delete)."""
        purged = await self.purge_queue(name)
        r = await self._call("DeleteQueue", api_pb2.QueueName(queue=name))
        return purged + int(r.count)  # the jobs that arrived there since the purge

    async def bind_queue(
        self: PublishCalls, queue: str, exchange: str, routing_key: str = ""
    ) -> None:
        """Bind ``queue`` to ``exchange`` (NotFoundError when the exchange does not exist)."""
        req = api_pb2.BindingRequest(queue=queue, exchange=exchange, routing_key=routing_key)
        await self._call("BindQueue", req)

    async def unbind_queue(
        self: PublishCalls, queue: str, exchange: str, routing_key: str = ""
    ) -> bool:
        """True if the binding existed."""
        req = api_pb2.BindingRequest(queue=queue, exchange=exchange, routing_key=routing_key)
        r = await self._call("UnbindQueue", req)
        return bool(r.found)

    async def list_routes(self: PublishCalls) -> Routes:
        r = await self._call("ListRoutes", api_pb2.ListRoutesRequest())
        return Routes(
            exchanges={e.name: e.type for e in r.exchanges},
            bindings=[(b.exchange, b.queue, b.routing_key) for b in r.bindings],
            queues={q.name: (int(q.expires_ms), int(q.message_ttl_ms)) for q in r.queues},
        )

    async def publish(
        self: PublishCalls,
        exchange: str,
        routing_key: str,
        body: bytes | str,
        **options: Unpack[AddOptions],
    ) -> list[str]:
        """Route through ``exchange`` on a node and add one job per matched queue with
        add_job's ``options``; their ids in route order (queues sorted). [] when nothing
        matched or the exchange is unknown: the message is dropped, as RabbitMQ does. The
        default exchange ``""`` is the queue named by ``routing_key``. A refused add raises
        its error (the jobs of the other queues may exist); like add_job, an answer lost
        after the call left is an IndeterminateError, never a silent second copy."""
        if self._closed:
            raise UnavailableError("client is closed")
        await self._maybe_refresh()
        req = api_pb2.PublishRequest(exchange=exchange, routing_key=routing_key)
        fill_add(req.job, "", body, options)
        results = await _send_publish(self, req, req.job.timeout_ms / 1000)
        for res in results:
            if isinstance(res, DisqError):
                raise res
        return [res for res in results if isinstance(res, str)]

    async def purge_queue(self: PublishCalls, queue: str) -> int:
        """Every queued job of ``queue`` on every node the client knows, acked (as ACKJOB:
        the copies elsewhere are collected); how many in total. A node that does not answer
        is skipped. Jobs being worked on or waiting out a delay are not queued: they stay."""
        if self._closed:
            raise UnavailableError("client is closed")
        await self._maybe_refresh()
        addrs = [n.addr for n in self.nodes()]
        req = api_pb2.QueueName(queue=queue)
        answers = await asyncio.gather(
            *(self._call_node(addr, "PurgeQueue", req) for addr in addrs),
            return_exceptions=True,
        )
        total = 0
        for answer in answers:
            if isinstance(answer, UnavailableError):
                continue  # down: its jobs stay until it comes back (as ack_queued did)
            if isinstance(answer, BaseException):
                raise answer
            total += int(answer.count)
        return total


async def _send_publish(
    client: PublishCalls, req: api_pb2.PublishRequest, wait_s: float
) -> list[str | DisqError]:
    """One Publish on the first node whose channel is connected (failover.py): an id or an
    error per matched queue. Sent again elsewhere only when it certainly did not leave, or
    when the node refused every add as LEAVING (it added nothing)."""
    deadline = wait_s + client.timeout_s

    async def send(n: NodeAddr) -> list[str | DisqError]:
        stub = await client._connected_stub(n)
        r = await stub.Publish(req, timeout=deadline, metadata=client._metadata)
        results = ids_or_errors(r.results, n.addr)
        leaving = [res for res in results if isinstance(res, LeavingError)]
        if leaving and len(leaving) == len(results):
            raise leaving[0]  # draining, it added nothing: the next node routes it
        return results

    return await send_with_failover(client.view, send, what="publish", lost="its jobs may exist")


class SyncRoutesMixin:
    """The routes methods of the blocking Client (the AsyncClient's, on its loop)."""

    def declare_exchange(
        self: OnLoop, name: str, type: str = "direct", *, passive: bool = False
    ) -> None:
        self._run(AsyncRoutesMixin.declare_exchange(self._aio, name, type, passive=passive))

    def delete_exchange(self: OnLoop, name: str) -> bool:
        return self._run(AsyncRoutesMixin.delete_exchange(self._aio, name))

    def declare_queue(
        self: OnLoop, name: str, *, expires_ms: int = 0, message_ttl_ms: int = 0
    ) -> None:
        aio = self._aio
        ttl_ms = message_ttl_ms
        self._run(
            AsyncRoutesMixin.declare_queue(aio, name, expires_ms=expires_ms, message_ttl_ms=ttl_ms)
        )

    def delete_queue(self: OnLoop, name: str) -> int:
        return self._run(AsyncRoutesMixin.delete_queue(self._aio, name))

    def bind_queue(self: OnLoop, queue: str, exchange: str, routing_key: str = "") -> None:
        self._run(AsyncRoutesMixin.bind_queue(self._aio, queue, exchange, routing_key))

    def unbind_queue(self: OnLoop, queue: str, exchange: str, routing_key: str = "") -> bool:
        return self._run(AsyncRoutesMixin.unbind_queue(self._aio, queue, exchange, routing_key))

    def list_routes(self: OnLoop) -> Routes:
        return self._run(AsyncRoutesMixin.list_routes(self._aio))

    def publish(
        self: OnLoop,
        exchange: str,
        routing_key: str,
        body: bytes | str,
        **options: Unpack[AddOptions],
    ) -> list[str]:
        return self._run(
            AsyncRoutesMixin.publish(self._aio, exchange, routing_key, body, **options)
        )

    def purge_queue(self: OnLoop, queue: str) -> int:
        return self._run(AsyncRoutesMixin.purge_queue(self._aio, queue))
