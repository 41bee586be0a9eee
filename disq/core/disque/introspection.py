"""Introspection and PAUSE: SHOW, QSTAT, QPEEK, QSCAN, JSCAN (read only) and PAUSE, which
also travels between nodes (the PAUSE message). QLEN is the core's own (``core.qlen``).

A component of the core (``core.inspect``): it keeps no state; it reads the job table and
the queues, and PAUSE sets a queue's flags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from disq.core.disque.blocked import BlockedClients
from disq.core.disque.counts import QueueCounts
from disq.core.disque.host import CoreHost
from disq.core.disque.job import ACKED, BEANSTALK_ORIGIN, STATE_NAMES, WAIT_REPL, DJob
from disq.core.disque.queue import DQueue
from disq.core.disque.results import Results
from disq.core.messages import BSTATE_BURIED, PAUSE_IN, PAUSE_OUT, Pause

T = TypeVar("T")


class IntrospectHost(CoreHost, Protocol):
    """What the read-only commands and PAUSE need of the core beyond its job table."""

    counts: QueueCounts
    blocked: BlockedClients
    results: Results

    def _check_new_queue(self, name: str) -> None: ...
    def _queue(self, name: str, now_ms: int) -> DQueue: ...


class Introspection:
    """The read-only commands and PAUSE (``core.inspect``)."""

    def __init__(self, host: IntrospectHost) -> None:
        self.host = host

    def show(self, now_ms: int, job_id: str) -> list[tuple[str, object]] | None:
        j = self.host.jobs.get(job_id)
        if j is None:
            return None
        ttl = max(0, (j.etime_ms - now_ms) // 1000)
        requeue = None if j.qtime_ms == 0 or j.state == ACKED else max(0, j.qtime_ms - now_ms)
        awake = None if j.awake_ms <= 0 else max(0, j.awake_ms - now_ms)
        confirmed = sorted(j.confirmed) if j.state in (WAIT_REPL, ACKED) else []
        pairs: list[tuple[str, object]] = [
            ("id", j.id),
            ("queue", j.queue if j.delivered or j.state != ACKED else None),
            ("state", STATE_NAMES[j.state]),
            ("repl", j.repl),
            ("ttl", ttl),
            ("ctime", j.ctime),
            ("delay", j.delay_s),
            ("retry", j.retry_s),
            ("nacks", j.nacks),
            ("additional-deliveries", j.add_deliveries),
            ("nodes-delivered", sorted(j.delivered)),
            ("nodes-confirmed", confirmed),
            ("next-requeue-within", requeue),
            ("next-awake-within", awake),
            ("body", j.body if j.state != ACKED or j.body else None),
        ]
        if j.idem_key:
            # disq's addition, only for a keyed job: its key (a schedule's tick job carries
            # schedule:<name>:<tick>, which tells the ticks apart).
            pairs.append(("idempotency-key", j.idem_key))
        headers = j.headers
        if headers:
            # disq's addition, only for a job with headers: a flat [k1, v1, ...] list, as
            # GETJOB WITHHEADERS gives them.
            pairs.append(("headers", [x for pair in headers for x in pair]))
        result = self.host.results.get(now_ms, j.id)
        if result is not None:
            # disq's addition, only when a result is kept under the job's id (RESULT SET).
            pairs.append(("result", result))
        if j.flags & BEANSTALK_ORIGIN:
            # disq's addition, only for jobs put through a beanstalk door: the state the
            # owner last reported, which a takeover restores.
            pairs.append(("beanstalk-state", "buried" if j.bstate == BSTATE_BURIED else "ready"))
        return pairs

    def qstat(self, now_ms: int, queue: str) -> list[tuple[str, object]] | None:
        """Disque's fields, then disq's (counts.py): ``jobs`` (every live job of the queue
        held here, queued or not), ``active`` (delivered or waiting for a requeue) and
        ``delayed``. A queue with no queue record here (never queued to, or collected idle)
        is null as in Disque, unless this node holds jobs of it: then its Disque fields are
        those of an empty queue."""
        q = self.host.queues.get(queue)
        jobs, active, delayed = self.host.counts.of(queue, len(q) if q is not None else 0)
        if q is None:
            if not jobs:
                return None
            return [
                ("name", queue),
                ("len", 0),
                ("age", 0),
                ("idle", 0),
                ("blocked", 0),
                ("import-from", []),
                ("import-rate", 0),
                ("jobs-in", 0),
                ("jobs-out", 0),
                ("pause", "none"),
                ("jobs", jobs),
                ("active", active),
                ("delayed", delayed),
            ]
        return [
            ("name", q.name),
            ("len", len(q)),
            ("age", max(0, (now_ms - q.ctime_ms) // 1000)),
            ("idle", max(0, (now_ms - q.atime_ms) // 1000)),
            ("blocked", len(q.blocked)),
            ("import-from", q.live_responders(now_ms)),
            ("import-rate", q.import_rate(now_ms)),
            ("jobs-in", q.jobs_in),
            ("jobs-out", q.jobs_out),
            ("pause", q.pause_name()),
            ("jobs", jobs),
            ("active", active),
            ("delayed", delayed),
        ]

    def qpeek(self, queue: str, count: int) -> list[DJob]:
        q = self.host.queues.get(queue)
        if q is None or count == 0:
            return []
        if count > 0:
            return list(q.skiplist.islice(0, count))
        found: list[DJob] = list(
            q.skiplist.islice(max(0, len(q.skiplist) + count), len(q.skiplist))
        )
        found.reverse()
        return found

    def qscan(
        self,
        now_ms: int,
        cursor: int,
        count: int,
        *,
        busyloop: bool = False,
        minlen: int | None = None,
        maxlen: int | None = None,
        importrate: int | None = None,
    ) -> tuple[int, list[str]]:
        """QSCAN over the sorted queue names, those within the bounds given."""
        queues = self.host.queues

        def pick(name: str) -> str | None:
            q = queues[name]
            if minlen is not None and len(q) < minlen:
                return None
            if maxlen is not None and len(q) > maxlen:
                return None
            if importrate is not None and q.import_rate(now_ms) < importrate:
                return None
            return q.name

        return _scan(sorted(queues), cursor, count, busyloop, pick)

    def jscan(
        self,
        cursor: int,
        count: int,
        *,
        busyloop: bool = False,
        queue: str | None = None,
        states: set[int] | None = None,
    ) -> tuple[int, list[DJob]]:
        """JSCAN over the sorted job ids, those of ``queue`` in ``states`` when given."""
        jobs = self.host.jobs

        def pick(job_id: str) -> DJob | None:
            j = jobs[job_id]
            if queue is not None and j.queue != queue:
                return None
            if states and j.state not in states:
                return None
            if j.state == ACKED and not j.delivered:
                return None  # a dummy ack is bookkeeping, not a job
            return j

        return _scan(sorted(jobs), cursor, count, busyloop, pick)

    def pause(self, now_ms: int, queue: str, flags: int | None, bcast: bool) -> int:
        q = self.host.queues.get(queue)
        if q is None:
            if not flags:
                # Reading the state (or pausing nothing) must not create a phantom queue.
                if bcast:
                    for node in self.host.view.all_peers():
                        self.host._send(node, Pause(queue, 0))
                return 0
            self.host._check_new_queue(queue)
            q = self.host._queue(queue, now_ms)
        if flags is not None:
            q.pause = flags
            if not q.paused_out and q.blocked and q.skiplist:
                self.host.blocked.serve(q, now_ms)
        if bcast:
            for node in self.host.view.all_peers():
                self.host._send(node, Pause(queue, q.pause))
        return q.pause

    # ------------------------------------------------------------------ messages
    def on_pause(self, now_ms: int, sender: str, msg: Pause) -> None:
        q = self.host._queue(msg.queue, now_ms)
        q.pause = msg.flags & (PAUSE_IN | PAUSE_OUT)
        if not q.paused_out and q.blocked and q.skiplist:
            self.host.blocked.serve(q, now_ms)


def _scan(
    keys: list[str], cursor: int, count: int, busyloop: bool, pick: Callable[[str], T | None]
) -> tuple[int, list[T]]:
    """SCAN's stateless iteration over sorted keys: the cursor is a position, so keys added
    or removed meanwhile may be missed or repeated, as with Redis SCAN. ``pick`` gives what a
    key shows (None: skip it); up to about ``count`` of them, or all with ``busyloop``."""
    out: list[T] = []
    pos = cursor
    while pos < len(keys):
        item = pick(keys[pos])
        pos += 1
        if item is not None:
            out.append(item)
            if not busyloop and len(out) >= count:
                break
    return (0 if pos >= len(keys) else pos), out
