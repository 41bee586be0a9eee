"""The Queue service's queue policy RPCs: SetQueuePolicy, GetQueuePolicy, DeleteQueuePolicy,
ListQueuePolicies, and Redrive (QREDRIVE), on top of the results RPCs (api_results.py).
QPOLICY's and QREDRIVE's grammar over RESP is disq/doors/disque/policies.py; both give the
command to the node core, whose policy table every node keeps (disq/core/policy/). A refusal
is SYNTAX (a bad field) or LIMIT (the table is full), and stores nothing; the answer follows
the change's record.

Redrive is per node, as QREDRIVE: it moves the dead letters queued here. Its adds wait for
their copies, so it takes a token as SetResult does and the count arrives later (PENDING);
its checks are the core's (COUNT's bound, TO naming the queue itself), QREDRIVE's messages.
"""

from __future__ import annotations

from typing import Any

import grpc

from disq.core.disque.api import Pending
from disq.core.messages import PolicyEntry
from disq.core.policy.table import PolicyError
from disq.proto_gen import api_pb2
from disq.server.api_results import ResultsQueueApi
from disq.server.api_service import ApiError, _added, _api_queue, _queue


def policy_error(exc: PolicyError) -> ApiError:
    if exc.code == "LIMIT":
        return ApiError(api_pb2.LIMIT, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    return ApiError(api_pb2.SYNTAX, grpc.StatusCode.INVALID_ARGUMENT, str(exc))


class PoliciesQueueApi(ResultsQueueApi):
    """disq.v1.Queue with the routes, results and queue policy RPCs."""

    async def SetQueuePolicy(self, request: api_pb2.QueuePolicy, context: Any) -> Any:
        async def body() -> api_pb2.SetQueuePolicyResponse:
            self._check_disk()
            queue = _queue(request.queue)
            dead_letter = _queue(request.dead_letter) if request.dead_letter else ""
            try:
                self.node.core.qpolicy_set(
                    self._now(),
                    queue,
                    request.max_deliveries,
                    dead_letter,
                    request.backoff_base_s,
                    request.backoff_max_s,
                )
            except PolicyError as exc:
                raise policy_error(exc) from None
            self._done()
            await self.node.durable()  # its record, then the change to every peer
            return api_pb2.SetQueuePolicyResponse()

        return await self._call(context, body)

    async def GetQueuePolicy(self, request: api_pb2.QueueName, context: Any) -> Any:
        async def body() -> api_pb2.GetQueuePolicyResponse:
            queue = _queue(request.queue)
            policies = self.node.core.policies
            e = policies.get(queue) if policies is not None else None
            if e is None:
                return api_pb2.GetQueuePolicyResponse(found=False)
            policy = _policy(e, request.queue)
            return api_pb2.GetQueuePolicyResponse(found=True, policy=policy)

        return await self._call(context, body)

    async def DeleteQueuePolicy(self, request: api_pb2.QueueName, context: Any) -> Any:
        async def body() -> api_pb2.Count:
            try:
                n = self.node.core.qpolicy_del(self._now(), _queue(request.queue))
            except PolicyError as exc:
                raise policy_error(exc) from None
            self._done()
            await self.node.durable()
            return api_pb2.Count(count=n)

        return await self._call(context, body)

    async def ListQueuePolicies(
        self, request: api_pb2.ListQueuePoliciesRequest, context: Any
    ) -> Any:
        async def body() -> api_pb2.ListQueuePoliciesResponse:
            policies = self.node.core.policies
            entries = policies.live_entries() if policies is not None else []
            return api_pb2.ListQueuePoliciesResponse(
                policies=[_policy(e, _api_queue(e.queue)) for e in entries]
            )

        return await self._call(context, body)

    async def Redrive(self, request: api_pb2.RedriveRequest, context: Any) -> Any:
        async def body() -> api_pb2.Count:
            queue = _queue(request.queue)
            to = _queue(request.to) if request.to else ""
            self._check_disk()
            token = self.node.new_token()
            # count 0: every one; the core checks the bound and TO, as for QREDRIVE.
            got = self.node.core.qredrive(self._now(), token, queue, to, request.count)
            if isinstance(got, Pending):
                (result,) = await self._wait([token])
                return api_pb2.Count(count=int(_added(result)))  # the count, as text
            self._done()
            await self.node.durable()  # the acks' records, as the RESP door's answer
            return api_pb2.Count(count=got)

        return await self._call(context, body)


def _policy(e: PolicyEntry, queue: str) -> api_pb2.QueuePolicy:
    return api_pb2.QueuePolicy(
        queue=queue,
        max_deliveries=e.max_deliveries,
        dead_letter=_api_queue(e.dead_letter) if e.dead_letter else "",
        backoff_base_s=e.backoff_base_s,
        backoff_max_s=e.backoff_max_s,
    )
