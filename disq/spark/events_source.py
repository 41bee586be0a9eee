"""``spark.readStream.format("disq-events")``: the nodes' event logs as a replayable stream.

One partition per node; the offset is ``{node id: next sequence number}``, kept in the query's
checkpoint, so a restarted query goes on where it stopped, as Kafka's source does.

Options:

- ``nodes`` (required): gRPC addresses of one or more nodes; the others are found with Hello,
  at the start and at every trigger (a node that joins later is read from its first event).
- ``startingOffsets``: ``earliest`` (default: everything the logs still hold), ``latest``, or
  JSON ``{"<node id>": seq, ...}`` with -2 meaning earliest and -1 latest for a node. Only for
  a new query; a restarted one uses its checkpoint.
- ``maxOffsetsPerTrigger``: at most this many events per micro-batch, over all nodes, shared
  fairly: every node with events waiting gets an equal part (a node with fewer waiting leaves
  its unused part to the others), so each batch advances every node that has events (as long
  as the limit is at least the number of such nodes).
- ``failOnDataLoss`` (default true): fail when events the query still needs were dropped by
  retention (or a node lost its log); false: skip them and go on.
- ``password``

Triggers: any. With ``trigger(availableNow=True)`` the query reads what every node's log
held when it started (in batches within ``maxOffsetsPerTrigger``) and stops by itself: a
one-off export. A node that joins during such a run is read by the next run.

Columns: node, seq, time_ms, kind, queue, job_id, attempt, size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from disq.spark.options import DisqSparkError, Options

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


def fair_share(waiting: dict[str, int], budget: int) -> dict[str, int]:
    """How many of its ``waiting`` events each node gives to a batch of at most ``budget``:
    equal parts, a node that needs less than its part leaving the rest to the others. With
    fewer rows than nodes, one each to the nodes with the most waiting (then by id)."""
    take = dict.fromkeys(waiting, 0)
    live = sorted((n for n, w in waiting.items() if w > 0), key=lambda n: (waiting[n], n))
    left = budget
    while live and left > 0:
        each = left // len(live)
        if each == 0:
            most = sorted(live, key=lambda n: (take[n] - waiting[n], n))
            for n in most[:left]:
                take[n] += 1
            break
        still = []
        for n in live:
            t = min(each, waiting[n] - take[n])
            take[n] += t
            left -= t
            if take[n] < waiting[n]:
                still.append(n)
        live = still
    return take


class EventsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        opts = Options(options)
        self.starting = opts.get("startingOffsets", "earliest") or "earliest"
        if self.starting not in ("earliest", "latest"):
            try:
                parsed = json.loads(self.starting)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                raise DisqSparkError(
                    "option startingOffsets: earliest, latest or a JSON object "
                    f'{{"<node id>": seq}}, not {self.starting!r}'
                )
        self.max_per_trigger = opts.integer("maxOffsetsPerTrigger", None, minimum=1)
        self.fail_on_data_loss = opts.boolean("failOnDataLoss", True)
        self.connection = opts.connection()
        self.addrs: dict[str, str] = {}
        # Trigger.AvailableNow: each node's next seq when the query started; no batch reads
        # past it (None: any other trigger, read what there is).
        self.target: dict[str, int] | None = None

    # ------------------------------------------------------------------ on the driver
    def _client(self) -> Any:
        return self.connection.client()

    def _windows(self) -> dict[str, tuple[int, int]]:
        """Every node's (first_seq, next_seq), and its address in ``self.addrs``."""
        out: dict[str, tuple[int, int]] = {}
        hello = self.connection.hello()
        with self._client() as c:
            for n in hello.nodes:
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

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {nid: nxt for nid, (_, nxt) in self._windows().items()}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        windows = self._windows()
        if self.target is not None:
            # availableNow: only the nodes, and the events, there were at the start.
            windows = {
                nid: (first, min(nxt, self.target[nid]))
                for nid, (first, nxt) in windows.items()
                if nid in self.target
            }
        # A node seen for the first time is read from the start of its log.
        frm = {nid: start.get(nid, first) for nid, (first, _) in windows.items()}
        waiting = {nid: max(0, nxt - frm[nid]) for nid, (_, nxt) in windows.items()}
        if isinstance(limit, ReadMaxRows):
            take = fair_share(waiting, limit.max_rows)
        else:
            take = waiting
        end = dict(start)
        for nid, n in take.items():
            end[nid] = frm[nid] + n
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
