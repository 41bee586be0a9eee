"""A Celery result backend on disq: ``Celery(broker="disq://n1:7710,n2:7710",
backend="disq://n1:7710,n2:7710")``.

Registered as ``disq`` in Celery's ``celery.result_backends`` entry points (pyproject.toml):
no import in the app. The URL is the broker's (the gRPC ports of one or more nodes, the
query's options as for the broker, ``result_backend_transport_options`` merged over them);
the node calls are the kombu transport's (disq/integrations/resp_calls.py: RESP with the
SDK's failover and gRPC fallback).

Every disq node keeps every result (RESULT SET/GET/WAIT/DEL, disq/core/disque/results.py),
so a result outlives its worker and the node it was set on. What is stored where:

* a task's final state (SUCCESS, FAILURE with its traceback, REVOKED: Celery's READY_STATES)
  under ``celery-task-meta-<id>``; its other states (STARTED with ``task_track_started``,
  RETRY) under ``celery-task-progress-<id>``. One key each: RESULT WAIT answers as soon as
  its key exists, so a waiter on the final key is not woken by a STARTED. A task's state is
  the final key's, else the progress key's, else PENDING.
* a saved GroupResult (a group's, a chord header's) under ``celery-taskset-meta-<id>``.
* TTL: ``result_expires`` (one day unless told; failures ``result_failure_expires``), in
  whole seconds; none (0 or None) is the longest TTL a node takes.

``AsyncResult.get()`` waits on the node (RESULT WAIT on the final key), not by polling: in
slices of :data:`WAIT_SLICE_S`, each followed by a GET on every node (a node cut off when the
result was set learns it only when its link comes back, and one that joined later never: a
wait there alone could last that long, or for ever).
Its ``timeout`` is honoured (``celery.exceptions.TimeoutError``), and ``join_native`` waits
for each result the same way.

Chords: no counter (disq has no atomic increment). The producer saves the header's
GroupResult; every header task, once its own result is held, reads the group's results,
the last-listed first, and stops at the first one no node holds. The one that finds them
all final publishes the callback with values in the header's order, each callback message
carrying the idempotency key ``chord:<group id>:<callback task id>`` (the kombu transport's
``disq_idempotency_key`` property). Two parts that both see the chord complete, or a part
that runs again (retried after its worker or node died, with ``task_acks_late``), publish
nothing new within the node's idempotency window (one hour), so the callback runs once.
A header task that fails fails the chord (``ChordError`` on the callback, as on Redis);
each part that sees the failed group complete records it (its errbacks may run more than
once then).

Over gRPC (``publish_over=grpc``, TLS) the same, but a GET on every node is one GET on the
node the failover loop picks: a set answered a moment earlier may not be seen there yet.
"""

from __future__ import annotations

import contextvars
import hashlib
import math
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.canvas import maybe_signature
from celery.exceptions import ChordError, ImproperlyConfigured, TimeoutError
from celery.result import GroupResult, ResultSet, result_from_tuple
from celery.signals import before_task_publish
from kombu.utils.encoding import bytes_to_str

from disq.client import (
    Client,
    IndeterminateError,
    LeavingError,
    NoReplError,
    UnavailableError,
)
from disq.integrations.common import (
    DEFAULT_PORT,
    KOMBU_OPTIONS,
    SCHEME,
    OptionError,
    Settings,
    majority_of,
    parse_url,
    settings,
)
from disq.integrations.kombu_messages import IDEMPOTENCY_PROPERTY
from disq.integrations.resp_calls import RespCalls, connect

# A wait on one node lasts at most this long before every node is asked (see the docstring).
WAIT_SLICE_S = 5.0
# The longest TTL a node takes (disq/doors/disque/results.py): "no expiry".
MAX_TTL_S = 2**32 - 1
# A result key is 1..255 printable ASCII bytes without space; a task id that would not fit
# (a custom one) is keyed by its digest instead.
MAX_KEY_BYTES = 255
# Options of result_backend_transport_options that Celery itself reads.
_CELERY_OPTIONS = frozenset({"global_keyprefix", "result_chord_ordered"})
# Failing to reach the cluster: safe to retry (Celery's result_backend_always_retry).
_RETRYABLE = (UnavailableError, IndeterminateError, NoReplError, LeavingError)

# The group whose chord callback this thread is publishing (see _key_chord_callbacks).
_CHORD_PUBLISH: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "disq_chord_publish", default=None
)


def _key_chord_callbacks(
    sender: Any = None,
    headers: dict[str, Any] | None = None,
    properties: dict[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """Celery's ``before_task_publish``: a message published as a chord's callback (by
    :meth:`DisqBackend.on_chord_part_return`) gets the idempotency key of its chord and task,
    so that however many parts publish it, one job exists. One key per message: a callback
    that is a group publishes several, each its own."""
    gid = _CHORD_PUBLISH.get()
    task_id = (headers or {}).get("id")
    if gid is None or properties is None or not task_id:
        return  # not a callback, or Celery's task protocol 1 (no id in the headers): no key
    properties[IDEMPOTENCY_PROPERTY] = _fit(f"chord:{gid}:{task_id}")


before_task_publish.connect(_key_chord_callbacks, weak=False, dispatch_uid="disq-chord-callbacks")


def _fit(key: str) -> str:
    """``key`` when it is a valid result (or idempotency) key, else its digest under the
    same prefix: printable ASCII, no space, at most 255 bytes."""
    raw = key.encode("utf-8", "surrogateescape")
    if 0 < len(raw) <= MAX_KEY_BYTES and all(0x21 <= c <= 0x7E for c in raw):
        return key
    prefix = key[: key.rfind("-") + 1] if "-" in key[:40] else ""
    safe = "".join(c for c in prefix if 0x21 <= ord(c) <= 0x7E)
    return f"{safe}sha256:{hashlib.sha256(raw).hexdigest()}"


def backend_settings(url: str | None, options: dict[str, Any] | None = None) -> Settings:
    """The backend's settings: the URL's (as the broker's: ``disq://[:password@]host:port,
    ...?name=value``) with ``options`` (``result_backend_transport_options``) over them."""
    if not url or url in (SCHEME, f"{SCHEME}://"):
        url = f"{SCHEME}://127.0.0.1:{DEFAULT_PORT}"
    addresses, raw = parse_url(url)
    raw.update(options or {})
    return settings(addresses, raw, ignore=_CELERY_OPTIONS | KOMBU_OPTIONS)


def _seconds(value: Any) -> int | None:
    """``result_expires`` (seconds, or a timedelta made seconds) as whole seconds, rounded
    up; None or 0: no expiry."""
    if value is None:
        return None
    return math.ceil(float(value))


class DisqBackend(KeyValueStoreBackend):
    """Celery's result backend on disq (see the module docstring)."""

    key_t = bytes_to_str  # keys are str: the node calls take them so
    progress_keyprefix = "celery-task-progress-"
    implements_incr = False  # chords: on_chord_part_return below, no counter
    supports_autoexpire = True  # every result has its TTL on the nodes
    supports_native_join = True  # get_many waits on the nodes, one result after the other
    supports_failure_expires = True

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)
        conf = self.app.conf
        try:
            self.settings = backend_settings(
                url, dict(conf.get("result_backend_transport_options") or {})
            )
        except OptionError as exc:
            raise ImproperlyConfigured(f"disq result backend: {exc}") from exc
        # Whole seconds, rounded up (a TTL of 0.5 s is 1 s, not "never").
        self.expires: int | None = _seconds(getattr(self, "expires", None))
        failure_expires = conf.get("result_failure_expires")
        self.failure_expires = (
            self.expires
            if failure_expires is None
            else _seconds(self.prepare_expires(failure_expires))
        )
        prefix = self.task_keyprefix[: -len("celery-task-meta-")]
        self.progress_keyprefix = f"{prefix}{self.progress_keyprefix}"
        self._lock = threading.Lock()
        self._conn: tuple[Client, RespCalls] | None = None
        self._conn_pid = 0

    def __reduce__(self, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        return super().__reduce__(args, dict(kwargs or {}, url=self.url))

    # -- the nodes ------------------------------------------------------------------------
    def _calls(self) -> RespCalls:
        """This process's client and RESP calls, made on first use and anew after a fork
        (a prefork worker's pool builds its backend in the parent)."""
        with self._lock:
            if self._conn is None or self._conn_pid != os.getpid():
                self._conn = connect(self.settings)
                self._conn_pid = os.getpid()
            return self._conn[1]

    def close(self) -> None:
        """Close this process's connections (a later call opens them again)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and self._conn_pid == os.getpid():
            conn[1].close()
            conn[0].close()

    def _replicate(self) -> int:
        if self.settings.replicate is not None:
            return self.settings.replicate
        with self._lock:
            client = self._conn[0] if self._conn is not None else None
        size = client.cluster_size() if client is not None else len(self.settings.addresses)
        return majority_of(max(size, 1))

    def _ttl_s(self, expires: Any) -> int:
        if not expires:
            return MAX_TTL_S
        return max(1, min(MAX_TTL_S, int(expires)))

    def exception_safe_to_retry(self, exc: BaseException) -> bool:
        return isinstance(exc, _RETRYABLE)

    def as_uri(self, include_password: bool = False) -> str:
        """The URL as given (several hosts: Celery's own rendering cannot parse it), the
        password masked unless asked for."""
        uri = self.url or f"{SCHEME}://127.0.0.1:{DEFAULT_PORT}"
        if include_password or "@" not in uri.partition("?")[0]:
            return uri
        scheme, _, rest = uri.partition("://")
        userinfo, _, hosts = rest.partition("@")
        user = userinfo.split(":", 1)[0]
        return f"{scheme}://{user}:**@{hosts}"

    # -- the key-value primitives (KeyValueStoreBackend's) ---------------------------------
    def get(self, key: Any) -> bytes | None:
        return self._calls().result(_fit(bytes_to_str(key)))

    def mget(self, keys: list[Any]) -> list[bytes | None]:
        return [self.get(k) for k in keys]

    def set(self, key: Any, value: Any, expires: Any = None) -> None:
        self._calls().set_result(
            _fit(bytes_to_str(key)),
            value,
            ttl_s=self._ttl_s(self.expires if expires is None else expires),
            replicate=self._replicate(),
            repl_timeout_ms=self.settings.repl_timeout_ms,
        )

    def _set_with_state(self, key: Any, value: Any, state: str) -> None:
        if state == states.FAILURE:
            self.set(key, value, expires=self.failure_expires)
        else:
            self.set(key, value)

    def delete(self, key: Any) -> None:
        self._calls().delete_result(_fit(bytes_to_str(key)))

    # -- a task's keys ----------------------------------------------------------------------
    def get_key_for_progress(self, task_id: Any) -> str:
        return str(self._get_key_for(self.progress_keyprefix, task_id))

    def _final(self, task_id: Any, *, everywhere: bool = False) -> bytes | None:
        key = _fit(self.get_key_for_task(task_id))
        if everywhere:
            return self._calls().result_anywhere(key)
        return self._calls().result(key)

    def _store_result(
        self,
        task_id: Any,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        meta = self._get_result_meta(
            result=result, state=state, traceback=traceback, request=request
        )
        meta["task_id"] = bytes_to_str(task_id)
        if state in states.READY_STATES:
            # A task whose SUCCESS is stored keeps it: a copy run again after a lost worker
            # or a partition does not overwrite it with a FAILURE or a REVOKED
            # (KeyValueStoreBackend's rule). A SUCCESS is stored without that look: replacing
            # a SUCCESS with another is harmless, and it saves a round trip per task.
            if state != states.SUCCESS:
                current = self._final(task_id)
                if current is not None and (
                    self.decode_result(current)["status"] == states.SUCCESS
                ):
                    return result
            self._set_with_state(self.get_key_for_task(task_id), self.encode(meta), state)
        else:
            self.set(self.get_key_for_progress(task_id), self.encode(meta))
        return result

    def _get_task_meta_for(self, task_id: Any) -> dict[str, Any]:
        raw = self._final(task_id)
        if raw is None:
            raw = self.get(self.get_key_for_progress(task_id))
        if raw is None:
            return {"status": states.PENDING, "result": None}
        meta: dict[str, Any] = self.decode_result(raw)
        return meta

    def task_result_exists(self, task_id: Any) -> bool:
        return bool(self._get_task_meta_for(task_id)["status"] != states.PENDING)

    def _forget(self, task_id: Any) -> None:
        self.delete(self.get_key_for_task(task_id))
        self.delete(self.get_key_for_progress(task_id))

    def _restore_group(self, group_id: Any) -> dict[str, Any] | None:
        meta: dict[str, Any] | None = super()._restore_group(group_id)
        if meta is None:
            # Saved a moment ago by another process: maybe not on this node yet.
            raw = self._calls().result_anywhere(_fit(self.get_key_for_group(group_id)))
            if raw is not None:
                meta = self.decode(raw)
                assert meta is not None
                meta["result"] = result_from_tuple(meta["result"], self.app)
        return meta

    # -- waiting ------------------------------------------------------------------------------
    def wait_for(
        self,
        task_id: Any,
        timeout: float | None = None,
        interval: float = 0.5,
        no_ack: bool = True,
        on_interval: Any = None,
    ) -> dict[str, Any]:
        """The task's final meta, waited for on the nodes (RESULT WAIT on its final key, in
        slices); ``celery.exceptions.TimeoutError`` after ``timeout`` seconds."""
        self._ensure_not_eager()
        deadline = None if timeout is None else time.monotonic() + timeout
        key = _fit(self.get_key_for_task(task_id))
        calls = self._calls()
        while True:
            if on_interval is not None:
                on_interval()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raw = calls.result_anywhere(key)
                if raw is None:
                    raise TimeoutError("The operation timed out.")
            else:
                wait_s = WAIT_SLICE_S if remaining is None else min(WAIT_SLICE_S, remaining)
                raw = calls.result(key, timeout_s=wait_s)
                if raw is None:
                    raw = calls.result_anywhere(key)
            if raw is not None:
                meta: dict[str, Any] = self.decode_result(raw)
                if meta["status"] in states.READY_STATES:
                    return meta

    def get_many(
        self,
        task_ids: Any,
        timeout: float | None = None,
        interval: float = 0.5,
        no_ack: bool = True,
        on_message: Any = None,
        on_interval: Any = None,
        max_iterations: Any = None,
        READY_STATES: Any = states.READY_STATES,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(task id, final meta) of each task, as each is ready: each waited for on the
        nodes in turn (``join_native``); ``timeout`` counts for them all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for task_id in list(dict.fromkeys(task_ids)):
            tid = bytes_to_str(task_id)
            cached = self._cache.get(tid)
            if cached is not None and cached["status"] in READY_STATES:
                yield tid, cached
                continue
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            meta = self.wait_for(tid, timeout=remaining, on_interval=on_interval)
            if meta["status"] == states.SUCCESS:
                self._cache[tid] = meta
            if on_message is not None:
                on_message(meta)
            yield tid, meta

    # -- chords ---------------------------------------------------------------------------------
    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        """The header's GroupResult, saved before its tasks are sent: each part reads the
        group's task ids there."""
        self.ensure_chords_allowed()
        header_result = self.app.GroupResult(*header_result_args)
        expires = self._chord_result_expires or self.expires
        self.set(
            self.get_key_for_group(header_result.id),
            self.encode({"result": header_result.as_tuple()}),
            expires=expires,
        )

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> Any:
        """After this part's result is held: publish the callback if every result of the
        group is final (see the module docstring)."""
        gid, tid = request.group, request.id
        if not gid or not tid:
            return
        app = self.app
        callback = maybe_signature(request.chord, app=app)
        try:
            deps = GroupResult.restore(gid, backend=self)
        except Exception as exc:
            return self.chord_error_from_stack(
                callback, ChordError(f"Cannot restore group: {exc!r}")
            )
        if deps is None:
            return self.chord_error_from_stack(
                callback, ChordError(f"GroupResult {gid} no longer exists")
            )
        metas = self._all_final(deps)
        if metas is None:
            return None  # a later part publishes it
        try:
            values = self._values(deps, metas)
        except ChordError as exc:
            return self.chord_error_from_stack(callback, exc)
        token = _CHORD_PUBLISH.set(bytes_to_str(gid))
        try:
            retry_publish = getattr(app.amqp, "_retry_publish", None)
            if retry_publish is not None:
                retry_publish(callback.delay, values)
            else:  # pragma: no cover - Celery before 5.7
                callback.delay(values)
        except Exception as exc:
            return self.chord_error_from_stack(callback, ChordError(f"Callback error: {exc!r}"))
        finally:
            _CHORD_PUBLISH.reset(token)
        return None

    def _leaves(self, deps: ResultSet) -> list[Any]:
        out: list[Any] = []
        for r in deps.results:
            if isinstance(r, ResultSet):
                out.extend(self._leaves(r))
            else:
                out.append(r)
        return out

    def _all_final(self, deps: ResultSet) -> dict[str, dict[str, Any]] | None:
        """Every leaf result's final meta, or None at the first one no node holds. The
        last-listed first: the header's tasks mostly end in their order, so a part that is
        not the last stops after a read or two."""
        metas: dict[str, dict[str, Any]] = {}
        for r in reversed(self._leaves(deps)):
            raw = self._final(r.id)
            if raw is None:
                raw = self._final(r.id, everywhere=True)
            if raw is None:
                return None
            meta = self.decode_result(raw)
            if meta["status"] not in states.READY_STATES:
                return None
            metas[r.id] = meta
        return metas

    def _values(self, deps: ResultSet, metas: dict[str, dict[str, Any]]) -> list[Any]:
        """The callback's argument: the results in the header's order (a nested group's as
        a list); ChordError for a part that failed or was revoked."""
        out: list[Any] = []
        for r in deps.results:
            if isinstance(r, ResultSet):
                out.append(self._values(r, metas))
                continue
            meta = metas[r.id]
            if meta["status"] in states.PROPAGATE_STATES:
                exc = meta["result"]
                raise ChordError(f"Dependency {r.id} raised {exc!r}")
            out.append(meta["result"])
        return out
