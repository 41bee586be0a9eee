"""What the kombu transport and the Dramatiq broker share: the ``disq://`` URL, the options
that become the SDK client's arguments and each ADDJOB's, and the checks on them.

``disq://[:password@]host:port[,host:port...][?name=value&...]``: the hosts are the gRPC
ports of one or more nodes (seeds: the SDK learns the rest of the cluster with HELLO and
fails over between them). Query parameters and the integration's own options
(``broker_transport_options`` in Celery, keyword arguments of ``DisqBroker``) take the same
names; explicit options win over the URL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from disq.client import Client, UnavailableError
from disq.client.adds import AddOptions
from disq.integrations.transient import TRANSIENT_LEASE_MS

DEFAULT_PORT = 7710
SCHEME = "disq"
# The SDK's gRPC channels carry up to 64 MiB per call, and adds are batched: a message is
# refused before it leaves above this (an option), so an oversized one is a clear error and
# never an add of unknown outcome.
DEFAULT_MAX_MESSAGE_BYTES = 16 << 20

# Priorities, as kombu's Redis transport keeps them (its priority_steps, PRIORITY_STEPS,
# sep) but in AMQP's order: a higher number is served first, as on RabbitMQ. A message's
# priority (0..9, clamped) falls to the highest step not above it; each step but 0 is a
# queue of its own, ``<queue><PRIORITY_SEP><step>``, and a consumer's one GETJOB lists the
# steps highest first with ``in_order`` (a step's jobs before the next one's).
PRIORITY_STEPS = (0, 3, 6, 9)
MAX_PRIORITY = 9
# kombu's Redis separator: two control characters no Celery or Dramatiq queue name holds,
# valid UTF-8 (the gRPC API's queue names are strings) and any bytes to RESP's.
PRIORITY_SEP = "\x06\x16"

# Options given to disq.client.Client as they are.
_CLIENT_OPTIONS = {
    "password": str,
    "timeout_s": float,
    "connect_timeout_s": float,
    "discover": bool,  # off: only the URL's nodes are used (HELLO's others are not)
    "tls": bool,
    "tls_ca": str,
    "tls_cert": str,
    "tls_key": str,
    "tls_server_name": str,
}
# Options of every ADDJOB, and of the consumers.
_JOB_OPTIONS = {
    "replicate": int,
    "retry_s": int,
    "visibility_timeout": int,  # Celery's name (Redis, SQS transports) for RETRY
    "ttl_s": int,
    "async": bool,
    "repl_timeout_ms": int,
    "max_message_bytes": int,
    "prefetch": int,
    "wait_s": float,
    "dead_message_ttl_s": int,
    "priority_steps": tuple,  # "0,3,6,9" in a URL, a list in the options
    "publish_over": str,  # "resp" (the default) or "grpc": see disq.integrations.resp_calls
    "transient_lease_s": float,  # an auto_delete/exclusive queue's lease without x-expires
}
PUBLISH_OVER = ("resp", "grpc")


class OptionError(ValueError):
    """A URL or an option the integration cannot use (named in the message)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """A parsed ``disq://`` URL with its options applied."""

    addresses: list[str]
    client_options: dict[str, Any] = field(default_factory=dict)
    # None: the majority of the nodes the client knows (majority_of), so one node of 3 or
    # two of 5 can be down; not Disque's min(3, cluster size), which needs all of 3.
    replicate: int | None = None
    retry_s: int | None = None  # None: the node's default, min(TTL / 10, 300 s)
    ttl_s: int | None = None  # None: the node's default, 1 day
    async_: bool = False
    repl_timeout_ms: int = 5000
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    prefetch: int = 0  # 0: the consumer's own count (kombu's QoS, Dramatiq's prefetch)
    wait_s: float = 1.0  # the longest one blocking GETJOB waits on the node
    dead_message_ttl_s: int = 7 * 86400  # Dramatiq's dead letters live as long as Redis's
    priority_steps: tuple[int, ...] = PRIORITY_STEPS  # ascending, 0 first
    # How a message is added: one ADDJOB on the node's RESP port ("resp"), or the SDK's
    # gRPC AddJob ("grpc"); TLS connections always use gRPC (resp_calls.py says why).
    publish_over: str = "resp"
    # The lease of a transient queue declared without x-expires (transient.py).
    transient_lease_s: float = TRANSIENT_LEASE_MS / 1000

    @property
    def over_resp(self) -> bool:
        """Adds go over the nodes' RESP ports: asked for, and no TLS (HELLO does not give
        the RESP TLS port, and a TLS client is never downgraded to plaintext)."""
        tls = any(v for k, v in self.client_options.items() if k.startswith("tls"))
        return self.publish_over == "resp" and not tls

    def add_options(
        self, delay_ms: int = 0, *, ttl_s: int | None = None, cluster_size: int = 0
    ) -> AddOptions:
        """The keyword arguments of ``Client.add_job`` for a message delayed ``delay_ms``
        (milliseconds, as Dramatiq and Celery's countdown/ETA give them: the node's DELAYMS).

        ``ttl_s``: the message's own (kombu's expiration, a queue's message TTL); the lower
        of it and the ``ttl_s`` option applies, as RabbitMQ applies the lower of a
        message's and its queue's. Disque refuses a DELAY not shorter than the TTL, so a
        delayed job's TTL counts from the end of its delay: it lives as long after it
        becomes ready as any other job. ``cluster_size``: the nodes the client knows, whose
        majority is REPLICATE when the option is not given (0: the node's default)."""
        opts: AddOptions = {"repl_timeout_ms": self.repl_timeout_ms}
        if self.replicate is not None:
            opts["replicate"] = self.replicate
        elif cluster_size > 0:
            opts["replicate"] = majority_of(cluster_size)
        if self.retry_s is not None:
            opts["retry_s"] = self.retry_s
        if self.async_:
            opts["async_"] = True
        ttls = [t for t in (ttl_s, self.ttl_s) if t is not None]
        ttl = min(ttls) if ttls else None
        if delay_ms > 0:
            opts["delay_ms"] = delay_ms
            opts["ttl_s"] = (ttl or 86400) + -(-delay_ms // 1000)
        elif ttl is not None:
            opts["ttl_s"] = ttl
        return opts

    def priority_step(self, priority: Any) -> int:
        """The step of a message's priority: clamped to 0..9 (kombu's virtual channel's
        bounds; not a number: 0), then the highest step not above it."""
        try:
            p = max(0, min(int(priority), MAX_PRIORITY))
        except (TypeError, ValueError):
            return 0
        return max(s for s in self.priority_steps if s <= p)

    def step_queue(self, queue: str, step: int) -> str:
        """The disq queue of ``queue``'s messages of priority step ``step``."""
        return f"{queue}{PRIORITY_SEP}{step}" if step else queue

    def sub_queues(self, queue: str) -> list[str]:
        """Every disq queue of ``queue``, the highest step first (GETJOB's order)."""
        return [self.step_queue(queue, s) for s in reversed(self.priority_steps)]

    def queued(self, client: Client, queue: str) -> int:
        """Jobs queued for ``queue`` (every step) on every node that answers (QLEN summed)."""
        total = 0
        for node in client.nodes():
            for name in self.sub_queues(queue):
                try:
                    total += client.qlen(name, node=node.addr)
                except UnavailableError:
                    break  # a node that does not answer holds nothing anyone can get now
        return total


def majority_of(cluster_size: int) -> int:
    """REPLICATE when none is given: floor(n/2)+1 copies (2 of 3, 3 of 5; 1 of 1), so an
    add still completes with a minority of the nodes down."""
    return cluster_size // 2 + 1


def base_queue(name: str) -> str:
    """The queue a priority sub-queue belongs to (the name itself for step 0)."""
    return name.partition(PRIORITY_SEP)[0]


def ttl_from_ms(ms: Any) -> int | None:
    """A TTL in milliseconds (kombu's ``expiration`` property, a queue's ``x-message-ttl``)
    as TTL's whole seconds: rounded up, at least 1; None when absent or not a number."""
    if ms is None:
        return None
    try:
        value = float(ms)
    except (TypeError, ValueError):
        return None
    if value != value or value < 0:  # NaN, negative: not a TTL a broker would accept
        return None
    return max(1, math.ceil(value / 1000 - 1e-9))


def delay_ms_from_seconds(seconds: float) -> int:
    """A delay in whole milliseconds (the node's DELAYMS), rounded up: a job never runs
    before its time."""
    return max(0, math.ceil(seconds * 1000 - 1e-3))  # float noise is not a millisecond


def _priority_steps(value: Any) -> tuple[int, ...]:
    """``priority_steps``: integers 0..9 (a list, or "0,3,6,9" in a URL); 0, the queue
    itself, is always a step."""
    items = value.split(",") if isinstance(value, str) else value
    try:
        steps = {int(str(v).strip()) for v in items}
    except (TypeError, ValueError):
        raise OptionError(
            f"disq option priority_steps: expected integers 0..9, got {value!r}"
        ) from None
    if any(not 0 <= s <= MAX_PRIORITY for s in steps):
        raise OptionError(f"disq option priority_steps: each step must be 0..9, got {value!r}")
    return tuple(sorted(steps | {0}))


def _convert(name: str, kind: type, value: Any) -> Any:
    if kind is tuple:
        return _priority_steps(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise OptionError(f"disq option {name}: expected a boolean, got {value!r}")
    try:
        out = kind(value)
    except (TypeError, ValueError):
        raise OptionError(f"disq option {name}: expected {kind.__name__}, got {value!r}") from None
    if kind in (int, float) and out < 0:
        raise OptionError(f"disq option {name}: must not be negative, got {value!r}")
    return out


def parse_url(url: str) -> tuple[list[str], dict[str, str]]:
    """``disq://[:password@]h1:p1,h2:p2[/][?k=v...]`` -> (addresses, raw options)."""
    parts = urlsplit(url)
    if parts.scheme != SCHEME:
        raise OptionError(f"not a disq URL (scheme {parts.scheme!r}, expected 'disq'): {url!r}")
    netloc = parts.netloc
    raw: dict[str, str] = dict(parse_qsl(parts.query))
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        password = userinfo.split(":", 1)[1] if ":" in userinfo else userinfo
        if password:
            raw.setdefault("password", unquote(password))
    addresses = [host_port(h) for h in netloc.split(",") if h.strip()]
    if parts.path not in ("", "/"):
        raise OptionError(f"a disq URL has no path (virtual hosts do not exist): {url!r}")
    return addresses, raw


def host_port(text: str, default_port: int = DEFAULT_PORT) -> str:
    """``host[:port]`` (IPv6 in brackets) with the default port filled in, checked."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        host = f"[{host}]"
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not host:
        raise OptionError(f"disq address without a host: {text!r}")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise OptionError(f"disq address with a bad port: {text!r}")
        port = int(port_text)
    else:
        port = default_port
    return f"{host}:{port}"


def settings(
    addresses: list[str], raw: Mapping[str, Any], *, ignore: frozenset[str] = frozenset()
) -> Settings:
    """Settings from addresses and options (URL query and explicit options merged)."""
    client: dict[str, Any] = {}
    job: dict[str, Any] = {}
    for name, value in raw.items():
        if name in ignore:
            continue
        if name in _CLIENT_OPTIONS:
            client[name] = _convert(name, _CLIENT_OPTIONS[name], value)
        elif name in _JOB_OPTIONS:
            job[name] = _convert(name, _JOB_OPTIONS[name], value)
        else:
            known = ", ".join(sorted({*_CLIENT_OPTIONS, *_JOB_OPTIONS}))
            raise OptionError(f"unknown disq option {name!r} (known: {known})")
    if not addresses:
        raise OptionError("a disq URL needs at least one node: disq://host:7710[,host:port]")
    retry_s = job.get("retry_s", job.get("visibility_timeout"))
    replicate = job.get("replicate")
    if replicate is not None and replicate < 1:
        raise OptionError("disq option replicate: at least 1")
    publish_over = job.get("publish_over", "resp").strip().lower()
    if publish_over not in PUBLISH_OVER:
        raise OptionError(
            f"disq option publish_over: {' or '.join(PUBLISH_OVER)}, got {publish_over!r}"
        )
    if job.get("max_message_bytes", 1) < 1:
        raise OptionError("disq option max_message_bytes: at least 1")
    lease_s = job.get("transient_lease_s", TRANSIENT_LEASE_MS / 1000)
    if not 0.1 <= lease_s <= 86400:
        raise OptionError("disq option transient_lease_s: between 0.1 and 86400 seconds")
    return Settings(
        addresses=addresses,
        client_options=client,
        replicate=replicate,
        retry_s=retry_s,
        ttl_s=job.get("ttl_s"),
        async_=job.get("async", False),
        repl_timeout_ms=job.get("repl_timeout_ms", 5000),
        max_message_bytes=job.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES),
        prefetch=job.get("prefetch", 0),
        wait_s=job.get("wait_s", 1.0) or 1.0,
        dead_message_ttl_s=job.get("dead_message_ttl_s", 7 * 86400),
        priority_steps=job.get("priority_steps", PRIORITY_STEPS),
        publish_over=publish_over,
        transient_lease_s=lease_s,
    )


def ack_queued(client: Client, queue: str) -> int:
    """Ack every queued job of ``queue`` on every node the client knows (Disque's queues are
    per node): one PurgeQueue per node, which takes the node's whole queue at once (a JSCAN
    walk acking page by page skipped jobs: acking moved its cursor); a node that does not
    answer is skipped. The number acked. kombu's purge and Dramatiq's flush: the ready
    messages, not the ones delivered or waiting out a delay."""
    return client.purge_queue(queue)


# kombu's own options, which reach every transport's transport_options through Celery (and a
# backend's result_backend_transport_options when it shares the broker's dict): not disq's.
KOMBU_OPTIONS = frozenset(
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
