"""A Dramatiq results backend on disq: actors' return values (``store_results=True``) kept by
every node of the cluster, as the ``RESULT`` commands keep them (disq/core/disque/results.py).

Set up beside the broker, in the module the ``dramatiq`` command loads::

    broker = DisqBroker("disq://10.0.0.1:7710,10.0.0.2:7710")
    broker.add_middleware(Results(backend=DisqResultBackend(broker=broker)))
    dramatiq.set_broker(broker)

``DisqResultBackend(broker=...)`` uses the broker's SDK client and its RESP calls (one view of
the cluster, one set of connections, the URL's options: password, TLS, ``replicate``,
``repl_timeout_ms``, ``publish_over``). ``DisqResultBackend(url="disq://...", **options)``
(or ``client=``, an SDK :class:`~disq.client.Client`) makes its own, as Dramatiq's
``RedisBackend(url=...)`` does: for a process with no ``DisqBroker``, or a results cluster
apart from the broker's. Either way the client is made on first use, after ``dramatiq``
forks its worker processes.

How Dramatiq's backend contract maps to the nodes' commands (through
:class:`~disq.integrations.resp_calls.RespCalls`: RESP on the node's port, the SDK's
failover, gRPC when RESP cannot):

* ``store_result`` / ``store_exception`` (the ``Results`` middleware, after the actor ran
  and before the message is acked) -> ``RESULT SET <key> <encoded> TTL <s> REPLICATE <n>``:
  the value, or the exception as Dramatiq wraps it (``wrap_exception``: its type and
  message), encoded by the backend's encoder (JSON by default). The middleware's
  ``result_ttl`` (milliseconds) becomes the TTL in whole seconds, rounded up, at least 1.
  REPLICATE is the ``replicate`` option, else the majority of the nodes HELLO lists (2 of 3),
  as the broker's adds: a result is still stored with one node of 3 down. It returns once
  that many nodes hold it; the node sends it to every node it reaches.
* ``get_result(message, block=True, timeout=ms)`` -> ``RESULT WAIT <key> <ms>``: one wait on
  a node, woken when the result arrives there; no polling. A null at the timeout raises
  ``ResultTimeout``. ``timeout`` defaults to Dramatiq's 10 s; 0 looks once (``RESULT GET``).
  A node that dies during the wait: the wait is asked again of the next node.
* ``get_result(message)`` (``block=False``) -> ``RESULT GET``: ``ResultMissing`` when no
  result is there. A stored exception is raised as ``ResultFailure`` (``unwrap_result``).
* Pipelines and groups (``pipeline.get_result``, ``group.get_results``, ``group.wait``) read
  each message's result through the same ``get_result``.
* Keys: Dramatiq's ``build_message_key``, an MD5 hex digest of namespace, queue, actor and
  message id (32 characters, a valid disq key). With ``use_namespace_prefix_keys=True`` the
  readable key ``<namespace>:<queue>:<actor>:<message_id>`` is used when it is one (1..255
  printable ASCII bytes, no space); otherwise it is percent-encoded, and one still over 255
  bytes falls back to the digest.

Errors are the SDK's (:mod:`disq.client`): ``UnavailableError`` when no node answers,
``NoReplError`` when fewer than ``replicate`` nodes took a result in ``repl_timeout_ms``. A
store that raises is logged by Dramatiq's worker (its middleware hooks catch it), as with its
other backends.
"""

from __future__ import annotations

import hashlib
import string
import threading
from typing import Any
from urllib.parse import quote

from dramatiq.encoder import Encoder
from dramatiq.message import Message
from dramatiq.results import ResultBackend, ResultMissing, ResultTimeout
from dramatiq.results.backend import DEFAULT_TIMEOUT, Missing, MResult, Result

from disq.client import Client
from disq.integrations.common import (
    OptionError,
    Settings,
    majority_of,
    parse_url,
    settings,
    ttl_from_ms,
)
from disq.integrations.dramatiq import DisqBroker
from disq.integrations.resp_calls import RespCalls, resp_calls_for

DEFAULT_URL = "disq://127.0.0.1:7710"
# A result key: 1 to 255 printable ASCII bytes, no space (the node refuses others).
MAX_KEY_BYTES = 255
_KEY_BYTES = frozenset(range(0x21, 0x7F))
# What a readable key keeps as it is: printable ASCII but the space and the escape itself.
_SAFE = "".join(c for c in string.punctuation if c != "%")


def valid_key(key: str) -> bool:
    """A key every node takes: 1 to 255 printable ASCII bytes, no space."""
    data = key.encode()
    return 0 < len(data) <= MAX_KEY_BYTES and all(c in _KEY_BYTES for c in data)


class DisqResultBackend(ResultBackend):
    """Dramatiq's results on a disq cluster. Give ``broker`` (a :class:`DisqBroker`: its
    client and options), or ``url`` (``disq://...``, with the broker's URL options; keyword
    ``options`` win over the URL's) and optionally ``client`` (an SDK client of those nodes,
    as ``DisqBroker(client=...)``: the URL still gives the options, the password that RESP's
    AUTH sends among them). ``replicate``: the nodes a stored result is on before the store
    returns (default: the URL's ``replicate``, else the majority of the cluster).
    ``namespace``, ``encoder``, ``use_namespace_prefix_keys``: as Dramatiq's other backends."""

    def __init__(
        self,
        *,
        broker: DisqBroker | None = None,
        url: str | None = None,
        client: Client | None = None,
        namespace: str = "dramatiq-results",
        encoder: Encoder | None = None,
        use_namespace_prefix_keys: bool = False,
        replicate: int | None = None,
        **options: Any,
    ) -> None:
        if use_namespace_prefix_keys:  # not a keyword of older Dramatiq (always hashed)
            super().__init__(namespace=namespace, encoder=encoder, use_namespace_prefix_keys=True)
        else:
            super().__init__(namespace=namespace, encoder=encoder)
        if broker is not None and (url is not None or client is not None or options):
            raise OptionError(
                "DisqResultBackend: give a broker, or a url (and options, a client), not both"
            )
        if replicate is not None and replicate < 1:
            raise OptionError("DisqResultBackend replicate: at least 1")
        self._broker = broker
        if broker is not None:
            self.settings: Settings = broker.settings
        else:
            addresses, raw = parse_url(url or DEFAULT_URL)
            raw.update(options)
            self.settings = settings(addresses, raw)
        self.replicate = replicate if replicate is not None else self.settings.replicate
        self._client = client
        self._calls: RespCalls | None = None  # of _client, when not the broker's
        self._lock = threading.Lock()
        self._hello_of: Client | None = None  # the client that has asked the cluster

    def _node_calls(self) -> tuple[Client, RespCalls]:
        """The SDK client and its RESP calls: the broker's, or this backend's own, made on
        first use (in the process that uses them: after ``dramatiq``'s fork)."""
        if self._broker is not None:
            client = self._broker.client
            return client, self._broker._adds_of(client)
        with self._lock:
            if self._client is None:
                self._client = Client(self.settings.addresses, **self.settings.client_options)
            if self._calls is None:
                self._calls = resp_calls_for(self._client, self.settings)
            return self._client, self._calls

    def close(self) -> None:
        """Close this backend's client and connections (a broker's are the broker's to
        close)."""
        with self._lock:
            calls, self._calls = self._calls, None
            c, self._client = self._client, None
        if calls is not None:
            calls.close()
        if c is not None:
            c.close()

    def build_message_key(self, message: Message[Any]) -> str:
        key: str = super().build_message_key(message)
        if valid_key(key):
            return key
        quoted = quote(key, safe=_SAFE)  # printable ASCII, no space
        if len(quoted) <= MAX_KEY_BYTES:
            return quoted
        return hashlib.md5(key.encode()).hexdigest()

    def get_result(
        self, message: Message[Any], *, block: bool = False, timeout: int | None = None
    ) -> Result:
        """The result of ``message``: at once (``ResultMissing`` when there is none), or with
        ``block`` one ``RESULT WAIT`` of up to ``timeout`` ms (``ResultTimeout``). A stored
        exception raises ``ResultFailure``."""
        key = self.build_message_key(message)
        _, calls = self._node_calls()
        if not block:
            data = calls.result(key, 0.0)
            if data is None:
                raise ResultMissing(message)
        else:
            timeout_ms = DEFAULT_TIMEOUT if timeout is None else max(0, timeout)
            data = calls.result(key, timeout_ms / 1000)  # 0: one RESULT GET
            if data is None:
                raise ResultTimeout(message)
        return self.unwrap_result(self.encoder.decode(data))

    def _get(self, message_key: str) -> MResult:
        _, calls = self._node_calls()
        data = calls.result(message_key, 0.0)
        return Missing if data is None else self.encoder.decode(data)

    def _store(self, message_key: str, result: Result, ttl: int) -> None:
        client, calls = self._node_calls()
        replicate = self.replicate
        if replicate is None:
            if self._hello_of is not client:
                # Once per client: the majority of the nodes HELLO lists, not of the URL's
                # seeds (as the broker's adds).
                client.hello()
                self._hello_of = client
            replicate = majority_of(client.cluster_size())
        calls.set_result(
            message_key,
            self.encoder.encode(result),
            ttl_s=ttl_from_ms(ttl),
            replicate=replicate,
            repl_timeout_ms=self.settings.repl_timeout_ms,
        )
