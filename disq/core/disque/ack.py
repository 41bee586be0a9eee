"""Acks and their garbage collection (Disque's ack.c), and the deletions that end a job.

ACKJOB marks the job acked here (an ACKJOB record, fsynced before the answer under
``always``), then asks every node that may hold a copy to ack it too (SETACK) and retries with
exponential backoff; once every holder confirmed (GOTACK) the job is deleted everywhere
(DELJOB, logged here too). An ack for an id this node never held is a "dummy ack" broadcast
to all nodes, logged the same way. A holder that learns the ack by SETACK logs a DELJOB:
the acker keeps the ack, so a power loss of every node right after the answer leaves it
acked where it was answered, and its GC (or the WILLQUEUE of a holder that missed the SETACK,
answered SETACK) ends every copy instead of queueing it again. FASTACK skips the
confirmation round: DELJOB to everybody at once, best effort as in Disque. A deleted id is
remembered for a while (a tombstone) so a late REPLJOB cannot bring it back.

A component of the core (``core.acks``): it keeps no state of its own; the acked copies'
fields (gc_retry, confirmed, qtime_ms as the next GC attempt) and the job table are the core's.
"""

from __future__ import annotations

from typing import Protocol

from mypy_extensions import mypyc_attr

from disq.core import events as ev
from disq.core import ids
from disq.core.disque.blocked import BlockedClients
from disq.core.disque.counts import QueueCounts
from disq.core.disque.gone import GoneJobs
from disq.core.disque.host import CoreHost
from disq.core.disque.idempotency import KeyTable
from disq.core.disque.job import ACK_LOGGED, ACKED, NO_NODES, QUEUED, WAIT_REPL, DJob
from disq.core.events import EventBuffer
from disq.core.messages import DelJob, GotAck, SetAck
from disq.persistence.cluster_records import REC_ACKJOB, encode_ackjob
from disq.persistence.framing import frame

GC_RETRY_MIN_MS = 1000
GC_RETRY_MAX_MS = 180_000
GC_TIME_ERR_MS = 500  # jitter on every GC retry, so holders do not all retry at once
# A holder that learned the ack by SETACK makes its first GC attempt at this backoff step
# (GC_RETRY_MIN_MS << 2: 4 s +- 0.5 s), after the acker's own retry (2 s +- 0.5 s).
HOLDER_FIRST_GC_STEP = 2


def ackjob_record(j: DJob, wall_offset_ms: int) -> bytes:
    """The ACKJOB record of an ack this node answered: the id and the expiry, wall-clock
    (written here, and by a rewrite for an ack whose GC is not over: aof.py)."""
    return frame(REC_ACKJOB, encode_ackjob(j.id, j.etime_ms + wall_offset_ms))


class AckHost(CoreHost, Protocol):
    """What the acks need of the core beyond its job table."""

    events: EventBuffer
    counts: QueueCounts
    keys: KeyTable
    blocked: BlockedClients
    gone: GoneJobs

    def _register(self, j: DJob, awake: bool = True) -> None: ...


@mypyc_attr(allow_interpreted_subclasses=True)  # the simulator's mutants (tests/unit/test_sim.py)
class Acks:
    """ACKJOB, FASTACK, QPURGE and the ack GC's messages (``core.acks``)."""

    def __init__(self, host: AckHost) -> None:
        self.host = host

    # ------------------------------------------------------------------ commands
    def ack_job(self, now_ms: int, job_ids: list[str]) -> int:
        host = self.host
        known = 0
        for job_id in job_ids:
            j = host.jobs.get(job_id)
            if j is not None:
                if j.state != ACKED:
                    host.events.add(ev.ACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
                    self.ack_here(j, now_ms)
                    known += 1
            elif (
                host.view.cluster_size() > 1
                and not host.view.leaving
                and ids.may_be_redelivered(job_id)
            ):
                # Dummy ACK: an ack for a job this node never held; SETACK goes to everybody
                # in search of the holders.
                d = DJob(job_id, "", b"", 0, 0, 0, 0, now_ms + ids.ttl_minutes(job_id) * 60_000)
                d.state = ACKED
                host.events.add(ev.ACKED, now_ms, "", job_id, 0, 0)  # the queue is elsewhere
                host._register(d)
                self._log_ack(d)
                self.try_gc(d, now_ms)
        host.stats["jobs_acked"] += known
        return known

    def purge_queue(self, now_ms: int, queue: str, before_ctime: int = 0) -> int:
        """Ack every job queued here in ``queue`` (only those with a ctime below
        ``before_ctime`` when it is not 0), as ACKJOB does: the ack GC reaches every copy,
        and each is an ACKED event. The number acked. disq's purge (issue 29): a client that
        walked the queue with JSCAN and acked page by page skipped jobs, since acking while
        walking moves the cursor; this takes the queue's jobs in one step."""
        q = self.host.queues.get(queue)
        if q is None or not q.skiplist:
            return 0
        if before_ctime:
            job_ids = [j.id for j in q.skiplist if j.ctime < before_ctime]
        else:
            job_ids = [j.id for j in q.skiplist]
        return self.ack_job(now_ms, job_ids)

    def ack_here(self, j: DJob, now_ms: int) -> None:
        """Acked on this node (ACKJOB, a beanstalk delete of a replicated job): logged as
        acked, and the GC starts."""
        self.acknowledge(j, now_ms)
        self._log_ack(j)
        self.try_gc(j, now_ms)

    def _log_ack(self, j: DJob) -> None:
        host = self.host
        if host.persist:
            host.aof_out.append(ackjob_record(j, host.wall_offset_ms))
            j.flags |= ACK_LOGGED

    def acknowledge(self, j: DJob, now_ms: int, first_gc_step: int = 0) -> None:
        host = self.host
        if j.state == WAIT_REPL:
            # Acked while its ADDJOB still waits (Disque #73/#97): somebody consumed it, so
            # the copies exist; answer the producer with its id instead of crashing.
            host.blocked.answer_add_of(j.id, j.id)
        if j.state == QUEUED:
            host._dequeue(j)
        host.keys.key_done(j, now_ms)  # acked: its add surely finished
        host.counts.to_acked(j)
        j.gc_retry = first_gc_step
        j.confirmed = NO_NODES
        # Every acked job gets GC attempts of its own (as in Disque): a node that learned the
        # ack by SETACK and answered GOTACK must not keep it until its TTL if the DELJOB that
        # should follow is lost or its sender crashes.
        j.qtime_ms = self._gc_retry_time(j, now_ms)

    def _gc_retry_time(self, j: DJob, now_ms: int) -> int:
        base = min(GC_RETRY_MIN_MS << min(j.gc_retry, 20), GC_RETRY_MAX_MS)
        j.gc_retry += 1
        return now_ms + base + int(self.host.rng.random() * 2 * GC_TIME_ERR_MS) - GC_TIME_ERR_MS

    def try_gc(self, j: DJob, now_ms: int) -> None:
        """tryJobGC: SETACK to every node that may hold a copy and has not confirmed; delete
        once all did. A dummy ack (no known holders) asks everybody."""
        host = self.host
        dummy = not j.delivered
        j.confirm(host.my_id)
        if (not dummy and j.confirmed >= j.delivered) or (dummy and host.view.cluster_size() == 1):
            host._unregister(j, now_ms)
            return
        targets = host.view.all_peers() if dummy else list(j.delivered)
        for node in targets:
            if node != host.my_id and node not in j.confirmed:
                host._send(node, SetAck(j.id, len(j.delivered)))
        j.qtime_ms = self._gc_retry_time(j, now_ms)
        host._update_awake(j)

    def fast_ack(self, now_ms: int, job_ids: list[str]) -> int:
        host = self.host
        known = 0
        for job_id in job_ids:
            j = host.jobs.get(job_id)
            if j is None:
                for node in host.view.all_peers():
                    host._send(node, DelJob([job_id]))
                continue
            known += 1
            host.events.add(ev.ACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
            host._delete_from_cluster(j, now_ms)
        host.stats["jobs_acked"] += known
        return known

    def on_setack(self, now_ms: int, sender: str, msg: SetAck) -> None:
        host = self.host
        j = host.jobs.get(msg.job_id)
        if j is not None and j.state != ACKED:
            # The acker drives the GC; this holder's own attempts are the safety net for a
            # lost DELJOB or an acker that died, so they start after the acker's retry. Under
            # load one SETACK/GOTACK/DELJOB round trip can take over a second, and holders
            # attempting at 0.5-1.5 s (Disque's first step) each sent a SETACK round of
            # their own: 16% of a node's main thread under GETJOB+ACKJOB, feeding the load
            # that made the round trips slow.
            self.acknowledge(j, now_ms, first_gc_step=HOLDER_FIRST_GC_STEP)
            host._log_del(j.id)  # the acker logged the ack; this copy is done
            host._update_awake(j)
        if j is None:
            host._send(sender, GotAck(msg.job_id, False))
        elif len(j.delivered) <= msg.may_have:
            host._send(sender, GotAck(msg.job_id, True))
        else:
            self.try_gc(j, now_ms)

    def on_gotack(self, now_ms: int, sender: str, msg: GotAck) -> None:
        host = self.host
        j = host.jobs.get(msg.job_id)
        if j is None or j.state != ACKED:
            return
        dummy = not j.delivered
        if dummy and msg.known:
            # A holder took over the GC: the dummy ack is no longer needed.
            host._unregister(j, now_ms)
            return
        if msg.known or sender in j.delivered:
            if not dummy:
                j.deliver_to(sender)
            j.confirm(sender)
        if dummy and not msg.known:
            j.confirm(sender)
            if len(j.confirmed) >= host.view.cluster_size():
                host._unregister(j, now_ms)
            return
        if not dummy and j.confirmed >= j.delivered:
            host._broadcast_del(j)
            host._unregister(j, now_ms)

    def on_deljob(self, now_ms: int, sender: str, msg: DelJob) -> None:
        host = self.host
        for job_id in msg.job_ids:
            j = host.jobs.get(job_id)
            host.gone.mark(job_id, now_ms, j is not None and j.state == ACKED)
            if j is not None:
                if j.state != ACKED:
                    host._log_del(j.id)
                    # Deleted unacked: its add failed (NOREPL, the client left), or it was
                    # FASTACKed or DELJOBed. If its key is still tentative here (its add
                    # was never known done) a retry of the key must add the job again, not
                    # answer the id of a job that is gone. A done key stays (idempotency.py).
                    host.keys.forget_key(j, now_ms)
                host._unregister(j, now_ms)
            else:
                host.gone.tombstone(job_id, now_ms)
