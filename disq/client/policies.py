"""The SDK's queue policies (QPOLICY): set, get, list and delete a queue's delivery limit,
dead letter queue and requeue backoff, and redrive its dead letters (QREDRIVE). The cluster
keeps one policy table (every node holds all of it: disq/core/policy/), so a policy set
through any node is known by every node, and each of those calls may go to any node. Dead
letters are jobs of the node that moved them, so :meth:`AsyncPoliciesMixin.redrive` asks
every node the client knows and sums. The methods of :class:`~disq.client.AsyncClient` and
:class:`~disq.client.Client` as mixins (calls.py says how a mixin reaches the client).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from disq.client.calls import NodeCalls, OnLoop, PublishCalls
from disq.client.errors import InvalidArgumentError, UnavailableError
from disq.proto_gen import api_pb2

# How long a node's Redrive may wait for its new jobs' copies (the node's MOVE_TIMEOUT_MS,
# disq/core/disque/deadletter.py): a call's deadline is this on top of the client's own.
REDRIVE_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A queue's policy; 0 or "": the field is not set. ``backoff_max_s`` > 0: every
    requeue of a delivered job (a nack, a RETRY run out) waits min(base * 2^(deliveries-1),
    max) seconds on every node. ``max_deliveries`` > 0: a job that failed that many
    deliveries is moved to ``dead_letter`` (dropped without one) instead of being queued
    again; :meth:`AsyncPoliciesMixin.redrive` moves the dead letters back."""

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
        return _policy(r.policy, queue)

    async def delete_queue_policy(self: NodeCalls, queue: str) -> bool:
        """Delete it on every node; whether the queue had one."""
        r = await self._call("DeleteQueuePolicy", api_pb2.QueueName(queue=queue))
        return bool(r.count)

    async def queue_policies(self: NodeCalls) -> list[QueuePolicy]:
        """Every queue's policy (QPOLICY LIST), by queue name."""
        r = await self._call("ListQueuePolicies", api_pb2.ListQueuePoliciesRequest())
        return [_policy(p) for p in r.policies]

    async def redrive(
        self: PublishCalls, queue: str, to: str | None = None, count: int | None = None
    ) -> int:
        """Move the dead letters queued in ``queue`` back to each one's source queue (its
        ``disq-source-queue`` header), or all into ``to``, as new jobs with fresh counters
        (QREDRIVE); how many moved in total.

        A dead letter is a job of the node that moved it, and QREDRIVE moves only the ones
        queued on the node asked: so this asks EVERY node the client knows (the cluster's
        nodes as Hello lists them; with ``discover=False``, only the addresses given), at
        once, and sums. ``count``: at most that many per node (1..10,000); None: all of them
        (up to 10,000 per node). A dead letter being delivered (taken by a GETJOB, not yet
        acked or nacked) is not queued and stays; one without a source queue (not made by a
        policy) moves only with ``to``.

        A bad argument (an empty name, ``to`` naming ``queue`` itself, ``count`` out of
        bounds) raises InvalidArgumentError and nothing moves. A node that does not answer
        is skipped (its dead letters stay until asked again); any other node's error is
        raised (the other nodes' moves stand)."""
        if self._closed:
            raise UnavailableError("client is closed")
        await self._maybe_refresh()
        if count is not None and not 1 <= count < 1 << 32:
            # The wire's 0 means all, and it carries no more: a value the nodes never see
            # (above 10,000 they refuse it with QREDRIVE's own message).
            raise InvalidArgumentError(f"ERR COUNT must be 1 to 10000 (None: all), not {count}")
        req = api_pb2.RedriveRequest(queue=queue, to=to or "", count=count or 0)
        wait_s = REDRIVE_WAIT_S + self.timeout_s
        answers = await asyncio.gather(
            *(self._call_node(n.addr, "Redrive", req, timeout_s=wait_s) for n in self.nodes()),
            return_exceptions=True,
        )
        total = 0
        for answer in answers:
            if isinstance(answer, UnavailableError):
                continue  # down: its dead letters stay queued there
            if isinstance(answer, BaseException):
                raise answer
            total += int(answer.count)
        return total


def _policy(p: api_pb2.QueuePolicy, queue: str | None = None) -> QueuePolicy:
    return QueuePolicy(
        p.queue if queue is None else queue,
        p.max_deliveries,
        p.dead_letter,
        p.backoff_base_s,
        p.backoff_max_s,
    )


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

    def queue_policies(self: OnLoop) -> list[QueuePolicy]:
        return self._run(AsyncPoliciesMixin.queue_policies(self._aio))

    def redrive(self: OnLoop, queue: str, to: str | None = None, count: int | None = None) -> int:
        return self._run(AsyncPoliciesMixin.redrive(self._aio, queue, to, count))
