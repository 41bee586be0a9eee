"""A total-queue history checker, after Jepsen's ``checker/total-queue``.

Pure: a history in, a report out. No clocks, no IO, no order assumptions beyond "an event
names the value it is about", so histories recorded by many threads can be checked as
they were appended.

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

Every other type (``ack-ok``, ``nemesis``, ...) is kept in the history for people and ignored
here.

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

_CHECKED = frozenset({ADD_INVOKE, ADD_OK, ADD_FAIL, ADD_INFO, DEQUEUE_OK})

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
    """The checker's verdict. ``valid`` is false iff something was lost or invented."""

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
    lost_values: list[Any] = field(default_factory=list)
    unexpected_values: list[Any] = field(default_factory=list)
    duplicated_sample: dict[str, int] = field(default_factory=dict)
    failed_but_delivered_values: list[Any] = field(default_factory=list)

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


def check(history: Iterable[Mapping[str, Any] | Event]) -> QueueReport:
    """Check a total-queue history (see the module doc for the event types)."""
    attempted: set[Hashable] = set()
    acknowledged: set[Hashable] = set()
    failed: set[Hashable] = set()
    info: set[Hashable] = set()
    deliveries: Counter[Hashable] = Counter()

    for ev in history:
        kind = _get(ev, "type")
        if kind not in _CHECKED:
            continue
        value = _get(ev, "value")
        if value is None:
            raise ValueError(f"{kind} event without a value: {ev!r}")
        if kind == DEQUEUE_OK:
            deliveries[value] += 1
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

    return QueueReport(
        valid=not lost and not unexpected,
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
        # Lost and unexpected are the bugs: list them all, people need every one.
        lost_values=_sorted(lost),
        unexpected_values=_sorted(unexpected),
        duplicated_sample={str(v): dups[v] for v in _sorted(dups)[:SAMPLE]},
        failed_but_delivered_values=_sorted(failed_delivered)[:SAMPLE],
    )
