"""One node's state machines behind one API: the beanstalk core, the Disque core, membership.

Shaped after etcd raft's ``RawNode``: inputs go in (commands through the cores, peer messages,
``tick(now_ms)``), and the work they make for the IO layer comes out as one :class:`Ready`.
The IO layer persists the Ready's records, then sends its messages and delivers its replies
(:func:`apply_ready` is that order, written once), then calls :meth:`NodeCore.advance`.
Production (``disq.server.runtime``), the simulator and the unit tests drive this same class,
so the glue between the cores (the beanstalk bridge, the DELJOB/IdemKeys merge, reply routing
by token) runs under the simulator's faults too.

What lives here and nowhere else:

- **The beanstalk bridge.** A beanstalk put with ``beanstalk_replicate`` > 1 gets a Disque
  record replicated like a sync ADDJOB (:meth:`beanstalk_put`); INSERTED waits for the copies.
  The beanstalk core's ``cluster_events`` (bury, kick, release with a priority, delete) become
  BeanstalkUpdate/DELJOB through the Disque core; its bridge's ``takeovers``,
  ``dropped`` and ``relinks`` become beanstalk jobs adopted, dropped or relinked.
  One call can cause the other (a takeover adopts a job that wakes a reserve...), so
  :meth:`ready` settles both ways until nothing moves: no re-entrant pumps.
- **Reply routing by token.** One token counter for every door (RESP, gRPC, beanstalk), so
  a deferred result names exactly one waiter. Replicated puts' tokens are answered here, as
  beanstalk wake-ups; every other token leaves in ``Ready.replies`` for the IO layer's router.
- **Message merging.** Each peer gets at most one DelJob and one IdemKeys per Ready, with
  every entry: the ack GC of a busy queue ends thousands of jobs a second and each message
  costs an encode and a decode. They go last: a delete or a key that arrives a little later
  is safe, a job message that arrives after its delete is not.

Pure: no asyncio, no sockets, no clock (``now_ms`` is passed in), no randomness but the
cores' injected ``random.Random``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.beanstalk.model import ReplicaLink
from disq.core.disque.api import AddOptions, DeferredResult, DisqueError, Pending
from disq.core.events import EventBuffer

if TYPE_CHECKING:
    # The cluster's types, for annotations only: a node without a Disque core never loads
    # them (disq/core/node_cluster.py says why). The node core builds its ClusterCores
    # where a Disque core arrives, importing node_cluster there, which loads them.
    from disq.core.beanstalk.model import Session
    from disq.core.disque.core import DisqueCore
    from disq.core.disque.job import DJob
    from disq.core.membership import Membership
    from disq.core.messages import Message
    from disq.core.node_cluster import ClusterCores
    from disq.core.policy.table import Policies
    from disq.core.routes.table import Routes
    from disq.core.schedule.scheduler import Scheduler

BEANSTALK_REPL_TIMEOUT_MS: Final = 5000  # no copies by then: INTERNAL_ERROR, job dropped

# A beanstalk waiter's result: a reserved Job, a numeric id (a replicated put confirmed), or
# a beanstalk error code.
Wakeup = tuple["Session", Any]


class Ready:
    """One batch of work for the IO layer, taken with :meth:`NodeCore.ready`.

    THE RULE: ``aof_records`` are written (and fsynced, when the fsync policy says so)
    BEFORE any of ``messages``, ``replies`` or ``wakeups`` leaves. A GOTJOB confirms a copy,
    a reply hands out a job id, a wake-up answers INSERTED: each promises a record that a
    crash must not lose. :func:`apply_ready` is the one place that applies a Ready in that
    order; the server runtime and the simulator both call it.

    ``events`` and ``member_changes`` are bookkeeping (the lifecycle event log, link
    addresses): they depend on nothing and may be applied in any order.
    """

    __slots__ = ("aof_records", "events", "member_changes", "messages", "replies", "wakeups")

    def __init__(self) -> None:
        self.aof_records: list[bytes] = []  # framed records, in order
        self.messages: dict[str, list[Message]] = {}  # peer id -> messages, in order
        self.replies: list[tuple[int, DeferredResult]] = []  # token -> deferred result
        self.wakeups: list[Wakeup] = []  # beanstalk sessions to resume
        self.events: list[EventBuffer] = []  # lifecycle events, drained from both cores
        self.member_changes: list[tuple[str, int]] = []  # (node id, membership state)

    def __bool__(self) -> bool:
        return bool(
            self.aof_records
            or self.messages
            or self.replies
            or self.wakeups
            or self.events
            or self.member_changes
        )

    def __repr__(self) -> str:
        return (
            f"Ready(records={len(self.aof_records)}, peers={len(self.messages)}, "
            f"replies={len(self.replies)}, wakeups={len(self.wakeups)})"
        )


def apply_ready(
    rd: Ready,
    persist: Callable[[list[bytes]], bool],
    send: Callable[[str, list[Message]], None],
    reply: Callable[[int, DeferredResult], None],
    wake: Callable[[Session, Any], None],
) -> bool:
    """Apply ``rd`` in the order its rule demands: records first; only when ``persist``
    says they are durable, the messages, then the replies and wake-ups. False: nothing
    left (the IO layer keeps the Ready, retries later, and does not call ``advance``)."""
    if rd.aof_records and not persist(rd.aof_records):
        return False
    for peer, msgs in rd.messages.items():
        send(peer, msgs)
    for token, result in rd.replies:
        reply(token, result)
    # Not ``result`` again: compiled (mypyc), a loop variable keeps the type of its first
    # loop, and a wake-up's result is no DeferredResult.
    for session, woken in rd.wakeups:
        wake(session, woken)
    return True


# The simulator's tests subclass it in Python (mutants).
@mypyc_attr(allow_interpreted_subclasses=True)
class NodeCore:
    """The node's state machines: the beanstalk core, and the cluster's (``cluster_cores``:
    the Disque core, membership, the scheduler and routes tables), None on a node without
    its cluster doors (beanstalkd-style flags) until :meth:`attach_cluster`."""

    def __init__(
        self,
        beanstalk: BeanstalkCore,
        disque: DisqueCore | None = None,
        membership: Membership | None = None,
        *,
        beanstalk_replicate: int = 1,
        beanstalk_repl_timeout_ms: int = BEANSTALK_REPL_TIMEOUT_MS,
        contain_errors: bool = True,
    ) -> None:
        self.beanstalk = beanstalk
        self.beanstalk_replicate = beanstalk_replicate
        self.beanstalk_repl_timeout_ms = beanstalk_repl_timeout_ms
        # A bad peer message or a failing tick must not take a production node down; the
        # simulator turns this off, since any exception out of a core fails its seed.
        self.contain_errors = contain_errors
        self.message_errors = 0
        self.errors: list[tuple[str, BaseException]] = []  # (what, exception) for the log
        self.new_token: Callable[[], int] = itertools.count(1).__next__
        self._bputs: dict[int, tuple[Session, int]] = {}  # token -> (session, beanstalk id)
        self._in_flight: Ready | None = None
        self.cluster_cores: ClusterCores | None = None
        beanstalk.max_reserves = self._max_reserves  # QPOLICY MAXDELIVERIES on tubes
        if disque is not None:
            from disq.core.node_cluster import ClusterCores

            self.cluster_cores = ClusterCores(disque, membership, self._next_token, False)
        elif membership is not None:
            raise ValueError("membership without a Disque core: the cluster needs both")

    def attach_cluster(self, disque: DisqueCore, membership: Membership | None) -> None:
        """The node's cluster half, built after the node core (the server attaches it once
        its view and AOF are known): the Disque core, membership, the scheduler and the
        routes table."""
        from disq.core.node_cluster import ClusterCores

        self.cluster_cores = ClusterCores(disque, membership, self._next_token, True)

    def _max_reserves(self, tube: str) -> int:
        """The tube's MAXDELIVERIES (0: none, or no cluster), for the beanstalk core."""
        cluster = self.cluster_cores
        return cluster.policies.limit(tube)[0] if cluster is not None else 0

    # The cluster's cores, read where they live (None: no cluster attached).
    @property
    def disque(self) -> DisqueCore | None:
        cluster = self.cluster_cores
        return cluster.disque if cluster is not None else None

    @property
    def membership(self) -> Membership | None:
        cluster = self.cluster_cores
        return cluster.membership if cluster is not None else None

    @property
    def scheduler(self) -> Scheduler | None:
        """Recurring schedules, riding on the Disque core."""
        cluster = self.cluster_cores
        return cluster.scheduler if cluster is not None else None

    @property
    def routes(self) -> Routes | None:
        """Exchanges, bindings and queue declarations, riding on the Disque core."""
        cluster = self.cluster_cores
        return cluster.routes if cluster is not None else None

    @property
    def policies(self) -> Policies | None:
        """Queue policies (QPOLICY), riding on the Disque core."""
        cluster = self.cluster_cores
        return cluster.policies if cluster is not None else None

    def _next_token(self) -> int:
        return self.new_token()  # the simulator swaps ``new_token`` for its own counter

    # ------------------------------------------------------------------ inputs
    def on_peer_messages(self, now_ms: int, sender: str, msgs: Iterable[Message]) -> None:
        cluster = self.cluster_cores
        if cluster is not None:
            errors = self.errors if self.contain_errors else None
            self.message_errors += cluster.on_peer_messages(now_ms, sender, msgs, errors)

    def on_link_up(self, now_ms: int, node_id: str) -> None:
        """The IO layer's link to peer ``node_id`` came up: membership pings it, and the
        adds waiting for a copy there ask again (messages to a link that was down were
        dropped)."""
        cluster = self.cluster_cores
        if cluster is None:
            return
        try:
            cluster.on_link_up(now_ms, node_id)
        except Exception as exc:
            if not self.contain_errors:
                raise
            self.errors.append((f"link up {node_id}", exc))

    def cluster_reset(self, now_ms: int, new_id: str = "") -> None:
        """CLUSTER RESET (Disque's clusterReset): membership forgets every peer and ignores
        them until a meet, and every job and queue goes (flushServerData), their deletions
        logged so a restart does not load them again. Nothing the cores still had for the
        peers leaves. ``new_id`` (HARD): the node's id from now on; the cores read it from
        membership. The beanstalk door's tubes are not the cluster's and stay, as do the
        schedule definitions and the routes table (tables a meet syncs again)."""
        if self.cluster_cores is not None:
            self.cluster_cores.reset(now_ms, new_id)

    def tick(self, now_ms: int) -> None:
        """Run what is due in every core."""
        cluster = self.cluster_cores
        if cluster is not None:
            try:
                cluster.tick(now_ms)
            except Exception as exc:
                if not self.contain_errors:
                    raise
                self.errors.append(("cluster tick", exc))
        beanstalk = self.beanstalk
        if 0 <= beanstalk.next_deadline_ms() <= now_ms:
            beanstalk.tick(now_ms)

    def next_deadline_ms(self) -> int:
        """The earliest time ``tick`` has work, or -1 when nothing is scheduled."""
        best = self.beanstalk.next_deadline_ms()
        if self.cluster_cores is not None:
            when = self.cluster_cores.next_deadline_ms()
            if when >= 0 and (best < 0 or when < best):
                best = when
        return best

    def set_wall_offset(self, ms: int, now_ms: int) -> None:
        """The wall clock is ``ms`` from the node clock from ``now_ms`` on (the node follows
        it, disq/server/clock.py; a test steps it): the cores write absolute times with it."""
        self.beanstalk.wall_offset_ms = ms
        if self.cluster_cores is not None:
            self.cluster_cores.set_wall_offset(ms, now_ms)

    def cancel(self, token: int) -> None:
        """The client waiting on ``token`` went away."""
        bput = self._bputs.pop(token, None)
        if self.cluster_cores is not None:
            self.cluster_cores.disque.cancel(token)
        if bput is not None:
            # Nobody will hear INSERTED: the put goes, like a sync ADDJOB whose client left.
            self.beanstalk.drop(bput[1])

    def set_persist(self, on: bool) -> None:
        """Produce AOF records (the node has an AOF) or not."""
        self.beanstalk.persist = on
        if self.cluster_cores is not None:
            self.cluster_cores.set_persist(on)

    # ------------------------------------------------------------------ Disque commands
    # The commands of the RESP and gRPC doors come in here, as proposals come into raft's
    # RawNode: every door, the simulator and the tests give them to this one API, and what
    # they cause (records, peer messages, a deferred answer for ``token``) leaves in the
    # next Ready. Each is the Disque core's component call, unchanged: ``now_ms`` first,
    # DisqueError for a refusal (its code and text are the reply). A node without its
    # cluster half has no RESP or gRPC door; a call then is a bug, answered ERR.
    def _jobs(self) -> DisqueCore:
        cluster = self.cluster_cores
        if cluster is None:
            raise DisqueError("ERR", "this node has no cluster core")
        return cluster.disque

    @property
    def my_id(self) -> str:
        """This node's id (HELLO, CLUSTER MYID)."""
        return self._jobs().view.my_id

    def add_job(
        self, now_ms: int, token: int, queue: str, body: bytes, opts: AddOptions
    ) -> str | Pending:
        """ADDJOB: the id, or PENDING (the id or NOREPL arrives for ``token``)."""
        return self._jobs().add_job(now_ms, token, queue, body, opts)

    # fmt: off
    def get_job(
        self, now_ms: int, token: int, queues: list[str], *, nohang: bool = False,
        timeout_ms: int = 0, count: int = 1, in_order: bool = False,
    ) -> list[DJob] | Pending | None:
        """GETJOB: the jobs, None (NOHANG, none), or PENDING (they arrive for ``token``)."""
        return self._jobs().get_job(
            now_ms, token, queues, nohang=nohang, timeout_ms=timeout_ms, count=count,
            in_order=in_order,
        )
    # fmt: on

    def ack_job(self, now_ms: int, job_ids: list[str]) -> int:
        return self._jobs().acks.ack_job(now_ms, job_ids)

    def fast_ack(self, now_ms: int, job_ids: list[str]) -> int:
        return self._jobs().acks.fast_ack(now_ms, job_ids)

    def nack(self, now_ms: int, job_ids: list[str], delay_ms: int = 0) -> int:
        """NACK: queued again at once, or after ``delay_ms`` (on every holder)."""
        return self._jobs().nack(now_ms, job_ids, delay_ms)

    def enqueue(self, now_ms: int, job_ids: list[str]) -> int:
        return self._jobs().enqueue(now_ms, job_ids)

    def dequeue(self, now_ms: int, job_ids: list[str]) -> int:
        return self._jobs().dequeue(now_ms, job_ids)

    def del_job(self, now_ms: int, job_ids: list[str]) -> int:
        return self._jobs().del_job(now_ms, job_ids)

    def working(self, now_ms: int, job_id: str) -> int:
        """WORKING: the seconds until the next requeue (NOJOB, TOOLATE)."""
        return self._jobs().working(now_ms, job_id)

    def qlen(self, queue: str) -> int:
        return self._jobs().qlen(queue)

    def qpurge(self, now_ms: int, queue: str) -> int:
        return self._jobs().acks.purge_queue(now_ms, queue)

    def show(self, now_ms: int, job_id: str) -> list[tuple[str, object]] | None:
        """SHOW: the job's fields as pairs, or None."""
        return self._jobs().inspect.show(now_ms, job_id)

    def qstat(self, now_ms: int, queue: str) -> list[tuple[str, object]] | None:
        """QSTAT: Disque's pairs and disq's, then the queue's policy when it has one."""
        stat = self._jobs().inspect.qstat(now_ms, queue)
        policy = self.qpolicy_get(queue)
        if stat is not None and policy:
            stat.extend(policy)
        return stat

    def qpolicy_set(
        self,
        now_ms: int,
        queue: str,
        max_deliveries: int = 0,
        dead_letter: str = "",
        backoff_base_s: int = 0,
        backoff_max_s: int = 0,
    ) -> None:
        """QPOLICY SET: the queue's whole policy (disq/core/policy/); PolicyError."""
        self._policies().set(
            now_ms, queue, max_deliveries, dead_letter, backoff_base_s, backoff_max_s
        )

    def qpolicy_get(self, queue: str) -> list[tuple[str, object]] | None:
        """QPOLICY GET: the policy's set fields as pairs, or None."""
        from disq.core.policy.table import describe

        e = self._policies().get(queue)
        return None if e is None else describe(e)

    def qpolicy_list(self) -> list[tuple[str, list[tuple[str, object]]]]:
        """Every queue with a policy, by name, with its set fields (the dashboard)."""
        from disq.core.policy.table import describe

        return [(e.queue, describe(e)) for e in self._policies().live_entries()]

    def qpolicy_del(self, now_ms: int, queue: str) -> int:
        """QPOLICY DEL: 1, or 0 when the queue had no policy."""
        return 1 if self._policies().delete(now_ms, queue) else 0

    def qredrive(
        self, now_ms: int, token: int, queue: str, to: str = "", count: int = 0
    ) -> int | Pending:
        """QREDRIVE: the dead letters queued here in ``queue`` back to their source queue (or
        ``to``); how many moved, or PENDING (the count arrives for ``token``)."""
        self._policies()
        return self._jobs().dead_letters.redrive(now_ms, token, queue, to, count)

    def _policies(self) -> Policies:
        cluster = self.cluster_cores
        if cluster is None:
            raise DisqueError("ERR", "queue policies need the node's cluster core")
        return cluster.policies

    def qpeek(self, queue: str, count: int) -> list[DJob]:
        return self._jobs().inspect.qpeek(queue, count)

    # fmt: off
    def qscan(
        self, now_ms: int, cursor: int, count: int, *, busyloop: bool = False,
        minlen: int | None = None, maxlen: int | None = None, importrate: int | None = None,
    ) -> tuple[int, list[str]]:
        return self._jobs().inspect.qscan(
            now_ms, cursor, count, busyloop=busyloop, minlen=minlen, maxlen=maxlen,
            importrate=importrate,
        )

    def jscan(
        self, cursor: int, count: int, *, busyloop: bool = False, queue: str | None = None,
        states: set[int] | None = None,
    ) -> tuple[int, list[DJob]]:
        return self._jobs().inspect.jscan(
            cursor, count, busyloop=busyloop, queue=queue, states=states
        )
    # fmt: on

    def pause(self, now_ms: int, queue: str, flags: int | None, bcast: bool) -> int:
        """PAUSE: the queue's pause flags after the change (``flags`` None: read them)."""
        return self._jobs().inspect.pause(now_ms, queue, flags, bcast)

    def flushall(self) -> None:
        """FLUSHALL (DEBUG FLUSHALL): every job, queue and result goes, on this node only."""
        self._jobs().flush.flushall()

    def job_count(self) -> int:
        return len(self._jobs().jobs)

    def queue_count(self) -> int:
        return len(self._jobs().queues)

    def result_set(
        self,
        now_ms: int,
        token: int,
        job_id: str,
        value: bytes,
        ttl_s: int | None,
        repl: int | None,
        timeout_ms: int,
        ack: bool = False,
    ) -> str | Pending:
        """RESULT SET: "OK", or PENDING (OK or NOREPL arrives for ``token``); ``ack``: the
        job ``job_id`` is acked once the result is held."""
        results = self._jobs().results
        return results.set(now_ms, token, job_id, value, ttl_s, repl, timeout_ms, ack)

    def result_get(self, now_ms: int, job_id: str) -> bytes | None:
        return self._jobs().results.get(now_ms, job_id)

    def result_wait(self, now_ms: int, token: int, job_id: str, timeout_ms: int) -> bytes | Pending:
        """RESULT WAIT: the value, or PENDING (the value, or None at the timeout, arrives
        for ``token``)."""
        return self._jobs().results.wait(now_ms, token, job_id, timeout_ms)

    def result_del(self, now_ms: int, job_id: str) -> int:
        return self._jobs().results.delete(now_ms, job_id)

    # ------------------------------------------------------------------ the bridge
    def beanstalk_put(self, s: Session, job_id: int, now_ms: int) -> int:
        """The beanstalk door's Replicator: copy a put to ``beanstalk_replicate`` nodes.
        0: done (INSERTED now); 1: INSERTED waits for the copies; -1: failed (the job is
        dropped, the door answers INTERNAL_ERROR)."""
        cluster = self.cluster_cores
        if self.beanstalk_replicate <= 1 or cluster is None:
            return 0
        disque = cluster.disque
        beanstalk = self.beanstalk
        job = beanstalk.jobs[job_id]
        token = self.new_token()
        try:
            did, pending = disque.bridge.add(
                now_ms,
                token,
                job.tube.name,
                job.body,
                priority=job.pri,
                ttr_s=job.ttr_ms // 1000,
                delay_s=job.delay_ms // 1000,
                repl=self.beanstalk_replicate,
                timeout_ms=self.beanstalk_repl_timeout_ms,
                bid=job_id,
            )
        except DisqueError:
            beanstalk.drop(job_id)
            return -1
        job.replica = ReplicaLink(did, self.beanstalk_replicate)
        if pending:
            self._bputs[token] = (s, job_id)
        return 1 if pending else 0

    def _settle(self, now_ms: int) -> None:
        """Carry changes across the bridge, both ways, until neither core has any."""
        cluster = self.cluster_cores
        if cluster is None:
            self.beanstalk.cluster_events.clear()
            return
        cluster.settle(now_ms, self.beanstalk)

    # ------------------------------------------------------------------ output
    def has_ready(self) -> bool:
        """Whether :meth:`ready` would return a non-empty Ready (cheap: the hot path asks)."""
        b = self.beanstalk
        if b.aof_out or b.wakeups or b.cluster_events or len(b.events):
            return True
        cluster = self.cluster_cores
        return cluster is not None and cluster.has_output()

    def ready(self, now_ms: int) -> Ready:
        """Everything the inputs since the last Ready produced. Call :meth:`advance` once
        the IO layer has applied it, before the next ``ready``."""
        if self._in_flight is not None:
            raise RuntimeError("ready() again before advance(): the last Ready is not applied")
        self._settle(now_ms)
        rd = Ready()
        beanstalk, cluster = self.beanstalk, self.cluster_cores
        disque: DisqueCore | None = None
        membership: Membership | None = None
        sched: Scheduler | None = None
        routes: Routes | None = None
        policies: Policies | None = None
        if cluster is not None:
            disque, membership = cluster.disque, cluster.membership
            sched, routes, policies = cluster.scheduler, cluster.routes, cluster.policies
            if disque.replies and cluster.has_own_adds():
                cluster.own_replies(now_ms)
        # Records: the beanstalk core's first. The Disque core's records of a replicated
        # beanstalk job follow the beanstalk PUT they describe (replay relinks them).
        if beanstalk.aof_out:
            rd.aof_records, beanstalk.aof_out = beanstalk.aof_out, []
        if disque is not None and disque.aof_out:
            rd.aof_records.extend(disque.aof_out)
            disque.aof_out.clear()
        if sched is not None and sched.aof_out:
            rd.aof_records.extend(sched.aof_out)
            sched.aof_out.clear()
        if routes is not None and routes.aof_out:
            rd.aof_records.extend(routes.aof_out)
            routes.aof_out.clear()
        if policies is not None and policies.aof_out:
            rd.aof_records.extend(policies.aof_out)
            policies.aof_out.clear()
        if membership is not None:
            if membership.outbox:
                self._add_messages(rd, membership.outbox)
                membership.outbox.clear()
            if membership.events:
                rd.member_changes, membership.events = membership.events, []
                if cluster is not None:
                    cluster.tell_deaths(now_ms, rd.member_changes)
        if disque is not None:
            if disque.outbox:
                self._add_messages(rd, disque.outbox)
                disque.outbox.clear()
            if disque.replies:
                self._route_replies(rd, disque)
            if len(disque.events):
                rd.events.append(disque.events.take())
        if len(beanstalk.events):
            rd.events.append(beanstalk.events.take())
        if sched is not None:
            if sched.outbox:
                self._add_messages(rd, sched.outbox)
                sched.outbox.clear()
            if len(sched.events):
                rd.events.append(sched.events.take())
        if routes is not None and routes.outbox:
            self._add_messages(rd, routes.outbox)
            routes.outbox.clear()
        if policies is not None and policies.outbox:
            self._add_messages(rd, policies.outbox)
            policies.outbox.clear()
        if beanstalk.wakeups:
            rd.wakeups, beanstalk.wakeups = beanstalk.wakeups, []
        self._in_flight = rd
        return rd

    def advance(self) -> None:
        """The last Ready is applied: the next may be taken."""
        self._in_flight = None

    @staticmethod
    def _add_messages(rd: Ready, outbox: list[tuple[str, Message]]) -> None:
        # Only the cluster's cores send messages: node_cluster is loaded when one is here.
        from disq.core.node_cluster import add_messages

        add_messages(rd.messages, outbox)

    def _route_replies(self, rd: Ready, disque: DisqueCore) -> None:
        replies, disque.replies = disque.replies, []
        bputs = self._bputs
        if not bputs:
            rd.replies = replies
            return
        out = rd.replies
        wakeups = self.beanstalk.wakeups
        for token, result in replies:
            bput = bputs.pop(token, None)
            if bput is None:
                out.append((token, result))
                continue
            session, job_id = bput
            # The Disque core answers a job id when the copies exist, a NOREPL error
            # otherwise (the job is dropped through the bridge's ``dropped``).
            wakeups.append((session, job_id if isinstance(result, str) else "INTERNAL_ERROR"))

    # ------------------------------------------------------------------ persistence
    def restore(
        self,
        now_ms: int,
        records: list[tuple[int, bytes]],
        buf: bytes = b"",
        job_offsets: list[int] | None = None,
    ) -> int:
        """Replay an AOF's records into empty cores; the number of jobs they hold. The node's
        reader leaves the Disque core's job records (JOB_RECORD_TYPES) in the file's buffer
        ``buf`` and gives where each starts, ``job_offsets`` (DisqueCore.restore)."""
        jobs = self.beanstalk.restore(records)
        if self.cluster_cores is not None:
            jobs += self.cluster_cores.restore(now_ms, records, buf, job_offsets)
        return jobs

    def live_bytes(self) -> int:
        """What the AOF would hold after a rewrite (the rewrite trigger compares the file to
        it after every write: O(1))."""
        live = self.beanstalk.live_bytes
        if self.cluster_cores is not None:
            live += self.cluster_cores.disque.memory.used_bytes
        return live
