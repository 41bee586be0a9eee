"""A kombu transport for disq: ``kombu.Connection("disq://n1:7710,n2:7710")``, and so
Celery's ``broker_url = "disq://n1:7710,n2:7710"``.

The alias ``disq`` is registered in kombu's ``TRANSPORT_ALIASES`` when kombu.transport is
first imported, by the hook that ``disq-kombu.pth`` installs (``disq_kombu_alias.py``): no
import in the app. See the README, "Use it from Celery / Dramatiq".

It is kombu's virtual transport (kombu.transport.virtual, as SQS and Redis) over the gRPC
SDK's blocking ``disq.client.Client``, which already fails over between the URL's nodes:

* publish to the default exchange (""): ADDJOB on the queue the routing key names, the body
  the JSON of kombu's message (body, headers, properties: as the other virtual transports
  keep it); to a named exchange: one publish the node routes (below). REPLICATE, RETRY,
  TTL and ASYNC from the options; REPLICATE's default is the majority of the nodes the
  client knows (one node of 3 may be down), the others are Disque's. A Celery ETA or countdown
  (``eta`` in the headers, protocol 2) becomes DELAY: no worker holds the message before
  its time, so no ETA outlives a visibility timeout (the Redis and SQS transports' trap).
* priorities (kombu's ``priority``, Celery's): as kombu's Redis transport, one disq queue
  per priority step (``priority_steps``, default 0, 3, 6, 9; step 0 is the queue itself,
  the others ``<queue>\\x06\\x16<step>``), but a HIGHER number is served first, as on
  RabbitMQ (kombu's integration suite's ``PRIORITY_ORDER = 'asc'``).
* TTL: kombu's ``expiration`` and a queue's ``message_ttl`` (``x-message-ttl``, for the
  queues this connection declared) become the job's TTL, whole seconds rounded up; not a
  Celery task's ``expires`` (the worker revokes it, as on Redis).
* idempotency: a message's ``disq_idempotency_key`` property (Celery's ``apply_async(...,
  disq_idempotency_key=k)``) is the add's IDEMPOTENCY-KEY: repeated on the queue within the
  node's window, it adds nothing (so the result backend publishes a chord's callback once).
* consume: one blocking GETJOB over the channel's queues (each queue's priority steps,
  highest first, taken in that order with INORDER; the queues take turns at the head of the
  list) for as many messages as the QoS prefetch leaves room for; the wait is on the node,
  never a sleep-and-poll loop, over its RESP port (resp_calls.py: a Celery parent that forks
  has no gRPC call in flight). Asynchronous: on a Celery worker's event loop a thread of the
  connection waits, the loop delivers (kombu_loop.py: a full prefetch blocks no pidbox).
* ack -> ACKJOB at the job's creator (over RESP; over gRPC, queued and batched per node,
  when RESP cannot); reject(requeue=True) -> NACK (at once back in the queue, its nack
  counter +1, delivered with ``redelivered`` True); reject(requeue=False) -> ACKJOB
  (dropped). Unacked messages come back after RETRY, which is the visibility timeout; the
  ones a closing channel still holds are NACKed back at once.
* queue_purge: every node's queued jobs of the queue acked (one PurgeQueue per node); the
  queue's size: QLEN summed over the nodes (Disque's queues are per node).
* Exchanges (direct, fanout, topic), bindings and transient queues live in the cluster's
  replicated routes table, not in the process: every client of every node sees the same
  ones, and a publish to an exchange is routed by the node that takes it (a message no
  binding matches is dropped, as on RabbitMQ). So Celery's remote control (pidbox: a fanout
  exchange, reply queues with x-expires), events (the ``celeryev`` topic exchange) and
  Flower work. Transient queues (auto_delete, exclusive, x-expires) are leases the channel
  renews while it uses them; exclusive ones are deleted when the channel closes: see
  ``disq.integrations.transient``. Celery's mingle and gossip stay off: Celery enables them
  only for the transports it lists (amqp, redis, gcpubsub).

Errors: a failure to reach the cluster is :class:`DisqConnectionError` (kombu's
ConnectionError, among the transport's connection errors: kombu and Celery retry and
reconnect, and ``ensure_connection`` raises kombu's OperationalError); a refusal by the
node (a paused queue, a full MAXLEN, out of memory, a message over ``max_message_bytes``)
is :class:`DisqChannelError` (kombu's ChannelError). An add whose answer was lost is a
connection error too: kombu's publish retry may then add the message twice, never lose it.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import Empty
from typing import Any

import structlog
from amqp.protocol import queue_declare_ok_t
from kombu.exceptions import ChannelError, ConnectionError
from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments
from kombu.utils.uuid import uuid

from disq.client import (
    AuthError,
    Client,
    DisqError,
    IndeterminateError,
    Job,
    LeavingError,
    NoReplError,
    UnavailableError,
)
from disq.integrations.common import (
    DEFAULT_PORT,
    KOMBU_OPTIONS,
    Settings,
    ack_queued,
    base_queue,
    host_port,
    parse_url,
    settings,
    ttl_from_ms,
)
from disq.integrations.kombu_loop import Fetcher, reset_after_fork
from disq.integrations.kombu_messages import eta_delay_ms, idempotency_key, message_ttl_s
from disq.integrations.resp_calls import RespCalls, connect
from disq.integrations.transient import QueueArgumentError, TransientQueues, queue_lease

log = structlog.get_logger("disq.kombu")

_DEFAULT_PREFETCH = 100  # a consumer with no QoS limit asks for this many per GETJOB
# Queues whose declared message TTL this connection remembers: a bound, not a cache (one
# process declaring more queues than this with a TTL is refused, with a clear error).
MAX_QUEUE_TTLS = 10_000
# While one channel's prefetch is full, how often the other channels' queues (a worker's
# pidbox) are looked at between waits for an ack: a control command's latency then.
HELD_LOOK_INTERVAL_S = 0.2
# Each such look waits this long on the node, the least a blocking GETJOB waits, not NOHANG:
# a NOHANG GETJOB takes only what the node holds and asks no other node (no NEEDJOBS), so a
# message published at another node (``celery inspect`` connected elsewhere) would stay
# there for as long as the prefetch is full. A blocking one that finds nothing asks the
# cluster; what the others send is queued on the node and taken by a later look.
HELD_LOOK_WAIT_S = 0.001
# How long a fetch waits for more acks once a slot is free but fewer than half (_drain).
FETCH_GATHER_S = 0.005
# Failing to reach the cluster, or an add whose outcome is unknown: kombu retries these.
_CONNECTION_REASONS = (UnavailableError, IndeterminateError, NoReplError, LeavingError, AuthError)


class DisqConnectionError(ConnectionError):
    """No node of the URL could serve the call (kombu retries it, Celery reconnects)."""


class DisqChannelError(ChannelError):
    """A node refused the call (paused queue, MAXLEN, out of memory, bad argument)."""


class MessageTooLargeError(DisqChannelError):
    """The encoded message is over ``max_message_bytes``: refused before it was sent."""


class UnsupportedExchangeTypeError(DisqChannelError):
    """An exchange type the cluster does not route (only direct, fanout and topic)."""


EXCHANGE_TYPES = frozenset(["direct", "fanout", "topic"])


@contextmanager
def _kombu_errors(what: str) -> Iterator[None]:
    """The SDK's errors as kombu's: the connection errors retry, the refusals do not."""
    try:
        yield
    except _CONNECTION_REASONS as exc:
        raise DisqConnectionError(f"disq {what}: {exc}") from exc
    except DisqError as exc:
        raise DisqChannelError(f"disq {what}: {exc.reason} {exc}") from exc


class QoS(virtual.QoS):
    """Acks and rejects go to the cluster (the job is there, not in this process); each
    one frees a prefetch slot, which wakes a drain waiting for one."""

    def ack(self, delivery_tag: str) -> None:
        message = self._delivered.get(delivery_tag)
        if message is not None:
            self.channel._ack(message)
        super().ack(delivery_tag)
        self.channel.connection._slot_freed()

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        message = self._delivered.get(delivery_tag)
        if message is not None:
            if requeue:
                self.channel._nack(message)
            else:
                self.channel._ack(message)
        self._quick_ack(delivery_tag)  # forgotten here (not re-put: the cluster has it)
        self.channel.connection._slot_freed()


class Channel(virtual.Channel):
    QoS = QoS
    from_transport_options = virtual.Channel.from_transport_options

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._settings: Settings = connection.settings
        self._client: Client = connection.disq_client()
        self._transient = TransientQueues()
        # Queues consumed with no_ack (Celery's pidbox, replies, event receivers): a job is
        # acked as it is delivered, as the AMQP broker counts it acked once sent; unacked,
        # the node would deliver it again after its RETRY.
        self._no_ack_queues: set[str] = set()
        self._pid = os.getpid()
        self._next_renewal_at: float | None = None
        self._fetch_turn = 0  # which consumed queue heads the next GETJOB's list (_fetch)

    def prepare_queue_arguments(self, arguments: Any, **kwargs: Any) -> Any:
        """A Queue's ``message_ttl`` (and kombu's other queue options) as RabbitMQ's
        ``x-`` arguments, as the Redis and py-amqp transports pass them to queue_declare."""
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    # -- exchanges, bindings and queue declarations: the cluster's routes table -----------
    def exchange_declare(
        self,
        exchange: str | None = None,
        type: str = "direct",
        durable: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        nowait: bool = False,
        passive: bool = False,
    ) -> None:
        type = type or "direct"
        exchange = exchange or f"amq.{type}"
        if not passive and type not in EXCHANGE_TYPES:
            raise UnsupportedExchangeTypeError(
                f"exchange {exchange!r}: type {type!r} is not supported by disq "
                f"(supported: {', '.join(sorted(EXCHANGE_TYPES))})"
            )
        with _kombu_errors(f"declare exchange {exchange!r}"):
            self._client.declare_exchange(exchange, type, passive=passive)

    def exchange_delete(self, exchange: str, if_unused: bool = False, nowait: bool = False) -> None:
        with _kombu_errors(f"delete exchange {exchange!r}"):
            self._client.delete_exchange(exchange)

    def queue_declare(
        self,
        queue: str | None = None,
        passive: bool = False,
        durable: bool = True,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        nowait: bool = False,
        **kwargs: Any,
    ) -> Any:
        """A plain queue needs no declaration (Disque's queues exist from their first job);
        a transient one (auto_delete, exclusive, x-expires) is a lease in the cluster, and an
        ``x-message-ttl`` is kept there for publishes through exchanges."""
        queue = queue or f"amq.gen-{uuid()}"
        if not passive:
            try:
                expires_ms, ttl_ms = queue_lease(
                    arguments,
                    auto_delete=auto_delete,
                    exclusive=exclusive,
                    default_ms=round(self._settings.transient_lease_s * 1000),
                )
            except QueueArgumentError as exc:
                raise DisqChannelError(f"disq declare queue {queue!r}: {exc}") from None
            if expires_ms or ttl_ms:
                with _kombu_errors(f"declare queue {queue!r}"):
                    self._client.declare_queue(queue, expires_ms=expires_ms, message_ttl_ms=ttl_ms)
            if expires_ms:
                self._transient.declared(
                    queue,
                    expires_ms=expires_ms,
                    message_ttl_ms=ttl_ms,
                    auto_delete=auto_delete,
                    exclusive=exclusive,
                    now=time.monotonic(),
                )
            self._new_queue(
                queue,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                arguments=arguments,
                nowait=nowait,
                **kwargs,
            )
        return queue_declare_ok_t(queue, self._size(queue), 0)

    def queue_bind(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self._binding(queue, *args, bind=True, **kwargs)

    def queue_unbind(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self._binding(queue, *args, bind=False, **kwargs)

    def _binding(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,  # AMQP binding arguments: routes keep none
        *,
        bind: bool,
        **kwargs: Any,
    ) -> None:
        """Binds (or unbinds) on the cluster, then in the transient queues' record."""
        exchange = exchange or "amq.direct"
        routing_key = routing_key or ""
        what = f"queue {queue!r} {'to' if bind else 'from'} exchange {exchange!r}"
        with _kombu_errors(f"bind {what}" if bind else f"unbind {what}"):
            change = self._client.bind_queue if bind else self._client.unbind_queue
            change(queue, exchange, routing_key)
        record = self._transient.bound if bind else self._transient.unbound
        record(queue, exchange, routing_key)

    def queue_delete(
        self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any
    ) -> int | None:
        """The declaration and bindings, and the queued jobs on every node (their number)."""
        if if_empty and self._size(queue):
            return None
        self._transient.forget(queue)
        with _kombu_errors(f"delete queue {queue!r}"):
            purged = self._client.delete_queue(queue)
            # The queue's priority steps are queues of their own, never declared: purged.
            for step in self._settings.sub_queues(queue):
                if step != queue:
                    purged += ack_queued(self._client, step)
            return purged

    def _exchange_table(self, exchange: str) -> tuple[str, list[tuple[str, str, str]]]:
        """The exchange's type and bindings as kombu's exchange types read them: (routing
        key, pattern, queue); KeyError for an exchange the cluster does not know."""
        with _kombu_errors("list routes"):
            routes = self._client.list_routes()
        type = routes.exchanges[exchange]
        kind: Any = self.exchange_types[type]  # an instance per channel (kombu's __init__)
        table = [
            kind.prepare_bind(queue, exchange, key, None)
            for ex, queue, key in routes.bindings
            if ex == exchange
        ]
        return type, table

    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        return self._exchange_table(exchange)[1]

    def typeof(self, exchange: str, default: str = "direct") -> Any:
        try:
            type = self._exchange_table(exchange)[0]
        except KeyError:
            type = default
        return self.exchange_types[type]

    def list_bindings(self) -> Iterator[tuple[str, str, str]]:
        """(queue, exchange, routing key) of every binding of the cluster."""
        with _kombu_errors("list routes"):
            routes = self._client.list_routes()
        return ((queue, ex, key) for ex, queue, key in routes.bindings)

    # -- publishing ---------------------------------------------------------------------
    def _body(self, message: dict[str, Any], where: str) -> bytes:
        """The message as a job's body, refused over the transport's size limit."""
        body = json.dumps(message, separators=(",", ":")).encode()
        limit = self._settings.max_message_bytes
        if len(body) > limit:
            raise MessageTooLargeError(
                f"message of {len(body)} bytes for {where} is over the limit of "
                f"{limit} bytes (transport option max_message_bytes)"
            )
        return body

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        body = self._body(message, f"queue {queue!r}")
        delay_ms = eta_delay_ms(message.get("headers"))
        props = message.get("properties") or {}
        ttls = [
            t for t in (message_ttl_s(message), self.connection.queue_ttl_s(queue)) if t is not None
        ]
        target = self._settings.step_queue(
            queue, self._settings.priority_step(props.get("priority"))
        )
        opts = self._settings.add_options(
            delay_ms, ttl_s=min(ttls) if ttls else None, cluster_size=self._client.cluster_size()
        )
        if key := idempotency_key(message):
            opts["idempotency_key"] = key
        with _kombu_errors(f"publish to {queue!r}"):
            self.connection.disq_resp().add_job(target, body, **opts)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        """Nothing to create (a Disque queue exists from its first job); a declared message
        TTL (kombu's ``message_ttl``: ``x-message-ttl`` in ms) caps what is published to
        the queue from this connection."""
        ttl_ms = (kwargs.get("arguments") or {}).get("x-message-ttl")
        if ttl_ms is not None:
            self.connection.set_queue_ttl(queue, ttl_from_ms(ttl_ms))

    def basic_publish(
        self, message: dict[str, Any], exchange: str, routing_key: str, **kwargs: Any
    ) -> None:
        """The default exchange ("") names the queue: one ADDJOB, as before. A named
        exchange: one publish, routed by the node with the cluster's table; a message no
        binding matches is dropped there, as RabbitMQ drops it."""
        if not exchange:
            super().basic_publish(message, exchange, routing_key, **kwargs)
            return
        self._inplace_augment_message(message, exchange, routing_key)
        props = message.get("properties") or {}
        if self._settings.priority_step(props.get("priority")):
            # The node routes by queue name and knows nothing of kombu's priority steps: a
            # prioritized message through a named exchange (rare: Celery's tasks go through
            # the default one) is routed here, from the cluster's table, onto each queue's
            # step. One ListRoutes more than an unprioritized publish.
            for queue in self._lookup(exchange, routing_key):
                self._put(queue, message)
            return
        body = self._body(message, f"exchange {exchange!r}")
        delay_ms = eta_delay_ms(message.get("headers"))
        # The message's own TTL here; each queue's x-message-ttl is applied by the node.
        opts = self._settings.add_options(
            delay_ms,
            ttl_s=message_ttl_s(message),
            cluster_size=self._client.cluster_size(),
        )
        if key := idempotency_key(message):
            opts["idempotency_key"] = key
        with _kombu_errors(f"publish to exchange {exchange!r}"):
            # [] when nothing matched: dropped without a word, as RabbitMQ drops it (a
            # worker's heartbeats with no receiver bound, every 2 s: no log line each).
            self._client.publish(exchange, routing_key, body, **opts)

    def _lookup(self, exchange: str, routing_key: str, default: str | None = None) -> list[str]:
        """The queues the cluster's table routes to (the node's publish routes the same
        way; kombu's own callers of this, restore and fanout delivery, are not used)."""
        if not exchange:
            return [routing_key] if routing_key else []
        try:
            type, table = self._exchange_table(exchange)
        except KeyError:
            return []
        kind: Any = self.exchange_types[type]
        return sorted(kind.lookup(table, exchange, routing_key, default))

    # -- consuming ----------------------------------------------------------------------
    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        result = super().basic_consume(queue, no_ack, *args, **kwargs)
        if no_ack:
            self._no_ack_queues.add(queue)
        else:
            self._no_ack_queues.discard(queue)
        self.connection._slot_freed()  # a drain waiting for a consumer may fetch now
        return result

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack, **kwargs)
        if message is not None and no_ack:
            self._ack(message)
        return message

    def basic_cancel(self, consumer_tag: str) -> None:
        """No longer consumed here: its lease is no longer renewed by this channel (an
        auto_delete queue expires with it, see ``disq.integrations.transient``)."""
        queue: str | None = self._tag_to_queue.get(consumer_tag)
        super().basic_cancel(consumer_tag)
        if queue is not None and queue not in self._active_queues:
            self._no_ack_queues.discard(queue)

    def close(self) -> None:
        """Consumers cancelled, then the exclusive queues this channel declared deleted,
        as a closing AMQP connection deletes them."""
        if self.closed:
            return
        super().close()
        self.delete_owned_queues()

    def delete_owned_queues(self) -> None:
        """The exclusive queues this channel declared, deleted now."""
        for name in self._transient.owned():
            self._delete_transient(name)

    def _delete_transient(self, name: str) -> None:
        self._transient.forget(name)
        if os.getpid() != self._pid:
            return  # a forked child: the parent's client is not ours to use
        try:
            self._client.delete_queue(name)
        except (DisqError, RuntimeError) as exc:  # RuntimeError: the client's loop is closed
            # Not fatal: the cluster deletes it when its lease runs out.
            log.warning("disq.kombu.transient_delete_failed", queue=name, error=str(exc))

    def renew_leases(self, now: float) -> float | None:
        """Declare again the transient queues due (the lease renewal); with a renewal so
        late the node may have deleted the queue, its bindings too. The monotonic time of
        the next renewal, or None."""
        consumed = self._active_queues
        for t in self._transient.due(now, consumed):
            lapsed = t.may_have_lapsed(now)
            with _kombu_errors(f"renew queue {t.name!r}"):
                self._client.declare_queue(
                    t.name, expires_ms=t.expires_ms, message_ttl_ms=t.message_ttl_ms
                )
                if lapsed:
                    for exchange, key in sorted(t.bindings):
                        self._client.bind_queue(t.name, exchange, key)
            t.renewed_at = now
        self._next_renewal_at = self._transient.next_due(consumed)
        return self._next_renewal_at

    def _message(self, job: Job) -> dict[str, Any]:
        try:
            payload: dict[str, Any] = json.loads(job.body)
            props = payload["properties"]
        except (ValueError, KeyError, TypeError):
            # Not a kombu message (added by another client): delivered as its raw bytes.
            payload = {
                "body": base64.b64encode(job.body).decode(),
                "content-encoding": "binary",
                "content-type": "application/data",
                "headers": {},
                "properties": {"body_encoding": "base64", "delivery_info": {}},
            }
            props = payload["properties"]
        # A tag per delivery: a job delivered twice (after its RETRY) is two deliveries.
        props["delivery_tag"] = uuid()
        info = props.setdefault("delivery_info", {})
        info["disq_job_id"] = job.id
        info.setdefault("routing_key", base_queue(job.queue))
        info.setdefault("exchange", "")
        # Delivered before (nacked, or again after its RETRY): where Celery reads it, as
        # kombu's Redis transport marks a restored message.
        info["redelivered"] = payload["redelivered"] = bool(job.nacks or job.additional_deliveries)
        return payload

    def _fetch(self, queues: list[str], count: int, wait_s: float | None) -> list[Job]:
        """GETJOB over ``queues``, each queue's priority steps highest first, in that order:
        a queue's higher step's jobs before its lower step's.

        ``in_order`` is strict over the whole list, so the list is queue by queue and the
        queues take turns at its head, one more each fetch (as kombu's Redis transport
        rotates its queues). A strict order across queues would let the first one's backlog
        take every fetch's room (a busy task queue starved a worker's pidbox). The
        trade-off: between queues, priority is per queue, as on RabbitMQ."""
        if len(queues) > 1:
            turn = self._fetch_turn % len(queues)
            self._fetch_turn += 1
            queues = queues[turn:] + queues[:turn]
        names = [q for queue in queues for q in self._settings.sub_queues(queue)]
        calls: RespCalls = self.connection.disq_resp()  # RESP: no gRPC call in flight meanwhile
        with _kombu_errors(f"GETJOB from {queues}"):
            if wait_s is None or wait_s <= 0:
                return calls.get_jobs(names, count=count, nohang=True, in_order=True)
            return calls.get_jobs(names, count=count, timeout_s=wait_s, in_order=True)

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        jobs = self._fetch([queue], 1, timeout)
        if not jobs:
            raise Empty()
        return self._message(jobs[0])

    def drain_events(
        self, timeout: float | None = None, callback: Callable[..., Any] | None = None
    ) -> None:
        """One GETJOB over every consumed queue, blocking on the node up to ``timeout``
        (capped by ``wait_s``), for as many messages as the prefetch allows."""
        if not self._consumers or not self.qos.can_consume():
            raise Empty()
        wait_s = self._settings.wait_s if timeout is None else min(timeout, self._settings.wait_s)
        if self._next_renewal_at is not None:  # back in time for the next lease renewal
            wait_s = min(wait_s, self._next_renewal_at - time.monotonic())
        jobs = self._fetch(list(dict.fromkeys(self._active_queues)), self._room(), wait_s)
        if not jobs:
            raise Empty()
        deliver = callback or self.connection._deliver
        for job in jobs:
            self._deliver_job(job, deliver)

    def _room(self) -> int:
        """How many messages one fetch may bring: the free prefetch slots."""
        room: int = self.qos.can_consume_max_estimate()
        return room if room else (self._settings.prefetch or _DEFAULT_PREFETCH)

    def _queue_of(self, job: Job) -> str:
        """The kombu queue a fetched job belongs to (the name its consumer consumes: a
        priority step's job belongs to its queue)."""
        return base_queue(job.queue)

    def _deliver_job(self, job: Job, deliver: Callable[..., Any]) -> None:
        queue = self._queue_of(job)
        if queue in self._no_ack_queues:
            self.connection.disq_resp().ack(job.id)
        deliver(self._message(job), queue)

    def _size(self, queue: str) -> int:
        return self._settings.queued(self._client, queue)

    def _purge(self, queue: str) -> int:
        """Ack every queued job of the queue (each priority step) on every node (kombu's
        purge: the ready messages; delivered and delayed ones are not ready)."""
        with _kombu_errors(f"purge {queue!r}"):
            return sum(ack_queued(self._client, q) for q in self._settings.sub_queues(queue))

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True  # Disque queues exist from their first job: every name is a queue

    # -- acks ---------------------------------------------------------------------------
    def _ack(self, message: virtual.Message) -> None:
        job_id = message.delivery_info.get("disq_job_id")
        if job_id:
            # A lost ack only means the job comes back after its RETRY (at-least-once),
            # never a loss: RespCalls.ack never raises for one.
            self.connection.disq_resp().ack(job_id)

    def _nack(self, message: virtual.Message) -> None:
        job_id = message.delivery_info.get("disq_job_id")
        if job_id:
            with _kombu_errors("NACK"):
                self.connection.disq_resp().nack(job_id)

    def _restore(self, message: virtual.Message) -> None:
        """A message this channel holds unacked when it closes goes back at once (NACK);
        re-adding it would make a second job beside the first."""
        self._nack(message)

    def _restore_at_beginning(self, message: virtual.Message) -> None:
        self._nack(message)


_Channel = Channel  # the class, for annotations inside Transport (whose Channel is an attribute)

# Connections not closed yet, for the exit hook below.
_OPEN_TRANSPORTS: weakref.WeakSet[Transport] = weakref.WeakSet()


def _delete_owned_queues_at_exit() -> None:
    """A process that exits without closing its connection (Flower's event thread, a
    script) has its exclusive queues deleted as it goes, as RabbitMQ deletes them when the
    socket closes, not a lease later. Best effort: what fails here expires."""
    for transport in list(_OPEN_TRANSPORTS):
        for channel in list(transport.channels):
            if isinstance(channel, Channel):
                channel.delete_owned_queues()


atexit.register(_delete_owned_queues_at_exit)
os.register_at_fork(after_in_child=lambda: reset_after_fork(_OPEN_TRANSPORTS))


class Transport(virtual.Transport):
    """kombu's virtual transport over the disq SDK (see the module docstring)."""

    Channel = Channel
    default_port: Any = DEFAULT_PORT
    driver_type = "disq"
    driver_name = "disq"
    # The whole URL reaches the transport: several nodes, separated by commas.
    can_parse_url = True
    # GETJOB blocks on the node: no sleep between empty polls.
    polling_interval = 0.0
    # asynchronous: a Celery worker runs its event loop (see disq.integrations.kombu_loop).
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=EXCHANGE_TYPES
    )
    connection_errors: Any = (*virtual.Transport.connection_errors, DisqConnectionError)
    channel_errors: Any = (*virtual.Transport.channel_errors, DisqChannelError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.settings = _settings_of(client)
        self._disq: Client | None = None
        self._resp: RespCalls | None = None  # publish and consume over RESP (resp_calls.py)
        self._disq_pid = 0
        self._lock = threading.Lock()
        self._slot = threading.Condition()
        # Slots freed so far (under _slot): a drain that read it before looking at the
        # prefetch waits only if no ack came since, else an ack that lands between its look
        # and its wait (the loop's thread acks while the fetcher looks) would be waited out.
        self._slots_freed = 0
        self._next_held_look = 0.0  # monotonic: a held drain's next look at the others
        self._queue_ttl_s: dict[str, int] = {}  # declared message TTLs (MAX_QUEUE_TTLS)
        self._fetcher: Fetcher | None = None  # on an event loop (register_with_event_loop)
        _OPEN_TRANSPORTS.add(self)

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """A thread fetches, the loop's thread delivers (disq.integrations.kombu_loop)."""
        self._stop_fetcher()
        self._fetcher = Fetcher(self._drain, self._deliver)
        self._fetcher.register(loop)

    def _stop_fetcher(self) -> None:
        fetcher, self._fetcher = self._fetcher, None
        if fetcher is not None:  # what it fetched and never delivered: NACKed, back at once
            fetcher.stop(self.settings.wait_s + 1.0, lambda job_id: self.disq_resp().nack(job_id))

    def queue_ttl_s(self, queue: str) -> int | None:
        """The message TTL this connection declared for ``queue``, if any."""
        return self._queue_ttl_s.get(queue)

    def set_queue_ttl(self, queue: str, ttl_s: int | None) -> None:
        if ttl_s is None:
            self._queue_ttl_s.pop(queue, None)
            return
        if queue not in self._queue_ttl_s and len(self._queue_ttl_s) >= MAX_QUEUE_TTLS:
            raise DisqChannelError(
                f"queue {queue!r}: this connection already declared a message TTL for "
                f"{MAX_QUEUE_TTLS} queues (the most it remembers)"
            )
        self._queue_ttl_s[queue] = ttl_s

    def disq_client(self) -> Client:
        """The SDK client of this connection, made on first use (so a Celery parent that
        only looked at the transport forks no gRPC state), and anew in a forked child."""
        return self._client_and_resp()[0]

    def disq_resp(self) -> RespCalls:
        """The default exchange's publish, and the consumer's GETJOB, ACKJOB and NACK: over
        the node's RESP port, or the client's gRPC calls (``publish_over``, TLS); made with
        the client, anew after a fork."""
        return self._client_and_resp()[1]

    def _client_and_resp(self) -> tuple[Client, RespCalls]:
        with self._lock:
            if self._disq is None or self._resp is None or self._disq_pid != os.getpid():
                self._disq, self._resp = connect(self.settings)
                self._disq_pid = os.getpid()
            return self._disq, self._resp

    def establish_connection(self) -> Transport:
        # Ask the cluster once, so a URL that leads nowhere fails here, as kombu expects.
        client = self.disq_client()
        with _kombu_errors(f"connect to {','.join(self.settings.addresses)}"):
            client.hello()
        result: Transport = super().establish_connection()
        return result

    def close_connection(self, connection: Any) -> None:
        _OPEN_TRANSPORTS.discard(self)
        self._stop_fetcher()
        super().close_connection(connection)  # channels first: they NACK what they held
        self._drop_client(close=True)

    def _collect(self, connection: Any) -> None:
        """After a fork (Celery's pool): forget the parent's client without closing it; its
        loop thread does not exist in this process. Celery's after a connection error too."""
        self._stop_fetcher()
        self._drop_client(close=False)

    def _drop_client(self, *, close: bool) -> None:
        with self._lock:
            c, self._disq = self._disq, None
            resp, self._resp = self._resp, None
        if c is not None and close and self._disq_pid == os.getpid():
            if resp is not None:
                resp.close()
            c.close()

    def _renew_leases(self, now: float) -> float | None:
        """Every channel's due lease renewals; the earliest next one."""
        due = [ch.renew_leases(now) for ch in self.channels if isinstance(ch, Channel)]
        return min((d for d in due if d is not None), default=None)

    def _slot_freed(self) -> None:
        with self._slot:
            self._slots_freed += 1
            self._slot.notify_all()

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]
        """Deliver what one blocking GETJOB over every channel's queues brings;
        ``socket.timeout`` when nothing came within ``timeout``. While every prefetch slot
        is taken, wait for an ack instead. Transient queues' leases are renewed here. On an
        event loop, what the fetcher brings (it runs ``_drain``)."""
        if self._fetcher is not None:
            if not self._fetcher.wait(timeout):
                raise TimeoutError()
            return
        self._drain(timeout, self._deliver)

    def _drain(self, timeout: float | None, deliver: Callable[..., Any]) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        gather_until = 0.0  # the wait for a batch's acks, once one slot is free (below)
        while True:
            freed = self._slots_freed
            now = time.monotonic()
            next_renewal = self._renew_leases(now)
            remaining = None if deadline is None else deadline - now
            if remaining is not None and remaining <= 0:
                raise TimeoutError()  # socket.timeout, what kombu's callers catch
            consuming = [ch for ch in self.channels if isinstance(ch, Channel) and ch._consumers]
            consumable = [ch for ch in consuming if ch.qos.can_consume()]
            # A channel whose prefetch slots are all taken (a worker's tasks with acks_late)
            # beside others that may fetch (its pidbox): a blocking GETJOB on the others
            # would make a slot freed by an ack wait it out. So a quick look at the others
            # (HELD_LOOK_WAIT_S) at most every HELD_LOOK_INTERVAL_S, and between looks a
            # wait on the slot condition an ack signals. Not a look each time: the acks of a
            # batch just handed to the loop's thread come within milliseconds, and a look
            # then (a GETJOB round trip, the node's timer) delayed every batch.
            # A channel with a slot free but fewer than half its prefetch: the loop's thread
            # is acking the batch it was handed (an ack a task, a few ms for all of them).
            # Fetching at the first ack brought one message a GETJOB (a solo worker drained
            # at a fifth of the rate): wait FETCH_GATHER_S for the others' acks first.
            short = [ch for ch in consumable if ch.qos.prefetch_count > 2 * ch._room()]
            if short:
                if not gather_until:
                    gather_until = now + FETCH_GATHER_S
                if now < gather_until:
                    with self._slot:
                        if self._slots_freed == freed:
                            self._slot.wait(gather_until - now)
                    continue
            held = len(consumable) < len(consuming)
            look = not held or now >= self._next_held_look
            if consumable and look:
                if held:
                    self._next_held_look = now + HELD_LOOK_INTERVAL_S
                wait_s = HELD_LOOK_WAIT_S if held else self.settings.wait_s
                if remaining is not None:
                    wait_s = min(wait_s, remaining)
                if next_renewal is not None:
                    wait_s = min(wait_s, next_renewal - now)
                if self._fetch_for(consumable, wait_s, deliver):
                    return
                if not held:
                    continue
            # Nothing may be fetched now: wait for a slot (an ack) or a consumer.
            wait_s = self.settings.wait_s if remaining is None else remaining
            if consumable:
                wait_s = min(wait_s, max(self._next_held_look - now, 0.0))
            if next_renewal is not None:
                wait_s = min(wait_s, max(next_renewal - now, 0.0))
            with self._slot:
                if self._slots_freed == freed:
                    self._slot.wait(wait_s)

    def _fetch_for(
        self, channels: list[_Channel], wait_s: float, deliver: Callable[..., Any]
    ) -> bool:
        """One blocking GETJOB over the queues of every channel that may take messages,
        each job delivered through the channel that consumes its queue. One wait for all:
        taking turns (kombu's cycle) would block on an idle channel (a Celery worker's
        pidbox) while the task channel's jobs wait. At most as many jobs as the fullest
        channel has room for, so no channel gets more than its prefetch."""
        owner: dict[str, _Channel] = {}
        for ch in channels:
            for queue in ch._active_queues:
                owner.setdefault(queue, ch)
        count = min(ch._room() for ch in channels)
        jobs = channels[0]._fetch(list(owner), count, wait_s)
        for job in jobs:
            owner[channels[0]._queue_of(job)]._deliver_job(job, deliver)
        return bool(jobs)

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        """The URL as given (kombu's own rendering cannot parse several hosts), with the
        password masked unless asked for."""
        if include_password or "@" not in uri.partition("?")[0]:
            return uri
        scheme, _, rest = uri.partition("://")
        userinfo, _, hosts = rest.partition("@")
        user = userinfo.split(":", 1)[0]
        return f"{scheme}://{user}:{mask}@{hosts}"

    def verify_connection(self, connection: Any) -> bool:
        return self._disq is not None

    @property
    def default_connection_params(self) -> dict[str, Any]:
        return {"port": self.default_port, "hostname": "127.0.0.1"}

    def driver_version(self) -> str:
        from disq import __version__

        return __version__


def _settings_of(conn: Any) -> Settings:
    """The connection's URL (or hostname/port), password, ssl and transport options."""
    hostname = conn.hostname or "127.0.0.1"
    raw: dict[str, Any] = {}
    if "://" in hostname:
        addresses, raw = parse_url(hostname)
    else:
        addresses = [host_port(h, conn.port or DEFAULT_PORT) for h in hostname.split(",")]
    if conn.password:
        raw["password"] = conn.password
    ssl = conn.ssl
    if isinstance(ssl, dict):  # Celery's broker_use_ssl, named as for the other transports
        raw["tls"] = True
        for theirs, ours in (
            ("ca_certs", "tls_ca"),
            ("certfile", "tls_cert"),
            ("keyfile", "tls_key"),
            ("server_hostname", "tls_server_name"),
        ):
            if ssl.get(theirs):
                raw[ours] = ssl[theirs]
    elif ssl:
        raw["tls"] = True
    raw.update(conn.transport_options or {})
    return settings(addresses, raw, ignore=KOMBU_OPTIONS)
