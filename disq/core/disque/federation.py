"""Federation (Disque's queue.c, needJobsForQueue and friends): a node whose consumers find a
queue empty asks the others for jobs (NEEDJOBS), and they move some over (YOURJOBS).

A rare NEEDJOBS(1) broadcast discovers who has jobs; frequent ad hoc requests go to the nodes
that recently answered (the queue's ``responders``). disq adds ``wanted_by``: peers that asked
while the queue here was empty get the next job added here at once, instead of waiting for
their next (backed off) broadcast.
"""

from __future__ import annotations

from typing import Protocol

from disq.core.disque.counts import QueueCounts
from disq.core.disque.gone import GoneJobs
from disq.core.disque.host import CoreHost
from disq.core.disque.idempotency import KeyTable
from disq.core.disque.job import ACTIVE, BCAST_QUEUED, DJob
from disq.core.disque.queue import DQueue
from disq.core.disque.replication import Replication
from disq.core.disque.requeue import Requeue
from disq.core.messages import NeedJobs, YourJobs

NEEDJOBS_BCAST_MIN_MS = 2000
NEEDJOBS_BCAST_MAX_MS = 30_000
NEEDJOBS_ADHOC_MIN_MS = 25
NEEDJOBS_ADHOC_MAX_MS = 2000
# A consumer that starts waiting on a queue nobody here waited on asks every node at once
# (at most this often), not at the backed-off pace of a wait that goes on (below).
NEEDJOBS_NEW_WAIT_MS = 100
NEEDJOBS_MIN_REQUEST = 5
NEEDJOBS_MAX_REQUEST = 100
WANTED_VALID_MS = 35_000  # longer than the longest NEEDJOBS broadcast gap


class FederationHost(CoreHost, Protocol):
    """What federation needs of the core beyond its job table."""

    max_queues: int
    counts: QueueCounts
    gone: GoneJobs
    keys: KeyTable
    requeue: Requeue
    replication: Replication

    def _queue(self, name: str, now_ms: int) -> DQueue: ...
    def _postpone(self, j: DJob, now_ms: int) -> None: ...
    def _register(self, j: DJob, awake: bool = True) -> None: ...
    def _log_job(self, j: DJob, now_ms: int, record: bytes = b"") -> None: ...


class Federation:
    """NEEDJOBS / YOURJOBS (``core.federation``): the pace of a queue's requests lives in its
    DQueue (its responders, backoffs and ``wanted_by``); this keeps no state of its own."""

    def __init__(self, host: FederationHost) -> None:
        self.host = host

    def need_jobs(self, q: DQueue, now_ms: int, reached_zero: bool, new_wait: bool = False) -> None:
        """needJobsForQueue: a rare NEEDJOBS(1) broadcast to discover who has jobs, and
        frequent ad hoc requests to the nodes that recently answered.

        ``new_wait``: a consumer starts waiting where none waited. Disque broadcasts on the
        backoff of the queue's last wait (up to 30 s): a consumer whose client moved here,
        or one that polls (a Dramatiq or Celery consumer's GETJOB of a second, again and
        again), could wait that long for jobs queued on a node that last heard from this
        one while it had consumers of its own. A new wait broadcasts now (at most every
        NEEDJOBS_NEW_WAIT_MS) and starts the backoff over."""
        if self.host.view.leaving:
            return
        if new_wait and now_ms - q.needjobs_bcast_ms > NEEDJOBS_NEW_WAIT_MS:
            q.needjobs_bcast_ms = 0
            q.needjobs_bcast_attempt = 0
        responders = q.live_responders(now_ms)
        rate = q.import_rate(now_ms)
        to_fetch = NEEDJOBS_MIN_REQUEST
        if responders:
            to_fetch = rate // len(responders)
        to_fetch = max(NEEDJOBS_MIN_REQUEST, min(NEEDJOBS_MAX_REQUEST, to_fetch))
        bcast_delay = min(
            NEEDJOBS_BCAST_MIN_MS << min(q.needjobs_bcast_attempt, 10), NEEDJOBS_BCAST_MAX_MS
        )
        adhoc_delay = min(
            NEEDJOBS_ADHOC_MIN_MS << min(q.needjobs_adhoc_attempt, 10), NEEDJOBS_ADHOC_MAX_MS
        )
        if q.needjobs_bcast_ms == 0 or now_ms - q.needjobs_bcast_ms > bcast_delay:
            q.needjobs_bcast_ms = now_ms
            q.needjobs_bcast_attempt += 1
            for node in self.host.view.reachable_peers():
                self.host._send(node, NeedJobs(q.name, 1))
        if responders and (reached_zero or now_ms - q.needjobs_adhoc_ms > adhoc_delay):
            q.needjobs_adhoc_ms = now_ms
            q.needjobs_adhoc_attempt += 1
            for node in responders:
                self.host._send(node, NeedJobs(q.name, to_fetch))

    def _give_jobs(self, q: DQueue, node: str, count: int, now_ms: int) -> None:
        n = count if len(q) >= 2 * count else max(1, len(q) // 2)
        records: list[bytes] = []
        kept: list[DJob] = []
        while len(records) < n and q.skiplist:
            j: DJob = q.skiplist.pop(0)
            if j.idem_key and (j.queue, j.idem_key) in self.host.keys.tentative:
                # The importer takes an exported job's key as done (it was queued here),
                # but a copy whose add is still undecided can be queued by its RETRY: if
                # that add then fails, the importer would answer a retry of the key with
                # the id of a deleted job. Such a job stays here until its key is decided.
                kept.append(j)
                continue
            self.host.counts.to_active(j)
            j.queued_at = node  # queued at the importer now (dead_peers.py)
            q.jobs_out += 1
            j.deliver_to(node)
            records.append(self.host._copy_record(j, now_ms))
            if j.retry_s == 0:
                # An at-most-once job must exist in one place only: it moves.
                self.host._log_del(j.id)
                self.host._unregister(j, now_ms)
            else:
                # Our copy stays active; the importer's QUEUED/WILLQUEUE answers keep it
                # from being requeued here while the importer has it.
                self.host._postpone(j, now_ms)
        for j in kept:
            q.skiplist.add(j)
        if records:
            self.host.stats["jobs_exported"] += len(records)
            self.host._send(node, YourJobs(records))

    def push_wanted(self, q: DQueue, now_ms: int) -> None:
        for node, until in list(q.wanted_by.items()):
            if until < now_ms or not self._peer_ok(node):
                del q.wanted_by[node]
                continue
            del q.wanted_by[node]
            self._give_jobs(q, node, 1, now_ms)
            return

    def _peer_ok(self, node: str) -> bool:
        return node in self.host.view.reachable_peers()

    # ------------------------------------------------------------------ messages
    def on_needjobs(self, now_ms: int, sender: str, msg: NeedJobs) -> None:
        q = self.host.queues.get(msg.queue)
        if q is None:
            if len(self.host.queues) >= self.host.max_queues:
                return  # at the bound: a peer's interest is not worth a queue record
            # Remember the interest (the queue record is reclaimed by the idle GC).
            q = self.host._queue(msg.queue, now_ms)
        if q.paused_out:
            return
        if not q.skiplist:
            if not q.blocked:
                q.wanted_by[sender] = now_ms + WANTED_VALID_MS
            return
        # Disque ignores a NEEDJOBS while its queue imports (an importer does not export),
        # against jobs bouncing between nodes. But a node imports only for consumers that
        # asked here, and one with jobs queued has none of them waiting: those jobs sat
        # here, for up to the import window and the asker's next (backed off) broadcast,
        # while a consumer elsewhere asked for them (a Dramatiq or Celery consumer whose
        # client moved to another node stalled 4-18 s). Jobs move only towards a node
        # whose consumers wait, and at most half of a short queue goes (_give_jobs).
        self._give_jobs(q, sender, max(1, msg.count), now_ms)

    def on_yourjobs(self, now_ms: int, sender: str, msg: YourJobs) -> None:
        imported = 0
        host = self.host
        queue = ""
        for record in msg.records:
            d = host.replication.read_copy(record, now_ms)
            queue = d.queue
            j = host.jobs.get(d.id)
            if j is None:
                if host.gone.tombstoned(d.id, now_ms):
                    continue
                # Queued there: its add is done.
                j = host.replication.activate(d, now_ms, key_done=True)
                j.deliver_to(sender)
                host._register(j)
                host._log_job(j, now_ms, record)  # as it arrived, as a REPLJOB's
            else:
                j.deliver_to(*d.delivered)
                # This node's copy may have missed QUEUEDs the exporter saw (it was not in
                # every holder's delivered set): the exporter's counters are at least as new.
                host.requeue.merge_counters(j, d.nacks, d.add_deliveries, now_ms)
            if j.state == ACTIVE:
                # Imported jobs are queued without a QUEUED broadcast: the sender already
                # knows where they went.
                j.flags &= ~BCAST_QUEUED
                if self.host._enqueue(j, now_ms):
                    imported += 1
        if msg.records:
            q = self.host._queue(queue, now_ms)
            q.responders[sender] = now_ms
            if imported:
                q.record_import(now_ms, imported)
            q.needjobs_adhoc_attempt = 0
            if len(q.responders) == 1:
                q.needjobs_bcast_attempt = 0
            self.host.stats["jobs_imported"] += imported
