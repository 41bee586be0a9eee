"""``disq.Worker``: consume queues with a handler, at-least-once made safe by default.

- ``concurrency`` handlers at a time; the worker asks for exactly as many jobs as it has free
  slots (one GetJobs for all of them), so a job never waits in the worker's memory while its
  retry clock runs.
- A handler that returns acks the job (acks of many jobs travel together: ``ack_nowait``);
  one that raises nacks it: the job is queued again at once and its nack counter grows.
- Heartbeats: while a handler runs, WORKING is sent every half of the job's retry time, so a
  long job is not delivered to someone else meanwhile. Disque refuses WORKING once half the
  job's TTL has passed (TOOLATE); the heartbeat stops there and the retry takes its course.
- Dead letters: a job delivered with ``nacks >= max_nacks`` or ``additional_deliveries >=
  max_deliveries`` (Disque's own counters, so the count survives worker crashes) is added
  to the ``dead_letter`` queue with the same body and headers and acked, instead of being
  handled again.
  The counters travel with the job (every copy keeps them, QUEUED, YOURJOBS and the AOF
  carry them), so redeliveries re-queued by any node count, wherever the worker fetches.
  With ``max_deliveries = k``, the first delivery that finds ``additional_deliveries >= k``
  (k re-queues by RETRY, i.e. k deliveries never acked in time; NACKs count apart, against
  ``max_nacks``) is dead-lettered.
- Results (``store_results=True``): a handler's return value (bytes, or a str as UTF-8;
  None stores nothing) is stored as the job's result, and the job is acked by that same
  call once the result is held (``RESULT SET ... ACK``): a client waits for it with
  ``client.result(job_id, timeout_s)``. A store that fails (NOREPL) nacks the job, so it
  runs again; a value of another type is a handler error (nacked).
- Shutdown (``stop()``, SIGTERM or SIGINT under ``run_forever``): no more fetching; running
  handlers get ``shutdown_grace_s`` to finish; what is still running then is nacked (async
  handlers are cancelled; a thread cannot be, its late result is ignored). Queued acks are
  sent before ``run`` returns. Nothing is lost: a job is acked only after its handler
  returned, and every other job comes back.

Sync handlers run in a thread pool of ``concurrency`` threads; async handlers on the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import signal
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog

from disq.client.aio import AsyncClient, Job
from disq.client.errors import DisqError, NoJobError, TooLateError
from disq.client.tracing import handler_failed, process_span

Handler = Callable[[Job], Any] | Callable[[Job], Awaitable[Any]]

FETCH_RETRY_MIN_S = 0.2
FETCH_RETRY_MAX_S = 5.0


@dataclass(slots=True)
class WorkerStats:
    fetched: int = 0
    acked: int = 0
    results_stored: int = 0
    nacked: int = 0
    dead_lettered: int = 0
    heartbeats: int = 0
    fetch_errors: int = 0


class Worker:
    def __init__(
        self,
        client: AsyncClient | str | Sequence[str],
        queues: str | Sequence[str],
        handler: Handler,
        *,
        concurrency: int = 4,
        dead_letter: str | None = None,
        max_nacks: int | None = None,
        max_deliveries: int | None = None,
        heartbeat: bool = True,
        shutdown_grace_s: float = 30.0,
        fetch_timeout_s: float = 1.0,
        client_options: dict[str, Any] | None = None,
        store_results: bool = False,
        result_ttl_s: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if (max_nacks is not None or max_deliveries is not None) and not dead_letter:
            raise ValueError("max_nacks / max_deliveries need a dead_letter queue")
        self._own_client = not isinstance(client, AsyncClient)
        self._client_arg = client
        self._client_options = dict(client_options or {})  # for the AsyncClient it creates
        self.client: AsyncClient | None = client if isinstance(client, AsyncClient) else None
        self.queues = [queues] if isinstance(queues, str) else list(queues)
        self.handler = handler
        self.concurrency = concurrency
        self.dead_letter = dead_letter
        self.max_nacks = max_nacks
        self.max_deliveries = max_deliveries
        self.heartbeat = heartbeat
        self.shutdown_grace_s = shutdown_grace_s
        self.fetch_timeout_s = fetch_timeout_s
        self.store_results = store_results
        self.result_ttl_s = result_ttl_s  # None: the job's own TTL (the node's default)
        self.stats = WorkerStats()
        self.log = structlog.get_logger("disq.worker")
        self._is_async = inspect.iscoroutinefunction(handler)
        self._stop: asyncio.Event | None = None
        self._running: dict[asyncio.Task[None], Job] = {}
        self._abandoned: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = False  # run() is going: stop() from now on is heard

    # ------------------------------------------------------------------ control
    def stop(self) -> None:
        """Ask the worker to shut down gracefully (thread-safe)."""
        loop, ev = self._loop, self._stop
        if loop is None or ev is None:
            return
        if loop.is_running():
            loop.call_soon_threadsafe(ev.set)

    def run_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
            await self.run()

        asyncio.run(main())

    async def run(self) -> None:
        """Fetch and handle jobs until :meth:`stop`."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.started = True
        if self.client is None:
            assert not isinstance(self._client_arg, AsyncClient)
            self.client = AsyncClient(self._client_arg, **self._client_options)
        if not self._is_async:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="disq-worker")
        try:
            await self._fetch_loop()
        finally:
            await self._shutdown()

    # ------------------------------------------------------------------ fetching
    async def _fetch_loop(self) -> None:
        assert self._stop is not None and self.client is not None
        stop = self._stop
        backoff = FETCH_RETRY_MIN_S
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                free = self.concurrency - len(self._running)
                if free <= 0:
                    await asyncio.wait(
                        [stopping, *self._running], return_when=asyncio.FIRST_COMPLETED
                    )
                    continue
                fetch = asyncio.ensure_future(
                    self.client.get_jobs(self.queues, count=free, timeout_s=self.fetch_timeout_s)
                )
                await asyncio.wait([stopping, fetch], return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    fetch.cancel()  # stopping: the node forgets the wait; nothing was taken
                    await asyncio.gather(fetch, return_exceptions=True)
                    break
                try:
                    jobs = fetch.result()
                except DisqError as exc:
                    self.stats.fetch_errors += 1
                    self.log.warning("fetch_failed", error=str(exc), retry_in_s=backoff)
                    await asyncio.wait([stopping], timeout=backoff)
                    backoff = min(FETCH_RETRY_MAX_S, backoff * 2)
                    continue
                backoff = FETCH_RETRY_MIN_S
                for job in jobs:
                    self.stats.fetched += 1
                    if self._is_dead(job):
                        await self._move_to_dead_letter(job)
                        continue
                    task = asyncio.ensure_future(self._handle(job))
                    self._running[task] = job
                    task.add_done_callback(self._running_done)
        finally:
            stopping.cancel()

    def _running_done(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)

    def _is_dead(self, job: Job) -> bool:
        if self.max_nacks is not None and job.nacks >= self.max_nacks:
            return True
        return self.max_deliveries is not None and job.additional_deliveries >= self.max_deliveries

    async def _move_to_dead_letter(self, job: Job) -> None:
        assert self.client is not None and self.dead_letter is not None
        try:
            # Its headers go along (a trace, a tenant): the dead letter is the same job.
            await self.client.add_job(self.dead_letter, job.body, headers=job.headers or None)
        except DisqError as exc:
            # Not moved: leave the job where it is; it comes back after its retry time.
            self.log.warning("dead_letter_failed", job=job.id, error=str(exc))
            return
        self.client.ack_nowait(job.id)
        self.stats.dead_lettered += 1
        self.log.info(
            "dead_lettered",
            job=job.id,
            queue=job.queue,
            to=self.dead_letter,
            nacks=job.nacks,
            additional_deliveries=job.additional_deliveries,
        )

    # ------------------------------------------------------------------ handling
    async def _handle(self, job: Job) -> None:
        # The job's span (disq/client/tracing.py) holds its handling, ack or nack included: a
        # no-op unless the app uses OpenTelemetry.
        with process_span(job) as span:
            await self._handle_in_span(job, span)

    async def _handle_in_span(self, job: Job, span: Any) -> None:
        assert self.client is not None
        beat = None
        if self.heartbeat and job.retry_s > 0:
            beat = asyncio.ensure_future(self._heartbeat(job))
        try:
            if self._is_async:
                value = await self.handler(job)
            else:
                loop = asyncio.get_running_loop()
                # The pool's threads do not get the task's context by themselves: the handler
                # runs in a copy of it, so the job's span is current there (its own spans and
                # adds continue the trace), as are the app's context variables.
                run = contextvars.copy_context().run
                value = await loop.run_in_executor(self._pool, run, self.handler, job)
            if self.store_results and value is not None and not isinstance(value, bytes | str):
                raise TypeError(f"a stored result is bytes or str, not {type(value).__name__}")
        except asyncio.CancelledError:
            raise  # shutdown: the job is nacked there
        except Exception as exc:
            if job.id in self._abandoned:
                return
            self.log.warning("handler_failed", job=job.id, queue=job.queue, error=repr(exc))
            if span is not None:
                handler_failed(span, exc)
            await self._nack(job)
            return
        finally:
            if beat is not None:
                beat.cancel()
        if job.id in self._abandoned:
            return  # shutdown already nacked it; a late success must not ack a requeued job
        if self.store_results and value is not None:
            try:
                await self.client.set_result(job.id, value, ttl_s=self.result_ttl_s, ack=True)
            except DisqError as exc:
                self.log.warning("result_not_stored", job=job.id, error=str(exc))
                await self._nack(job)
                return
            self.stats.results_stored += 1
        else:
            self.client.ack_nowait(job.id)
        self.stats.acked += 1

    async def _nack(self, job: Job) -> None:
        assert self.client is not None
        try:
            await self.client.nack(job.id)
            self.stats.nacked += 1
        except DisqError as exc:
            self.log.warning("nack_failed", job=job.id, error=str(exc))

    async def _heartbeat(self, job: Job) -> None:
        assert self.client is not None
        interval = max(0.1, job.retry_s / 2)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.client.working(job.id)
                self.stats.heartbeats += 1
            except (TooLateError, NoJobError) as exc:
                self.log.info("heartbeat_stopped", job=job.id, reason=exc.reason)
                return
            except DisqError as exc:
                self.log.warning("heartbeat_failed", job=job.id, error=str(exc))

    # ------------------------------------------------------------------ shutdown
    async def _shutdown(self) -> None:
        assert self.client is not None
        if self._running:
            _, pending = await asyncio.wait(list(self._running), timeout=self.shutdown_grace_s)
            for task in pending:
                job = self._running.get(task)
                if job is None:
                    continue
                self._abandoned.add(job.id)
                task.cancel()
                await self._nack(job)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        await self.client.flush()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_client:
            await self.client.close()
        self.log.info(
            "worker_stopped",
            acked=self.stats.acked,
            nacked=self.stats.nacked,
            dead_lettered=self.stats.dead_lettered,
        )
