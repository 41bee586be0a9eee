"""A holder confirmed dead: its jobs are requeued by the survivors soon, not at their RETRY.

Disque requeues a job whose queueing node died only when a surviving holder's RETRY timer
fires (300 s with the defaults). disq (issue 29) brings that timer forward when membership
*confirms* a peer DEAD (SWIM's dead, after the node timeout; never on a mere suspicion):
every copy here that is live (ACTIVE: not queued here, not acked), at-least-once (RETRY >
0), not a beanstalk copy, and that was last known queued or worked on at the dead node (or
where it is queued is unknown and the dead node holds a copy) gets its requeue time moved
to ``DEAD_REQUEUE_DELAY_MS`` plus up to ``DEAD_REQUEUE_JITTER_MS`` from now. From there the
usual exchange (requeue.py) keeps duplicates down as at RETRY: WILLQUEUE 500 ms before, a
live holder that has the job queued answers QUEUED and the others stand down; the first
holder to fire queues it and its QUEUED makes the others stand down.

Where a job is: ``DJob.queued_at``, the node this copy last heard queued or worked on the
job (the REPLJOB's sender, which queues it once its add is done; a QUEUED's or WORKING's
sender; the importer of a job this node gave away with YOURJOBS; this node when it queued
the job). Why not every job whose holder set includes the
dead node (the simpler rule): a job delivered by a live node to a worker still on it has
the dead node among its holders too, and would be run twice well before its RETRY; with
REPLICATE 2 that is every in-flight job whose other copy was on the dead node.

The work is bounded per loop iteration: a death takes a snapshot of the job ids (one C-level
copy of the dict's keys, 15-20 ms of CPU per million; a dict's iterator cannot be kept
across ticks while jobs come and go) and the timer looks at ``DEAD_SWEEP_BATCH`` of them per
tick, so a node holding a million jobs does not stall its loop for the whole walk. A second
death during a sweep starts it again with both nodes (a job brought forward stays so).

A component of the core: it owns the dead set and the sweep; it reads the job table and
moves a job's requeue time through the core's timer (``_update_awake``), nothing else.
"""

from __future__ import annotations

from disq.core.disque.host import CoreHost
from disq.core.disque.job import ACTIVE, BCAST_WILLQUEUE, BEANSTALK_ORIGIN, DJob

# A second or two: long enough for the WILLQUEUE round (sent 500 ms before) to reach a live
# holder that has the job queued, short beside a RETRY. The jitter spreads the holders so the
# first one's QUEUED reaches the others before their own timer fires.
DEAD_REQUEUE_DELAY_MS = 1000
DEAD_REQUEUE_JITTER_MS = 1000
DEAD_SWEEP_BATCH = 4096  # job ids looked at per tick


class DeadPeers:
    """Requeue soon the jobs a dead peer had queued (the module's docstring says which)."""

    def __init__(self, host: CoreHost) -> None:
        self.host = host
        self.dead: set[str] = set()
        self.sweep_ids: list[str] = []  # job ids to look at, a snapshot taken at the death
        self.sweep_pos = 0
        self.sweep_due_ms = 0

    def died(self, now_ms: int, node_id: str) -> None:
        """Membership confirmed ``node_id`` DEAD: sweep the jobs, from the next tick on."""
        if node_id == self.host.my_id:
            return
        self.dead.add(node_id)
        self.sweep_ids = list(self.host.jobs)
        self.sweep_pos = 0
        self.sweep_due_ms = now_ms

    def alive(self, node_id: str) -> None:
        """``node_id`` is back (or was only suspected): no longer a reason to requeue.
        Jobs already brought forward keep their time: their WILLQUEUE now reaches it, and
        it answers QUEUED if it has them queued."""
        self.dead.discard(node_id)
        if not self.dead:
            self.sweep_ids = []
            self.sweep_pos = 0

    def sweep(self, now_ms: int) -> None:
        """One batch of the sweep (the core's tick runs it while ``sweep_ids`` is not empty)."""
        ids = self.sweep_ids
        pos = self.sweep_pos
        end = min(pos + DEAD_SWEEP_BATCH, len(ids))
        jobs = self.host.jobs
        for i in range(pos, end):
            j = jobs.get(ids[i])
            if j is not None:
                self.requeue_soon(j, now_ms)
        if end >= len(ids):
            self.sweep_ids = []
            self.sweep_pos = 0
            self.dead.clear()
        else:
            self.sweep_pos = end

    def requeue_soon(self, j: DJob, now_ms: int) -> bool:
        """Bring ``j``'s requeue forward if a dead peer had it; True if it was."""
        if j.state != ACTIVE or j.retry_s == 0 or j.qtime_ms == 0:
            return False  # queued here, acked, waiting for its copies, or at-most-once
        if j.flags & BEANSTALK_ORIGIN:
            return False  # the owner's holders take it over by their own timer (bridge.py)
        dead = self.dead
        where = j.queued_at
        if where:
            if where not in dead:
                return False  # queued or in a worker's hands at a live node (or here)
        elif not any(n in dead for n in j.delivered):
            return False
        at = now_ms + DEAD_REQUEUE_DELAY_MS + int(self.host.rng.random() * DEAD_REQUEUE_JITTER_MS)
        # Never before the job's DELAY ends: every requeue time is set as an event's time
        # (REPLJOB + DELAY, a QUEUED, a delivery) plus RETRY and jitter, so the time minus
        # RETRY is no earlier than that event, on this node's clock.
        not_before = j.qtime_ms - j.retry_s * 1000
        if at < not_before:
            at = not_before
        if at >= j.qtime_ms:
            return False
        j.qtime_ms = at
        j.flags |= BCAST_WILLQUEUE
        self.host.stats["jobs_requeue_advanced"] += 1
        self.host._update_awake(j)
        return True
