"""The beanstalk bridge (disq's addition, ``--beanstalk-replicate``): beanstalk jobs replicated
through the Disque core.

The owner's beanstalk engine holds the live job; the Disque core holds a record of it
(BEANSTALK_ORIGIN, and BEANSTALK_OWNED on the owner) that is replicated like any job and never
queued. The holders ask the owner whether it still has the job (WILLQUEUE, answered QUEUED)
every max(TTR, BEANSTALK_MIN_RETRY_S); when it stops answering one of them takes the job over
into its own engine. The owner tells the holders of buries, kicks and priority changes
(BEANSTALK_UPDATE) and of the deletion (DELJOB).

A component of the core (``core.bridge``). The node drains its three outboxes for its
engine:

- ``takeovers``: jobs this node takes over from a lost owner: put them in the engine, then
  call ``adopted``;
- ``dropped``: engine ids whose cluster record is gone: drop them from the engine;
- ``relinks``: owned records restored from the AOF: link them to their engine jobs.
"""

from __future__ import annotations

from typing import Protocol

from disq.core import ids
from disq.core.disque.ack import Acks
from disq.core.disque.api import NOREPL_NODES, DisqueError
from disq.core.disque.blocked import BlockedClients
from disq.core.disque.host import CoreHost
from disq.core.disque.job import (
    ACTIVE,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    DJob,
)
from disq.core.disque.replication import Replication
from disq.core.messages import BeanstalkUpdate, Queued

# Beanstalk jobs have no TTL; their cluster records live "forever" (fits the u32 wire field).
BEANSTALK_TTL_S = 100 * 365 * 86400
# Replicas ask the owner of a beanstalk job whether it still holds it (WILLQUEUE) every
# max(TTR, this): a TTR of 1 s would otherwise mean one question per job per second.
BEANSTALK_MIN_RETRY_S = 5


class BridgeHost(CoreHost, Protocol):
    """What the bridge needs of the core beyond its job table."""

    blocked: BlockedClients
    acks: Acks
    replication: Replication

    def _new_ctime(self, now_ms: int) -> int: ...
    def _register(self, j: DJob, awake: bool = True) -> None: ...
    def _log_job(self, j: DJob, now_ms: int) -> None: ...
    def _postpone(self, j: DJob, now_ms: int) -> None: ...


class BeanstalkBridge:
    """The beanstalk side of the core (``core.bridge``), with its three outboxes."""

    def __init__(self, host: BridgeHost) -> None:
        self.host = host
        self.takeovers: list[DJob] = []  # taken over from a lost owner: into the engine
        self.dropped: list[int] = []  # engine ids whose record is gone: out of the engine
        self.relinks: list[DJob] = []  # owned records restored from the AOF: link them

    def add(
        self,
        now_ms: int,
        token: int,
        tube: str,
        body: bytes,
        *,
        priority: int,
        ttr_s: int,
        delay_s: int,
        repl: int,
        timeout_ms: int,
        bid: int,
    ) -> tuple[str, bool]:
        """A beanstalk put (already in the local engine as ``bid``) replicated to ``repl``
        nodes. Returns (cluster id, pending); when pending, the id or a NOREPL error comes
        in ``replies`` under ``token``. On NOREPL the engine job is dropped (see
        ``beanstalk_dropped``): the client was never told INSERTED."""
        additional = repl - 1
        if additional > len(self.host.view.reachable_peers()):
            raise DisqueError("NOREPL", NOREPL_NODES)
        ctime = self.host._new_ctime(now_ms)
        retry = max(ttr_s, BEANSTALK_MIN_RETRY_S)
        job_id = ids.make_job_id(self.host.my_id, self.host.rng, BEANSTALK_TTL_S, retry)
        j = DJob(job_id, tube, body, repl, ctime, delay_s, retry, now_ms + BEANSTALK_TTL_S * 1000)
        j.flags |= BEANSTALK_ORIGIN | BEANSTALK_OWNED
        j.priority = priority
        j.bid = bid
        j.deliver_to(self.host.my_id)
        self.host._register(j)
        if additional <= 0:
            j.state = ACTIVE
            self.host._log_job(j, now_ms)
            return job_id, False
        j.confirmed = {self.host.my_id}
        self.host.blocked.wait_for_copies(token, job_id, now_ms + timeout_ms, now_ms)
        self.host.replication.replicate(j, additional, now_ms)
        # Logged now, with the nodes asked for copies, not when they confirm: the engine's
        # PUT is in this same Ready, and a crash before the copies confirm must not leave
        # the engine's job unlinked from copies that would take it over later (its delete
        # would reach none of them: a deleted job back a TTR later).
        self.host._log_job(j, now_ms)
        return job_id, True

    def update(self, now_ms: int, job_id: str, bstate: int, priority: int) -> None:
        """The owner's engine buried, kicked or re-prioritised the job: tell the holders."""
        j = self.host.jobs.get(job_id)
        if j is None or not j.flags & BEANSTALK_OWNED:
            return
        j.bstate, j.priority = bstate, priority
        for node in j.delivered:
            self.host._send(node, BeanstalkUpdate(j.id, bstate, priority))

    def deleted(self, now_ms: int, job_id: str) -> None:
        """The owner's engine deleted the job: acked as ACKJOB acks, so every copy goes by
        the ack's GC, and a holder that missed it is answered SETACK when it asks (WILLQUEUE)
        even after a power loss of every node: DELETED must not come back a TTR later as a
        takeover (a DELJOB to the holders, as FASTACK, could be lost with their caches)."""
        j = self.host.jobs.get(job_id)
        if j is None or not j.flags & BEANSTALK_OWNED:
            return
        j.bid = 0  # the engine job is gone already
        self.host.acks.ack_here(j, now_ms)

    def take_over(self, j: DJob) -> None:
        """The owner did not answer WILLQUEUE: this holder becomes the owner. QUEUED tells
        the other holders, who postpone (two takeovers at once mean a duplicate, which
        at-least-once allows)."""
        j.flags = (j.flags | BEANSTALK_OWNED) & ~BCAST_WILLQUEUE
        j.qtime_ms = 0
        self.takeovers.append(j)
        for node in j.delivered:
            self.host._send(node, Queued(j.id))

    def adopted(self, now_ms: int, j: DJob, bid: int) -> None:
        """The engine took over ``j`` as ``bid``."""
        j.bid = bid
        if self.host.jobs.get(j.id) is j:
            self.host._log_job(j, now_ms)

    # ------------------------------------------------------------------ messages
    def on_update(self, now_ms: int, sender: str, msg: BeanstalkUpdate) -> None:
        j = self.host.jobs.get(msg.job_id)
        if j is None or j.flags & BEANSTALK_OWNED:
            return
        j.bstate = msg.bstate
        j.priority = msg.priority
        self.host._log_job(j, now_ms)  # a restarted holder must restore it as the owner left it
        self.host._postpone(j, now_ms)
