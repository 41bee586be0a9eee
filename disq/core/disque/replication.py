"""Replication (Disque's clusterReplicateJob, REPLJOB/GOTJOB): a new job's copies.

A sync ADDJOB registers the job WAIT_REPL here and sends REPLJOB to R-1 shuffled reachable
peers; each peer registers it *active* (not queued: "replicated to several nodes, queued on
one"), logs the job's record as it arrived (job_record.py) and answers GOTJOB, which leaves
only after that record is written. At R
confirmations the creator logs the job, answers the client and queues it (or, replicated
externally under memory pressure, hands it to one holder with ENQUEUE).

Reachable is Disque's notion (``ClusterView.reachable_peers``): a known peer the failure
detector has not given up on, whatever the state of its link; a node just restarted counts
the peers it knew at once. So a target may well be down: the blocked ADDJOB's timer
(blocked.py) asks every target that has not confirmed again until the ms-timeout, and
replaces the ones the failure detector gives up on with nodes reachable then (nodes that came
back included).

A component of the core (``core.replication``): it keeps no state of its own (a waiting add's
targets and confirmations are the job's, its client blocked.py's); what it does to the job
table and the outboxes goes through the core, the :class:`ReplicationHost` it is given.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Protocol

from disq.core import events as ev
from disq.core.disque.blocked import BlockedClients
from disq.core.disque.gone import GoneJobs
from disq.core.disque.handoff import Handoffs
from disq.core.disque.host import CoreHost
from disq.core.disque.idempotency import KeyTable
from disq.core.disque.job import (
    ACTIVE,
    AWAITS_DELAY,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    LOGGED_AT_ADD,
    NO_NODES,
    WAIT_REPL,
    DJob,
    deserialize,
)
from disq.core.disque.keyvote import KeyVoting
from disq.core.disque.memory import MemoryLevels
from disq.core.disque.requeue import Requeue
from disq.core.disque.state import KV_ADD
from disq.core.job_record import ttl_left_ms
from disq.core.messages import Enqueue, GotJob, ReplJob

_NAMES_MAX = 4096  # queue names interned for the copies; past that, start again


class ReplicationHost(CoreHost, Protocol):
    """What replication needs of the core beyond its job table."""

    events: ev.EventBuffer
    memory: MemoryLevels
    gone: GoneJobs
    blocked: BlockedClients
    keys: KeyTable
    votes: KeyVoting
    requeue: Requeue
    handoff: Handoffs

    def _jitter(self) -> int: ...
    def _register(self, j: DJob, awake: bool = True) -> None: ...
    def _log_job(self, j: DJob, now_ms: int, record: bytes = b"") -> None: ...
    def _copy_record(self, j: DJob, now_ms: int) -> bytes: ...
    def _copies_needed(self, j: DJob) -> int: ...


class Replication:
    """REPLJOB / GOTJOB and the end of a replicated add (``core.replication``)."""

    def __init__(self, host: ReplicationHost) -> None:
        self.host = host
        self._names: dict[bytes, str] = {}  # queue names of the copies, one str each

    def replicate(self, j: DJob, count: int, now_ms: int, resend: bool = True) -> bytes:
        """clusterReplicateJob: add up to ``count`` new reachable nodes to the job's
        delivered set and send them REPLJOB; with ``resend``, ask again every delivered
        node that has not confirmed. Disque resends to confirmed nodes too; disq does not:
        under load thousands of adds wait, and re-sent bodies nobody needs saturate links.
        The record sent (b"": none), encoded once for every target."""
        host = self.host
        new: list[str] = []
        if count > 0:
            peers = [n for n in host.view.reachable_peers() if n not in j.delivered]
            host.rng.shuffle(peers)
            new = peers[:count]
            j.deliver_to(*new)
        msg: ReplJob | None = None
        me = host.my_id
        targets = j.delivered if resend else new
        for node in targets:
            if node == me or node in j.confirmed:
                continue
            if msg is None:
                msg = ReplJob(host._copy_record(j, now_ms))
            host._send(node, msg)
        return b"" if msg is None else msg.record

    def achieved(self, j: DJob, now_ms: int) -> None:
        """The add has the copies it asked for: answer its clients and keep the job."""
        host = self.host
        j.state = ACTIVE
        confirmed = j.confirmed
        j.confirmed = NO_NODES
        tokens, deadline = host.blocked.take_add(j.id)
        if host.votes.needed(j):
            # A keyed add on a cluster: its copies exist, now its key is voted on
            # (keyvote.py); the add's clients get the key's job, and the job is queued
            # only if it wins. Logged now: a restart must find this candidate.
            self._log_job_here(j, now_ms)
            host.votes.propose(j, KV_ADD, tokens, deadline, now_ms, confirmed)
            return
        host.keys.announce_key(j, now_ms)  # before the answer: it may wait for the key's acks
        if tokens and not host.keys.hold_reply(j, tokens, deadline, now_ms):
            host.replies.extend((t, j.id) for t in tokens)
        self._log_job_here(j, now_ms)
        self.finish_add(j, confirmed, now_ms)

    def start(self, j: DJob, count: int, now_ms: int) -> None:
        """A sync add: ask ``count`` nodes for copies, and log this node's own copy now.

        Logged as the REPLJOBs leave, not once the copies confirm: under ``appendfsync
        always`` the answer waits for this node's fsync and the replicas' (before their
        GOTJOBs); one after the other, the two were the add's latency, at once it is the
        later of them. A keyed add is logged when its copies exist (its vote starts then);
        an add that fails takes its DELJOB (core.py ``_unregister``)."""
        host = self.host
        record = self.replicate(j, count, now_ms)
        if host.my_id in j.delivered and not host.votes.needed(j):
            # The bytes its peers get are its own record too, but for a beanstalk put's
            # alias (its peers' copies must not claim the engine job: aof.py).
            host._log_job(j, now_ms, record if not j.bid else b"")
            j.flags |= LOGGED_AT_ADD

    def _log_job_here(self, j: DJob, now_ms: int) -> None:
        """The LOADJOB of a job whose add is done, when this node keeps a copy (again if a
        resend asked more nodes than the record made at the add names)."""
        if self.host.my_id not in j.delivered or j.flags & BEANSTALK_OWNED:
            return
        if not j.flags & LOGGED_AT_ADD or len(j.delivered) > j.repl:
            self.host._log_job(j, now_ms)

    def finish_add(self, j: DJob, confirmed: Set[str], now_ms: int) -> None:
        """The add is done: keep the job here (queued, or waiting out its DELAY), or, when
        this node keeps no copy, have a holder queue it."""
        host = self.host
        if j.flags & BEANSTALK_OWNED:
            # Logged at the put already (bridge.py); the engine holds the live job, nothing
            # to queue here.
            host._update_awake(j)
            return
        me = host.my_id
        if me not in j.delivered:
            # External replication: a holder that confirmed its copy queues it (the others
            # re-queue theirs by RETRY if that ENQUEUE is lost); this node forgets it.
            holders = sorted(confirmed - {me}) or sorted(j.delivered)
            if holders:
                host._send(host.rng.choice(holders), Enqueue(j.id))
            host._forget(j)
            return
        if j.delay_s == 0:
            host._enqueue(j, now_ms)
        else:
            host._update_awake(j)

    # ------------------------------------------------------------------ messages
    def on_repljob(self, now_ms: int, sender: str, msg: ReplJob) -> None:
        host = self.host
        if host.memory.warning > 0 or host.view.leaving:
            return  # no copy: the sender will pick another node
        record = msg.record
        copy = self.read_copy(record, now_ms)
        q = host.queues.get(copy.queue)
        if q is not None and q.paused_in:
            return
        j = host.jobs.get(copy.id)
        if j is not None:
            j.deliver_to(*copy.delivered)
            # A resend, or a drain handing its copy over: the sender may have counted more.
            host.requeue.merge_counters(j, copy.nacks, copy.add_deliveries, now_ms)
        else:
            if host.gone.tombstoned(copy.id, now_ms):
                return  # acked or deleted here moments ago: a late resend must not revive it
            j = self.activate(copy, now_ms)  # its key is tentative: the add may still fail
            j.queued_at = sender  # the creator queues it once its add is done (dead_peers.py)
            host._register(j)
            host._log_job(j, now_ms, record)  # as it arrived: no second encoding
            host.events.add(ev.REPLICATED, now_ms, j.queue, j.id, 0, len(j.body))
        host._send(sender, GotJob(copy.id))

    def read_copy(self, record: bytes, now_ms: int) -> DJob:
        """deserializeJob: a peer's copy (REPLJOB, YOURJOBS), not yet made active here.
        Raises JobRecordError for a record that does not add up (the message is refused)."""
        names = self._names
        if len(names) > _NAMES_MAX:
            names.clear()
        return deserialize(record, 0, len(record), now_ms + ttl_left_ms(record), names, b"")

    def activate(self, j: DJob, now_ms: int, key_done: bool = False) -> DJob:
        """deserializeJob's end: a peer's copy becomes active here, to be requeued after
        delay + retry (+ jitter). Its idempotency key is tentative unless ``key_done`` (the
        job's add is known to have finished)."""
        host = self.host
        j.state = ACTIVE
        # The counters travel with the job (REPLJOB, YOURJOBS, a drain's handoff, the AOF).
        # BCAST_QUEUED as Disque's REPLJOB sets it: the job was (or is being) queued where
        # it came from, so this copy's own requeue counts a delivery (core.py _enqueue).
        flags = BCAST_QUEUED | (j.flags & BEANSTALK_ORIGIN)
        if j.delay_s and now_ms <= j.ctime // 1_000_000 - host.wall_offset_ms + j.delay_s * 1000:
            flags |= AWAITS_DELAY  # not queued before its DELAY ends (counts.py)
        j.delivered = {*j.delivered, host.my_id}
        if j.idem_key:
            host.keys.remember_key(j, now_ms, tentative=not key_done)
        if j.retry_s:
            flags |= BCAST_WILLQUEUE
            j.qtime_ms = now_ms + (j.delay_s + j.retry_s) * 1000 + host._jitter()
        j.flags = flags
        return j

    def on_gotjob(self, now_ms: int, sender: str, msg: GotJob) -> None:
        host = self.host
        if host.handoff.in_flight and host.handoff.gotjob(now_ms, sender, msg):
            return  # it confirmed a drain's handoff (handoff.py)
        j = host.jobs.get(msg.job_id)
        if j is None or j.state != WAIT_REPL:
            return
        j.confirm(sender)
        j.deliver_to(sender)
        if len(j.confirmed) >= host._copies_needed(j):
            self.achieved(j, now_ms)
