"""What the metrics count as it happens: latency histograms and per-queue lifecycle event
counts, fed by the runtime's flush (:meth:`NodeMetrics.on_events`, once per flush over the
events drained into the event log anyway) and the AOF's fsyncs.

Split from disq/server/metrics.py (which re-exports these names) so that mypyc compiles it
(issue 33): ``on_events`` loops over every event of a flush, on the path of every add, and
interpreted it was a few percent of a node's CPU in the ADDJOB REPLICATE 1 row. The
scrape-time collector stays in metrics.py, interpreted: it subclasses prometheus_client's
Collector, which a native class cannot.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.core import HistogramMetricFamily

from disq.core import events as ev

if TYPE_CHECKING:
    from disq.core.events import EventBuffer
    from disq.server.host import NodeHost

# Per-queue series are capped: the MAX_QUEUE_SERIES deepest queues (tubes) get their own
# depth series and the rest are summed under queue="_other"; per-queue event counters keep
# the first MAX_QUEUE_SERIES queue names seen, later ones count under "_other".
MAX_QUEUE_SERIES = 1000
OTHER = "_other"

# Latency buckets (upper bounds). Event latencies are in ms (the cores' clock); fsync in s.
LATENCY_BOUNDS_MS: tuple[int, ...] = (
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 3600000,
)  # fmt: skip
FSYNC_BOUNDS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip

# Delivered jobs whose creation time is remembered for the ack latency (oldest dropped first).
MAX_DELIVERED_TRACKED = 100_000

_N_KINDS = max(ev.KIND_NAMES) + 1


class LatencyHistogram:
    """Fixed-bucket counts in a plain list: ``counts[i]`` counts observations ``<= bounds[i]``
    (and above the previous bound); the last slot counts those above every bound."""

    __slots__ = ("bounds", "count", "counts", "sum", "unit_s")

    def __init__(self, bounds: Sequence[float], unit_s: float = 1.0) -> None:
        self.bounds = tuple(bounds)
        self.unit_s = unit_s  # seconds per unit of the observed values (0.001 for ms)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus buckets: (le in seconds, cumulative count), ending with +Inf."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            out.append((_fmt(bound * self.unit_s), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        return HistogramMetricFamily(
            name, doc, buckets=self.cumulative(), sum_value=self.sum * self.unit_s
        )


def _fmt(x: float) -> str:
    return repr(float(round(x, 9)))


class NodeMetrics:
    """What is counted as it happens (cheaply) rather than read at scrape time: latency
    histograms and per-queue lifecycle event counts."""

    def __init__(self) -> None:
        self.delivery = LatencyHistogram(LATENCY_BOUNDS_MS, 0.001)
        self.ack = LatencyHistogram(LATENCY_BOUNDS_MS, 0.001)
        self.replication = LatencyHistogram(LATENCY_BOUNDS_MS, 0.001)
        self.fsync = LatencyHistogram(FSYNC_BOUNDS_S)
        self.queue_events: dict[str, list[int]] = {}  # queue -> counts by event kind
        # job id -> ctime ms, delivered not acked; an OrderedDict: trimmed from its oldest end
        # (a dict's next(iter()) walks every deleted slot before the first live one)
        self._delivered: OrderedDict[str | int, int] = OrderedDict()
        self.host: NodeHost | None = None

    def on_events(self, buf: EventBuffer) -> None:
        """One drained batch of lifecycle events (called by the runtime's flush)."""
        per_queue = self.queue_events
        host = self.host
        disque = host.core.disque if host is not None else None
        bjobs = host.beanstalk.jobs if host is not None else {}
        djobs = disque.jobs if disque is not None else {}
        # The events' times are wall-clock (the runtime converts them), as a Disque ctime is;
        # a beanstalk job's ctime_ms is on the node clock (disq/server/clock.py).
        boff = host.beanstalk.wall_offset_ms if host is not None else 0
        delivered = self._delivered
        for kind, t, queue, job_id in zip(
            buf.kinds, buf.times, buf.queues, buf.job_ids, strict=False
        ):
            counts = per_queue.get(queue)
            if counts is None:
                if len(per_queue) >= MAX_QUEUE_SERIES:
                    queue = OTHER
                counts = per_queue.get(queue)
                if counts is None:
                    counts = per_queue[queue] = [0] * _N_KINDS
            counts[kind] += 1
            if kind == ev.DELIVERED or kind == ev.REPLICATED:
                ctime_ms = _ctime_ms(job_id, djobs, bjobs, boff)
                if ctime_ms < 0:
                    continue
                if kind == ev.DELIVERED:
                    self.delivery.observe(max(0, t - ctime_ms))
                    # An ack may remove the job before the drain sees it: remember the ctime.
                    delivered[job_id] = ctime_ms
                    if len(delivered) > MAX_DELIVERED_TRACKED:
                        delivered.popitem(last=False)
                else:
                    self.replication.observe(max(0, t - ctime_ms))
            elif kind == ev.ACKED or (kind == ev.DELETED and type(job_id) is int):
                # Disque's ACK; a beanstalk delete of a delivered (reserved) job.
                ctime_ms = delivered.pop(job_id, -1)
                if ctime_ms < 0 and kind == ev.ACKED:
                    ctime_ms = _ctime_ms(job_id, djobs, bjobs, boff)
                if ctime_ms >= 0:
                    self.ack.observe(max(0, t - ctime_ms))

    def on_fsync(self, seconds: float) -> None:
        self.fsync.observe(seconds)


def _ctime_ms(
    job_id: str | int, djobs: dict[str, Any], bjobs: dict[int, Any], boff: int = 0
) -> int:
    """The job's creation time in wall ms, -1 if this node no longer holds it (``boff``: the
    beanstalk core's wall offset, its ctime_ms being on the node clock)."""
    if type(job_id) is str:
        dj = djobs.get(job_id)
        return -1 if dj is None else int(dj.ctime // 1_000_000)
    bj = bjobs.get(job_id)  # type: ignore[arg-type]
    return -1 if bj is None else int(bj.ctime_ms) + boff
