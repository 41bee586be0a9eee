"""The node core's cluster half: what only a node with its Disque core runs.

Split from ``disq.core.node_core`` so that a node without its cluster doors (beanstalkd's
flags: the way test harnesses start beanstalkd) never loads the peer messages (two dozen
dataclasses), the scheduler or the routes table: compiled, initialising those modules was
about a third of what such a node paid between the interpreter's start and its first answer
(docs/benchmarks.md, "Start at the floor"). ``NodeCore`` imports this module in
the methods that reach it, which run only once a Disque core is attached; the first such
import initialises it, later ones are a pointer check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

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
    RouteSync,
    SchedSync,
)
from disq.core.routes.table import Routes
from disq.core.schedule.scheduler import Scheduler
from disq.persistence.route_records import ROUTE_RECORD_TYPES
from disq.persistence.schedule_records import SCHEDULE_RECORD_TYPES

if TYPE_CHECKING:
    from disq.core.disque.core import DisqueCore
    from disq.core.node_core import NodeCore, Ready

_SETTLE_ROUNDS_MAX = 64  # the bridge settles in 1-3 rounds; more is a core bug


def new_scheduler(disque: DisqueCore, next_token: Callable[[], int], follow: bool) -> Scheduler:
    """Recurring schedules ride on the Disque core's keyed adds (disq/core/schedule/).
    ``follow``: it logs and keeps the wall clock as the Disque core already does (a core
    attached late; a new node core's cores start together)."""
    sched = Scheduler(disque.view, disque, next_token)
    if follow:
        sched.persist = disque.persist
        sched.wall_offset_ms = disque.wall_offset_ms
    return sched


def new_routes(disque: DisqueCore, follow: bool) -> Routes:
    """Exchanges, bindings and queue declarations (disq/core/routes/); ``follow`` as above."""
    routes = Routes(disque.view, disque)
    if follow:
        routes.persist = disque.persist
        routes.wall_offset_ms = disque.wall_offset_ms
    return routes


def on_peer_messages(core: NodeCore, now_ms: int, sender: str, msgs: Iterable[Message]) -> None:
    membership, disque = core.membership, core.disque
    # A node forgotten by CLUSTER RESET and not met since: its job, schedule and routes
    # messages (a requeue, a copy, a lane frame still in flight) must not make state
    # here; only membership reads its messages, for a meet.
    forgotten = membership is not None and membership.ignores(sender)
    for msg in msgs:
        try:
            if isinstance(msg, MEMBERSHIP_TYPES):
                if membership is not None:
                    membership.on_message(now_ms, sender, msg)
                    if forgotten and not membership.ignores(sender):
                        forgotten = False  # met: what follows it is read
            elif forgotten:
                assert membership is not None
                membership.ignored += 1
            elif isinstance(msg, SchedSync):
                if core.scheduler is not None:
                    core.scheduler.on_message(now_ms, sender, msg)
            elif isinstance(msg, RouteSync):
                if core.routes is not None:
                    core.routes.on_message(now_ms, sender, msg)
            elif disque is not None:
                disque.on_message(now_ms, sender, msg)
        except Exception as exc:
            if not core.contain_errors:
                raise
            core.message_errors += 1
            core.errors.append((f"peer message {type(msg).__name__} from {sender}", exc))


def settle(core: NodeCore, now_ms: int, disque: DisqueCore) -> None:
    """Carry changes across the beanstalk bridge, both ways, until neither core has any."""
    beanstalk = core.beanstalk
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
                    disque.beanstalk_deleted(now_ms, link.disque_id)
                else:
                    bstate = BSTATE_BURIED if job.state == BURIED else BSTATE_READY
                    disque.beanstalk_update(now_ms, link.disque_id, bstate, job.pri)
        if disque.beanstalk_dropped:
            moved = True
            dropped, disque.beanstalk_dropped = disque.beanstalk_dropped, []
            for bid in dropped:
                beanstalk.drop(bid)
        if disque.takeovers:
            moved = True
            takeovers, disque.takeovers = disque.takeovers, []
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
                disque.adopted(now_ms, j, job.id)
        if disque.relinks:
            moved = True
            relinks, disque.relinks = disque.relinks, []
            for j in relinks:
                live = beanstalk.jobs.get(j.bid)
                if live is None:
                    disque.beanstalk_deleted(now_ms, j.id)  # deleted before the crash
                else:
                    live.replica = ReplicaLink(j.id, j.repl)
        if not moved:
            break
    else:  # pragma: no cover - would be a core bug: each round consumes its input
        raise RuntimeError("the beanstalk bridge did not settle")
    if disque.max_memory_bytes or disque.memory_warning:
        # Also when the limit went to 0: a warning level must clear at once.
        sched = core.scheduler
        other = beanstalk.live_bytes + (sched.table_bytes if sched is not None else 0)
        disque.update_memory(now_ms, other)


def tell_deaths(now_ms: int, changes: list[tuple[str, int]], disque: DisqueCore) -> None:
    """The Disque core hears of confirmed deaths (DEAD, not SUSPECT: a suspicion comes
    after one missed probe) and of peers back alive: it requeues a dead peer's jobs
    soon (dead_peers.py). It only notes them here; the sweep runs from its tick. Any
    other state (alive, suspected, left after its drain, forgotten) ends the reason."""
    for node_id, state in changes:
        if state == DEAD:
            disque.peer_dead(now_ms, node_id)
        else:
            disque.peer_alive(node_id)


def add_messages(rd: Ready, outbox: list[tuple[str, Message]]) -> None:
    """Each peer gets at most one DelJob, one IdemKeys and one KeyVotes per Ready."""
    per_peer = rd.messages
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


def restore(
    core: NodeCore,
    now_ms: int,
    records: list[tuple[int, bytes]],
    buf: bytes = b"",
    job_offsets: list[int] | None = None,
) -> int:
    """Replay the cluster's records into the Disque core and the tables; its job count.
    The node's reader leaves the Disque core's job records in the file's buffer ``buf``
    and gives where each starts, ``job_offsets`` (DisqueCore.restore)."""
    jobs = 0
    if core.disque is not None:
        core.disque.restore(now_ms, records, buf, job_offsets)
        jobs = len(core.disque.jobs)
    if core.scheduler is not None:
        kinds = SCHEDULE_RECORD_TYPES
        core.scheduler.restore(now_ms, [r for r in records if r[0] in kinds])
    if core.routes is not None:
        route_kinds = ROUTE_RECORD_TYPES
        core.routes.restore(now_ms, [r for r in records if r[0] in route_kinds])
    return jobs


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
