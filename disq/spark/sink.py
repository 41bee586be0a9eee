"""``df.write.format("disq")``: a DataFrame into a queue, as jobs, in batched AddJobs calls.

Options (all strings, as Spark passes them):

- ``nodes`` (required): gRPC addresses, ``host:port[,host:port...]``
- ``queue``: the queue, unless the rows have a ``queue`` column
- ``replicate``, ``retry``, ``ttl``, ``delay`` (seconds), ``async`` (true/false),
  ``replTimeoutMs``: ADDJOB's options, unless a row has the column of the same name
  (``replicate``, ``retry_s``, ``ttl_s``, ``delay_s``)
- ``bodyColumn`` (default ``body``): string or binary
- ``batchSize`` (default 500): jobs per AddJobs; ``inFlightBatches`` (default 4): concurrent
  AddJobs per task
- ``idempotency`` (default ``on``): every row gets the key ``<writeId>/<partition>/<row>``,
  so a task that Spark runs again adds nothing twice (exactly-once into the queue, within the
  nodes' key window); ``off``: at-least-once. A row's own ``idempotency_key`` column wins.
- ``writeId``: the key prefix (default: a fresh id per write, fixed on the driver, so a
  retried task uses the same keys); set it to make a whole re-run of the job idempotent.
  A retried task starts on another node of ``nodes`` than its previous attempt (attempt a of
  partition p prefers node (p + a) mod n): the keys make that safe, even for adds of the
  failed attempt still in flight (a node holding an unfinished add's copy holds the retry
  until that add is decided), and a node that failed the task is not tried first again.
- ``password``
- ``tlsCa``, ``tlsCert``, ``tlsKey``: TLS to the nodes (paths on the driver, read there and
  shipped to the tasks): the CA of the nodes' certificates, and the client certificate and
  key of nodes that require one. Plaintext unless one is given. The sources take them too.

Only appends: overwrite makes no sense for a queue and is refused.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

# Row columns that override an option for that row (named as add_job's arguments).
ROW_OPTIONS = ("replicate", "retry_s", "ttl_s", "delay_s")
KNOWN_COLUMNS = {"queue", "idempotency_key", *ROW_OPTIONS}


class DisqSinkError(ValueError):
    """A bad option, column or mode, found before anything is written."""


@dataclass
class AddedJobs(WriterCommitMessage):
    partition: int
    attempt: int
    jobs: int


def _lower(options: dict[str, str]) -> dict[str, str]:
    """Spark's option names are case-insensitive."""
    return {k.lower(): v for k, v in options.items()}


def _connection(lower: dict[str, str]) -> tuple[str, str | None]:
    """(nodes, password) from the options; nodes is required."""
    nodes = lower.get("nodes")
    if not nodes:
        raise DisqSinkError("option nodes is required: host:port[,host:port...] (gRPC ports)")
    return nodes, lower.get("password")


def _tls_options(lower: dict[str, str]) -> dict[str, Any]:
    """The client's tls_* options from tlsCa/tlsCert/tlsKey, the files read now (on the
    driver), so the tasks need no copy of them."""
    from disq.tls import TlsError, read_pem

    out: dict[str, Any] = {}
    for option, arg, what in (
        ("tlsca", "tls_ca", "CA certificate"),
        ("tlscert", "tls_cert", "certificate"),
        ("tlskey", "tls_key", "key"),
    ):
        path = lower.get(option)
        if path:
            try:
                pem = read_pem(path, what)
            except TlsError as exc:
                raise DisqSinkError(str(exc)) from None
            assert pem is not None
            out[arg] = pem
    if ("tls_cert" in out) != ("tls_key" in out):
        raise DisqSinkError("options tlsCert and tlsKey go together")
    return out


def _bool(v: str | None, default: bool) -> bool:
    if v is None:
        return default
    if v.lower() in ("true", "1", "yes", "on"):
        return True
    if v.lower() in ("false", "0", "no", "off"):
        return False
    raise DisqSinkError(f"not a boolean: {v!r}")


def _int(options: dict[str, str], name: str, default: int | None) -> int | None:
    v = options.get(name)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError as exc:
        raise DisqSinkError(f"option {name} must be an integer, not {v!r}") from exc
    if n < 0:
        raise DisqSinkError(f"option {name} must not be negative")
    return n


class DisqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "disq"

    def schema(self) -> str:
        from disq.spark.snapshot import SCHEMA

        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from disq.spark.snapshot import SnapshotReader

        return SnapshotReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from disq.spark.queue_stream import QueueStreamReader

        return QueueStreamReader(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DisqStreamWriter:
        if overwrite:
            raise DisqSinkError("the disq sink only appends (output mode 'append')")
        return DisqStreamWriter(DisqWriter(dict(self.options), schema))

    def writer(self, schema: StructType, overwrite: bool) -> DisqWriter:
        if overwrite:
            raise DisqSinkError(
                "the disq sink only appends (mode 'append'); a queue cannot be overwritten"
            )
        return DisqWriter(dict(self.options), schema)


class DisqWriter(DataSourceWriter):
    """Made on the driver (options and columns checked there), pickled to the tasks."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        lower = _lower(options)
        self.nodes, self.password = _connection(lower)
        self.tls = _tls_options(lower)
        self.body_column = lower.get("bodycolumn", "body")
        fields = {f.name: f for f in schema.fields}
        body = fields.get(self.body_column)
        if body is None:
            raise DisqSinkError(
                f"no body column {self.body_column!r} (columns: {', '.join(fields) or 'none'}); "
                "name it with option bodyColumn"
            )
        if not isinstance(body.dataType, StringType | BinaryType):
            raise DisqSinkError(
                f"body column {self.body_column!r} must be string or binary, "
                f"not {body.dataType.simpleString()}"
            )
        unknown = set(fields) - KNOWN_COLUMNS - {self.body_column}
        if unknown:
            raise DisqSinkError(
                f"unknown columns {sorted(unknown)}: a row may have {sorted(KNOWN_COLUMNS)} "
                "besides its body (drop the others before writing)"
            )
        self.columns = [c for c in fields if c != self.body_column]
        self.queue = lower.get("queue")
        if not self.queue and "queue" not in fields:
            raise DisqSinkError("option queue is required unless the rows have a queue column")
        self.defaults: dict[str, Any] = {
            "replicate": _int(lower, "replicate", None),
            "retry_s": _int(lower, "retry", None),
            "ttl_s": _int(lower, "ttl", None),
            "delay_s": _int(lower, "delay", 0),
            "repl_timeout_ms": _int(lower, "repltimeoutms", 5000),
            "async_": _bool(lower.get("async"), False),
        }
        self.batch_size = max(1, _int(lower, "batchsize", 500) or 1)
        self.in_flight = max(1, _int(lower, "inflightbatches", 4) or 1)
        self.idempotent = _bool(lower.get("idempotency"), True)
        self.write_id = lower.get("writeid") or uuid.uuid4().hex
        # Fault injection for tests of the exactly-once path: partition 0 fails after this
        # many rows, in its first attempt only (Spark runs the task again) or in every one
        # (the write, or the streaming batch, fails; a restarted query runs it again).
        self.fail_first_attempt_after = _int(lower, "_failfirstattemptafter", None)
        self.fail_after = _int(lower, "_failafter", None)
        # ... and this one fails without waiting for its adds in flight (sent, no answer
        # yet): the task's retry meets adds of the failed attempt that are not decided yet.
        self.fail_in_flight_after = _int(lower, "_failfirstattemptinflightafter", None)

    # ------------------------------------------------------------------ on the executors
    def write(self, iterator: Iterator[Any]) -> AddedJobs:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        n = asyncio.run(self._write(iterator, self.write_id, partition, attempt))
        return AddedJobs(partition, attempt, n)

    async def _write(self, rows: Iterator[Any], prefix: str, partition: int, attempt: int) -> int:
        from disq.client import AsyncClient, DisqError

        fail_after = None
        in_flight_fail = False
        if partition == 0:
            fail_after = self.fail_after
            if attempt == 0 and self.fail_first_attempt_after is not None:
                fail_after = self.fail_first_attempt_after
            if attempt == 0 and self.fail_in_flight_after is not None:
                fail_after, in_flight_fail = self.fail_in_flight_after, True
        async with AsyncClient(
            self.nodes, password=self.password, timeout_s=30, **self.tls
        ) as client:
            if len(client.seeds) > 1:
                # Each attempt of a partition starts on its own node (see the docstring).
                client.last_node = client.seeds[(partition + attempt) % len(client.seeds)]
            pending: set[asyncio.Task[list[Any]]] = set()
            batch: list[dict[str, Any]] = []
            written = 0

            async def flush(jobs: list[dict[str, Any]]) -> None:
                pending.add(asyncio.ensure_future(client.add_jobs(jobs)))
                while len(pending) >= self.in_flight:
                    done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for t in done:
                        pending.discard(t)
                        _check(t.result())

            def _check(results: list[Any]) -> None:
                for r in results:
                    if isinstance(r, DisqError):
                        raise r  # the task fails; Spark retries it; the keys keep it exact

            for index, row in enumerate(rows):
                if fail_after is not None and index == fail_after:
                    if in_flight_fail:
                        if batch:
                            pending.add(asyncio.ensure_future(client.add_jobs(batch)))
                        for _ in range(3):
                            await asyncio.sleep(0)  # the last batches leave, unanswered
                        raise RuntimeError(
                            f"injected failure after {index} rows with "
                            f"{sum(not t.done() for t in pending)} AddJobs in flight"
                        )
                    for t in pending:
                        _check(await t)
                    raise RuntimeError(
                        f"injected failure after {index} rows (a _fail* test option)"
                    )
                batch.append(self._job(row, prefix, partition, index))
                if len(batch) >= self.batch_size:
                    written += len(batch)
                    await flush(batch)
                    batch = []
            if batch:
                written += len(batch)
                await flush(batch)
            for t in pending:
                _check(await t)
            return written

    def _job(self, row: Any, prefix: str, partition: int, index: int) -> dict[str, Any]:
        d = row.asDict()
        body = d[self.body_column]
        if body is None:
            raise DisqSinkError(f"row {index} of partition {partition} has a null body")
        job: dict[str, Any] = {
            "queue": d.get("queue") or self.queue,
            "body": bytes(body) if isinstance(body, bytearray | memoryview) else body,
            **self.defaults,
        }
        for column in ROW_OPTIONS:
            v = d.get(column)
            if v is not None:
                job[column] = int(v)
        key = d.get("idempotency_key")
        if key:
            job["idempotency_key"] = key
        elif self.idempotent:
            job["idempotency_key"] = f"{prefix}/{partition}/{index}"
        return job

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: each job was acknowledged by the cluster as it was added."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be taken back: jobs of failed tasks stay (their retries add none)."""


class DisqStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("disq")``: each micro-batch as a batch write. The keys are
    ``<query id>/<batch id>/<partition>/<row>``: a batch that Spark runs again after a
    failure or a restart of the query (same checkpoint, same query id, same batch id) adds
    nothing twice, as long as the batch's rows are the same (a replayable source)."""

    def __init__(self, inner: DisqWriter) -> None:
        self.inner = inner

    def write(self, iterator: Iterator[Any]) -> AddedJobs:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        prefix = f"{query or self.inner.write_id}/{batch or 0}"
        n = asyncio.run(self.inner._write(iterator, prefix, partition, attempt))
        return AddedJobs(partition, attempt, n)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every job was acknowledged as it was added."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing can be taken back; the batch's retry adds nothing twice."""
