"""The node core's cluster half: the cores only a node with its Disque core runs.

:class:`ClusterCores` holds the Disque core, membership, and the scheduler and routes tables
that ride on the Disque core, with what the node core asks of them together: peer messages
dispatched to their core, the beanstalk bridge settled, ticks, deadlines, AOF replay.
``NodeCore`` (disq/core/node_core.py) composes one once a Disque core is attached; this module
never imports the node core.

Apart from ``disq.core.node_core`` so that a node without its cluster doors (beanstalkd's
flags: the way test harnesses start beanstalkd) never loads the peer messages (two dozen
dataclasses), the scheduler or the routes table: compiled, initialising those modules was
about a third of what such a node paid between the interpreter's start and its first answer
(docs/benchmarks.md, "Start at the floor"). ``NodeCore`` imports this module where it builds
a ClusterCores, which happens only once a Disque core is attached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from disq.core.beanstalk.core import EV_DELETE
from disq.core.beanstalk.model import BURIED, ReplicaLink
from disq.core.messages import (
    BSTATE_BURIED,
    BSTATE_READY,
    DEAD,
    MEMBERSHIP_TYPES,
    DelJob,
    IdemKeys,
    KeyVote,
    KeyVotes,
    Message,
    PolicySync,
    RouteSync,
    SchedSync,
)
from disq.core.policy.table import Policies
from disq.core.routes.table import Routes
from disq.core.schedule.scheduler import Scheduler
from disq.persistence.policy_records import POLICY_RECORD_TYPES
from disq.persistence.route_records import ROUTE_RECORD_TYPES
from disq.persistence.schedule_records import SCHEDULE_RECORD_TYPES

if TYPE_CHECKING:
    from disq.core.beanstalk.core import BeanstalkCore
    from disq.core.disque.api import DeferredResult
    from disq.core.disque.core import DisqueCore
    from disq.core.membership import Membership

_SETTLE_ROUNDS_MAX = 64  # the bridge settles in 1-3 rounds; more is a core bug


class ClusterCores:
    """The Disque core, membership (None: a node with no failure detector, as some tests
    build), and the scheduler, routes and queue policy tables built on the Disque core."""

    def __init__(
        self,
        disque: DisqueCore,
        membership: Membership | None,
        next_token: Callable[[], int],
        follow: bool,
    ) -> None:
        """``follow``: the tables log and keep the wall clock as the Disque core already
        does (a core attached late; a new node core's cores start together)."""
        self.disque = disque
        self.membership = membership
        # Recurring schedules ride on the Disque core's keyed adds (disq/core/schedule/).
        self.scheduler = Scheduler(disque.view, disque, next_token)
        # Exchanges, bindings and queue declarations (disq/core/routes/).
        self.routes = Routes(disque.view, disque.acks)
        # Queue policies (disq/core/policy/): the Disque core's requeues read the backoff.
        self.policies = Policies(disque.view)
        self.next_token = next_token
        self._apply_policies(disque)
        if follow:
            self.scheduler.persist = self.routes.shared.persist = disque.persist
            self.policies.shared.persist = disque.persist
            self.scheduler.wall_offset_ms = disque.wall_offset_ms
            self.routes.shared.wall_offset_ms = disque.wall_offset_ms
            self.policies.shared.wall_offset_ms = disque.wall_offset_ms
        self.dispatch: dict[type, Callable[[int, str, Any], None]] = self._dispatch_table()

    def _apply_policies(self, disque: DisqueCore) -> None:
        """The Disque core's requeues read the policies: the backoff, the dead letters (whose
        adds take tokens from the node's one counter)."""
        disque.requeue.backoff = self.policies
        disque.dead_letters.policies = self.policies
        disque.dead_letters.new_token = self.next_token

    def _dispatch_table(self) -> dict[type, Callable[[int, str, Any], None]]:
        """The one dispatch of a peer message: its class to the handler that reads it (the
        wire's decoder already chose the class; nothing between decides again)."""
        dispatch = dict(self.disque.handlers)
        dispatch[SchedSync] = self.scheduler.on_message
        dispatch[RouteSync] = self.routes.on_message
        dispatch[PolicySync] = self.policies.on_message
        membership = self.membership
        if membership is not None:
            read: Callable[[int, str, Any], None] = membership.on_message
            for cls in MEMBERSHIP_TYPES:
                dispatch[cls] = read
        return dispatch

    def replace_disque(self, fresh: DisqueCore) -> None:
        """A restarted Disque core (the tests' crash and replay) takes the old one's place."""
        self.disque = fresh
        self._apply_policies(fresh)
        self.dispatch = self._dispatch_table()

    # ------------------------------------------------------------------ inputs
    def on_peer_messages(
        self,
        now_ms: int,
        sender: str,
        msgs: Iterable[Message],
        errors: list[tuple[str, BaseException]] | None,
    ) -> int:
        """Each message to its core. A message that raises is noted in ``errors`` and the
        rest are read; with ``errors`` None it propagates. The number that raised."""
        membership, dispatch = self.membership, self.dispatch
        failed = 0
        # A node forgotten by CLUSTER RESET and not met since: its job, schedule and routes
        # messages (a requeue, a copy, a lane frame still in flight) must not make state
        # here; only membership reads its messages, for a meet.
        forgotten = membership is not None and membership.ignores(sender)
        for msg in msgs:
            try:
                cls = type(msg)
                if forgotten:
                    assert membership is not None
                    if cls in MEMBERSHIP_TYPES:
                        dispatch[cls](now_ms, sender, msg)
                        forgotten = membership.ignores(sender)  # met: what follows is read
                    else:
                        membership.ignored += 1
                    continue
                handler = dispatch.get(cls)
                if handler is not None:
                    handler(now_ms, sender, msg)
            except Exception as exc:
                if errors is None:
                    raise
                failed += 1
                errors.append((f"peer message {type(msg).__name__} from {sender}", exc))
        return failed

    def on_link_up(self, now_ms: int, node_id: str) -> None:
        membership = self.membership
        if membership is not None:
            membership.on_link_up(now_ms, node_id)
        self.disque.blocked.peer_link_up(now_ms, node_id)
        self.disque.results.on_link_up(now_ms, node_id)
        self.scheduler.on_link_up(now_ms, node_id)
        self.routes.on_link_up(now_ms, node_id)
        self.policies.on_link_up(now_ms, node_id)

    def reset(self, now_ms: int, new_id: str) -> None:
        """CLUSTER RESET: NodeCore.cluster_reset says what goes and what stays."""
        if self.membership is not None:
            self.membership.reset(now_ms, new_id)
        self.disque.flush.flushall(log_deletes=True)
        self.disque.outbox.clear()
        self.scheduler.outbox.clear()
        self.routes.outbox.clear()
        self.policies.outbox.clear()

    def tick(self, now_ms: int) -> None:
        membership, disque = self.membership, self.disque
        if membership is not None and membership.next_deadline_ms() <= now_ms:
            membership.tick(now_ms)
        if 0 <= disque.next_deadline_ms() <= now_ms:
            disque.tick(now_ms)
        sched = self.scheduler
        if 0 <= sched.next_deadline_ms() <= now_ms:
            sched.tick(now_ms)
        routes = self.routes
        if 0 <= routes.next_deadline_ms() <= now_ms:
            routes.tick(now_ms)
        policies = self.policies
        if 0 <= policies.next_deadline_ms() <= now_ms:
            policies.tick(now_ms)

    def next_deadline_ms(self) -> int:
        """The earliest time ``tick`` has work, or -1 when nothing is scheduled."""
        best = -1
        membership = self.membership
        for when in (
            self.disque.next_deadline_ms(),
            membership.next_deadline_ms() if membership is not None else -1,
            self.scheduler.next_deadline_ms(),
            self.routes.next_deadline_ms(),
            self.policies.next_deadline_ms(),
        ):
            if when >= 0 and (best < 0 or when < best):
                best = when
        return best

    def set_wall_offset(self, ms: int, now_ms: int) -> None:
        self.disque.set_wall_offset(ms, now_ms)
        self.scheduler.set_wall_offset(ms)
        self.routes.shared.wall_offset_ms = self.policies.shared.wall_offset_ms = ms

    def set_persist(self, on: bool) -> None:
        self.disque.persist = self.scheduler.persist = self.routes.shared.persist = on
        self.policies.shared.persist = on

    # ------------------------------------------------------------------ the bridge
    def settle(self, now_ms: int, beanstalk: BeanstalkCore) -> None:
        """Carry changes across the beanstalk bridge, both ways, until neither core has any."""
        disque = self.disque
        for _ in range(_SETTLE_ROUNDS_MAX):
            moved = False
            if beanstalk.cluster_events:
                moved = True
                events, beanstalk.cluster_events = beanstalk.cluster_events, []
                for kind, job in events:
                    link = job.replica
                    if link is None:
                        continue
                    if kind == EV_DELETE:
                        disque.bridge.deleted(now_ms, link.disque_id)
                    else:
                        bstate = BSTATE_BURIED if job.state == BURIED else BSTATE_READY
                        disque.bridge.update(now_ms, link.disque_id, bstate, job.pri)
            if disque.bridge.dropped:
                moved = True
                dropped, disque.bridge.dropped = disque.bridge.dropped, []
                for bid in dropped:
                    beanstalk.drop(bid)
            if disque.bridge.takeovers:
                moved = True
                takeovers, disque.bridge.takeovers = disque.bridge.takeovers, []
                for j in takeovers:
                    job = beanstalk.adopt(
                        j.queue,
                        j.body,
                        j.priority,
                        j.retry_s * 1000,
                        j.bstate == BSTATE_BURIED,
                        now_ms,
                    )
                    job.replica = ReplicaLink(j.id, j.repl)
                    disque.bridge.adopted(now_ms, j, job.id)
            if disque.bridge.relinks:
                moved = True
                relinks, disque.bridge.relinks = disque.bridge.relinks, []
                for j in relinks:
                    live = beanstalk.jobs.get(j.bid)
                    if live is None:
                        disque.bridge.deleted(now_ms, j.id)  # deleted before the crash
                    else:
                        live.replica = ReplicaLink(j.id, j.repl)
            if not moved:
                break
        else:  # pragma: no cover - would be a core bug: each round consumes its input
            raise RuntimeError("the beanstalk bridge did not settle")
        if disque.memory.max_bytes or disque.memory.warning:
            # Also when the limit went to 0: a warning level must clear at once.
            other = beanstalk.live_bytes + self.scheduler.table_bytes
            disque.update_memory(now_ms, other)

    # ------------------------------------------------------------------ output
    def has_output(self) -> bool:
        """Whether the cores have anything for the node core's next Ready."""
        d = self.disque
        if (
            d.outbox
            or d.replies
            or d.aof_out
            or len(d.events)
            or d.bridge.takeovers
            or d.bridge.dropped
            or d.bridge.relinks
        ):
            return True
        if self.scheduler.has_output() or self.routes.has_output():
            return True
        if self.policies.has_output():
            return True
        m = self.membership
        return m is not None and bool(m.outbox or m.events)

    def tell_deaths(self, now_ms: int, changes: list[tuple[str, int]]) -> None:
        """The Disque core hears of confirmed deaths (DEAD, not SUSPECT: a suspicion comes
        after one missed probe) and of peers back alive: it requeues a dead peer's jobs
        soon (dead_peers.py). It only notes them here; the sweep runs from its tick. Any
        other state (alive, suspected, left after its drain, forgotten) ends the reason."""
        disque = self.disque
        for node_id, state in changes:
            if state == DEAD:
                disque.dead_peers.died(now_ms, node_id)
            else:
                disque.dead_peers.alive(node_id)

    def has_own_adds(self) -> bool:
        """Whether adds of the cluster's own are out (a schedule's tick, a dead letter's move,
        a redrive's): their answers are not the IO layer's."""
        return bool(self.scheduler.tokens) or self.disque.dead_letters.has_adds()

    def own_replies(self, now_ms: int) -> None:
        """The answers to the cluster's own adds go to the scheduler and the dead letters; the
        rest, and what those answers cause (a redrive's total), stay for the IO layer."""
        sched, dead, disque = self.scheduler, self.disque.dead_letters, self.disque
        replies, disque.replies = disque.replies, []
        keep: list[tuple[int, DeferredResult]] = []
        for token, result in replies:
            if token in sched.tokens:
                sched.on_reply(now_ms, token, result)
            elif not dead.on_reply(now_ms, token, result):
                keep.append((token, result))
        keep.extend(disque.replies)
        disque.replies = keep

    # ------------------------------------------------------------------ persistence
    def restore(
        self,
        now_ms: int,
        records: list[tuple[int, bytes]],
        buf: bytes,
        job_offsets: list[int] | None,
    ) -> int:
        """Replay the cluster's records into the Disque core and the tables; its job count.
        The node's reader leaves the Disque core's job records in the file's buffer ``buf``
        and gives where each starts, ``job_offsets`` (DisqueCore.restore)."""
        self.disque.restore(now_ms, records, buf, job_offsets)
        kinds = SCHEDULE_RECORD_TYPES
        self.scheduler.restore(now_ms, [r for r in records if r[0] in kinds])
        route_kinds = ROUTE_RECORD_TYPES
        self.routes.restore(now_ms, [r for r in records if r[0] in route_kinds])
        policy_kinds = POLICY_RECORD_TYPES
        self.policies.restore(now_ms, [r for r in records if r[0] in policy_kinds])
        return len(self.disque.jobs)


def add_messages(per_peer: dict[str, list[Message]], outbox: list[tuple[str, Message]]) -> None:
    """Each peer gets at most one DelJob, one IdemKeys and one KeyVotes per Ready:
    ``outbox``'s messages join ``per_peer`` (a Ready's messages)."""
    merged: dict[tuple[str, type], DelJob | IdemKeys] = {}
    votes: dict[str, KeyVotes] = {}
    for dest, msg in outbox:
        kind = type(msg)
        if kind is KeyVote:
            assert isinstance(msg, KeyVote)
            batch = votes.get(dest)
            if batch is None:
                batch = votes[dest] = KeyVotes()
            batch.add(msg)
            continue
        if kind is DelJob or kind is IdemKeys:
            assert isinstance(msg, DelJob | IdemKeys)
            acc = merged.get((dest, kind))
            if acc is None:
                merged[(dest, kind)] = _copy_columns(msg)
            else:
                _extend_columns(acc, msg)
            continue
        msgs = per_peer.get(dest)
        if msgs is None:
            per_peer[dest] = msgs = []
        msgs.append(msg)
    for (dest, _), acc in merged.items():
        msgs = per_peer.get(dest)
        if msgs is None:
            per_peer[dest] = msgs = []
        msgs.append(acc)
    for dest, batch in votes.items():
        msgs = per_peer.get(dest)
        if msgs is None:
            per_peer[dest] = msgs = []
        msgs.append(batch)


def _copy_columns(msg: DelJob | IdemKeys) -> DelJob | IdemKeys:
    if isinstance(msg, DelJob):
        return DelJob(list(msg.job_ids))
    return IdemKeys(
        list(msg.queues),
        list(msg.keys),
        list(msg.job_ids),
        list(msg.ack_queues),
        list(msg.ack_keys),
    )


def _extend_columns(acc: DelJob | IdemKeys, msg: DelJob | IdemKeys) -> None:
    if isinstance(acc, DelJob) and isinstance(msg, DelJob):
        acc.job_ids.extend(msg.job_ids)
    elif isinstance(acc, IdemKeys) and isinstance(msg, IdemKeys):
        acc.queues.extend(msg.queues)
        acc.keys.extend(msg.keys)
        acc.job_ids.extend(msg.job_ids)
        acc.ack_queues.extend(msg.ack_queues)
        acc.ack_keys.extend(msg.ack_keys)
