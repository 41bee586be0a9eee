"""A kombu transport for disq: ``kombu.Connection("disq://n1:7710,n2:7710")``, and so
Celery's ``broker_url = "disq://n1:7710,n2:7710"``.

The alias ``disq`` is registered in kombu's ``TRANSPORT_ALIASES`` when kombu.transport is
first imported, by the hook that ``disq-kombu.pth`` installs (``disq_kombu_alias.py``): no
import in the app. See the README, "Use it from Celery / Dramatiq".

It is kombu's virtual transport (kombu.transport.virtual, as SQS and Redis) over the gRPC
SDK's blocking ``disq.client.Client``, which already fails over between the URL's nodes:

* publish: ADDJOB on the queue the routing key names, the body the JSON of kombu's message
  (body, headers, properties: as the other virtual transports keep it). REPLICATE, RETRY,
  TTL and ASYNC from the options; REPLICATE's default is the majority of the nodes the
  client knows (one node of 3 may be down), the others are Disque's. A Celery ETA or countdown
  (``eta`` in the headers, protocol 2) becomes DELAY: no worker holds the message before
  its time, so no ETA outlives a visibility timeout (the Redis and SQS transports' trap).
* priorities (kombu's ``priority``, Celery's): as kombu's Redis transport, one disq queue
  per priority step (``priority_steps``, default 0, 3, 6, 9; step 0 is the queue itself,
  the others ``<queue>\\x06\\x16<step>``), but a HIGHER number is served first, as on
  RabbitMQ (kombu's integration suite's ``PRIORITY_ORDER = 'asc'``).
* TTL: kombu's ``expiration`` and a queue's ``message_ttl`` (``x-message-ttl``, for the
  queues this connection declared) become the job's TTL, whole seconds rounded up.
* consume: one blocking GETJOB over the channel's queues (their priority steps, highest
  first, taken in that order) for as many messages as the QoS prefetch leaves room for;
  the wait is on the node, never a sleep-and-poll loop.
* ack -> ACKJOB (queued, sent within the client's loop iteration, batched per node);
  reject(requeue=True) -> NACK (at once back in the queue, its nack counter +1);
  reject(requeue=False) -> ACKJOB (dropped). Unacked messages come back after RETRY, which
  is the visibility timeout; the ones a closing channel still holds are NACKed back at once.
* queue_purge: every node's queued jobs of the queue acked (PurgeQueue per node); the queue's
  size: QLEN summed over the nodes (Disque's queues are per node).
* Exchanges: direct only (``implements``). Fanout and topic are not supported, so Celery
  turns remote control off by itself and mingle and gossip skip this driver.

Errors: a failure to reach the cluster is :class:`DisqConnectionError` (kombu's
ConnectionError, among the transport's connection errors: kombu and Celery retry and
reconnect, and ``ensure_connection`` raises kombu's OperationalError); a refusal by the
node (a paused queue, a full MAXLEN, out of memory, a message over ``max_message_bytes``)
is :class:`DisqChannelError` (kombu's ChannelError). An add whose answer was lost is a
connection error too: kombu's publish retry may then add the message twice, never lose it.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from queue import Empty
from typing import Any

import structlog
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
    Settings,
    ack_queued,
    base_queue,
    delay_from_seconds,
    host_port,
    parse_url,
    settings,
    ttl_from_ms,
)

log = structlog.get_logger("disq.kombu")

# kombu's own options, which reach every transport's transport_options through Celery.
_KOMBU_OPTIONS = frozenset(
    {
        "polling_interval",
        "body_encoding",
        "deadletter_queue",
        "max_retries",
        "interval_start",
        "interval_step",
        "interval_max",
        "confirm_publish",
        "client_name",
    }
)
_DEFAULT_PREFETCH = 100  # a consumer with no QoS limit asks for this many per GETJOB
# Queues whose declared message TTL this connection remembers: a bound, not a cache (one
# process declaring more queues than this with a TTL is refused, with a clear error).
MAX_QUEUE_TTLS = 10_000
# Failing to reach the cluster, or an add whose outcome is unknown: kombu retries these.
_CONNECTION_REASONS = (UnavailableError, IndeterminateError, NoReplError, LeavingError, AuthError)


class DisqConnectionError(ConnectionError):
    """No node of the URL could serve the call (kombu retries it, Celery reconnects)."""


class DisqChannelError(ChannelError):
    """A node refused the call (paused queue, MAXLEN, out of memory, bad argument)."""


class MessageTooLargeError(DisqChannelError):
    """The encoded message is over ``max_message_bytes``: refused before it was sent."""


@contextmanager
def _kombu_errors(what: str) -> Iterator[None]:
    """The SDK's errors as kombu's: the connection errors retry, the refusals do not."""
    try:
        yield
    except _CONNECTION_REASONS as exc:
        raise DisqConnectionError(f"disq {what}: {exc}") from exc
    except DisqError as exc:
        raise DisqChannelError(f"disq {what}: {exc.reason} {exc}") from exc


def eta_delay_s(headers: dict[str, Any] | None, now_s: float | None = None) -> int:
    """The DELAY of a Celery message: its ``eta`` header (protocol 2, ISO 8601) from now,
    rounded up to whole seconds; 0 without one or when it has passed. A naive ETA is UTC
    (Celery writes aware ones unless ``enable_utc`` is off and no timezone is set)."""
    eta = (headers or {}).get("eta")
    if not eta:
        return 0
    try:
        when = datetime.fromisoformat(str(eta))
    except ValueError:
        return 0  # not ours to refuse: the worker reads (and judges) the header itself
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = time.time() if now_s is None else now_s
    return delay_from_seconds(when.timestamp() - now)


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

    # -- publishing ---------------------------------------------------------------------
    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        limit = self._settings.max_message_bytes
        if len(body) > limit:
            raise MessageTooLargeError(
                f"message of {len(body)} bytes for queue {queue!r} is over the limit of "
                f"{limit} bytes (transport option max_message_bytes)"
            )
        delay_s = eta_delay_s(message.get("headers"))
        props = message.get("properties") or {}
        ttls = [
            t
            for t in (ttl_from_ms(props.get("expiration")), self.connection.queue_ttl_s(queue))
            if t is not None
        ]
        target = self._settings.step_queue(
            queue, self._settings.priority_step(props.get("priority"))
        )
        opts = self._settings.add_options(
            delay_s, ttl_s=min(ttls) if ttls else None, cluster_size=self._client.cluster_size()
        )
        with _kombu_errors(f"publish to {queue!r}"):
            self._client.add_job(target, body, **opts)

    def prepare_queue_arguments(self, arguments: Any, **kwargs: Any) -> Any:
        """A Queue's ``message_ttl`` (and kombu's other queue options) as RabbitMQ's
        ``x-`` arguments, as the Redis and py-amqp transports pass them to queue_declare."""
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        """Nothing to create (a Disque queue exists from its first job); a declared message
        TTL (kombu's ``message_ttl``: ``x-message-ttl`` in ms) caps what is published to
        the queue from this connection."""
        ttl_ms = (kwargs.get("arguments") or {}).get("x-message-ttl")
        if ttl_ms is not None:
            self.connection.set_queue_ttl(queue, ttl_from_ms(ttl_ms))

    def _lookup(self, exchange: str, routing_key: str, default: str | None = None) -> list[str]:
        """Direct routing by the bindings this process declared; with none known for the
        key (the consumer declared them, in another process), the routing key names the
        queue, as Celery's default routing does: never a silently dropped message."""
        try:
            queues = self.typeof(exchange).lookup(
                self.get_table(exchange), exchange, routing_key, default
            )
        except KeyError:
            queues = []
        return list(queues) or [routing_key or exchange]

    # -- consuming ----------------------------------------------------------------------
    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        result = super().basic_consume(queue, no_ack, *args, **kwargs)
        self.connection._slot_freed()  # a drain waiting for a consumer may fetch now
        return result

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
        payload["redelivered"] = bool(job.nacks or job.additional_deliveries)
        return payload

    def _fetch(self, queues: list[str], count: int, wait_s: float | None) -> list[Job]:
        """GETJOB over ``queues`` (their priority steps, highest first), in that order: a
        step's jobs before any lower step's."""
        steps = reversed(self._settings.priority_steps)
        names = [self._settings.step_queue(q, s) for s in steps for q in queues]
        with _kombu_errors(f"GETJOB from {queues}"):
            if wait_s is None or wait_s <= 0:
                return self._client.get_jobs(names, count=count, nohang=True, in_order=True)
            return self._client.get_jobs(names, count=count, timeout_s=wait_s, in_order=True)

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
        room = self.qos.can_consume_max_estimate()
        count = room if room else (self._settings.prefetch or _DEFAULT_PREFETCH)
        wait_s = self._settings.wait_s if timeout is None else min(timeout, self._settings.wait_s)
        jobs = self._fetch(list(dict.fromkeys(self._active_queues)), count, max(wait_s, 0.001))
        if not jobs:
            raise Empty()
        deliver = callback or self.connection._deliver
        for job in jobs:
            deliver(self._message(job), base_queue(job.queue))

    def _size(self, queue: str) -> int:
        total = 0
        for node in self._client.nodes():
            for name in self._settings.sub_queues(queue):
                try:
                    total += self._client.qlen(name, node=node.addr)
                except UnavailableError:
                    break  # a node that does not answer holds nothing anyone can get now
        return total

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
            # Queued: one Ack per node per client loop iteration. A lost ack only means
            # the job comes back after its RETRY (at-least-once), never a loss.
            self._client.ack_nowait(job_id)

    def _nack(self, message: virtual.Message) -> None:
        job_id = message.delivery_info.get("disq_job_id")
        if job_id:
            with _kombu_errors("NACK"):
                self._client.nack(job_id)

    def _restore(self, message: virtual.Message) -> None:
        """A message this channel holds unacked when it closes goes back at once (NACK);
        re-adding it would make a second job beside the first."""
        self._nack(message)

    def _restore_at_beginning(self, message: virtual.Message) -> None:
        self._nack(message)


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
    implements = virtual.Transport.implements.extend(exchange_type=frozenset(["direct"]))
    connection_errors: Any = (*virtual.Transport.connection_errors, DisqConnectionError)
    channel_errors: Any = (*virtual.Transport.channel_errors, DisqChannelError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.settings = _settings_of(client)
        self._disq: Client | None = None
        self._disq_pid = 0
        self._lock = threading.Lock()
        self._slot = threading.Condition()
        self._queue_ttl_s: dict[str, int] = {}  # declared message TTLs (MAX_QUEUE_TTLS)

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
        with self._lock:
            if self._disq is None or self._disq_pid != os.getpid():
                self._disq = Client(self.settings.addresses, **self.settings.client_options)
                self._disq_pid = os.getpid()
            return self._disq

    def establish_connection(self) -> Transport:
        # Ask the cluster once, so a URL that leads nowhere fails here, as kombu expects.
        client = self.disq_client()
        with _kombu_errors(f"connect to {','.join(self.settings.addresses)}"):
            client.hello()
        result: Transport = super().establish_connection()
        return result

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)  # channels first: they NACK what they held
        self._drop_client(close=True)

    def _collect(self, connection: Any) -> None:
        """After a fork (Celery's pool): forget the parent's client without closing it; its
        loop thread does not exist in this process."""
        self._drop_client(close=False)

    def _drop_client(self, *, close: bool) -> None:
        with self._lock:
            c, self._disq = self._disq, None
        if c is not None and close and self._disq_pid == os.getpid():
            c.close()

    def _slot_freed(self) -> None:
        with self._slot:
            self._slot.notify_all()

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]
        """Deliver what one blocking GETJOB brings; ``socket.timeout`` when nothing came
        within ``timeout``. While every prefetch slot is taken, wait for an ack instead."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError()  # socket.timeout, what kombu's callers catch
            if not any(ch._consumers and ch.qos.can_consume() for ch in self.channels):
                # Nothing may be fetched now: wait for a slot (an ack) or a consumer.
                with self._slot:
                    self._slot.wait(self.settings.wait_s if remaining is None else remaining)
                continue
            try:
                assert self.cycle is not None  # set by virtual.Transport.__init__
                self.cycle.get(self._deliver, timeout=remaining)
            except Empty:
                continue
            return

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
    return settings(addresses, raw, ignore=_KOMBU_OPTIONS)
