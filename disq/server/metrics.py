"""Prometheus metrics, read at scrape time from the state the cores and the IO layer keep.

Nothing here runs on a hot path: what does, :meth:`NodeMetrics.on_events` (once per flush,
over the lifecycle events the runtime drains into the event log anyway) and
:meth:`LatencyHistogram.observe` (one ``bisect`` and one increment of a plain list of ints),
is in disq/server/event_metrics.py, compiled, and re-exported here.
No prometheus_client object is touched before a scrape: :class:`NodeCollector` turns the
counters the node already keeps (DisqueCore.stats, Scheduler.stats, queue lengths,
PeerLinks.stats(), the AOF writer, RespStats, beanstalk tube counters) into metric families
when ``/metrics`` is read.

The metric names, types and labels are listed in docs/metrics.md.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from disq.core import events as ev
from disq.core.messages import ALIVE, DEAD, LEFT, SUSPECT
from disq.protocol.beanstalk import OP_NAMES
from disq.server.event_metrics import (  # noqa: F401 (tests import these from here)
    FSYNC_BOUNDS_S,
    LATENCY_BOUNDS_MS,
    MAX_DELIVERED_TRACKED,
    MAX_QUEUE_SERIES,
    OTHER,
    LatencyHistogram,
    NodeMetrics,
)
from disq.server.host import NodeHost

_STATE_NAMES = {ALIVE: "alive", SUSPECT: "suspect", DEAD: "dead", LEFT: "left"}


class MetricsHost(NodeHost, Protocol):
    """The runtime as the metrics see it: the host plus its beanstalk door's counters."""

    op_counts: list[int]
    sessions: dict[Any, Any]
    started: float
    instance_id: str
    metrics: NodeMetrics | None


def _capped(items: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The MAX_QUEUE_SERIES largest values by name, the rest summed under ``_other``."""
    items = list(items)
    if len(items) <= MAX_QUEUE_SERIES:
        return items
    top = heapq.nlargest(MAX_QUEUE_SERIES, items, key=lambda kv: kv[1])
    kept = {name for name, _ in top}
    rest = sum(n for name, n in items if name not in kept)
    return [*top, (OTHER, rest)]


Kind = type[GaugeMetricFamily] | type[CounterMetricFamily]
G, C = GaugeMetricFamily, CounterMetricFamily


def _families(rows: Iterable[tuple[Kind, str, str, float]]) -> Iterator[Metric]:
    """One unlabelled family per ``(kind, name, doc, value)`` row."""
    for kind, name, doc, value in rows:
        yield kind(name, doc, value=value)


def _labelled(
    kind: Kind, name: str, doc: str, label: str, values: Iterable[tuple[str, float]]
) -> Metric:
    """One family with one label: a sample per ``(label value, value)``."""
    fam = kind(name, doc, labels=[label])
    for v, n in values:
        fam.add_metric([v], n)
    return fam


class NodeCollector(Collector):
    """Reads the node's state when Prometheus scrapes."""

    def __init__(self, host: MetricsHost, metrics: NodeMetrics) -> None:
        self.host = host
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._node()
        yield from self._beanstalk()
        yield from self._aof()
        yield from self._latencies()
        if self.host.core.scheduler is not None:
            yield from self._schedules()
        if self.host.core.routes is not None:
            yield from self._routes()
        if self.host.cluster is not None:
            yield from self._cluster()

    # ------------------------------------------------------------------ node
    def _node(self) -> Iterator[Metric]:
        host = self.host
        info = GaugeMetricFamily(
            "disq_node_info", "Constant 1, labelled with the node's identity.", labels=["node_id"]
        )
        cluster = host.cluster
        node_id = cluster.membership.my_id if cluster is not None else host.instance_id
        info.add_metric([node_id], 1)
        yield info
        yield GaugeMetricFamily(
            "disq_uptime_seconds",
            "Seconds since the node started.",
            value=time.monotonic() - host.started,
        )

    # ------------------------------------------------------------------ beanstalk door
    def _beanstalk(self) -> Iterator[Metric]:
        host = self.host
        bs = host.beanstalk
        yield _labelled(
            C,
            "disq_beanstalk_commands",
            "Beanstalk commands processed.",
            "command",
            ((OP_NAMES[op], n) for op, n in enumerate(host.op_counts) if op in OP_NAMES),
        )
        yield from _families((
            (G, "disq_beanstalk_connections", "Open beanstalk connections.", len(host.sessions)),
            (G, "disq_beanstalk_jobs", "Jobs in the beanstalk core.", len(bs.jobs)),
            (G, "disq_beanstalk_memory_used_bytes", "Bytes of beanstalk job bodies held.",
             bs.used_bytes),
            (C, "disq_beanstalk_policy_buried",
             "Jobs buried by their tube's queue policy (MAXDELIVERIES).", bs.policy_buried),
        ))  # fmt: skip
        tubes = list(bs.tubes.values())
        depth = {
            t.name: len(t.ready) + len(t.delayed) + len(t.buried) + t.reserved_count for t in tubes
        }
        kept = {name for name, _ in _capped(depth.items())}
        states = GaugeMetricFamily(
            "disq_beanstalk_tube_jobs",
            'Jobs per tube and state (the 1000 fullest tubes; the rest under tube="_other").',
            labels=["tube", "state"],
        )
        total = CounterMetricFamily(
            "disq_beanstalk_tube_puts", "Jobs put into the tube.", labels=["tube"]
        )
        deletes = CounterMetricFamily(
            "disq_beanstalk_tube_deletes", "delete commands on the tube.", labels=["tube"]
        )
        other = [0, 0, 0, 0, 0, 0]
        for t in tubes:
            row = (
                len(t.ready),
                t.reserved_count,
                len(t.delayed),
                len(t.buried),
                t.total_jobs,
                t.cmd_delete,
            )
            if t.name in kept:
                for state, n in zip(("ready", "reserved", "delayed", "buried"), row, strict=False):
                    states.add_metric([t.name, state], n)
                total.add_metric([t.name], row[4])
                deletes.add_metric([t.name], row[5])
            else:
                other = [a + b for a, b in zip(other, row, strict=True)]
        if len(tubes) > len(kept):
            for i, state in enumerate(("ready", "reserved", "delayed", "buried")):
                states.add_metric([OTHER, state], other[i])
            total.add_metric([OTHER], other[4])
            deletes.add_metric([OTHER], other[5])
        yield states
        yield total
        yield deletes

    # ------------------------------------------------------------------ AOF
    def _aof(self) -> Iterator[Metric]:
        aof = self.host.aof
        writer = aof.writer
        yield from _families((
            (G, "disq_aof_enabled", "1 if the append-only file is on.", int(writer is not None)),
            (G, "disq_aof_size_bytes", "Size of the AOF.", writer.size if writer else 0),
            (C, "disq_aof_rewrites", "AOF rewrites completed.",
             writer.rewrites_done if writer else 0),
            (C, "disq_aof_records_written", "Records appended to the AOF.",
             writer.records_written if writer else 0),
            (G, "disq_aof_write_error",
             "1 while the last AOF write failed (puts are refused until a retry succeeds).",
             int(aof.error is not None)),
            (G, "disq_aof_disk_full",
             "1 while new jobs are refused for lack of disk space (docs/disk-full.md).",
             int(aof.disk_full)),
            (G, "disq_aof_disk_free_bytes",
             "Free bytes on the data directory's filesystem at the last check (statvfs).",
             max(aof.disk_free, 0)),
        ))  # fmt: skip

    def _latencies(self) -> Iterator[Metric]:
        m = self.metrics
        yield m.delivery.family(
            "disq_job_delivery_latency_seconds",
            "Time from a job's creation to each delivery (GETJOB, reserve).",
        )
        yield m.ack.family(
            "disq_job_ack_latency_seconds", "Time from a job's creation to its acknowledgement."
        )
        yield m.replication.family(
            "disq_job_replication_latency_seconds",
            "Time from a job's creation to this node taking its copy (replica side).",
        )
        yield m.fsync.family("disq_aof_fsync_seconds", "Duration of AOF fsyncs.")

    # ------------------------------------------------------------------ schedules
    def _schedules(self) -> Iterator[Metric]:
        sched = self.host.core.scheduler
        assert sched is not None
        st = sched.stats
        for key, doc in (
            ("ticks_fired", "Schedule ticks this node fired whose job it got bound."),
            ("ticks_late", "Of the ticks fired here, those fired more than 2 s after their time."),
            ("ticks_skipped", "Misfired ticks dropped here (policy SKIP, or CATCHUP's older)."),
            ("fire_errors", "Adds of a tick's job that failed here (fired again later)."),
        ):
            name = "disq_schedule_" + key
            yield CounterMetricFamily(name, doc, value=st.get(key, 0))
        yield GaugeMetricFamily(
            "disq_schedules",
            "Schedules the cluster keeps, as this node holds them (deleted ones not counted).",
            value=len(sched.names()),
        )

    # ------------------------------------------------------------------ routes
    def _routes(self) -> Iterator[Metric]:
        routes = self.host.core.routes
        assert routes is not None
        for name, doc, value in (
            ("disq_route_exchanges", "Exchanges the cluster keeps, as this node holds them.",
             len(routes.exchanges)),
            ("disq_route_bindings", "Bindings, as this node holds them.", routes.binding_count),
            ("disq_route_queues", "Queue declarations (transient ones included).",
             len(routes.queues)),
            ("disq_route_tombstones", "Deleted entries kept so a node that missed the delete "
             "cannot bring them back.", routes.shared.tombstones),
        ):  # fmt: skip
            yield GaugeMetricFamily(name, doc, value=value)
        st = routes.stats
        yield CounterMetricFamily(
            "disq_route_queues_expired",
            "Transient queues this node deleted when their lease passed.",
            value=st.get("queues_expired", 0),
        )
        yield CounterMetricFamily(
            "disq_route_jobs_purged",
            "Jobs this node acked because their queue was deleted or expired.",
            value=st.get("jobs_purged", 0),
        )

    # ------------------------------------------------------------------ cluster half
    def _cluster(self) -> Iterator[Metric]:
        cluster = self.host.cluster
        assert cluster is not None
        d = cluster.disque
        st = d.stats
        for key, name, doc in (
            ("jobs_added", "disq_jobs_added", "Jobs added on this node (ADDJOB)."),
            ("jobs_delivered", "disq_jobs_delivered", "Job deliveries (GETJOB)."),
            ("jobs_acked", "disq_jobs_acked", "Jobs acknowledged."),
            ("jobs_requeued", "disq_jobs_requeued", "Jobs queued again by their retry timer."),
            (
                "jobs_requeue_advanced",
                "disq_jobs_requeue_advanced",
                "Requeue times brought forward because a holder was confirmed dead.",
            ),
            ("jobs_expired", "disq_jobs_expired", "Jobs removed by their TTL."),
            ("jobs_imported", "disq_jobs_imported", "Jobs imported from other nodes (federation)."),
            ("jobs_exported", "disq_jobs_exported", "Jobs exported to other nodes (federation)."),
            ("noreply_timeouts", "disq_norepl_timeouts", "ADDJOBs answered NOREPL on timeout."),
            (
                "jobs_dead_lettered",
                "disq_jobs_dead_lettered",
                "Jobs past their queue's MAXDELIVERIES moved to its DEADLETTER queue by this node.",
            ),
            (
                "jobs_dead_letter_dropped",
                "disq_jobs_dead_letter_dropped",
                "Jobs past their queue's MAXDELIVERIES dropped (the policy has no DEADLETTER).",
            ),
            (
                "dead_letter_retries",
                "disq_dead_letter_retries",
                "Dead letter moves tried again (no majority for the key, OOM, a paused queue).",
            ),
            ("jobs_redriven", "disq_jobs_redriven", "Dead letters moved back by QREDRIVE."),
        ):
            yield CounterMetricFamily(name, doc, value=st.get(key, 0))
        yield from _families((
            (G, "disq_jobs", "Jobs held by the Disque core.", len(d.jobs)),
            (G, "disq_queues", "Queues known to this node.", len(d.queues)),
        ))  # fmt: skip
        yield _labelled(
            G,
            "disq_queue_depth",
            'Queued jobs per queue (the 1000 deepest; the rest under queue="_other").',
            "queue",
            _capped((q.name, len(q)) for q in d.queues.values()),
        )
        events = CounterMetricFamily(
            "disq_queue_events",
            "Job lifecycle events per queue (first 1000 queues seen; later ones under "
            'queue="_other").',
            labels=["queue", "event"],
        )
        for queue, counts in self.metrics.queue_events.items():
            for kind, n in enumerate(counts):
                if n:
                    events.add_metric([queue or "_unknown", ev.KIND_NAMES[kind]], n)
        yield events
        yield from _families((
            (G, "disq_memory_used_bytes", "Bytes the Disque core accounts for jobs.",
             d.memory.used_bytes),
            (G, "disq_memory_max_bytes", "maxmemory (0: no limit).", d.memory.max_bytes),
            (G, "disq_memory_warning_level", "0 ok, 1 above 75% of maxmemory, 2 above 95%, 3 full.",
             d.memory.warning),
        ))  # fmt: skip
        yield from self._membership()
        yield from self._links()
        yield GaugeMetricFamily(
            "disq_event_log_next_sequence",
            "Sequence number the next lifecycle event will get.",
            value=cluster.event_log.next_seq,
        )
        yield from self._resp()

    def _membership(self) -> Iterator[Metric]:
        cluster = self.host.cluster
        assert cluster is not None
        by_state = dict.fromkeys(_STATE_NAMES.values(), 0)
        members = cluster.membership.members()
        for m in members:
            name = _STATE_NAMES.get(m.state)
            if name is not None:
                by_state[name] += 1
        yield _labelled(
            G,
            "disq_cluster_members",
            "Known cluster members (this node included) by state.",
            "state",
            by_state.items(),
        )
        me = cluster.membership.my_id
        links = cluster.links
        yield _labelled(
            G,
            "disq_peer_link_up",
            "1 if the outbound link to the peer is up.",
            "peer",
            (
                (m.node_id[:8], int(links is not None and links.is_up(m.node_id)))
                for m in members
                if m.node_id != me and m.state != LEFT
            ),
        )

    def _links(self) -> Iterator[Metric]:
        cluster = self.host.cluster
        assert cluster is not None
        s = cluster.links.stats() if cluster.links is not None else {}
        for kind, key, doc in (
            (G, "links_up", "Outbound peer links up."),
            (G, "links_columnar", "Outbound peer links up whose peer reads batch messages "
             "(fewer than links_up while a rolling restart mixes builds)."),
            (G, "links_lane", "Outbound peer links up whose job messages take a job lane (TCP "
             "beside the stream)."),
            (G, "lane_pending", "Connections to the job lane port that have not said their "
             "hello yet (capped per port and per process by the open-files limit)."),
            (G, "lane_buffered_bytes", "Bytes the inbound job lanes hold together (frames not "
             "yet whole)."),
            (C, "lane_closed_buffer_full", "Inbound job lanes closed because their read took the "
             "lanes' buffered bytes past the bound."),
            (C, "lanes_refused", "Outbound job lanes closed before the peer took their hello "
             "(refused, or dropped at its cap): the link went on on its stream alone."),
            (C, "messages_too_large", "Messages to peers refused unsent: over their path's frame "
             "limit on their own."),
            (C, "frames_sent", "Frames sent to peers."),
            (C, "frames_received", "Frames received from peers."),
            (C, "lane_frames_sent", "Of the frames sent to peers, those written on a job lane."),
            (C, "lane_frames_received", "Of the frames received, those read from a job lane."),
            (C, "messages_sent", "Messages sent to peers."),
            (C, "messages_received", "Messages received from peers."),
        ):  # fmt: skip
            yield kind(f"disq_peer_{key}", doc, value=s.get(key, 0))
        yield _labelled(
            C,
            "disq_peer_lane_pending_closed",
            "Connections to the job lane port closed before a valid hello, by reason.",
            "reason",
            (
                (reason, s.get("lane_pending_closed_" + reason, 0))
                for reason in ("cap", "timeout", "refused")
            ),
        )
        yield _labelled(
            C,
            "disq_peer_frames_dropped",
            "Peer frames dropped, by reason.",
            "reason",
            (
                (reason, s.get(key, 0))
                for key, reason in (
                    ("frames_dropped", "queue_full"),
                    ("frames_blocked", "blocked"),
                    ("frames_malformed", "malformed"),
                )
            ),
        )

    def _resp(self) -> Iterator[Metric]:
        cluster = self.host.cluster
        assert cluster is not None
        hub = cluster.hub
        rs = hub.stats
        yield from _families((
            (G, "disq_resp_connected_clients", "Open RESP connections.", hub.connected_clients),
            (C, "disq_resp_commands", "RESP commands processed.", rs.commands),
        ))  # fmt: skip
        yield _labelled(
            C,
            "disq_resp_command_calls",
            "RESP calls per command.",
            "command",
            ((name, n) for name, (n, _usec) in sorted(rs.calls.items())),
        )
        yield from _families((
            (C, "disq_resp_connections_received", "RESP connections accepted.",
             rs.connections_received),
            (C, "disq_resp_rejected_connections", "RESP connections refused (maxclients).",
             rs.rejected_connections),
            (C, "disq_resp_net_input_bytes", "Bytes read on the RESP port.", rs.net_input_bytes),
            (C, "disq_resp_net_output_bytes", "Bytes written on the RESP port.",
             rs.net_output_bytes),
        ))  # fmt: skip
