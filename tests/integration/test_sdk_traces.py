"""Trace context through jobs on a real 3-node cluster (cluster/lab.py): adds made in a span
(the blocking add, a batch of add_jobs on the client's loop thread, an AsyncClient's add, a
publish)
carry it in their headers, and ``disq.Worker`` handles each job in a CONSUMER span of the
same trace whose parent is the producer's span; without opentelemetry, in a fresh process,
the same round trip adds no header and fails nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402
from test_sdk import PINNED, addr, running  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import AsyncClient, Client, Job  # noqa: E402
from disq.worker import Worker  # noqa: E402


def test_a_worker_span_continues_the_producer_s_trace(
    lab3: Lab, spans: InMemorySpanExporter
) -> None:
    queue = "traced"
    tracer = trace.get_tracer("test")
    with Client(addr(lab3, 0), discover=False) as c:
        c.declare_exchange("traced-fan", "fanout")
        c.bind_queue(queue, "traced-fan")
        with tracer.start_as_current_span("produce", kind=trace.SpanKind.PRODUCER) as producer:
            lone = c.add_job(queue, "lone", replicate=2)  # the blocking add, on this thread
            # A batch runs on the client's loop thread: the caller's context goes with it.
            batch = c.add_jobs(
                [{"queue": queue, "body": "batch"}, {"queue": queue, "body": "fail-once"}]
            )

            async def add_async() -> str:
                async with AsyncClient(addr(lab3, 1), discover=False) as ac:
                    return await ac.add_job(queue, "async", replicate=2)

            # asyncio.run copies this thread's context into its task: the span is current.
            aio = asyncio.run(add_async())
            published = c.publish("traced-fan", "", "published", replicate=2)
        assert all(isinstance(j, str) for j in batch) and len(published) == 1
        ids = {lone, aio, *published, *(j for j in batch if isinstance(j, str))}
        untraced = c.add_job(queue, "outside", replicate=2)  # no span: a trace of its own

        in_handler: dict[bytes, trace.SpanContext] = {}
        failed: list[bytes] = []
        lock = threading.Lock()

        def handler(job: Job) -> None:
            with lock:
                # The worker's span is current in the pool's thread.
                in_handler.setdefault(job.body, trace.get_current_span().get_span_context())
                if job.body == b"fail-once" and not failed:
                    failed.append(job.body)
                    raise RuntimeError("first delivery fails")

        w = Worker(addr(lab3, 0), queue, handler, concurrency=2, fetch_timeout_s=0.2, **PINNED)
        with running(w) as errors:
            eventually(lambda: w.stats.acked == 6, "six jobs acked")

            def processed() -> list[ReadableSpan]:
                return [s for s in spans.get_finished_spans() if s.name == f"{queue} process"]

            eventually(lambda: len(processed()) == 7, "seven spans ended (one job ran twice)")
        assert not errors

    ctx = producer.get_span_context()
    by_id: dict[str, list[ReadableSpan]] = {}
    for s in processed():
        assert s.kind is trace.SpanKind.CONSUMER
        attrs = dict(s.attributes or {})
        assert attrs["messaging.system"] == "disq"
        assert attrs["messaging.destination.name"] == queue
        by_id.setdefault(str(attrs["messaging.message.id"]), []).append(s)
    assert set(by_id) == ids | {untraced}
    for job_id in ids:
        for s in by_id[job_id]:
            assert s.parent is not None and s.parent.span_id == ctx.span_id, job_id
            assert s.context.trace_id == ctx.trace_id
    [outside] = by_id[untraced]
    assert outside.parent is None and outside.context.trace_id != ctx.trace_id
    retried = sorted(by_id[batch[1]], key=lambda s: s.start_time or 0)  # type: ignore[index]
    assert [s.attributes["disq.job.deliveries"] for s in retried] == [1, 2]  # type: ignore[index]
    assert retried[0].status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in retried[0].events] == ["exception"]
    assert retried[1].status.status_code is trace.StatusCode.UNSET
    spans_by_body = {s.context.span_id for ss in by_id.values() for s in ss}
    assert {sc.span_id for sc in in_handler.values()} <= spans_by_body
    assert len(in_handler) == 6


def test_without_opentelemetry_jobs_carry_no_trace_and_run(lab3: Lab) -> None:
    # opentelemetry-api blocked as if not installed: the add and the worker work as before.
    code = f"""
        import sys
        sys.modules["opentelemetry"] = None
        import asyncio, threading
        from disq.client import Client
        from disq.worker import Worker
        seen = []
        done = threading.Event()
        def handler(job):
            seen.append(dict(job.headers))
            if len(seen) == 2:
                done.set()
        with Client({addr(lab3, 2)!r}, discover=False) as c:
            c.add_job("untraced", "x", replicate=2)
            c.add_job("untraced-tenant", "x", replicate=2, headers={{"tenant": "acme"}})
        w = Worker({addr(lab3, 2)!r}, ["untraced", "untraced-tenant"], handler,
                   fetch_timeout_s=0.2, client_options={{"discover": False}})
        async def main():
            run = asyncio.ensure_future(w.run())
            assert await asyncio.to_thread(done.wait, 30)
            w.stop()  # the running handlers finish and their acks are sent before run returns
            await run
        asyncio.run(asyncio.wait_for(main(), 60))
        print(sorted(map(sorted, seen)), w.stats.acked, w.stats.nacked)
        print([n for n in sys.modules if n.startswith("opentelemetry") and sys.modules[n]])
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["[[], ['tenant']] 2 0", "[]"]
