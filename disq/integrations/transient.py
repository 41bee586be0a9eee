"""The transient queues one kombu channel keeps alive in the cluster.

RabbitMQ deletes an ``exclusive`` queue when its connection closes, an ``auto_delete`` one
when its last consumer goes, and one declared with ``x-expires`` after that long unused. The
cluster cannot see a client's connection, so every transient queue is a lease there
(``declare_queue(name, expires_ms=...)``) that the processes using it renew; a process that
dies without a word (SIGKILL, a lost host) stops renewing and the cluster deletes the queue,
its bindings and its jobs when the lease runs out.

* ``x-expires`` given: that is the lease; else an ``auto_delete`` or ``exclusive`` queue's
  lease is :data:`TRANSIENT_LEASE_MS` (60 s, RabbitMQ's default heartbeat: about when
  RabbitMQ notices a silent client), or the connection's option ``transient_lease_s``.
* Renewed while this channel consumes the queue; an ``exclusive`` one while the channel is
  open, and deleted when it closes (no other connection may use it).
* An ``auto_delete`` queue is not deleted when this channel's consumer goes: other
  processes may consume it (the cluster cannot count consumers), and a consumer that
  cancels and consumes again (Celery's ``rpc://`` result consumer does, between results)
  would lose what arrived meanwhile. It expires a lease after the last renewal instead.
  Declared and never consumed, it expires too: nothing the cluster keeps may outlive the
  processes that use it.

Renewal is driven from the connection's ``drain_events`` (no thread of its own): a consumer
drains all the time, and the blocking GETJOB's wait is capped by the next renewal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

TRANSIENT_LEASE_MS = 60_000
RENEWALS_PER_LEASE = 3  # renewed every third of its lease: two renewals may fail in a row
MIN_RENEW_INTERVAL_S = 0.05
# A renewal later than this share of the lease may come after the node deleted the queue
# (and its bindings): then the bindings are declared again with it.
LATE_RENEWAL_SHARE = 0.8


class QueueArgumentError(ValueError):
    """An ``x-expires`` or ``x-message-ttl`` the cluster cannot use (named in the message)."""


def _ms_argument(arguments: Mapping[str, Any], name: str, *, least: int) -> int:
    """A queue argument in milliseconds (0 when absent), at least ``least`` (RabbitMQ
    refuses an x-expires of 0 and a negative x-message-ttl)."""
    value = arguments.get(name)
    if value is None:
        return 0
    try:
        ms = int(value)
    except (TypeError, ValueError):
        raise QueueArgumentError(f"{name} must be whole milliseconds, got {value!r}") from None
    if ms < least:
        raise QueueArgumentError(f"{name} must be at least {least} ms, got {value!r}")
    return ms


def queue_lease(
    arguments: Mapping[str, Any] | None,
    *,
    auto_delete: bool,
    exclusive: bool,
    default_ms: int = TRANSIENT_LEASE_MS,
) -> tuple[int, int]:
    """``(expires_ms, message_ttl_ms)`` of a declared queue: expires_ms 0 = not transient;
    ``default_ms`` the lease of a transient one declared without x-expires."""
    args = arguments or {}
    expires_ms = _ms_argument(args, "x-expires", least=1)
    ttl_ms = _ms_argument(args, "x-message-ttl", least=0)
    if not expires_ms and (auto_delete or exclusive):
        expires_ms = default_ms
    return expires_ms, ttl_ms


@dataclass(slots=True)
class TransientQueue:
    name: str
    expires_ms: int
    message_ttl_ms: int
    auto_delete: bool
    exclusive: bool
    renewed_at: float  # monotonic time of the last declare the cluster accepted
    bindings: set[tuple[str, str]] = field(default_factory=set)  # (exchange, routing key)

    @property
    def owned(self) -> bool:
        """Exclusive: renewed while the channel lives, deleted when it closes."""
        return self.exclusive

    @property
    def due_at(self) -> float:
        interval_s = self.expires_ms / 1000 / RENEWALS_PER_LEASE
        return self.renewed_at + max(interval_s, MIN_RENEW_INTERVAL_S)

    def may_have_lapsed(self, now: float) -> bool:
        return now - self.renewed_at >= self.expires_ms / 1000 * LATE_RENEWAL_SHARE


class TransientQueues:
    """One channel's transient queues: what to renew when, what to delete when."""

    def __init__(self) -> None:
        self._queues: dict[str, TransientQueue] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._queues

    def get(self, name: str) -> TransientQueue | None:
        return self._queues.get(name)

    def declared(
        self,
        name: str,
        *,
        expires_ms: int,
        message_ttl_ms: int,
        auto_delete: bool,
        exclusive: bool,
        now: float,
    ) -> None:
        """A (re)declare the cluster accepted; the bindings recorded so far are kept."""
        old = self._queues.get(name)
        self._queues[name] = TransientQueue(
            name,
            expires_ms,
            message_ttl_ms,
            auto_delete,
            exclusive,
            now,
            old.bindings if old is not None else set(),
        )

    def bound(self, name: str, exchange: str, routing_key: str) -> None:
        q = self._queues.get(name)
        if q is not None:
            q.bindings.add((exchange, routing_key))

    def unbound(self, name: str, exchange: str, routing_key: str) -> None:
        q = self._queues.get(name)
        if q is not None:
            q.bindings.discard((exchange, routing_key))

    def forget(self, name: str) -> TransientQueue | None:
        return self._queues.pop(name, None)

    def owned(self) -> list[str]:
        return [q.name for q in list(self._queues.values()) if q.owned]

    def _kept(self, consumed: Collection[str]) -> list[TransientQueue]:
        # A copy first (one C call, atomic under the GIL): on an event loop the renewals
        # run in the fetcher's thread while the loop's thread may declare a queue.
        return [q for q in list(self._queues.values()) if q.owned or q.name in consumed]

    def due(self, now: float, consumed: Collection[str]) -> list[TransientQueue]:
        """The queues to renew now: consumed or exclusive, at a third of their lease."""
        return [q for q in self._kept(consumed) if q.due_at <= now]

    def next_due(self, consumed: Collection[str]) -> float | None:
        """The monotonic time of the next renewal (None: nothing to renew)."""
        return min((q.due_at for q in self._kept(consumed)), default=None)
