"""``spark.readStream.format("disq").option("queue", q)``: consume a queue's jobs as a stream,
acking them when Spark commits the micro-batch that carried them.

At every trigger the driver takes up to ``maxJobsPerTrigger`` jobs (GETJOB NOHANG on every
node, since Disque's queues are per node) and keeps them until Spark has committed the batch;
then it acks them (each at the node that created it): at the next trigger (micro-batches run
one after the other, so by then the batch is in the sink and the commit log) or in
``commit``, whichever comes first. A batch that fails, or a query that stops
before committing, leaves its jobs unacked: disq delivers them again after their retry time,
to this query or to any consumer. So the stream is at-least-once, and a job's
``additional_deliveries`` tells a redelivery apart.

A restarted query may be asked for a batch its previous driver had taken: those jobs are no
longer in memory, the batch is empty, and the jobs come back by their retry as said.

Options: ``nodes`` (required), ``queue`` (required; several, comma-separated),
``maxJobsPerTrigger`` (default 1000), ``password``. Columns: those of the snapshot read
(disq/spark/snapshot.py), one data source's schema: node (where it was taken), id, queue,
state (``delivered``), body, nacks, additional_deliveries, retry_s; ctime and ttl_s are null
(GETJOB does not give them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from disq.spark.options import DisqSparkError, Options

Row = tuple[str, str, str, str, bytes, int, int, None, None, int]


@dataclass
class TakenJobs(InputPartition):
    rows: list[Row] = field(default_factory=list)


class QueueStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        opts = Options(options)
        self.queues = [q for q in (opts.get("queue") or "").split(",") if q]
        if not self.queues:
            raise DisqSparkError("option queue is required: readStream.format('disq') consumes it")
        self.max_per_trigger = opts.integer("maxJobsPerTrigger", 1000, minimum=1) or 1
        self.connection = opts.connection()
        # Taken and not yet committed: {(start, end) of the offsets: jobs}.
        self.taken: dict[tuple[int, int], list[Row]] = {}

    def initialOffset(self) -> dict[str, int]:
        return {"taken": 0}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        begin = int(start["taken"])
        # Micro-batches run one after the other: asked for the batch after ``start``, Spark
        # has written and committed every batch up to it. Ack those now, since Spark calls
        # ``commit`` only later (or, for the last batch before a stop, not at all).
        self._ack_upto(begin)
        rows: list[Row] = []
        hello = self.connection.hello()
        addrs = [(n.id, f"{n.host}:{n.grpc_port}") for n in hello.nodes if n.grpc_port]
        for node_id, addr in addrs:
            want = self.max_per_trigger - len(rows)
            if want <= 0:
                break
            try:
                with self.connection.client(addr) as node:
                    jobs = node.get_jobs(self.queues, count=want, nohang=True)
            except Exception:  # a node that is down: its jobs are read when it is back
                continue
            rows.extend(
                (
                    node_id,
                    j.id,
                    j.queue,
                    "delivered",
                    j.body,
                    j.nacks,
                    j.additional_deliveries,
                    None,
                    None,
                    j.retry_s,
                )
                for j in jobs
            )
        if not rows:
            return start
        end = begin + len(rows)
        self.taken[(begin, end)] = rows
        return {"taken": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        rows = self.taken.get((int(start["taken"]), int(end["taken"])))
        return [TakenJobs(rows)] if rows else []

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, TakenJobs)
        yield from partition.rows

    def commit(self, end: dict[str, int]) -> None:
        """The batch is written: ack its jobs (and any earlier batch's still held)."""
        self._ack_upto(int(end["taken"]))

    def _ack_upto(self, upto: int) -> None:
        done = [k for k in self.taken if k[1] <= upto]
        ids = [row[1] for k in done for row in self.taken[k]]
        if ids:
            with self.connection.client() as c:
                c.ack(*ids)
        for k in done:
            del self.taken[k]
