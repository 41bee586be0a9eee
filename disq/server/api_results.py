"""The Queue service's results RPCs: SetResult, GetResult, DeleteResult, on top of the routes
RPCs (api_routes.py). RESULT's grammar over RESP is disq/doors/disque/results.py; both give
the command to the node core, which keeps the result on every node
(disq/core/disque/results.py).

A SetResult or a waiting GetResult takes a token, as a sync AddJob or a blocking GetJobs does:
the answer comes back through the node's router, and a call that goes away cancels its token
(a set's result stays, where it landed; a wait stops waiting).
"""

from __future__ import annotations

from typing import Any

from disq.core.disque.api import DisqueError, Pending
from disq.core.disque.results import (
    DEFAULT_RESULT_TIMEOUT_MS,
    valid_result_key,
)
from disq.proto_gen import api_pb2
from disq.server.api_routes import RoutesQueueApi
from disq.server.api_service import _ids, syntax


def _key(key: str) -> str:
    if not valid_result_key(key.encode("utf-8", "surrogatepass")):
        raise syntax("a result key is 1 to 255 printable ASCII bytes, no space")
    return key


class ResultsQueueApi(RoutesQueueApi):
    """disq.v1.Queue with the routes and results RPCs."""

    async def SetResult(self, request: api_pb2.SetResultRequest, context: Any) -> Any:
        async def body() -> api_pb2.SetResultResponse:
            key = _key(request.key)
            if request.ack:
                _ids([key])  # BADID: only a job's id can be acked
            ttl_s = request.ttl_s if request.HasField("ttl_s") else None
            if ttl_s is not None and ttl_s < 1:
                raise syntax("TTL must be at least 1")
            repl = request.replicate if request.HasField("replicate") else None
            if repl is not None and repl < 1:
                raise syntax("REPLICATE must be at least 1")
            self._check_disk()
            token = self.node.new_token()
            r = self.node.core.result_set(
                self._now(),
                token,
                key,
                request.value,
                ttl_s,
                repl,
                request.repl_timeout_ms or DEFAULT_RESULT_TIMEOUT_MS,
                request.ack,
            )
            if isinstance(r, Pending):
                (result,) = await self._wait([token])
                if isinstance(result, DisqueError):
                    raise result
            else:
                await self.node.durable()  # logged here before the answer, as the RESP door
            return api_pb2.SetResultResponse()

        return await self._call(context, body)

    async def GetResult(self, request: api_pb2.GetResultRequest, context: Any) -> Any:
        async def body() -> api_pb2.GetResultResponse:
            key = _key(request.key)
            core = self.node.core
            if not request.HasField("wait_ms"):
                value = core.result_get(self._now(), key)
            else:
                token = self.node.new_token()
                got = core.result_wait(self._now(), token, key, request.wait_ms)
                if isinstance(got, Pending):
                    (result,) = await self._wait([token])
                    value = result if isinstance(result, bytes) else None
                else:
                    value = got
            if value is None:
                return api_pb2.GetResultResponse(found=False)
            return api_pb2.GetResultResponse(found=True, value=value)

        return await self._call(context, body)

    async def DeleteResult(self, request: api_pb2.ResultKey, context: Any) -> Any:
        async def body() -> api_pb2.Count:
            n = self.node.core.result_del(self._now(), _key(request.key))
            await self.node.durable()  # its record, then the delete to every peer
            return api_pb2.Count(count=n)

        return await self._call(context, body)
