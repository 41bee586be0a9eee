"""The Queue service's routes RPCs (issue 29): exchanges, bindings, queue declarations,
Publish and PurgeQueue, on top of :class:`QueueApi` (api_service.py, kept to its size).

The same envelope as every other RPC: a refusal is a status code and an ErrorInfo reason
(SYNTAX for a bad argument, NOT_FOUND for a missing exchange, PRECONDITION_FAILED for a
type clash, LIMIT when a table is full). Publish routes with this node's table and adds one
job per matched queue in one step, as AddJobs adds a batch: the sync adds replicate at once
and the call answers when every one has its id or its error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from disq.core.disque.api import DEFAULT_TTL_S
from disq.core.routes.table import (
    LIMIT,
    NAME_MAX_BYTES,
    NOT_FOUND,
    PRECONDITION_FAILED,
    ROUTING_KEY_MAX_BYTES,
    RouteError,
    Routes,
)
from disq.proto_gen import api_pb2
from disq.server.api_service import ApiError, QueueApi, _api_queue, _kept, _queue, syntax

T = TypeVar("T")

_ROUTE_REASONS: dict[str, tuple[int, grpc.StatusCode]] = {
    NOT_FOUND: (api_pb2.NOT_FOUND, grpc.StatusCode.NOT_FOUND),
    PRECONDITION_FAILED: (api_pb2.PRECONDITION_FAILED, grpc.StatusCode.FAILED_PRECONDITION),
    LIMIT: (api_pb2.LIMIT, grpc.StatusCode.RESOURCE_EXHAUSTED),
}


def route_error(exc: RouteError) -> ApiError:
    reason, code = _ROUTE_REASONS.get(exc.code, (api_pb2.SYNTAX, grpc.StatusCode.INVALID_ARGUMENT))
    return ApiError(reason, code, str(exc))


def _bounded(what: str, text: str, limit: int) -> str:
    if len(text.encode("utf-8", "surrogatepass")) > limit:
        raise syntax(f"{what} is longer than {limit} bytes")
    return text


def _ttl_capped(job: api_pb2.AddJobRequest, message_ttl_ms: int) -> int:
    """A queue's x-message-ttl caps the add's TTL: whole seconds, rounded up, at least 1,
    counted from when the job is queued (after its DELAY, as RabbitMQ counts from when the
    message enters the queue; Disque refuses a DELAY at or past the TTL)."""
    delay_s = job.delay_s or -(-job.delay_ms // 1000)
    cap_s = max(1, -(-message_ttl_ms // 1000)) + delay_s
    ttl_s = job.ttl_s if job.HasField("ttl_s") else DEFAULT_TTL_S
    return min(ttl_s, cap_s)


class RoutesQueueApi(QueueApi):
    """disq.v1.Queue with the routes RPCs."""

    def _routes(self) -> Routes:
        return _kept(self.node.routes, "routes")

    def _change(self, change: Callable[[Routes], T]) -> T:
        """Run a routes change; its refusal as the API's error. Records and pushes follow."""
        try:
            result = change(self._routes())
        except RouteError as exc:
            raise route_error(exc) from None
        self._done()  # the ROUTE records, then the change to every peer
        return result

    async def DeclareExchange(self, request: api_pb2.DeclareExchangeRequest, context: Any) -> Any:
        async def body() -> api_pb2.RouteChangeResponse:
            if not request.passive:
                self._check_disk()
            name = request.name
            etype = request.type or "direct"
            routes = self._routes()
            new = name not in routes.exchanges
            self._change(
                lambda r: r.declare_exchange(self._now(), name, etype, passive=request.passive)
            )
            return api_pb2.RouteChangeResponse(found=new and not request.passive)

        return await self._call(context, body)

    async def DeleteExchange(self, request: api_pb2.ExchangeName, context: Any) -> Any:
        async def body() -> api_pb2.RouteChangeResponse:
            found = self._change(lambda r: r.delete_exchange(self._now(), request.name))
            return api_pb2.RouteChangeResponse(found=bool(found))

        return await self._call(context, body)

    async def DeclareQueue(self, request: api_pb2.DeclareQueueRequest, context: Any) -> Any:
        async def body() -> api_pb2.RouteChangeResponse:
            self._check_disk()
            name = _queue(request.name)
            new = name not in self._routes().queues
            self._change(
                lambda r: r.declare_queue(
                    self._now(), name, request.expires_ms, request.message_ttl_ms
                )
            )
            return api_pb2.RouteChangeResponse(found=new)

        return await self._call(context, body)

    async def DeleteQueue(self, request: api_pb2.QueueName, context: Any) -> Any:
        async def body() -> api_pb2.Count:
            name = _queue(request.queue)
            purged = self._change(lambda r: r.delete_queue(self._now(), name))
            return api_pb2.Count(count=int(purged))

        return await self._call(context, body)

    async def BindQueue(self, request: api_pb2.BindingRequest, context: Any) -> Any:
        async def body() -> api_pb2.RouteChangeResponse:
            self._check_disk()
            queue = _queue(request.queue)
            routes = self._routes()
            new = (queue, request.routing_key) not in routes.bindings.get(request.exchange, {})
            self._change(
                lambda r: r.bind(self._now(), queue, request.exchange, request.routing_key)
            )
            return api_pb2.RouteChangeResponse(found=new)

        return await self._call(context, body)

    async def UnbindQueue(self, request: api_pb2.BindingRequest, context: Any) -> Any:
        async def body() -> api_pb2.RouteChangeResponse:
            queue = _queue(request.queue)
            found = self._change(
                lambda r: r.unbind(self._now(), queue, request.exchange, request.routing_key)
            )
            return api_pb2.RouteChangeResponse(found=bool(found))

        return await self._call(context, body)

    async def ListRoutes(self, request: api_pb2.ListRoutesRequest, context: Any) -> Any:
        async def body() -> api_pb2.ListRoutesResponse:
            routes = self._routes()
            out = api_pb2.ListRoutesResponse()
            for name in sorted(routes.exchanges):
                out.exchanges.add(name=name, type=routes.exchanges[name])
            for exchange, queue, key in routes.binding_list():
                out.bindings.add(exchange=exchange, queue=_api_queue(queue), routing_key=key)
            for name in sorted(routes.queues):
                d = routes.queues[name]
                out.queues.add(
                    name=_api_queue(name),
                    expires_ms=d.expires_ms,
                    message_ttl_ms=d.message_ttl_ms,
                )
            return out

        return await self._call(context, body)

    async def Publish(self, request: api_pb2.PublishRequest, context: Any) -> Any:
        async def body() -> api_pb2.PublishResponse:
            exchange = _bounded("exchange name", request.exchange, NAME_MAX_BYTES)
            key = request.routing_key
            if exchange:
                _bounded("routing key", key, ROUTING_KEY_MAX_BYTES)
            matched = self._routes().route(exchange, key) or []
            response = api_pb2.PublishResponse()
            if not matched:
                return response  # dropped, as RabbitMQ drops an unroutable message
            self._check_disk()
            routes = self._routes()

            def prepare(queue: str) -> tuple[api_pb2.AddJobRequest, str]:
                response.queues.append(_api_queue(queue))
                req = api_pb2.AddJobRequest()
                req.CopyFrom(request.job)
                ttl_ms = routes.message_ttl_ms(queue)
                if ttl_ms:
                    req.ttl_s = _ttl_capped(request.job, ttl_ms)
                return req, queue

            await self._add_each(response, [_queue(q) for q in matched], prepare)
            return response

        return await self._call(context, body)

    async def PurgeQueue(self, request: api_pb2.QueueName, context: Any) -> Any:
        async def body() -> api_pb2.Count:
            n = self.node.core.qpurge(self._now(), _queue(request.queue))
            self._done()  # the acks' DELJOB records, then their SETACKs
            return api_pb2.Count(count=n)

        return await self._call(context, body)
