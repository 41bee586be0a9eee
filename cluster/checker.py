"""A total-queue history checker, after Jepsen's ``checker/total-queue``.

Pure: a history in (and, optionally, what the drain found left on the nodes), a report out.
No clocks, no IO. The only order it relies on is the history's own append order for the
deliveries of one value (an ``abandon`` belongs to the delivery before it), which holds for
histories recorded by many threads, since each thread records a delivery before it decides
to abandon it.

An event is a mapping (a ``history.jsonl`` line) or an :class:`Event` with a ``type``:

``add-invoke`` (value)
    a producer is about to send ``ADDJOB`` with this unique value.
``add-ok`` (value, id)
    ``ADDJOB`` answered with a job id: the job is **acknowledged**.
``add-fail`` (value, error)
    the job was definitely not added (connect refused, so never sent; or refused up front,
    e.g. ``-NOREPL Not enough reachable nodes`` or a validation error).
``add-info`` (value, error)
    indeterminate: ``-NOREPL Timeout reached ...`` (sync replication timed out but copies may
    live on), a client timeout, a connection lost after sending. An ``add-invoke`` with no
    completion at all is indeterminate too.
``dequeue-ok`` (value)
    ``GETJOB`` handed this value to a consumer (recorded before the ``ACKJOB``: the job was
    delivered whether or not the ack then reached anyone).
``abandon`` (value)
    the consumer that was just handed this value dies: it does not ACK and closes its
    connection (the jepsen workload does this to a share of its GETJOBs). The job's RETRY
    must put it back in a queue, so it must be delivered again, unless it was acked.
``ack-ok`` (ids)
    ``ACKJOB`` of these job ids answered: a consumer finished them. Job ids are tied to
    values by the ``id`` of ``dequeue-ok`` events. A job acked by one consumer is done even
    if a node the ack had not reached yet (partitioned, killed) hands it out again later and
    that delivery is abandoned: nobody owes it another delivery.

Every other type (``nemesis``, ``ack-fail``, ...) is kept in the history for people and
ignored here.

What is counted, as sets of values unless said otherwise:

* attempted: every value a producer tried; acknowledged, failed, indeterminate partition it.
* delivered: distinct values dequeued; deliveries: every ``dequeue-ok`` event.
* **lost**: acknowledged but never delivered. At-least-once delivery means this MUST be 0.
* duplicated: values delivered more than once (at-least-once allows it; counted, with the
  number of extra deliveries).
* **unexpected**: delivered but never attempted (a corrupted or invented job). MUST be 0.
* recovered: indeterminate but delivered (the job survived its NOREPL or timeout).
* failed_but_delivered: ``add-fail`` yet delivered. Not a loss, but it means an error that
  should have been definite was not: reported so someone looks at it.
* abandoned: ``abandon`` events (deliveries whose consumer died).
* **stranded**: acknowledged values whose last delivery was abandoned, that were never
  delivered again and that no consumer ever acked (``ack-ok``). The "delivered at least
  once" check cannot see them (they *were* delivered), yet the job is stuck: nobody acked
  it and nobody will ever get it. MUST be 0.
* abandoned_after_ack: values whose last delivery was abandoned but which a consumer had
  acked (a redelivery by a node the ack had not reached yet). Counted, not judged.
* abandoned_unacknowledged: the same as stranded for values whose add was not
  acknowledged. Not a violation: a job whose ``ADDJOB`` failed with ``-NOREPL Timeout``
  is deleted by the node that took it (Disque cleans up partial copies), and a replica may
  have handed it out in the meantime (its RETRY can fire before the ADDJOB times out).
  Reported, not judged.
* **left on nodes** (``left_on_nodes``, given by the caller: per node, jobs still in a
  deliverable state after the drain, or why the node could not be asked): any non-zero or
  unknown count is listed in ``stranded_on_nodes`` and makes the run invalid.

``valid``: lost, unexpected and stranded are 0, and nothing is left on the nodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

ADD_INVOKE = "add-invoke"
ADD_OK = "add-ok"
ADD_FAIL = "add-fail"
ADD_INFO = "add-info"
DEQUEUE_OK = "dequeue-ok"
ABANDON = "abandon"
ACK_OK = "ack-ok"

_CHECKED = frozenset({ADD_INVOKE, ADD_OK, ADD_FAIL, ADD_INFO, DEQUEUE_OK, ABANDON})

# How many example values a report lists per category; counts are always exact.
SAMPLE = 50


@dataclass(frozen=True, slots=True)
class Event:
    """One history event; ``to_dict`` gives the JSON line written to ``history.jsonl``."""

    type: str
    value: int | str | None = None
    id: str | None = None
    node: int | None = None
    process: int | str | None = None
    time: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type}
        for k in ("value", "id", "node", "process", "time", "error"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        d.update(self.extra)
        return d


@dataclass(slots=True)
class QueueReport:
    """The checker's verdict. ``valid`` is false iff something was lost, invented or
    stranded, or the nodes still held deliverable jobs."""

    valid: bool
    attempted: int
    acknowledged: int
    failed: int
    indeterminate: int
    delivered: int
    deliveries: int
    lost: int
    duplicated: int
    duplicate_deliveries: int
    unexpected: int
    recovered: int
    failed_but_delivered: int
    abandoned: int = 0
    stranded: int = 0
    abandoned_unacknowledged: int = 0
    abandoned_after_ack: int = 0
    left_on_nodes: int = 0
    stranded_on_nodes: dict[str, int | str] = field(default_factory=dict)
    lost_values: list[Any] = field(default_factory=list)
    unexpected_values: list[Any] = field(default_factory=list)
    duplicated_sample: dict[str, int] = field(default_factory=dict)
    failed_but_delivered_values: list[Any] = field(default_factory=list)
    stranded_values: list[Any] = field(default_factory=list)
    abandoned_unacknowledged_values: list[Any] = field(default_factory=list)
    abandoned_after_ack_values: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """A few readable lines; the verdict first."""
        verdict = "VALID" if self.valid else "INVALID"
        lines = [
            f"total-queue: {verdict}",
            f"  attempted     {self.attempted:>8}",
            f"  acknowledged  {self.acknowledged:>8}",
            f"  failed        {self.failed:>8}",
            f"  indeterminate {self.indeterminate:>8}  (recovered: {self.recovered})",
            f"  delivered     {self.delivered:>8}  distinct, {self.deliveries} deliveries",
            f"  duplicated    {self.duplicated:>8}  ({self.duplicate_deliveries} extra deliveries)",
            f"  lost          {self.lost:>8}  (must be 0)",
            f"  unexpected    {self.unexpected:>8}  (must be 0)",
            f"  abandoned     {self.abandoned:>8}  deliveries whose consumer died",
            f"  stranded      {self.stranded:>8}  (must be 0: acknowledged, abandoned, never "
            "delivered again nor acked)",
            f"  left on nodes {self.left_on_nodes:>8}  (must be 0: deliverable after the drain)",
        ]
        if self.failed_but_delivered:
            lines.append(
                f"  WARNING: {self.failed_but_delivered} values failed definitely yet were "
                f"delivered, e.g. {_fmt(self.failed_but_delivered_values)}"
            )
        if self.lost:
            lines.append(f"  lost values: {_fmt(self.lost_values)}")
        if self.unexpected:
            lines.append(f"  unexpected values: {_fmt(self.unexpected_values)}")
        if self.stranded:
            lines.append(f"  stranded values: {_fmt(self.stranded_values)}")
        if self.abandoned_unacknowledged:
            lines.append(
                f"  note: {self.abandoned_unacknowledged} values whose add was not acknowledged "
                f"were abandoned and never delivered again (allowed: a failed add may be "
                f"deleted), e.g. {_fmt(self.abandoned_unacknowledged_values)}"
            )
        if self.abandoned_after_ack:
            lines.append(
                f"  note: {self.abandoned_after_ack} values were acked, then handed out again "
                f"by a node the ack had not reached and abandoned (done: not stranded), "
                f"e.g. {_fmt(self.abandoned_after_ack_values)}"
            )
        if self.stranded_on_nodes:
            lines.append(f"  left per node: {self.stranded_on_nodes}")
        return "\n".join(lines)


def _fmt(values: list[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:20])
    return shown + (", ..." if len(values) > 20 else "")


def _order(v: Hashable) -> tuple[int, int, str]:
    # Values are normally ints; a corrupted body may come back as a str. Ints first.
    return (0, v, "") if isinstance(v, int) else (1, 0, str(v))


def _sorted(values: Iterable[Hashable]) -> list[Any]:
    return sorted(values, key=_order)


def _get(ev: Mapping[str, Any] | Event, key: str) -> Any:
    if isinstance(ev, Event):
        return getattr(ev, key)
    return ev.get(key)


def _ids(ev: Mapping[str, Any] | Event) -> list[str]:
    ids = ev.extra.get("ids") if isinstance(ev, Event) else ev.get("ids")
    return [str(i) for i in ids or ()]


def check(
    history: Iterable[Mapping[str, Any] | Event],
    *,
    left_on_nodes: Mapping[str, int | str] | None = None,
) -> QueueReport:
    """Check a total-queue history (see the module doc for the event types).

    ``left_on_nodes``: per node, how many jobs were still deliverable when the drain ended,
    or a string saying why the node could not be asked (None: not checked).
    """
    attempted: set[Hashable] = set()
    acknowledged: set[Hashable] = set()
    failed: set[Hashable] = set()
    info: set[Hashable] = set()
    deliveries: Counter[Hashable] = Counter()
    # Per value: whether its latest delivery was abandoned.
    last_abandoned: dict[Hashable, bool] = {}
    abandoned = 0
    value_of_id: dict[str, Hashable] = {}
    acked_ids: set[str] = set()

    for ev in history:
        kind = _get(ev, "type")
        if kind == ACK_OK:
            acked_ids.update(_ids(ev))
            continue
        if kind not in _CHECKED:
            continue
        value = _get(ev, "value")
        if value is None:
            raise ValueError(f"{kind} event without a value: {ev!r}")
        if kind == DEQUEUE_OK:
            deliveries[value] += 1
            last_abandoned[value] = False
            jid = _get(ev, "id")
            if jid is not None:
                value_of_id[str(jid)] = value
            continue
        if kind == ABANDON:
            abandoned += 1
            last_abandoned[value] = True
            continue
        # An add completion without its invoke (a truncated history) still was an attempt.
        attempted.add(value)
        if kind == ADD_OK:
            acknowledged.add(value)
        elif kind == ADD_FAIL:
            failed.add(value)
        elif kind == ADD_INFO:
            info.add(value)

    # A value both acknowledged and failed/info would be a recorder bug; the success wins
    # because it is the claim the lost-check must hold the system to.
    failed -= acknowledged
    info -= acknowledged
    failed -= info
    indeterminate = attempted - acknowledged - failed  # includes invokes never completed
    delivered = set(deliveries)
    lost = acknowledged - delivered
    unexpected = delivered - attempted
    recovered = indeterminate & delivered
    failed_delivered = failed & delivered
    dups = {v: c for v, c in deliveries.items() if c > 1}
    consumer_acked = {value_of_id[i] for i in acked_ids if i in value_of_id}
    after_ack = {v for v, a in last_abandoned.items() if a} & consumer_acked
    stuck = {v for v, a in last_abandoned.items() if a} - consumer_acked
    stranded = stuck & acknowledged
    on_nodes: dict[str, int | str] = {
        str(k): v for k, v in (left_on_nodes or {}).items() if not isinstance(v, int) or v != 0
    }
    left = sum(v for v in on_nodes.values() if isinstance(v, int))

    return QueueReport(
        valid=not lost and not unexpected and not stranded and not on_nodes,
        attempted=len(attempted),
        acknowledged=len(acknowledged),
        failed=len(failed),
        indeterminate=len(indeterminate),
        delivered=len(delivered),
        deliveries=sum(deliveries.values()),
        lost=len(lost),
        duplicated=len(dups),
        duplicate_deliveries=sum(c - 1 for c in dups.values()),
        unexpected=len(unexpected),
        recovered=len(recovered),
        failed_but_delivered=len(failed_delivered),
        abandoned=abandoned,
        stranded=len(stranded),
        abandoned_unacknowledged=len(stuck - acknowledged),
        abandoned_after_ack=len(after_ack),
        left_on_nodes=left,
        stranded_on_nodes=on_nodes,
        # Lost and unexpected are the bugs: list them all, people need every one.
        lost_values=_sorted(lost),
        unexpected_values=_sorted(unexpected),
        duplicated_sample={str(v): dups[v] for v in _sorted(dups)[:SAMPLE]},
        failed_but_delivered_values=_sorted(failed_delivered)[:SAMPLE],
        stranded_values=_sorted(stranded),
        abandoned_unacknowledged_values=_sorted(stuck - acknowledged)[:SAMPLE],
        abandoned_after_ack_values=_sorted(after_ack)[:SAMPLE],
    )
