"""Requeue between the holders of a job's copies (Disque's job.c: ENQUEUE, QUEUED,
WILLQUEUE, WORKING): who queues a copy, who pushes its timer, whose copy stays when two were
queued at once, and the counters the copies share.

A NACK with a DELAY (disq's; Disque's NACK requeues at once) is a WORKING for the delay
rather than the RETRY: every holder sets its requeue timer to the delay's end, so no node
queues the job meanwhile (a holder whose timer ran early would: WILLQUEUE only asks, it does
not forbid). The NACK counts one nack, carried by the WORKING; the requeue at the delay's end
is no new delivery (``NACK_WAIT``), so additional deliveries count RETRYs run out only.
Never early: each holder counts the delay from when it hears it, after the NACK.

A queue's BACKOFF (QPOLICY, disq/core/policy/) is such a hold, its delay computed from the
job's counters: a NACK without DELAY is a NACK DELAY of the backoff; a RETRY run out counts
its additional delivery at once, then holds the job for the backoff (a WORKING with the
delay and both counters) instead of queueing it. An explicit DELAY wins over the backoff.
"""

from __future__ import annotations

from random import Random
from typing import Protocol

from disq.core import events as ev
from disq.core.disque.api import DisqueError
from disq.core.disque.counts import QueueCounts
from disq.core.disque.gone import GoneJobs
from disq.core.disque.host import CoreHost
from disq.core.disque.job import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    DELIVERED,
    NACK_WAIT,
    QUEUED,
    DJob,
)
from disq.core.disque.memory import MemoryLevels
from disq.core.disque.state import GONE_ACKED, GONE_DELETED
from disq.core.events import EventBuffer
from disq.core.messages import DelJob, Enqueue, Queued, SetAck, WillQueue, Working


def compare_ids_by_job(a: str, b: str, job_id: str) -> int:
    """Disque's ``compareNodeIDsByJob``: node ids XORed with the job id, so which copy wins
    a double requeue differs per job and the load spreads."""
    key = job_id.encode()
    ka = bytes(x ^ y for x, y in zip(a.encode(), key, strict=False))
    kb = bytes(x ^ y for x, y in zip(b.encode(), key, strict=False))
    return (ka > kb) - (ka < kb)


class DeadLetterCheck(Protocol):
    """deadletter.py's ``DeadLetters``: whether a queue's MAXDELIVERIES takes a job."""

    def spent(self, j: DJob, now_ms: int, nack: bool) -> bool: ...


class RequeueHost(CoreHost, Protocol):
    """What the requeue exchange needs of the core beyond its job table."""

    counts: QueueCounts
    gone: GoneJobs
    memory: MemoryLevels
    events: EventBuffer
    rng: Random

    @property
    def dead_letters(self) -> DeadLetterCheck: ...

    def _postpone(self, j: DJob, now_ms: int) -> None: ...
    def _log_job(self, j: DJob, now_ms: int) -> None: ...
    def _update_awake(self, j: DJob, at: int = 0) -> None: ...
    def _jitter(self) -> int: ...


class BackoffTable(Protocol):
    """The queue policies' backoff (disq/core/policy/table.py's ``Policies``)."""

    def backoff_s(self, queue: str, deliveries: int) -> int: ...


class Requeue:
    """The requeue messages between holders (``core.requeue``): it keeps no state of its own
    (``backoff``: the cluster's queue policies, None on a core without them); the copies'
    fields and the job table are the core's."""

    def __init__(self, host: RequeueHost) -> None:
        self.host = host
        self.backoff: BackoffTable | None = None

    def backoff_ms(self, j: DJob) -> int:
        """The hold ``j``'s queue's BACKOFF owes the delivery that just failed, with a
        jitter of up to a tenth of it added (never less); 0: none. Read before the requeue
        counts: deliveries = nacks + additional deliveries + 1 (the add's own delivery)."""
        table = self.backoff
        if table is None:
            return 0
        s = table.backoff_s(j.queue, j.nacks + j.add_deliveries + 1)
        if s <= 0:
            return 0
        ms = s * 1000
        return ms + int(self.host.rng.random() * (ms // 10))

    def nack(self, now_ms: int, job_ids: list[str], delay_ms: int) -> int:
        """NACK: with a DELAY, or without one on a queue with a BACKOFF, the jobs delivered
        from here wait on every holder, then are queued again; the others are queued at
        once (Disque's NACK). How many were taken."""
        host = self.host
        if host.memory.warning >= 3:
            raise DisqueError("OOM", "command not allowed when used memory > 'maxmemory'.")
        n = 0
        for job_id in job_ids:
            j = host.jobs.get(job_id)
            if j is None or j.state != ACTIVE:
                continue
            if host.dead_letters.spent(j, now_ms, True):
                host.events.add(ev.NACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
                n += 1  # past its queue's MAXDELIVERIES: moved, not queued (deadletter.py)
                continue
            wait = delay_ms if delay_ms > 0 else self.backoff_ms(j)
            if wait <= 0:
                if host._enqueue(j, now_ms, nack=True):
                    host.events.add(ev.NACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
                    n += 1
                continue
            if j.flags & BEANSTALK_ORIGIN:
                continue
            if j.retry_s == 0 and j.flags & DELIVERED:
                continue  # at-most-once: never queued again (as a NACK without DELAY)
            j.nacks += 1
            self._hold_everywhere(j, now_ms, wait)
            host.events.add(ev.NACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
            n += 1
        return n

    def retry_backoff(self, j: DJob, now_ms: int) -> bool:
        """``j``'s RETRY ran out here and no copy is queued: on a queue with a BACKOFF, count
        the additional delivery now (the requeue at the hold's end is no new one) and hold
        the job on every holder; False (nothing done): queue it as Disque does. Only a job
        queued before (``BCAST_QUEUED``, as ``_enqueue`` counts): a DELAY's end is no retry."""
        if not j.flags & BCAST_QUEUED or j.flags & (NACK_WAIT | BEANSTALK_ORIGIN):
            return False
        wait = self.backoff_ms(j)
        if wait <= 0:
            return False
        j.add_deliveries += 1
        self._hold_everywhere(j, now_ms, wait)
        return True

    def _hold_everywhere(self, j: DJob, now_ms: int, wait_ms: int) -> None:
        """Hold ``j`` here and tell every holder to (a WORKING with the delay and the
        counters); log the counters."""
        self._hold(j, now_ms, wait_ms)
        msg = Working(j.id, wait_ms, j.nacks, j.add_deliveries)
        for node in j.delivered:
            self.host._send(node, msg)
        self.host._log_job(j, now_ms)

    def _hold(self, j: DJob, now_ms: int, delay_ms: int) -> None:
        """Requeue ``j`` once ``delay_ms`` has passed here, as no new delivery; WILLQUEUE
        first, as a RETRY's requeue asks."""
        j.flags |= NACK_WAIT | BCAST_WILLQUEUE
        j.qtime_ms = now_ms + delay_ms + self.host._jitter()
        self.host._update_awake(j)

    def on_enqueue(self, now_ms: int, sender: str, msg: Enqueue) -> None:
        j = self.host.jobs.get(msg.job_id)
        if j is None or j.state != ACTIVE:
            return
        q = self.host.queues.get(j.queue)
        if q is not None and q.paused_in:
            return
        if j.delay_s:
            j.qtime_ms = now_ms + j.delay_s * 1000
            j.flags &= ~BCAST_WILLQUEUE
            self.host._update_awake(j)
        else:
            self.host._enqueue(j, now_ms, moved=True)  # a move, not a redelivery (_enqueue)

    def merge_counters(self, j: DJob, nacks: int, add_deliveries: int, now_ms: int) -> None:
        """Take a peer's counters: the larger of each wins. Counters only grow and every
        change is broadcast, so the maximum is what the busiest copy saw; adding instead
        would count twice a requeue two nodes did at once, or a repeated message. A copy
        that changed is logged again (restarts keep the counters), never a job whose add
        is still waiting (it is logged once done) nor an acked one (its DELJOB is)."""
        changed = False
        if nacks > j.nacks:
            j.nacks = nacks
            changed = True
        if add_deliveries > j.add_deliveries:
            j.add_deliveries = add_deliveries
            changed = True
        if changed and (j.state == ACTIVE or j.state == QUEUED):
            self.host._log_job(j, now_ms)

    def on_queued(self, now_ms: int, sender: str, msg: Queued) -> None:
        j = self.host.jobs.get(msg.job_id)
        if j is None:
            return
        if msg.nacks or msg.additional_deliveries:
            self.merge_counters(j, msg.nacks, msg.additional_deliveries, now_ms)
        elif msg.incr_nacks or msg.incr_deliveries:
            # A peer that sends only Disque's flags: count by them, as Disque does.
            self.merge_counters(
                j, j.nacks + msg.incr_nacks, j.add_deliveries + msg.incr_deliveries, now_ms
            )
        if j.state == QUEUED and compare_ids_by_job(sender, self.host.my_id, j.id) > 0:
            self.host._dequeue(j)  # two copies queued: the one whose node wins keeps it
        if j.state != QUEUED:
            j.queued_at = sender  # where the job is now (dead_peers.py)
        self.host.counts.undelay(j)  # queued there: its delay is over (counts.py)
        # And so is a hold (a NACK DELAY, a BACKOFF): this copy's next requeue is a RETRY
        # run out again, counted and backed off, not the hold's end.
        j.flags &= ~NACK_WAIT
        j.flags |= BCAST_QUEUED
        if j.state in (ACTIVE, QUEUED) and j.retry_s:
            j.flags |= BCAST_WILLQUEUE
            self.host._postpone(j, now_ms)

    def on_willqueue(self, now_ms: int, sender: str, msg: WillQueue) -> None:
        j = self.host.jobs.get(msg.job_id)
        if j is None:
            # Acked, or deleted, here: the sender's copy is one the GC did not reach
            # (gone.py's ``mark`` says how); it is told what happened to the job.
            how = self.host.gone.how(msg.job_id, now_ms)
            if how == GONE_ACKED:
                self.host._send(sender, SetAck(msg.job_id, 0))
            elif how == GONE_DELETED:
                self.host._send(sender, DelJob([msg.job_id]))
            return
        if j.state == ACKED:
            self.host._send(sender, SetAck(j.id, len(j.delivered)))
        elif j.state == QUEUED or j.flags & BEANSTALK_OWNED:
            # With the counters: the asker may have missed the QUEUED that counted them.
            self.host._send(sender, Queued(j.id, False, False, j.nacks, j.add_deliveries))

    def on_working(self, now_ms: int, sender: str, msg: Working) -> None:
        j = self.host.jobs.get(msg.job_id)
        if j is None:
            return
        if j.state == QUEUED:
            self.host._dequeue(j)
        j.queued_at = sender  # a worker of the sender's has it (dead_peers.py)
        if msg.delay_ms and j.state == ACTIVE and (j.retry_s or not j.flags & DELIVERED):
            # An older build's WORKING has no delivery counter (0): the maximum keeps ours.
            self.merge_counters(j, msg.nacks, msg.additional_deliveries, now_ms)
            self._hold(j, now_ms, msg.delay_ms)
            return
        self.host._postpone(j, now_ms)
