"""What this node remembers of jobs that are gone: tombstones (a late REPLJOB or YOURJOBS of
a job acked or deleted here lately must not bring it back) and how each went (acked or
deleted: what a holder's late WILLQUEUE is answered, requeue.py). Both are FIFOs bounded by
count and by age.

A component of the core (``core.gone``): it owns the two tables and reads nothing else.
"""

from __future__ import annotations

from collections import OrderedDict

from disq.core.disque.state import GONE_ACKED, GONE_DELETED

TOMBSTONE_MS = 120_000  # refuse late REPLJOBs for jobs acked/deleted this recently
TOMBSTONE_MAX = 200_000


class GoneJobs:
    """The tombstones and the gone marks of the jobs that left this node."""

    def __init__(self) -> None:
        # FIFOs trimmed from their oldest end: OrderedDicts (a dict's next(iter(d)) walks every
        # deleted slot first: 80% of a node's acks once tombstones were bounded).
        self.tombstones: OrderedDict[str, int] = OrderedDict()  # job id -> until (age order)
        self.marks: OrderedDict[str, int] = OrderedDict()  # acked or DELJOBed here

    def clear(self) -> None:
        self.tombstones.clear()
        self.marks.clear()

    def tombstone(self, job_id: str, now_ms: int) -> None:
        tombstones = self.tombstones
        tombstones[job_id] = now_ms + TOMBSTONE_MS
        tombstones.move_to_end(job_id)
        if len(tombstones) > TOMBSTONE_MAX:
            tombstones.popitem(last=False)

    def mark(self, job_id: str, now_ms: int, acked: bool) -> None:
        """``job_id`` is gone from the cluster as this node knows: acked here (consumed),
        or deleted by a DELJOB (acked elsewhere and collected, or never to run: a failed
        add, a key's losing job). A copy that a holder still requeues (its WILLQUEUE) is
        told the same: a SETACK for an acked job, a DELJOB for a deleted one (a deleted
        job told "acked" would keep its idempotency key bound: two jobs for one key).
        Why: the acker's GC reaches the nodes in its delivered set, and a job that two
        holders exported at different times (YOURJOBS) has a copy that set may not name; a
        holder that knew of it took the acker's DELJOB and forgot it. The copy would live
        until its TTL, requeued at every RETRY (the simulator's stranded jobs)."""
        gone = self.marks
        gone[job_id] = (now_ms + TOMBSTONE_MS) * 2 + (1 if acked else 0)
        gone.move_to_end(job_id)
        if len(gone) > TOMBSTONE_MAX:
            gone.popitem(last=False)

    def how(self, job_id: str, now_ms: int) -> int:
        """GONE_ACKED, GONE_DELETED, or 0 (not known gone here)."""
        mark = self.marks.get(job_id)
        if mark is None:
            return 0
        if mark // 2 < now_ms:
            del self.marks[job_id]
            return 0
        return GONE_ACKED if mark % 2 else GONE_DELETED

    def tombstoned(self, job_id: str, now_ms: int) -> bool:
        until = self.tombstones.get(job_id)
        if until is None:
            return False
        if until < now_ms:
            del self.tombstones[job_id]
            return False
        return True

    # ------------------------------------------------------------------ messages
