"""The SDK's queue policies (QPOLICY): set, get and delete a queue's delivery limit, dead
letter queue and requeue backoff. The cluster keeps one policy table (every node holds all
of it: disq/core/policy/), so a policy set through any node is known by every node, and
each call may go to any node. The methods of :class:`~disq.client.AsyncClient` and
:class:`~disq.client.Client` as mixins (calls.py says how a mixin reaches the client).
"""

from __future__ import annotations

from dataclasses import dataclass

from disq.client.calls import NodeCalls, OnLoop
from disq.proto_gen import api_pb2


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A queue's policy; 0 or "": the field is not set. ``backoff_max_s`` > 0: every
    requeue of a delivered job (a nack, a RETRY run out) waits min(base * 2^(deliveries-1),
    max) seconds on every node. ``max_deliveries`` and ``dead_letter`` are kept, not yet
    applied."""

    queue: str
    max_deliveries: int = 0
    dead_letter: str = ""
    backoff_base_s: int = 0
    backoff_max_s: int = 0


class AsyncPoliciesMixin:
    """The queue policy methods of AsyncClient."""

    async def set_queue_policy(
        self: NodeCalls,
        queue: str,
        *,
        max_deliveries: int = 0,
        dead_letter: str = "",
        backoff: tuple[int, int] | None = None,
    ) -> None:
        """Set ``queue``'s whole policy (what is not given is unset): ``max_deliveries``
        1..1,000,000, ``dead_letter`` a queue's name, ``backoff`` (base, max) seconds with
        0 <= base <= max <= 30 days. A bad value raises InvalidArgumentError, a full table
        (100,000 policies) LimitError; nothing changes then."""
        base, top = backoff if backoff is not None else (0, 0)
        req = api_pb2.QueuePolicy(
            queue=queue,
            max_deliveries=max_deliveries,
            dead_letter=dead_letter,
            backoff_base_s=base,
            backoff_max_s=top,
        )
        await self._call("SetQueuePolicy", req)

    async def queue_policy(self: NodeCalls, queue: str) -> QueuePolicy | None:
        """``queue``'s policy, or None."""
        r = await self._call("GetQueuePolicy", api_pb2.QueueName(queue=queue))
        if not r.found:
            return None
        p = r.policy
        return QueuePolicy(
            queue, p.max_deliveries, p.dead_letter, p.backoff_base_s, p.backoff_max_s
        )

    async def delete_queue_policy(self: NodeCalls, queue: str) -> bool:
        """Delete it on every node; whether the queue had one."""
        r = await self._call("DeleteQueuePolicy", api_pb2.QueueName(queue=queue))
        return bool(r.count)


class SyncPoliciesMixin:
    """The queue policy methods of the blocking Client (the AsyncClient's, on its loop)."""

    def set_queue_policy(
        self: OnLoop,
        queue: str,
        *,
        max_deliveries: int = 0,
        dead_letter: str = "",
        backoff: tuple[int, int] | None = None,
    ) -> None:
        self._run(
            AsyncPoliciesMixin.set_queue_policy(
                self._aio,
                queue,
                max_deliveries=max_deliveries,
                dead_letter=dead_letter,
                backoff=backoff,
            )
        )

    def queue_policy(self: OnLoop, queue: str) -> QueuePolicy | None:
        return self._run(AsyncPoliciesMixin.queue_policy(self._aio, queue))

    def delete_queue_policy(self: OnLoop, queue: str) -> bool:
        return self._run(AsyncPoliciesMixin.delete_queue_policy(self._aio, queue))
