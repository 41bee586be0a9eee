"""``spark.read.format("disq")``: a non-destructive snapshot of a queue's jobs.

One partition per node (found with Hello); each reads its node's jobs of the queue with JSCAN
(bodies included), so nothing is dequeued, delivered or acked. Disque keeps a job queued on
one node and active copies on the others, so the default ``states`` (``queued``) gives each
waiting job once; ``states`` ``queued,active`` shows the copies as well (one row per node and
copy: dedupe on ``id`` if you want jobs).

Options: ``nodes`` (required), ``queue`` (required), ``states`` (comma-separated: wait-repl,
active, queued, acked), ``password``. Columns: node, id, queue, state, body (binary), nacks,
additional_deliveries, ctime, ttl_s, retry_s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from disq.spark.options import DisqSparkError, Options

SCHEMA = (
    "node STRING, id STRING, queue STRING, state STRING, body BINARY, nacks INT, "
    "additional_deliveries INT, ctime LONG, ttl_s LONG, retry_s INT"
)
STATES = ("wait-repl", "active", "queued", "acked")


@dataclass
class NodeJobs(InputPartition):
    node_id: str
    addr: str


class SnapshotReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = Options(options)
        self.queue = opts.get("queue") or ""
        if not self.queue:
            raise DisqSparkError("option queue is required: spark.read.format('disq') reads one")
        states = opts.get("states", "queued") or ""
        self.states = [s.strip() for s in states.split(",") if s.strip()]
        bad = [s for s in self.states if s not in STATES]
        if bad:
            raise DisqSparkError(f"option states: unknown {bad}, use {', '.join(STATES)}")
        self.connection = opts.connection()

    def partitions(self) -> list[InputPartition]:
        return [
            NodeJobs(n.id, f"{n.host}:{n.grpc_port}")
            for n in sorted(self.connection.hello().nodes, key=lambda n: n.id)
            if n.grpc_port
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, NodeJobs)
        with self.connection.client() as c:
            jobs = c.scan_jobs(partition.addr, queue=self.queue, states=self.states)
        for j in jobs:
            yield (
                partition.node_id,
                j.id,
                j.queue,
                j.state,
                bytes(j.body),
                j.nacks,
                j.additional_deliveries,
                j.ctime,
                j.ttl_s,
                j.retry_s,
            )
