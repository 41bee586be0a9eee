"""Handoff on a graceful drain (issue 11): a leaving node gives its jobs to other nodes.

The runtime sets the node leaving (CLUSTER LEAVING yes: ADDJOB answers -LEAVING, peers stop
choosing it), calls :meth:`Handoffs.start` once, then :meth:`Handoffs.tick` now and then until
:meth:`Handoffs.pending` is 0 or its drain bound passes (disq/server/drain.py).

What is handed off, one job at a time, to one reachable peer:

- a QUEUED job: dequeued here, then REPLJOB and ENQUEUE to a peer, holders of a copy first.
  REPLJOB makes (or confirms) the peer's copy; the ENQUEUE right behind it on the same
  stream queues it there at once, not after RETRY. The peer's GOTJOB confirms the handoff
  (it leaves the peer after the ENQUEUE ran there, or with it in the same iteration).
- an ACTIVE job with no copy on another node (REPLICATE 1, or copies lost): REPLJOB to a
  peer, so the job outlives this node; with ENQUEUE too if it was never delivered (delayed,
  or restored from the AOF), since no other node would ever queue it. A delivered one is
  requeued by its new holder at RETRY unless acked meanwhile (the ack of an unknown id is
  broadcast, so the client may ack anywhere).

On GOTJOB the local copy is forgotten (DELJOB in the AOF: a restart does not bring back a
second queued copy). The copy sent leaves this node out of its delivered set, so a
REPLICATE 1 job's ack is collected without waiting for this node. A peer that does not
answer within ``HANDOFF_RETRY_MS``, or that stops being reachable (down, or leaving too:
a whole cluster stopped at once), is replaced by the next one. No reachable peer at all:
the job stays here (queued again if it was), in the AOF, for a restart.

Not handed off: ACTIVE jobs with copies elsewhere (their holders requeue them at RETRY, as
after any node loss), WAIT_REPL adds (their clients get the id or -NOREPL), ACKED jobs
(their GC goes on elsewhere), and beanstalk jobs: a beanstalk job lives in this node's
engine and there is no protocol to move it; replicated ones (``beanstalk-replicate`` > 1)
are taken over by a holder when this node is gone, the others stay in the AOF.
A delayed job that is QUEUED here gets its DELAY again on the peer (ENQUEUE's rule).

A component of the core (``core.handoff``): it owns the jobs in flight; what it does to the
job table (dequeue, enqueue, forget) and the messages it sends go through the core, the
:class:`HandoffHost` it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from disq.core.disque.host import CoreHost
from disq.core.disque.job import (
    ACKED,
    ACTIVE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    DELIVERED,
    QUEUED,
    DJob,
    serialize,
)
from disq.core.disque.keyvote import KeyVoting
from disq.core.disque.state import Handoff
from disq.core.messages import Enqueue, GotJob, ReplJob

HANDOFF_RETRY_MS = 1000  # a peer silent this long is replaced by the next one


class HandoffHost(CoreHost, Protocol):
    """What the handoff needs of the core."""

    votes: KeyVoting


class Handoffs:
    """The drain handoff. Replication's GOTJOB handler asks :meth:`gotjob` first: a GOTJOB
    for a job being handed off confirms the handoff; every other one is replication's."""

    def __init__(self, host: HandoffHost) -> None:
        self.host = host
        self.in_flight: dict[str, Handoff] | None = None  # None: no drain started
        self.usable: Callable[[str], bool] | None = None  # the runtime's link check

    @property
    def draining(self) -> bool:
        return self.in_flight is not None

    def start(self, now_ms: int, usable: Callable[[str], bool] | None = None) -> int:
        """Begin handing this node's jobs to others (the node is leaving). Returns how many
        are in flight; 0 at once when there is nothing to move or nowhere to move it.
        ``usable``: the runtime's word on a reachable peer (its link is up): a peer that has
        just exited is still reachable for membership until the node timeout."""
        self.usable = usable
        hs = self.in_flight
        if hs is None:
            hs = self.in_flight = {}
        host = self.host
        me = host.view.my_id
        for j in list(host.jobs.values()):
            if j.id in hs or j.flags & (BEANSTALK_ORIGIN | BEANSTALK_OWNED):
                continue
            if host.votes.needed(j) and host.votes.decided_here((j.queue, j.idem_key)) != j.id:
                # Its key's vote is not won here (keyvote.py): queued elsewhere it could be a
                # second job of the key. It stays, in the AOF; the vote decides after a restart.
                continue
            if j.state == QUEUED:
                h = Handoff(enqueue=True, queued=True)
            elif j.state == ACTIVE and not (j.delivered - {me}):
                delivered = bool(j.flags & DELIVERED)
                if delivered and j.retry_s == 0:
                    continue  # at-most-once and already delivered: never queued again
                h = Handoff(enqueue=not delivered, queued=False)
            else:
                continue
            host._dequeue(j)
            hs[j.id] = h
            self._send(j, h, now_ms)
        return len(hs)

    def pending(self) -> int:
        """Jobs handed off but not confirmed yet."""
        return len(self.in_flight) if self.in_flight else 0

    def tick(self, now_ms: int) -> None:
        """Replace the peers that did not confirm in time; drop what no longer needs it."""
        hs = self.in_flight
        if not hs:
            return
        reachable = set(self._peers())
        for job_id, h in list(hs.items()):
            j = self.host.jobs.get(job_id)
            if j is None or j.state == ACKED:
                del hs[job_id]  # acked or deleted meanwhile: nothing to move
                continue
            if h.until > now_ms and h.target in reachable:
                continue  # a peer that became unreachable or leaving is replaced at once
            if j.state == QUEUED:
                self.host._dequeue(j)  # its requeue timer fired here meanwhile
            self._send(j, h, now_ms)

    def _peers(self) -> list[str]:
        usable = self.usable
        peers = self.host.view.reachable_peers()
        return peers if usable is None else [n for n in peers if usable(n)]

    def _send(self, j: DJob, h: Handoff, now_ms: int) -> None:
        host = self.host
        reachable = self._peers()
        if not reachable:
            self._give_up(j, h, now_ms)
            return
        fresh = [n for n in reachable if n not in h.tried]
        if not fresh:
            h.tried.clear()  # every peer was asked once: go round again
            fresh = list(reachable)
        holders = [n for n in fresh if n in j.delivered]
        pool = holders or fresh
        target = pool[int(host.rng.random() * len(pool))]
        h.target = target
        h.tried.append(target)
        h.until = now_ms + HANDOFF_RETRY_MS
        j.deliver_to(target)
        # Without this node (it leaves) and its beanstalk alias (it names this node's job).
        holders = sorted(j.delivered - {host.view.my_id})
        host._send(target, ReplJob(serialize(j, max(1000, j.etime_ms - now_ms), 0, holders)))
        if h.enqueue:
            host._send(target, Enqueue(j.id))

    def _give_up(self, j: DJob, h: Handoff, now_ms: int) -> None:
        hs = self.in_flight
        if hs is not None:
            hs.pop(j.id, None)
        if h.queued and j.state == ACTIVE:
            # Stays here, queued, in the AOF for a restart. Put back where it was: not a
            # delivery, so no counter moves and the record need not be written again.
            self.host._enqueue(j, now_ms, moved=True)

    def gotjob(self, now_ms: int, sender: str, msg: GotJob) -> bool:
        """True when ``msg`` confirms a handoff (it is then done with); False: not one of
        this drain's, replication's to handle."""
        hs = self.in_flight
        if not hs:
            return False
        h = hs.get(msg.job_id)
        if h is None:
            return False
        if sender in h.tried:
            del hs[msg.job_id]
            j = self.host.jobs.get(msg.job_id)
            if j is not None and j.state != ACKED:
                self.host._log_del(j.id)
                self.host._unregister(j, now_ms)
        return True
