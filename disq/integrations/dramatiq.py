"""A Dramatiq broker for disq: ``dramatiq.set_broker(DisqBroker(url="disq://n1:7710,n2:7710"))``
in the app module, and ``dramatiq app`` workers run unchanged.

How Dramatiq's broker contract maps to Disque's commands (through the SDK's blocking
``disq.client.Client``, which fails over between the URL's nodes):

* ``enqueue(message, delay=ms)`` -> ADDJOB of ``message.encode()`` on the message's queue,
  with DELAYMS for a delay (milliseconds, as Dramatiq gives it): the job is not delivered
  before its time, so no worker holds it in memory meanwhile. (Dramatiq's Redis and
  RabbitMQ brokers use a ``<queue>.DQ`` delay queue the worker holds messages from; this
  broker declares no delay queues, and a delayed message keeps its queue name and gets no
  ``eta`` option.) REPLICATE, RETRY (the visibility timeout), TTL and ASYNC from the
  options; REPLICATE's default is the majority of the nodes HELLO lists (one node of 3 may
  be down). The message returned carries its job's id in ``options["disq_job_id"]``, as a
  delivered one does (Redis's ``redis_message_id``): the two compare equal.
* The ``broker_priority`` message option (Dramatiq's RabbitMQ broker's: a HIGHER number is
  served first; the opposite of the actor's own ``priority``) picks the queue's priority
  step, as the kombu transport's priorities (disq/integrations/common.py): 0..9, steps 0,
  3, 6, 9 (option ``priority_steps``), one disq queue per step but 0; consumers take the
  steps highest first.
* ``consume(queue, prefetch, timeout)`` declares the queue (as RabbitMQ's) and returns a
  consumer: blocking GETJOB for the free prefetch slots, waiting on the node up to
  ``timeout``; with every slot taken it waits for an ack, not a timer. A message delivered
  before (a nack, or a requeue after its RETRY: GETJOB's counters) has ``redelivered``
  True, as RabbitMQ's messages have.
* ``ack`` -> ACKJOB. ``nack`` (the message failed for good: Dramatiq's Retries middleware
  gave up) -> dead letter: the message is added to ``<queue>.XQ`` (Dramatiq's dead-letter
  queue name, as the RabbitMQ broker; kept ``dead_message_ttl_s``, 7 days as Redis's), then
  the original is acked. Both take a delivered proxy or a plain ``Message`` carrying its
  job's id. ``requeue`` (worker shutdown) -> NACK: back in the queue at once.
* Unacked messages (a killed worker) come back after RETRY.
* ``flush(queue)`` acks every job of the queue (each of its priority steps) and of its
  ``.XQ`` on every node: the queued ones, and those waiting out a delay or delivered and not
  acked yet (Redis's flush drops its delay queue too). ``join`` waits until no node holds a
  live job of the queue: none queued, delayed or delivered and unacked (QSTAT's ``jobs``,
  summed over the nodes and the steps).

Failures to reach the cluster raise Dramatiq's ``ConnectionClosed`` (a BrokerConnectionError:
the worker restarts its consumer and retries acks); refusals raise ``DisqBrokerError``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import dramatiq
import structlog
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.common import xq_name
from dramatiq.errors import BrokerError, ConnectionClosed, QueueJoinTimeout
from dramatiq.message import Message
from dramatiq.middleware import Middleware

from disq.client import (
    AuthError,
    Client,
    DisqError,
    IndeterminateError,
    LeavingError,
    NoReplError,
    UnavailableError,
)
from disq.integrations.common import (
    Settings,
    ack_queued,
    parse_url,
    settings,
)
from disq.integrations.resp_calls import RespCalls, resp_calls_for

log = structlog.get_logger("disq.dramatiq")

# Where a sent or delivered message keeps its job's id (Redis's redis_message_id); never
# encoded into a job's body: a retry is a new job.
_JOB_ID = "disq_job_id"
_CONNECTION_REASONS = (UnavailableError, IndeterminateError, NoReplError, LeavingError, AuthError)
# An add that failed for want of a node is sent again, to the next node, as Dramatiq's
# RabbitMQ broker re-publishes up to this many times before it raises ConnectionClosed. A
# node that died after it took the add but before it answered (IndeterminateError) may still
# deliver that copy: the message then runs twice, never zero times (at least once, as the
# kombu transport under kombu's publish retry).
MAX_ENQUEUE_ATTEMPTS = 6
_ADD_RETRY_REASONS = (UnavailableError, IndeterminateError, NoReplError, LeavingError)


class DisqBrokerError(BrokerError):
    """A node refused the call (paused queue, MAXLEN, out of memory, message too large)."""


@contextmanager
def _broker_errors(what: str) -> Iterator[None]:
    try:
        yield
    except _CONNECTION_REASONS as exc:
        raise ConnectionClosed(exc) from exc
    except DisqError as exc:
        raise DisqBrokerError(f"disq {what}: {exc.reason} {exc}") from exc


def _plain(message: Message[Any] | MessageProxy) -> Message[Any]:
    """The Message itself, of a delivered proxy or a plain one."""
    if isinstance(message, MessageProxy):
        inner: Message[Any] = message._message
        return inner
    return message


def _without_job_id(message: Message[Any]) -> Message[Any]:
    if _JOB_ID not in message.options:
        return message
    options = {k: v for k, v in message.options.items() if k != _JOB_ID}
    return dataclasses.replace(message, options=options)


# JSCAN's states of a job held but not queued: delivered or waiting out a delay (active), an
# add waiting for its copies (wait-repl).
_UNQUEUED_STATES = ("active", "wait-repl")
ACK_BATCH = 1000


def _ack_unqueued(client: Client, queue: str) -> int:
    """Ack every job of ``queue`` held but not queued on any node the client knows (a job
    has copies on several nodes: each id is acked once). The number acked."""
    ids: set[str] = set()
    for node in client.nodes():
        try:
            jobs = client.scan_jobs(node.addr, queue=queue, states=_UNQUEUED_STATES)
        except UnavailableError:
            continue  # down: its copies are collected by the acks' GC when it is back
        ids.update(j.id for j in jobs)
    found = sorted(ids)
    acked = 0
    for i in range(0, len(found), ACK_BATCH):
        acked += client.ack(*found[i : i + ACK_BATCH])
    return acked


class DisqMessage(MessageProxy):
    """A delivered message. ``redelivered`` (as RabbitMQ's messages have it): it was
    delivered before, by GETJOB's counters (a nack, or a requeue after its RETRY)."""

    def __init__(self, message: Message[Any], redelivered: bool) -> None:
        super().__init__(message)
        self.redelivered = redelivered


class DisqBroker(dramatiq.Broker):
    """Dramatiq on a disq cluster. ``url``: ``disq://[:password@]host:port[,host:port]
    [?option=value]``; keyword options (see disq/integrations/common.py) win over the URL:
    ``replicate``, ``retry_s`` (visibility timeout), ``ttl_s``, ``async``,
    ``repl_timeout_ms``, ``max_message_bytes``, ``wait_s``, ``dead_message_ttl_s``, and the
    SDK's ``password``, ``timeout_s``, ``tls``, ``tls_ca``, ``tls_cert``, ``tls_key``."""

    def __init__(
        self,
        url: str = "disq://127.0.0.1:7710",
        *,
        middleware: list[Middleware] | None = None,
        client: Client | None = None,
        **options: Any,
    ) -> None:
        super().__init__(middleware=middleware)
        addresses, raw = parse_url(url)
        raw.update(options)
        self.settings: Settings = settings(addresses, raw)
        self.queues: set[str] = set()
        self._client = client
        self._client_lock = threading.Lock()
        self._hello_of: Client | None = None  # the client that has asked the cluster
        self._adds: RespCalls | None = None  # the enqueue path of _adds_client (resp_calls.py)
        self._adds_client: Client | None = None

    @property
    def client(self) -> Client:
        """The SDK client, made on first use: ``dramatiq`` forks its worker processes after
        importing the app module, and a client's loop thread does not survive a fork."""
        with self._client_lock:
            if self._client is None:
                self._client = Client(self.settings.addresses, **self.settings.client_options)
            return self._client

    def _adds_of(self, client: Client) -> RespCalls:
        """The enqueue path of ``client``: ADDJOB over the node's RESP port, or the
        client's gRPC add (``publish_over``)."""
        with self._client_lock:
            if self._adds is None or self._adds_client is not client:
                if self._adds is not None:
                    self._adds.close()
                self._adds = resp_calls_for(client, self.settings)
                self._adds_client = client
            return self._adds

    def close(self) -> None:
        with self._client_lock:
            c, self._client = self._client, None
            adds, self._adds, self._adds_client = self._adds, None, None
        if adds is not None:
            adds.close()
        if c is not None:
            c.close()

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 30000) -> Consumer:
        """A consumer of ``queue_name``, declared first (as RabbitMQ's broker does)."""
        self.declare_queue(queue_name)
        return _DisqConsumer(self, queue_name, prefetch, timeout)

    def declare_queue(self, queue_name: str) -> None:
        """Disque queues exist from their first job: declaring only records the name (no
        delay queue: delays are Disque's DELAY)."""
        if queue_name not in self.queues:
            self.emit_before("declare_queue", queue_name)
            self.queues.add(queue_name)
            self.emit_after("declare_queue", queue_name)

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        """ADDJOB of the message (DELAYMS ``delay``); returns it with its job's id in
        ``options["disq_job_id"]``, so it equals the message a consumer gets."""
        message = _without_job_id(_plain(message))  # a retry sends a delivered one again
        queue_name = message.queue_name
        delay_ms = max(0, math.ceil(delay)) if delay else 0  # Dramatiq's delay is ms
        step = self.settings.priority_step(message.options.get("broker_priority"))
        self.logger.debug("Enqueueing message %r on queue %r.", message.message_id, queue_name)
        self.emit_before("enqueue", message, delay)
        job_id = self._add(self.settings.step_queue(queue_name, step), message.encode(), delay_ms)
        message = message.copy(options={_JOB_ID: job_id})
        self.emit_after("enqueue", message, delay)
        return message

    def _add(self, queue_name: str, body: bytes, delay_ms: int, ttl_s: int | None = None) -> str:
        limit = self.settings.max_message_bytes
        if len(body) > limit:
            raise DisqBrokerError(
                f"message of {len(body)} bytes for queue {queue_name!r} is over the limit of "
                f"{limit} bytes (option max_message_bytes)"
            )
        with _broker_errors(f"enqueue on {queue_name!r}"):
            client = self.client
            for attempt in range(1, MAX_ENQUEUE_ATTEMPTS + 1):
                try:
                    if self._hello_of is not client:
                        # Once per client: the default REPLICATE is the majority of the
                        # nodes HELLO lists, not of the URL's seeds.
                        client.hello()
                        self._hello_of = client
                    # Read at each attempt: after a failover the client may know the
                    # cluster anew.
                    opts = self.settings.add_options(delay_ms, cluster_size=client.cluster_size())
                    if ttl_s is not None:
                        opts["ttl_s"] = ttl_s
                    return self._adds_of(client).add_job(queue_name, body, **opts)
                except _ADD_RETRY_REASONS as exc:
                    if attempt == MAX_ENQUEUE_ATTEMPTS:
                        raise  # the last: its error raises
                    log.warning(
                        "enqueue_retried", queue=queue_name, attempt=attempt, error=str(exc)
                    )
        raise AssertionError("unreachable")  # the loop returns or raises

    def get_declared_queues(self) -> set[str]:
        return self.queues.copy()

    def get_declared_delay_queues(self) -> set[str]:
        return set()

    def qsize(self, queue_name: str) -> int:
        """Jobs queued for ``queue_name`` on every node that answers (QLEN summed)."""
        return self.settings.queued(self.client, queue_name)

    def flush(self, queue_name: str) -> None:
        """Ack every job of the queue (each priority step) and of its dead-letter queue, on
        every node: the queued ones at once (PurgeQueue), then those not queued (waiting out
        a delay, delivered and not acked yet) found by JSCAN on each node. A worker's later
        ack of a flushed message is harmless."""
        for name in (*self.settings.sub_queues(queue_name), xq_name(queue_name)):
            with _broker_errors(f"flush {name!r}"):
                ack_queued(self.client, name)
                _ack_unqueued(self.client, name)

    def flush_all(self) -> None:
        for queue_name in self.queues:
            self.flush(queue_name)

    def pending(self, queue_name: str) -> int:
        """The live jobs of ``queue_name`` (each priority step) the nodes that answer hold:
        queued, waiting out a delay, or delivered and not acked yet (QSTAT's ``jobs``,
        summed). A job counts once per copy: 0 means none anywhere."""
        total = 0
        client = self.client
        for node in client.nodes():
            for name in self.settings.sub_queues(queue_name):
                try:
                    stat = client.qstat(name, node=node.addr)
                except UnavailableError:
                    break  # down: its copies come back by their RETRY on the others
                if stat is not None:
                    total += int(stat["jobs"])
        return total

    def join(self, queue_name: str, *, interval: int = 100, timeout: int | None = None) -> None:
        """Wait until no node holds a live job of the queue: none queued, delayed, or
        delivered and not acked (Dramatiq's brokers poll the same way; meant for tests).
        ``timeout`` in milliseconds: then :class:`QueueJoinTimeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        while True:
            with _broker_errors(f"join {queue_name!r}"):
                if not self.pending(queue_name):
                    return
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)
            time.sleep(interval / 1000)


class _DisqConsumer(Consumer):
    def __init__(self, broker: DisqBroker, queue_name: str, prefetch: int, timeout: int) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self._queues = broker.settings.sub_queues(queue_name)  # highest priority step first
        self.prefetch = max(1, prefetch)
        self.wait_s = min(timeout / 1000, broker.settings.wait_s) if timeout else 0.001
        self._cache: list[MessageProxy] = []
        # Job ids delivered to the worker, not yet acked or nacked (Redis's consumer keeps
        # its queued_message_ids the same way): a message acked twice, or one this consumer
        # never delivered, frees no slot.
        self._outstanding: set[str] = set()
        self._slots = threading.Condition()

    def _done(self, job_id: str | None) -> None:
        with self._slots:
            self._outstanding.discard(job_id or "")
            self._slots.notify_all()

    def ack(self, message: Message[Any] | MessageProxy) -> None:
        """ACKJOB of a delivered message (a proxy, or the plain Message of one)."""
        job_id = message.options.get(_JOB_ID)
        try:
            if job_id:
                # Batched per node by the client; a lost ack brings the job back after
                # its RETRY (a second run, never a loss).
                self.broker.client.ack_nowait(job_id)
        finally:
            self._done(job_id)

    def nack(self, message: Message[Any] | MessageProxy) -> None:
        """Failed for good: into ``<queue>.XQ`` (as Dramatiq's other brokers), then acked.
        A proxy or the plain Message of a delivered message."""
        plain = _plain(message)
        job_id = plain.options.get(_JOB_ID)
        try:
            dead = _without_job_id(plain)
            self.broker._add(
                xq_name(self.queue_name), dead.encode(), 0, self.broker.settings.dead_message_ttl_s
            )
            if job_id:
                with _broker_errors("ack of a dead-lettered message"):
                    self.broker.client.ack(job_id)
            log.info("dead_lettered", queue=self.queue_name, message_id=plain.message_id)
        finally:
            self._done(job_id)

    def requeue(self, messages: Iterable[Message[Any] | MessageProxy]) -> None:
        """Shutdown: the messages not run go back at once (NACK)."""
        ids = [m.options[_JOB_ID] for m in messages if m.options.get(_JOB_ID)]
        with self._slots:
            self._outstanding.difference_update(ids)
        if ids:
            with _broker_errors("requeue"):
                self.broker.client.nack(*ids)

    def close(self) -> None:
        if self._cache:
            self.requeue(self._cache)
            self._cache = []

    def __next__(self) -> MessageProxy | None:
        if self._cache:
            return self._take()
        with self._slots:
            room = self.prefetch - len(self._outstanding)
            if room <= 0:
                # Every slot is taken: wait for an ack (or the timeout, so the worker can
                # look at its delayed messages and its shutdown flag).
                self._slots.wait(self.wait_s)
                return None
        with _broker_errors(f"GETJOB from {self.queue_name!r}"):
            jobs = self.broker.client.get_jobs(
                self._queues, count=room, timeout_s=self.wait_s, in_order=True
            )
        for job in jobs:
            try:
                message = Message.decode(job.body)
            except Exception:
                log.error("undecodable_message", queue=job.queue, job_id=job.id)
                message = None
            if message is None:
                # Not a Dramatiq message: dead-lettered as its raw bytes, never lost.
                self.broker._add(xq_name(self.queue_name), job.body, 0)
                with _broker_errors("ack of an undecodable message"):
                    self.broker.client.ack(job.id)
                continue
            message.options[_JOB_ID] = job.id
            redelivered = job.nacks > 0 or job.additional_deliveries > 0
            self._cache.append(DisqMessage(message, redelivered))
        return self._take() if self._cache else None

    def _take(self) -> MessageProxy:
        proxy = self._cache.pop(0)
        with self._slots:
            self._outstanding.add(proxy.options[_JOB_ID])
        return proxy
