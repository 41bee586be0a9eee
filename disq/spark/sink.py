"""``df.write.format("disq")``: a DataFrame into a queue, as jobs, in batched AddJobs calls.

Options (all strings, as Spark passes them; names are case-insensitive):

- ``nodes`` (required): gRPC addresses, ``host:port[,host:port...]``
- ``queue``: the queue, unless the rows have a ``queue`` column
- ``replicate`` (1 to 65535, and at most the cluster's size), ``retry`` (>= 0), ``ttl``
  (>= 1), ``delay`` (>= 0, below ttl), all in seconds but replicate; ``async`` (true/false),
  ``replTimeoutMs`` (default 30000, the SDK's is 5000: a bulk write waits for its copies rather
  than fail a task): ADDJOB's options, unless a row has the column of the same name
  (``replicate``, ``retry_s``, ``ttl_s``, ``delay_s``: integer columns)
- ``bodyColumn`` (default ``body``): string or binary
- ``batchSize`` (default 500): jobs per AddJobs; ``inFlightBatches`` (default 4): concurrent
  AddJobs per task
- ``maxBodyBytes`` (default and ceiling 60 MiB, under the SDK's 64 MiB message cap)
- ``bufferBytes`` (default 64 MiB): how much of a partition's bodies are checked before the
  first of them is sent (see "Bad rows")
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

Checked on the driver, before any task starts (DisqSinkError naming the option): every
option above, the columns and their types, append mode, and that ``nodes`` answer as disq's
gRPC ports (Hello: the cluster's size bounds ``replicate``).

Bad rows: a row the node would refuse (a null body, a body over maxBodyBytes, a row option
out of its range, no queue) fails its task with DisqSinkError naming the row's position in
its partition. Rows are checked before they are sent: a partition whose bodies fit in
``bufferBytes`` is checked whole first, so a bad row means nothing of that partition was
written. A larger partition is checked and sent span by span (bufferBytes each, so that a
task's memory stays bounded): rows of the spans before the bad row's were written, and the
error says how many. Other partitions are written or not as their own tasks went. After the
data is fixed, a write with the same ``writeId`` adds nothing twice (each row's key is its
position in its partition, so the partitioning must be the same).

Only appends: overwrite makes no sense for a queue and is refused.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from disq.spark.batches import (
    DEFAULT_TTL_S,
    MAX_QUEUE_NAME_BYTES,
    MAX_REPLICATE,
    ROW_OPTIONS,
    BadRow,
    RowRules,
    body_bytes,
    check_batch,
    jobs_of,
)
from disq.spark.options import Connection, DisqSparkError, Options
from disq.spark.queue_stream import QueueStreamReader
from disq.spark.snapshot import SCHEMA as SNAPSHOT_SCHEMA
from disq.spark.snapshot import SnapshotReader

KNOWN_COLUMNS = {"queue", "idempotency_key", *ROW_OPTIONS}
MAX_BODY_BYTES = 60 << 20
BATCH_MAX_BYTES = 16 << 20  # one AddJobs's bodies, well under the SDK's 64 MiB message cap
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


class DisqSinkError(DisqSparkError):
    """A bad option, column, mode or row of the sink, named in the message. Options,
    columns and mode are checked on the driver, before any task starts; a bad row fails
    its task (see the module's "Bad rows" for what was written)."""


@dataclass
class AddedJobs(WriterCommitMessage):
    partition: int
    attempt: int
    jobs: int


class DisqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "disq"

    def schema(self) -> str:
        return SNAPSHOT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SnapshotReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
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


def _check_columns(schema: StructType, body_column: str) -> list[str]:
    fields = {f.name: f for f in schema.fields}
    body = fields.get(body_column)
    if body is None:
        raise DisqSinkError(
            f"option bodyColumn: no body column {body_column!r} "
            f"(columns: {', '.join(fields) or 'none'}); name it with option bodyColumn"
        )
    if not isinstance(body.dataType, StringType | BinaryType):
        raise DisqSinkError(
            f"option bodyColumn: body column {body_column!r} must be string or binary, "
            f"not {body.dataType.simpleString()}"
        )
    unknown = set(fields) - KNOWN_COLUMNS - {body_column}
    if unknown:
        raise DisqSinkError(
            f"unknown columns {sorted(unknown)}: a row may have {sorted(KNOWN_COLUMNS)} "
            "besides its body (drop the others before writing)"
        )
    for name in ("queue", "idempotency_key"):
        if name in fields and not isinstance(fields[name].dataType, StringType):
            raise DisqSinkError(
                f"column {name} must be string, not {fields[name].dataType.simpleString()}"
            )
    for name in ROW_OPTIONS:
        if name in fields and not isinstance(fields[name].dataType, _INTEGRAL):
            raise DisqSinkError(
                f"column {name} must be an integer type, not {fields[name].dataType.simpleString()}"
            )
    return list(fields)


class DisqWriter(DataSourceArrowWriter):
    """Made on the driver (options, columns and the nodes checked there), pickled to the
    tasks, which get the rows as Arrow batches."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = Options(options, DisqSinkError)
        body_column = opts.get("bodyColumn", "body") or "body"
        columns = _check_columns(schema, body_column)
        queue = opts.get("queue")
        if queue is not None:
            if not queue:
                raise DisqSinkError("option queue must not be empty")
            if len(queue.encode("utf-8", "surrogatepass")) > MAX_QUEUE_NAME_BYTES:
                raise DisqSinkError(f"option queue is longer than {MAX_QUEUE_NAME_BYTES} bytes")
        elif "queue" not in columns:
            raise DisqSinkError("option queue is required unless the rows have a queue column")
        replicate = opts.integer("replicate", None, minimum=1, maximum=MAX_REPLICATE)
        retry = opts.integer("retry", None, what=" (seconds)")
        ttl = opts.integer("ttl", None, minimum=1, what=" (seconds)")
        delay = opts.integer("delay", 0, what=" (seconds)") or 0
        if delay >= (ttl if ttl is not None else DEFAULT_TTL_S):
            raise DisqSinkError(
                f"option delay ({delay} s) must be below ttl "
                f"({ttl if ttl is not None else DEFAULT_TTL_S} s): the jobs would never run"
            )
        defaults: dict[str, Any] = {
            "replicate": replicate,
            "retry_s": retry,
            "ttl_s": ttl,
            "delay_s": delay,
            # A bulk write would rather wait for its copies than fail a task (and, in local
            # mode, which retries no task, the whole write) when the nodes are slow for a
            # while: 30 s, not the SDK's 5 s.
            "repl_timeout_ms": opts.integer("replTimeoutMs", 30_000, minimum=1),
            "async_": opts.boolean("async", False),
        }
        self.batch_size = opts.integer("batchSize", 500, minimum=1) or 1
        self.in_flight = opts.integer("inFlightBatches", 4, minimum=1) or 1
        max_body = opts.integer("maxBodyBytes", MAX_BODY_BYTES, minimum=1, maximum=MAX_BODY_BYTES)
        self.buffer_bytes = opts.integer("bufferBytes", 64 << 20, minimum=1) or 1
        self.idempotent = opts.boolean("idempotency", True)
        self.write_id = opts.get("writeId") or uuid.uuid4().hex
        # Fault injection for tests of the exactly-once path: partition 0 fails after this
        # many rows, in its first attempt only (Spark runs the task again) or in every one
        # (the write, or the streaming batch, fails; a restarted query runs it again).
        self.fail_first_attempt_after = opts.integer("_failFirstAttemptAfter", None)
        self.fail_after = opts.integer("_failAfter", None)
        # ... and this one fails without waiting for its adds in flight (sent, no answer
        # yet): the task's retry meets adds of the failed attempt that are not decided yet.
        self.fail_in_flight_after = opts.integer("_failFirstAttemptInFlightAfter", None)
        # Last, the nodes: every local mistake is named before the network is tried.
        self.connection: Connection = opts.connection()
        size = len(self.connection.hello().nodes) or 1
        if replicate is not None and replicate > size:
            raise DisqSinkError(
                f"option replicate is {replicate}, but the cluster has {size} node"
                f"{'s' if size > 1 else ''}: no job could get its copies"
            )
        default_replicate = replicate if replicate is not None else min(3, size)
        if retry == 0 and default_replicate > 1:
            raise DisqSinkError(
                "option retry 0 (at-most-once delivery) needs option replicate 1, "
                f"not {default_replicate}"
            )
        self.rules = RowRules(body_column, queue, defaults, default_replicate, max_body or 1)

    # ------------------------------------------------------------------ on the executors
    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        n = self.run(iterator, self.write_id, partition, attempt)
        return AddedJobs(partition, attempt, n)

    def run(
        self, batches: Iterator[pa.RecordBatch], prefix: str, partition: int, attempt: int
    ) -> int:
        """Write one partition; a bad row raises DisqSinkError with only the message that
        matters (Spark shows the task's Python traceback under it)."""
        try:
            return asyncio.run(self._write(batches, prefix, partition, attempt))
        except _PartitionBadRow as exc:
            raise DisqSinkError(str(exc)) from None

    async def _write(
        self, batches: Iterator[pa.RecordBatch], prefix: str, partition: int, attempt: int
    ) -> int:
        fail_after = None
        in_flight_fail = False
        if partition == 0:
            fail_after = self.fail_after
            if attempt == 0 and self.fail_first_attempt_after is not None:
                fail_after = self.fail_first_attempt_after
            if attempt == 0 and self.fail_in_flight_after is not None:
                fail_after, in_flight_fail = self.fail_in_flight_after, True
        key_prefix = f"{prefix}/{partition}" if self.idempotent else None
        async with self.connection.async_client() as client:
            if len(client.seeds) > 1:
                # Each attempt of a partition starts on its own node (see the docstring).
                client.last_node = client.seeds[(partition + attempt) % len(client.seeds)]
            sender = _Sender(client, self.batch_size, self.in_flight)
            held: list[tuple[int, pa.RecordBatch]] = []
            held_bytes = 0
            row = 0  # the position in the partition of the next batch's first row
            for batch in batches:
                try:
                    check_batch(batch, row, self.rules)
                except BadRow as exc:
                    await sender.finish()
                    raise _PartitionBadRow(partition, exc, sender.sent) from None
                held.append((row, batch))
                row += batch.num_rows
                held_bytes += body_bytes(batch, self.rules.body_column)
                if held_bytes >= self.buffer_bytes:
                    await self._send(sender, held, key_prefix, fail_after, in_flight_fail)
                    held, held_bytes = [], 0
            await self._send(sender, held, key_prefix, fail_after, in_flight_fail)
            await sender.finish()
            return sender.sent

    async def _send(
        self,
        sender: _Sender,
        held: list[tuple[int, pa.RecordBatch]],
        key_prefix: str | None,
        fail_after: int | None,
        in_flight_fail: bool,
    ) -> None:
        for first_row, batch in held:
            for job in jobs_of(batch, first_row, self.rules, key_prefix):
                if fail_after is not None and sender.queued == fail_after:
                    await sender.fail_injected(in_flight_fail)
                await sender.add(job)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: each job was acknowledged by the cluster as it was added."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be taken back: jobs of failed tasks stay (their retries add none)."""


class _PartitionBadRow(Exception):
    def __init__(self, partition: int, bad: BadRow, written: int) -> None:
        where = f"row {bad.index} of partition {partition}: {bad.problem}"
        if written:
            done = (
                f"the {written} rows before it in this partition were written (it is over "
                "bufferBytes, so it was checked and sent in spans); a write with the same "
                "writeId adds them nothing twice"
            )
        else:
            done = "nothing of this partition was written"
        super().__init__(f"{where}; {done}")


class _Sender:
    """One task's AddJobs calls: batches of ``batch_size`` jobs (or BATCH_MAX_BYTES of
    bodies), ``in_flight`` of them at once; the first per-job error fails the task."""

    def __init__(self, client: Any, batch_size: int, in_flight: int) -> None:
        self.client = client
        self.batch_size = batch_size
        self.in_flight = in_flight
        self.pending: set[asyncio.Task[list[Any]]] = set()
        self.batch: list[dict[str, Any]] = []
        self.batch_bytes = 0
        self.queued = 0  # jobs handed to add()
        self.sent = 0  # jobs in answered AddJobs calls

    async def add(self, job: dict[str, Any]) -> None:
        self.batch.append(job)
        self.queued += 1
        self.batch_bytes += len(job["body"])
        if len(self.batch) >= self.batch_size or self.batch_bytes >= BATCH_MAX_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        if not self.batch:
            return
        jobs, self.batch, self.batch_bytes = self.batch, [], 0
        self.pending.add(asyncio.ensure_future(self.client.add_jobs(jobs)))
        while len(self.pending) >= self.in_flight:
            done, _ = await asyncio.wait(self.pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                self.pending.discard(t)
                self._check(t.result())

    def _check(self, results: list[Any]) -> None:
        from disq.client import DisqError

        for r in results:
            if isinstance(r, DisqError):
                raise r  # the task fails; Spark retries it; the keys keep it exact
        self.sent += len(results)

    async def finish(self) -> None:
        await self._flush()
        while self.pending:
            t = self.pending.pop()
            self._check(await t)

    async def fail_injected(self, in_flight: bool) -> None:
        """The ``_fail*`` test options: fail now, after waiting for the adds sent so far,
        or (``in_flight``) with the last ones sent and unanswered."""
        index = self.queued
        if in_flight:
            if self.batch:
                self.pending.add(asyncio.ensure_future(self.client.add_jobs(self.batch)))
                self.batch = []
            for _ in range(3):
                await asyncio.sleep(0)  # the last batches leave, unanswered
            raise RuntimeError(
                f"injected failure after {index} rows with "
                f"{sum(not t.done() for t in self.pending)} AddJobs in flight"
            )
        await self.finish()
        raise RuntimeError(f"injected failure after {index} rows (a _fail* test option)")


class DisqStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("disq")``: each micro-batch as a batch write. The keys are
    ``<query id>/<batch id>/<partition>/<row>``: a batch that Spark runs again after a
    failure or a restart of the query (same checkpoint, same query id, same batch id) adds
    nothing twice, as long as the batch's rows are the same (a replayable source)."""

    def __init__(self, inner: DisqWriter) -> None:
        self.inner = inner

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        prefix = f"{query or self.inner.write_id}/{batch or 0}"
        n = self.inner.run(iterator, prefix, partition, attempt)
        return AddedJobs(partition, attempt, n)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every job was acknowledged as it was added."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing can be taken back; the batch's retry adds nothing twice."""
