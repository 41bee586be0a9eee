"""The trace context an add carries (disq/client/tracing.py), without a node: what
:func:`disq.client.adds.fill_add` (every SDK add path) puts in the request's headers, in a
span and out of one, beside the caller's own headers; and, in fresh interpreters, nothing when
opentelemetry cannot be imported or was never imported by the app."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from disq.client.adds import fill_add
from disq.client.aio import Job
from disq.client.tracing import HEADERS_MAX, process_span
from disq.proto_gen import api_pb2

ROOT = Path(__file__).resolve().parents[2]


def _headers(**options: object) -> dict[str, bytes]:
    req = api_pb2.AddJobRequest()
    fill_add(req, "q", "body", options)  # type: ignore[arg-type]
    return dict(req.headers)


def test_an_add_in_a_span_carries_its_context_and_the_caller_s_headers_win(
    spans: InMemorySpanExporter,
) -> None:
    assert _headers() == {}  # no current span: nothing
    with trace.get_tracer("test").start_as_current_span("produce") as span:
        ctx = span.get_span_context()
        parent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}".encode()
        assert _headers() == {"traceparent": parent}
        assert _headers(headers={"tenant": "acme"}) == {"traceparent": parent, "tenant": b"acme"}
        mine = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        assert _headers(headers={"traceparent": mine}) == {"traceparent": mine.encode()}
        # No room left by the caller's headers: the add goes without the trace, not refused.
        full = {f"k{i}": "v" for i in range(HEADERS_MAX)}
        assert _headers(headers=full) == {k: b"v" for k in full}
        big = {"blob": b"x" * 16370}
        assert _headers(headers=big) == big
    assert _headers() == {}  # the span ended: nothing (no stale context kept for later adds)
    with trace.get_tracer("test").start_as_current_span("another") as other:
        assert f"{other.get_span_context().span_id:016x}" in _headers()["traceparent"].decode()


def test_the_worker_span_continues_the_job_s_context(spans: InMemorySpanExporter) -> None:
    with trace.get_tracer("test").start_as_current_span("produce") as producer:
        headers = _headers()
    job = Job("D-1", "q", b"", nacks=1, additional_deliveries=2, headers=headers)
    with process_span(job) as span:
        assert span is trace.get_current_span()
    [done] = [s for s in spans.get_finished_spans() if s.name == "q process"]
    assert done.parent is not None
    assert done.parent.span_id == producer.get_span_context().span_id
    assert done.context.trace_id == producer.get_span_context().trace_id
    assert done.kind is trace.SpanKind.CONSUMER
    assert dict(done.attributes or {}) == {
        "messaging.system": "disq",
        "messaging.operation.type": "process",
        "messaging.destination.name": "q",
        "messaging.message.id": "D-1",
        "disq.job.deliveries": 4,
    }


def _fresh(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


ADD_AND_SPAN = """
    from disq.client.adds import fill_add
    from disq.client.aio import Job
    from disq.client.tracing import process_span
    from disq.proto_gen import api_pb2
    for headers in (None, {"tenant": "acme"}):
        req = api_pb2.AddJobRequest()
        fill_add(req, "q", "b", {"headers": headers} if headers else {})
        print(sorted(req.headers))
    with process_span(Job("D-1", "q", b"", headers={"traceparent": b"00-x"})) as span:
        print(span)
    print(sorted(n for n in sys.modules if n.startswith("opentelemetry") and sys.modules[n]))
"""


def test_without_opentelemetry_nothing_is_added_and_nothing_fails() -> None:
    # Blocked as if not installed; then installed but never imported by the app (a node, whose
    # dashboard adds through the SDK): nothing added, no span, opentelemetry never imported.
    for prelude in ("import sys; sys.modules['opentelemetry'] = None", "import sys"):
        lines = _fresh(prelude + textwrap.dedent(ADD_AND_SPAN)).splitlines()
        assert lines == ["[]", "['tenant']", "None", "[]"]
