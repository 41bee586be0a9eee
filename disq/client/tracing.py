"""OpenTelemetry trace context through jobs, when the application uses OpenTelemetry.

- At add (every SDK path: :func:`disq.client.adds.fill_add`), :func:`with_trace` adds the
  current context, as the global propagator writes it (W3C ``traceparent``/``tracestate``
  by default), to the job's headers; headers the caller set win.
- ``disq.Worker`` runs each job in :func:`process_span`: a CONSUMER span whose parent is the
  context the job's headers carry.

Nothing is imported here at module level: ``opentelemetry`` is looked for at the first add
(not installed: that answer is kept, and every later add costs one check), and used only once
the application itself imported it (``opentelemetry.context`` in ``sys.modules``). A current
span needs that module, so nothing is lost, and a process that never touched OpenTelemetry
(a node, whose dashboard adds through the SDK) never imports it. No PRODUCER span is made
around an add: the consumer's parent is the caller's own span, and an add costs no span.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class Job(Protocol):
    """What a span reads of a delivered job (disq.client.aio.Job; aio imports this module)."""

    @property
    def id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def nacks(self) -> int: ...
    @property
    def additional_deliveries(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, bytes]: ...


# The node's bounds on a job's headers (disq/core/job_record.py, HEADERS_MAX and
# HEADERS_MAX_BYTES; the client may not import the cores): an add whose own headers leave no
# room for the trace's goes without it rather than failing.
HEADERS_MAX = 64
HEADERS_MAX_BYTES = 16384

TRACER_NAME = "disq"


class _Otel:
    """The few OpenTelemetry calls used, bound once it is imported."""

    __slots__ = ("current", "extract", "propagator", "start_span")

    def __init__(
        self,
        current: Callable[[], Mapping[str, object]],
        propagator: Callable[[], Any],
        extract: Callable[[Mapping[str, bytes]], Any],
        start_span: Callable[[Job, Any], contextlib.AbstractContextManager[Any]],
    ) -> None:
        self.current = current
        self.propagator = propagator
        self.extract = extract
        self.start_span = start_span


_otel: _Otel | None = None
# None: not looked for yet; True: opentelemetry-api is not installed, nothing to look for again.
_absent: bool | None = None
_modules = sys.modules
# The last context injected, the propagator that did and what it wrote: adds made in one span
# (a batch, a loop) inject once. A Context is immutable, and held here it is not freed, so
# the same object is the same context.
_last: tuple[object, object, dict[str, str]] = (None, None, {})


def _load() -> _Otel | None:
    """The bound calls, or None: not installed (kept) or not imported by the app (yet)."""
    global _otel, _absent
    if _absent is None:
        import importlib.util

        try:
            _absent = importlib.util.find_spec("opentelemetry") is None
        except (ImportError, ValueError):  # ValueError: None in sys.modules (import blocked)
            _absent = True
    if _absent or _modules.get("opentelemetry.context") is None:
        return None
    # Imported by name, untyped: the wheel's build type-checks this module (mypyc follows
    # the compiled modules' imports) where opentelemetry is not installed, an optional extra.
    import importlib

    try:
        context = importlib.import_module("opentelemetry.context")
        propagate = importlib.import_module("opentelemetry.propagate")
        trace = importlib.import_module("opentelemetry.trace")
    except ImportError:
        _absent = True
        return None

    class BytesGetter:
        """A job's headers (values bytes, as GetJobs gives them) as text to a propagator
        (its Getter's two methods: propagators call them, whatever the class)."""

        def get(self, carrier: Mapping[str, bytes], key: str) -> list[str] | None:
            value = carrier.get(key)
            return None if value is None else [value.decode("utf-8", "replace")]

        def keys(self, carrier: Mapping[str, bytes]) -> list[str]:
            return list(carrier)

    getter = BytesGetter()
    consumer = trace.SpanKind.CONSUMER
    # A proxy until the app sets a provider: spans go to whichever it sets later.
    tracer = trace.get_tracer(TRACER_NAME)

    def extract(headers: Mapping[str, bytes]) -> Any:
        return propagate.extract(headers, getter=getter)

    def start_span(job: Job, parent: Any) -> contextlib.AbstractContextManager[Any]:
        span: contextlib.AbstractContextManager[Any] = tracer.start_as_current_span(
            f"{job.queue} process",
            context=parent,
            kind=consumer,
            attributes={
                "messaging.system": "disq",
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": job.id,
                # This delivery's number: 1 the first time; NACKs and re-queues add to it.
                "disq.job.deliveries": job.nacks + job.additional_deliveries + 1,
            },
        )
        return span

    _otel = _Otel(context.get_current, propagate.get_global_textmap, extract, start_span)
    return _otel


def trace_headers() -> dict[str, str] | None:
    """The current context as headers (the global propagator's), None if there is none; the
    dict is shared by the adds of one context: read it, never change it."""
    global _last
    otel = _otel
    if otel is None:
        # Not installed: one check. Installed, not imported by the app: no span can be current.
        if _absent or (_absent is False and _modules.get("opentelemetry.context") is None):
            return None
        otel = _load()
        if otel is None:
            return None
    ctx = otel.current()
    if not ctx:
        return None  # the root context: no span, no baggage, nothing to propagate
    propagator = otel.propagator()
    last_ctx, last_propagator, carrier = _last
    if ctx is not last_ctx or propagator is not last_propagator:
        carrier = {}
        propagator.inject(carrier, ctx)
        _last = (ctx, propagator, carrier)
    return carrier or None


def with_trace(
    headers: Mapping[str, str | bytes] | None,
) -> Mapping[str, str | bytes] | None:
    """An add's headers with the current trace context's, the caller's winning; the caller's
    alone when the two would pass the node's bounds (the add must not fail for a trace). What
    it returns is read, never changed (the trace's dict is shared by the adds of a span)."""
    carrier = trace_headers()
    if carrier is None:
        return headers
    if not headers:
        return carrier
    merged: dict[str, str | bytes] = {**carrier, **headers}
    if len(merged) > HEADERS_MAX:
        return headers
    size = sum(
        len(k.encode()) + len(v.encode() if isinstance(v, str) else v) for k, v in merged.items()
    )
    return headers if size > HEADERS_MAX_BYTES else merged


def handler_failed(span: Any, exc: BaseException) -> None:
    """The span of a job whose handler raised (the worker nacks it, so the span's own exit
    never sees the exception): the exception recorded, the status ERROR."""
    import importlib

    trace = importlib.import_module("opentelemetry.trace")  # untyped: see _load
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, repr(exc)))


def process_span(job: Job) -> contextlib.AbstractContextManager[Any]:
    """The worker's span for one delivery of ``job`` (current while it is handled), its parent
    the context in the job's headers; entered, it gives the span, or None when the app does
    not use OpenTelemetry."""
    otel = _otel
    if otel is None and (_absent is True or (otel := _load()) is None):
        return contextlib.nullcontext()
    return otel.start_span(job, otel.extract(job.headers))
