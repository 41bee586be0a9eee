"""Celery's and Dramatiq's own OpenTelemetry instrumentations over disq, unchanged: a task
sent inside a span in this process runs, in a real worker process on a real 3-node cluster,
in a span of the same trace whose parent is the instrumentation's PRODUCER span. Celery's
(opentelemetry-instrumentation-celery) keeps the context in the task's message headers, and
Dramatiq's (opentelemetry-instrumentor-dramatiq) in the message's options: both travel in
the message disq carries as is. The workers write their spans, one JSON line each, to the
run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dramatiq
from celery import Celery
from eventually import eventually
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry_instrumentor_dramatiq import DramatiqInstrumentor
from task_apps import celery_worker, disq_url, dramatiq_worker, write_app

from cluster.lab import Lab
from disq.integrations.dramatiq import DisqBroker

# Each worker process exports its spans to runs/spans-<pid>.jsonl as they end.
_EXPORT = """
import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor


def _line(span):
    parent = span.parent
    return json.dumps({
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent else None,
    }) + "\\n"


def export_spans():
    out = open(os.path.join(os.environ["RUNS_DIR"], f"spans-{os.getpid()}.jsonl"), "a")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=_line)))
    trace.set_tracer_provider(provider)
"""

CELERY_OTEL_APP = (
    '''"""A Celery app on disq with Celery's OpenTelemetry instrumentation; no disq import."""
import os

from celery import Celery
from celery.signals import worker_process_init
from opentelemetry.instrumentation.celery import CeleryInstrumentor
'''
    + _EXPORT
    + """

app = Celery("capp", broker=os.environ["BROKER_URL"])
app.conf.broker_connection_retry_on_startup = True


@worker_process_init.connect(weak=False)
def instrument(*args, **kwargs):
    # In each pool process, as the instrumentation's documentation says for prefork.
    export_spans()
    CeleryInstrumentor().instrument()


@app.task
def traced(k):
    return k
"""
)

DRAMATIQ_OTEL_APP = (
    '''"""A Dramatiq app on disq with opentelemetry-instrumentor-dramatiq."""
import os

import dramatiq
from opentelemetry_instrumentor_dramatiq import DramatiqInstrumentor

from disq.integrations.dramatiq import DisqBroker
'''
    + _EXPORT
    + """

export_spans()
DramatiqInstrumentor().instrument()
dramatiq.set_broker(DisqBroker(os.environ["BROKER_URL"]))


@dramatiq.actor(queue_name=os.environ["QUEUE"], actor_name="traced")
def traced(k):
    return k
"""
)


def _worker_spans(app_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted((app_dir / "runs").glob("spans-*.jsonl"))
        for line in f.read_text().splitlines()
        if line.endswith("}")  # a line being written is not read half
    ]


def _one_span(spans: InMemorySpanExporter, kind: trace.SpanKind, prefix: str) -> ReadableSpan:
    [span] = [s for s in spans.get_finished_spans() if s.kind is kind and s.name.startswith(prefix)]
    return span


def _continues(consumer: dict[str, Any], producer: ReadableSpan) -> None:
    assert consumer["kind"] == "CONSUMER"
    assert consumer["trace_id"] == f"{producer.context.trace_id:032x}"
    assert consumer["parent_id"] == f"{producer.context.span_id:016x}"


def test_celery_s_instrumentation_carries_the_trace_over_disq(
    lab3: Lab, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app_dir = write_app(tmp_path, "capp", CELERY_OTEL_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "otel-celery", "w1", concurrency=1)
    CeleryInstrumentor().instrument()
    try:
        w.wait_for_log("ready.")
        with trace.get_tracer("test").start_as_current_span("request") as request:
            Celery("producer", broker=broker).send_task(
                "capp.traced", args=(1,), queue="otel-celery"
            )

        def ran() -> list[dict[str, Any]]:
            return [s for s in _worker_spans(app_dir) if s["name"] == "run/capp.traced"]

        eventually(lambda: len(ran()) == 1, "the task's span in the worker")
    finally:
        CeleryInstrumentor().uninstrument()
        w.stop()
    publish = _one_span(spans, trace.SpanKind.PRODUCER, "apply_async/")
    assert publish.parent is not None and publish.parent.span_id == request.context.span_id
    _continues(ran()[0], publish)


def test_dramatiq_s_instrumentation_carries_the_trace_over_disq(
    lab3: Lab, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    queue = "otel-dramatiq"
    app_dir = write_app(tmp_path, "dapp", DRAMATIQ_OTEL_APP)
    url = disq_url(lab3)
    w = dramatiq_worker(app_dir, url, queue, "w1", threads=1)
    broker = DisqBroker(url)
    DramatiqInstrumentor().instrument()
    try:
        w.wait_for_log("Worker process is ready for action.")
        actor: dramatiq.Actor[[int], int] = dramatiq.Actor(
            lambda k: k,
            broker=broker,
            actor_name="traced",
            queue_name=queue,
            priority=0,
            options={},
        )
        with trace.get_tracer("test").start_as_current_span("request"):
            actor.send(1)

        def ran() -> list[dict[str, Any]]:
            return [s for s in _worker_spans(app_dir) if s["kind"] == "CONSUMER"]

        eventually(lambda: len(ran()) == 1, "the message's span in the worker")
    finally:
        DramatiqInstrumentor().uninstrument()
        w.stop()
        broker.close()
    _continues(ran()[0], _one_span(spans, trace.SpanKind.SERVER, "dramatiq.producer."))
