"""``spark.readStream.format("disq-events")``: the nodes' event logs as a replayable stream.

One partition per node; the offset is ``{node id: next sequence number}``, kept in the query's
checkpoint, so a restarted query goes on where it stopped, as Kafka's source does.

Options:

- ``nodes`` (required): gRPC addresses of one or more nodes; the others are found with Hello,
  at the start and at every trigger (a node that joins later is read from its first event).
- ``startingOffsets``: ``earliest`` (default: everything the logs still hold), ``latest``, or
  JSON ``{"<node id>": seq, ...}`` with -2 meaning earliest and -1 latest for a node. Only for
  a new query; a restarted one uses its checkpoint.
- ``maxOffsetsPerTrigger``: at most this many events per micro-batch, over all nodes.
- ``failOnDataLoss`` (default true): fail when events the query still needs were dropped by
  retention (or a node lost its log); false: skip them and go on.
- ``password``

Columns: node, seq, time_ms, kind, queue, job_id, attempt, size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from disq.spark.sink import DisqSinkError, _bool, _connection, _int, _lower, _tls_options

SCHEMA = (
    "node STRING, seq LONG, time_ms LONG, kind STRING, queue STRING, job_id STRING, "
    "attempt INT, size INT"
)
PAGE = 10_000


class DisqEventsError(RuntimeError):
    """Events the query needs are gone (failOnDataLoss)."""


@dataclass
class NodeRange(InputPartition):
    node_id: str
    addr: str
    start: int  # first seq to read
    end: int  # one past the last


class DisqEventsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "disq-events"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> EventsStreamReader:
        return EventsStreamReader(dict(self.options))


class EventsStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        lower = _lower(options)
        self.nodes, self.password = _connection(lower)
        self.tls = _tls_options(lower)
        self.starting = lower.get("startingoffsets", "earliest")
        if self.starting not in ("earliest", "latest"):
            try:
                parsed = json.loads(self.starting)
            except ValueError as exc:
                raise DisqSinkError(
                    "startingOffsets: earliest, latest or JSON {node id: seq}"
                ) from exc
            if not isinstance(parsed, dict):
                raise DisqSinkError("startingOffsets JSON must be an object {node id: seq}")
        self.max_per_trigger = _int(lower, "maxoffsetspertrigger", None)
        self.fail_on_data_loss = _bool(lower.get("failondataloss"), True)
        self.addrs: dict[str, str] = {}

    # ------------------------------------------------------------------ on the driver
    def _client(self) -> Any:
        from disq.client import Client

        return Client(self.nodes, password=self.password, timeout_s=30, **self.tls)

    def _windows(self) -> dict[str, tuple[int, int]]:
        """Every node's (first_seq, next_seq), and its address in ``self.addrs``."""
        out: dict[str, tuple[int, int]] = {}
        with self._client() as c:
            for n in c.hello().nodes:
                if not n.grpc_port:
                    continue
                addr = f"{n.host}:{n.grpc_port}"
                try:
                    r = c.read_events(addr, 0, max_events=1)
                except Exception:  # a node that is down now is read when it is back
                    continue
                self.addrs[r.node_id] = addr
                out[r.node_id] = (r.first_seq, r.next_seq)
        return out

    def initialOffset(self) -> dict[str, int]:
        windows = self._windows()
        if self.starting == "earliest":
            return {nid: first for nid, (first, _) in windows.items()}
        if self.starting == "latest":
            return {nid: nxt for nid, (_, nxt) in windows.items()}
        wanted = json.loads(self.starting)
        out = {}
        for nid, (first, nxt) in windows.items():
            v = int(wanted.get(nid, -2))
            out[nid] = first if v == -2 else nxt if v == -1 else v
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger:
            return ReadMaxRows(self.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        windows = self._windows()
        end = dict(start)
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        for nid, (first, nxt) in sorted(windows.items()):
            frm = start.get(nid, first)  # a node seen for the first time: from its start
            take = max(0, nxt - frm)
            if budget is not None:
                take = min(take, budget)
                budget -= take
            end[nid] = frm + take
        return end

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        if not self.addrs:
            self._windows()
        parts: list[InputPartition] = []
        for nid, stop in sorted(end.items()):
            frm = start.get(nid, 0)
            if stop > frm and nid in self.addrs:
                parts.append(NodeRange(nid, self.addrs[nid], frm, stop))
        return parts

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the logs keep events by their own retention."""

    # ------------------------------------------------------------------ on the executors
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, NodeRange)
        seq = partition.start
        with self._client() as c:
            while seq < partition.end:
                r = c.read_events(partition.addr, seq, max_events=min(PAGE, partition.end - seq))
                if r.node_id != partition.node_id:
                    raise DisqEventsError(
                        f"{partition.addr} is now node {r.node_id[:8]}, not {partition.node_id[:8]}"
                    )
                events = [e for e in r.events if e.seq < partition.end]
                if not events or events[0].seq > seq:
                    gone_to = events[0].seq if events else partition.end
                    if self.fail_on_data_loss:
                        raise DisqEventsError(
                            f"node {partition.node_id[:8]}: events {seq}..{gone_to - 1} are gone "
                            "(retention); set failOnDataLoss false to skip them"
                        )
                    if not events:
                        return
                for e in events:
                    yield (
                        partition.node_id,
                        e.seq,
                        e.time_ms,
                        e.kind,
                        e.queue,
                        e.job_id,
                        e.attempt,
                        e.size,
                    )
                seq = events[-1].seq + 1
