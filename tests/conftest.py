"""Settings for the whole suite, applied before any test module imports grpc.

gRPC's fork support (grpcio 1.81 and later, grpc/grpc#43055): when the test process has
live channels (the SDK's in-process clients) and a test starts a subprocess with
``preexec_fn`` (the CLI's ``top``, Spark's gateway, ...), the fork handler restarts gRPC's
poller in the child before its ``exec``, and the child can die on ``epoll_wait: Bad file
descriptor`` (seen in two full runs: Spark's gateway and ``disq top`` exited at once). The
suite forks only to exec, so it turns fork support off, as gRPC's maintainers advise for
fork-then-exec programs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


@pytest.fixture
def spans() -> Iterator[Any]:
    """OpenTelemetry's SDK provider for the process (set once: OpenTelemetry refuses a
    second), exporting to a fresh in-memory exporter for this test (an
    ``InMemorySpanExporter``; the SDK is imported only by the tests that ask for it)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # the processor stays (no removal): a shut exporter drops its spans
