"""Frames between nodes: disq.core.messages objects <-> the protobuf of proto/disq/v1/cluster.proto.

Pure conversion, no IO: disq/server/peer_link.py moves the bytes. This is the hot path of
replication (one frame can carry thousands of REPLJOBs), so:

- Encoding fills the frame's sub-messages in place, field by field (``add().repl_job.job.id =
  ...``). With the upb backend that measured about 3x faster than building each message with
  keyword constructors and copying it into the frame.
- Decoding dispatches on ``WhichOneof`` through a dict and builds the slotted dataclasses with
  positional arguments.
- Problems are counted and logged once per frame, never per message: a peer that floods us with
  messages we cannot read must not also flood the log.

Robustness: a message whose oneof is empty or names a field this build does not know (a newer
peer) is skipped and counted, never an exception. Bytes that are not a Frame at all raise
:class:`FrameDecodeError`, which the link layer counts and drops. On the sending side a message
that cannot be encoded (not a message type, or an int out of the proto field's range: a bug in a
core) is skipped and counted, so one bad message never costs the rest of the frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby, repeat
from typing import Any

from google.protobuf.message import DecodeError

from disq.core import messages as m
from disq.persistence.route_records import RouteRecordError, decode_entry, encode_entry
from disq.persistence.schedule_records import ScheduleRecordError, decode_def, encode_def
from disq.proto_gen import cluster_pb2 as pb

__all__ = [
    "BATCH_FORMS",
    "COUNTERS",
    "ONEOF_CLASSES",
    "FrameDecodeError",
    "WireCounters",
    "decode_frame",
    "encode_frame",
]


class FrameDecodeError(ValueError):
    """The bytes are not a serialized Frame (truncated, corrupt, or not protobuf)."""


@dataclass(slots=True)
class WireCounters:
    """What the codec had to skip. Monotonic; the link layer reports them in its stats."""

    messages_skipped: int = 0  # received with an empty or unknown oneof
    messages_unencodable: int = 0  # refused on the way out (wrong type, value out of range)
    frames_malformed: int = 0  # received bytes that did not parse as a Frame


COUNTERS = WireCounters()
"""Default counters for callers that do not keep their own (process-wide)."""


def _log() -> Any:
    # Imported lazily, like the rest of the code base: the codec is imported at start-up and
    # only ever logs when something is wrong.
    from disq.logging import get_logger

    return get_logger("disq.peer_wire")


# ------------------------------------------------------------------------------------ encode
def _fill_member(t: pb.Member, x: m.Member) -> None:
    t.node_id = x.node_id
    t.host = x.host
    t.grpc_port = x.grpc_port
    t.client_port = x.client_port
    t.incarnation = x.incarnation
    t.state = x.state  # type: ignore[assignment]  # open enum: any int goes through
    t.leaving = x.leaving


def _fill_job(t: pb.Job, j: m.JobData) -> None:
    t.id = j.id
    t.queue = j.queue
    t.body = j.body
    t.repl = j.repl
    t.ctime = j.ctime
    t.delay_s = j.delay_s
    t.retry_s = j.retry_s
    t.ttl_remaining_s = j.ttl_remaining_s
    t.nacks = j.nacks
    t.additional_deliveries = j.additional_deliveries
    if j.nodes_delivered:
        t.nodes_delivered.extend(j.nodes_delivered)
    t.priority = j.priority
    if j.beanstalk:
        t.beanstalk = True
        t.bstate = j.bstate
        t.beanstalk_id = j.beanstalk_id
    if j.idempotency_key:
        t.idempotency_key = j.idempotency_key


def _enc_ping(t: pb.Message, x: m.Ping) -> None:
    s = t.ping
    s.probe_id = x.probe_id  # assigning, even a default, selects the oneof
    if x.meet:
        s.meet = True
    add = s.gossip.add
    for g in x.gossip:
        _fill_member(add(), g)


def _enc_ack(t: pb.Message, x: m.Ack) -> None:
    s = t.ack
    s.probe_id = x.probe_id
    s.target = x.target
    add = s.gossip.add
    for g in x.gossip:
        _fill_member(add(), g)


def _enc_ping_req(t: pb.Message, x: m.PingReq) -> None:
    s = t.ping_req
    s.probe_id = x.probe_id
    s.target = x.target


def _enc_repl_job(t: pb.Message, x: m.ReplJob) -> None:
    _fill_job(t.repl_job.job, x.job)


def _enc_got_job(t: pb.Message, x: m.GotJob) -> None:
    t.got_job.job_id = x.job_id


def _enc_enqueue(t: pb.Message, x: m.Enqueue) -> None:
    t.enqueue.job_id = x.job_id


def _enc_queued(t: pb.Message, x: m.Queued) -> None:
    s = t.queued
    s.job_id = x.job_id
    s.incr_nacks = x.incr_nacks
    s.incr_deliveries = x.incr_deliveries
    if x.nacks:
        s.nacks = x.nacks
    if x.additional_deliveries:
        s.additional_deliveries = x.additional_deliveries


def _enc_will_queue(t: pb.Message, x: m.WillQueue) -> None:
    t.will_queue.job_id = x.job_id


def _enc_set_ack(t: pb.Message, x: m.SetAck) -> None:
    s = t.set_ack
    s.job_id = x.job_id
    s.may_have = x.may_have


def _enc_got_ack(t: pb.Message, x: m.GotAck) -> None:
    s = t.got_ack
    s.job_id = x.job_id
    s.known = x.known


def _enc_idem_keys(t: pb.Message, x: m.IdemKeys) -> None:
    k = t.idem_keys
    k.SetInParent()  # selects the oneof even when the lists are empty
    k.queues.extend(x.queues)
    k.keys.extend(x.keys)
    k.job_ids.extend(x.job_ids)
    if x.ack_keys:
        k.ack_queues.extend(x.ack_queues)
        k.ack_keys.extend(x.ack_keys)


def _enc_key_vote(t: pb.Message, x: m.KeyVote) -> None:
    v = t.key_vote
    v.SetInParent()  # selects the oneof even when every field is at its default
    v.phase = x.phase
    v.queue = x.queue
    v.key = x.key
    v.ballot = x.ballot
    v.ballot_node = x.ballot_node
    v.ok = x.ok
    v.acc_ballot = x.acc_ballot
    v.acc_node = x.acc_node
    v.job_id = x.job_id
    v.decided = x.decided


def _enc_key_votes(t: pb.Message, x: m.KeyVotes) -> None:
    v = t.key_votes
    v.SetInParent()
    v.phase.extend(x.phase)
    v.queue.extend(x.queue)
    v.key.extend(x.key)
    v.ballot.extend(x.ballot)
    v.ballot_node.extend(x.ballot_node)
    v.ok.extend(x.ok)
    v.acc_ballot.extend(x.acc_ballot)
    v.acc_node.extend(x.acc_node)
    v.job_id.extend(x.job_id)
    v.decided.extend(x.decided)


def _enc_del_job(t: pb.Message, x: m.DelJob) -> None:
    t.del_job.job_ids.extend(x.job_ids)  # extend([]) selects the oneof too


def _enc_need_jobs(t: pb.Message, x: m.NeedJobs) -> None:
    s = t.need_jobs
    s.queue = x.queue
    s.count = x.count


def _enc_your_jobs(t: pb.Message, x: m.YourJobs) -> None:
    s = t.your_jobs
    s.SetInParent()  # an empty list assigns nothing, and the oneof must still say your_jobs
    add = s.jobs.add
    for j in x.jobs:
        _fill_job(add(), j)


def _enc_working(t: pb.Message, x: m.Working) -> None:
    t.working.job_id = x.job_id


def _enc_beanstalk_update(t: pb.Message, x: m.BeanstalkUpdate) -> None:
    s = t.beanstalk_update
    s.job_id = x.job_id
    s.bstate = x.bstate
    s.priority = x.priority


def _enc_pause(t: pb.Message, x: m.Pause) -> None:
    s = t.pause
    s.queue = x.queue
    s.flags = x.flags


def _enc_sched_sync(t: pb.Message, x: m.SchedSync) -> None:
    s = t.sched_sync
    s.entries.extend([encode_def(d) for d in x.entries])
    s.tick_names.extend(x.tick_names)
    s.tick_s.extend(x.tick_s)
    s.tick_jobs.extend(x.tick_jobs)
    s.digest = x.digest
    s.want = x.want


def _enc_route_sync(t: pb.Message, x: m.RouteSync) -> None:
    s = t.route_sync
    s.entries.extend([encode_entry(e) for e in x.entries])
    s.digest = x.digest
    s.want = x.want
    s.whole = x.whole


_ENCODERS: dict[type, Callable[[pb.Message, Any], None]] = {
    m.Ping: _enc_ping,
    m.Ack: _enc_ack,
    m.PingReq: _enc_ping_req,
    m.ReplJob: _enc_repl_job,
    m.GotJob: _enc_got_job,
    m.Enqueue: _enc_enqueue,
    m.Queued: _enc_queued,
    m.WillQueue: _enc_will_queue,
    m.SetAck: _enc_set_ack,
    m.GotAck: _enc_got_ack,
    m.DelJob: _enc_del_job,
    m.IdemKeys: _enc_idem_keys,
    m.KeyVote: _enc_key_vote,
    m.KeyVotes: _enc_key_votes,
    m.NeedJobs: _enc_need_jobs,
    m.YourJobs: _enc_your_jobs,
    m.Working: _enc_working,
    m.Pause: _enc_pause,
    m.BeanstalkUpdate: _enc_beanstalk_update,
    m.SchedSync: _enc_sched_sync,
    m.RouteSync: _enc_route_sync,
}


# ------------------------------------------------------------------------- batch forms
# A run of consecutive ReplJob (GotJob, SetAck, GotAck) messages for one peer travels as one
# ReplJobs (GotJobs, SetAcks, GotAcks) message, column by column, when the peer reads them
# (``columnar``). Only runs are merged, so the receiver still sees every message in the
# sender's order: a DELJOB sent after a REPLJOB of the same job cannot overtake it.
_MIN_RUN = 2  # a run of one goes as the plain message: nothing to share
_DEFAULT_PRIORITY = 1024  # JobData.priority's default: an empty priority column means it


def _optional(column: Any, values: list[Any], default: object) -> None:
    """Fill an optional column, unless every entry is the default: then it stays empty."""
    if values.count(default) != len(values):
        column.extend(values)


def _enc_repl_jobs(t: pb.Message, run: list[m.ReplJob]) -> None:
    jobs = [x.job for x in run]
    s = t.repl_jobs
    s.id.extend([j.id for j in jobs])
    s.queue.extend([j.queue for j in jobs])
    s.body.extend([j.body for j in jobs])
    s.repl.extend([j.repl for j in jobs])
    s.ctime.extend([j.ctime for j in jobs])
    s.delay_s.extend([j.delay_s for j in jobs])
    s.retry_s.extend([j.retry_s for j in jobs])
    s.ttl_remaining_s.extend([j.ttl_remaining_s for j in jobs])
    _optional(s.nacks, [j.nacks for j in jobs], 0)
    _optional(s.additional_deliveries, [j.additional_deliveries for j in jobs], 0)
    _optional(s.priority, [j.priority for j in jobs], _DEFAULT_PRIORITY)
    _optional(s.idempotency_key, [j.idempotency_key for j in jobs], "")
    # Columns that go together: all of them, or none.
    if any(j.nodes_delivered for j in jobs):
        s.nodes_delivered_count.extend([len(j.nodes_delivered) for j in jobs])
        s.nodes_delivered.extend([n for j in jobs for n in j.nodes_delivered])
    if any(j.beanstalk for j in jobs):
        s.beanstalk.extend([j.beanstalk for j in jobs])
        s.bstate.extend([j.bstate for j in jobs])
        s.beanstalk_id.extend([j.beanstalk_id for j in jobs])


def _enc_got_jobs(t: pb.Message, run: list[m.GotJob]) -> None:
    t.got_jobs.job_id.extend([x.job_id for x in run])


def _enc_set_acks(t: pb.Message, run: list[m.SetAck]) -> None:
    s = t.set_acks
    s.job_id.extend([x.job_id for x in run])
    s.may_have.extend([x.may_have for x in run])


def _enc_got_acks(t: pb.Message, run: list[m.GotAck]) -> None:
    s = t.got_acks
    s.job_id.extend([x.job_id for x in run])
    s.known.extend([x.known for x in run])


# Class of a run -> the encoder of its batch form, which takes the run's messages.
_BATCH_ENCODERS: dict[type, Callable[[pb.Message, Any], None]] = {
    m.ReplJob: _enc_repl_jobs,
    m.GotJob: _enc_got_jobs,
    m.SetAck: _enc_set_acks,
    m.GotAck: _enc_got_acks,
}


def _batched(msgs: Sequence[m.Message]) -> Iterable[tuple[Any, Any]]:
    """``(encoder, payload)`` per message to write, runs of the batchable classes merged: a
    batch's payload is the list of its messages."""
    get = _ENCODERS.get
    for cls, group in groupby(msgs, type):
        batch = _BATCH_ENCODERS.get(cls)
        if batch is not None:
            run: list[Any] = list(group)
            if len(run) >= _MIN_RUN:
                yield batch, run
                continue
            group = iter(run)
        single = get(cls)
        for msg in group:
            yield single, msg


def encode_frame(
    from_node: str,
    seq: int,
    msgs: Sequence[m.Message],
    counters: WireCounters = COUNTERS,
    columnar: bool = False,
) -> bytes:
    """Serialize one Frame carrying ``msgs`` in order. Never raises for a bad message.

    ``columnar``: the receiver reads the batch forms (ReplJobs, GotJobs, SetAcks, GotAcks);
    runs of ReplJob, GotJob, SetAck and GotAck are sent that way. An older peer gets one
    message per job.
    """
    frame = pb.Frame(from_node=from_node, seq=seq)
    messages = frame.messages
    add = messages.add
    get = _ENCODERS.get
    bad: list[str] = []
    todo: Iterable[tuple[Any, Any]] = (
        _batched(msgs) if columnar else ((get(type(x)), x) for x in msgs)
    )
    for enc, msg in todo:
        if enc is None:
            bad.append(type(msg).__name__)
            continue
        target = add()
        try:
            enc(target, msg)
        except (ValueError, TypeError, AttributeError) as exc:
            # Out-of-range ints raise ValueError, wrong field types TypeError; the half-filled
            # message must not go out.
            del messages[-1]
            if isinstance(msg, list):
                # One bad job must not cost the run: send it message by message, which skips
                # only the bad one (and counts it).
                for one in msg:
                    target = add()
                    try:
                        _ENCODERS[type(one)](target, one)
                    except (ValueError, TypeError, AttributeError) as exc1:
                        del messages[-1]
                        bad.append(f"{type(one).__name__}: {exc1}")
                continue
            bad.append(f"{type(msg).__name__}: {exc}")
    if bad:
        counters.messages_unencodable += len(bad)
        _log().error("peer_frame_messages_unencodable", count=len(bad), first=bad[0])
    return frame.SerializeToString()


# ------------------------------------------------------------------------------------ decode
def _member(g: pb.Member) -> m.Member:
    return m.Member(
        g.node_id, g.host, g.grpc_port, g.client_port, g.incarnation, g.state, g.leaving
    )


def _job(j: pb.Job) -> m.JobData:
    nd = j.nodes_delivered
    return m.JobData(
        j.id,
        j.queue,
        j.body,
        j.repl,
        j.ctime,
        j.delay_s,
        j.retry_s,
        j.ttl_remaining_s,
        j.nacks,
        j.additional_deliveries,
        list(nd) if nd else [],
        j.priority,
        j.beanstalk,
        j.bstate,
        j.beanstalk_id,
        j.idempotency_key,
    )


class _BadColumns(ValueError):
    """A batch message whose columns disagree in length (a broken peer)."""


def _column(col: Any, n: int, default: object) -> Iterable[Any]:
    if not col:
        return repeat(default, n)
    if len(col) != n:
        raise _BadColumns
    column: Iterable[Any] = col
    return column


def _dec_repl_jobs(t: pb.Message) -> list[m.ReplJob]:
    s = t.repl_jobs
    ids = s.id
    n = len(ids)
    if not (
        len(s.queue)
        == len(s.body)
        == len(s.repl)
        == len(s.ctime)
        == len(s.delay_s)
        == len(s.retry_s)
        == len(s.ttl_remaining_s)
        == n
    ):
        raise _BadColumns
    counts = s.nodes_delivered_count
    if counts:
        if len(counts) != n:
            raise _BadColumns
        flat = list(s.nodes_delivered)
        if sum(counts) != len(flat):
            raise _BadColumns
        delivered: list[list[str]] = []
        at = 0
        for c in counts:
            delivered.append(flat[at : at + c])
            at += c
    else:
        delivered = [[] for _ in range(n)]  # one list each: a JobData owns its list
    beanstalk = _column(s.beanstalk, n, False)
    bstate = _column(s.bstate, n, m.BSTATE_READY)
    beanstalk_id = _column(s.beanstalk_id, n, 0)
    return list(
        map(
            m.ReplJob,
            map(
                m.JobData,
                ids,
                s.queue,
                s.body,
                s.repl,
                s.ctime,
                s.delay_s,
                s.retry_s,
                s.ttl_remaining_s,
                _column(s.nacks, n, 0),
                _column(s.additional_deliveries, n, 0),
                delivered,
                _column(s.priority, n, _DEFAULT_PRIORITY),
                beanstalk,
                bstate,
                beanstalk_id,
                _column(s.idempotency_key, n, ""),
            ),
        )
    )


def _dec_got_jobs(t: pb.Message) -> list[m.GotJob]:
    return list(map(m.GotJob, t.got_jobs.job_id))


def _dec_set_acks(t: pb.Message) -> list[m.SetAck]:
    s = t.set_acks
    if len(s.may_have) != len(s.job_id):
        raise _BadColumns
    return list(map(m.SetAck, s.job_id, s.may_have))


def _dec_got_acks(t: pb.Message) -> list[m.GotAck]:
    s = t.got_acks
    if len(s.known) != len(s.job_id):
        raise _BadColumns
    return list(map(m.GotAck, s.job_id, s.known))


def _dec_ping(t: pb.Message) -> m.Ping:
    s = t.ping
    return m.Ping(s.probe_id, [_member(g) for g in s.gossip], s.meet)


def _dec_ack(t: pb.Message) -> m.Ack:
    s = t.ack
    return m.Ack(s.probe_id, s.target, [_member(g) for g in s.gossip])


def _dec_ping_req(t: pb.Message) -> m.PingReq:
    s = t.ping_req
    return m.PingReq(s.probe_id, s.target)


def _dec_repl_job(t: pb.Message) -> m.ReplJob:
    return m.ReplJob(_job(t.repl_job.job))


def _dec_got_job(t: pb.Message) -> m.GotJob:
    return m.GotJob(t.got_job.job_id)


def _dec_enqueue(t: pb.Message) -> m.Enqueue:
    return m.Enqueue(t.enqueue.job_id)


def _dec_queued(t: pb.Message) -> m.Queued:
    s = t.queued
    return m.Queued(s.job_id, s.incr_nacks, s.incr_deliveries, s.nacks, s.additional_deliveries)


def _dec_will_queue(t: pb.Message) -> m.WillQueue:
    return m.WillQueue(t.will_queue.job_id)


def _dec_set_ack(t: pb.Message) -> m.SetAck:
    s = t.set_ack
    return m.SetAck(s.job_id, s.may_have)


def _dec_got_ack(t: pb.Message) -> m.GotAck:
    s = t.got_ack
    return m.GotAck(s.job_id, s.known)


def _dec_idem_keys(t: pb.Message) -> m.IdemKeys:
    k = t.idem_keys
    return m.IdemKeys(
        list(k.queues), list(k.keys), list(k.job_ids), list(k.ack_queues), list(k.ack_keys)
    )


def _dec_key_vote(t: pb.Message) -> m.KeyVote:
    v = t.key_vote
    return m.KeyVote(
        v.phase,
        v.queue,
        v.key,
        v.ballot,
        v.ballot_node,
        v.ok,
        v.acc_ballot,
        v.acc_node,
        v.job_id,
        v.decided,
    )


def _dec_key_votes(t: pb.Message) -> m.KeyVotes:
    v = t.key_votes
    # Columns of different lengths (a broken peer): KeyVotes.votes() reads whole rows only.
    return m.KeyVotes(
        list(v.phase),
        list(v.queue),
        list(v.key),
        list(v.ballot),
        list(v.ballot_node),
        list(v.ok),
        list(v.acc_ballot),
        list(v.acc_node),
        list(v.job_id),
        list(v.decided),
    )


def _dec_del_job(t: pb.Message) -> m.DelJob:
    return m.DelJob(list(t.del_job.job_ids))


def _dec_need_jobs(t: pb.Message) -> m.NeedJobs:
    s = t.need_jobs
    return m.NeedJobs(s.queue, s.count)


def _dec_your_jobs(t: pb.Message) -> m.YourJobs:
    return m.YourJobs([_job(j) for j in t.your_jobs.jobs])


def _dec_working(t: pb.Message) -> m.Working:
    return m.Working(t.working.job_id)


def _dec_beanstalk_update(t: pb.Message) -> m.BeanstalkUpdate:
    s = t.beanstalk_update
    return m.BeanstalkUpdate(s.job_id, s.bstate, s.priority)


def _dec_pause(t: pb.Message) -> m.Pause:
    s = t.pause
    return m.Pause(s.queue, s.flags)


def _dec_sched_sync(t: pb.Message) -> m.SchedSync:
    s = t.sched_sync
    entries = []
    for raw in s.entries:
        try:
            entries.append(decode_def(raw))
        except ScheduleRecordError:
            COUNTERS.messages_skipped += 1  # one bad entry, not the whole sync
    return m.SchedSync(
        entries,
        list(s.tick_names),
        list(s.tick_s),
        list(s.tick_jobs),
        s.digest,
        s.want,
    )


def _dec_route_sync(t: pb.Message) -> m.RouteSync:
    s = t.route_sync
    entries = []
    for raw in s.entries:
        try:
            entries.append(decode_entry(raw))
        except RouteRecordError:
            COUNTERS.messages_skipped += 1  # one bad entry, not the whole sync
    return m.RouteSync(entries, s.digest, s.want, s.whole)


_DECODERS: dict[str | None, Callable[[pb.Message], m.Message]] = {
    "ping": _dec_ping,
    "ack": _dec_ack,
    "ping_req": _dec_ping_req,
    "repl_job": _dec_repl_job,
    "got_job": _dec_got_job,
    "enqueue": _dec_enqueue,
    "queued": _dec_queued,
    "will_queue": _dec_will_queue,
    "set_ack": _dec_set_ack,
    "got_ack": _dec_got_ack,
    "del_job": _dec_del_job,
    "idem_keys": _dec_idem_keys,
    "key_vote": _dec_key_vote,
    "key_votes": _dec_key_votes,
    "need_jobs": _dec_need_jobs,
    "your_jobs": _dec_your_jobs,
    "working": _dec_working,
    "pause": _dec_pause,
    "beanstalk_update": _dec_beanstalk_update,
    "sched_sync": _dec_sched_sync,
    "route_sync": _dec_route_sync,
}

ONEOF_CLASSES: dict[str, type] = {
    "ping": m.Ping,
    "ack": m.Ack,
    "ping_req": m.PingReq,
    "repl_job": m.ReplJob,
    "got_job": m.GotJob,
    "enqueue": m.Enqueue,
    "queued": m.Queued,
    "will_queue": m.WillQueue,
    "set_ack": m.SetAck,
    "got_ack": m.GotAck,
    "del_job": m.DelJob,
    "need_jobs": m.NeedJobs,
    "your_jobs": m.YourJobs,
    "working": m.Working,
    "pause": m.Pause,
    "beanstalk_update": m.BeanstalkUpdate,
    "idem_keys": m.IdemKeys,
    "key_vote": m.KeyVote,
    "key_votes": m.KeyVotes,
    "sched_sync": m.SchedSync,
    "route_sync": m.RouteSync,
}
"""Field of ``Message.body`` -> the core's class; the drift test holds it to the proto."""

_BATCH_DECODERS: dict[str | None, Callable[[pb.Message], list[Any]]] = {
    "repl_jobs": _dec_repl_jobs,
    "got_jobs": _dec_got_jobs,
    "set_acks": _dec_set_acks,
    "got_acks": _dec_got_acks,
}

BATCH_FORMS: dict[str, type] = {
    "repl_jobs": m.ReplJob,
    "got_jobs": m.GotJob,
    "set_acks": m.SetAck,
    "got_acks": m.GotAck,
}
"""Field of ``Message.body`` -> the core's class each entry of that batch form becomes."""


def decode_frame(
    frame: bytes | pb.Frame,
    counters: WireCounters = COUNTERS,
) -> tuple[str, int, list[m.Message]]:
    """``(from_node, seq, messages)`` of one Frame, messages in the sender's order.

    Messages this build cannot read are skipped (counted, one warning per frame). Raises
    :class:`FrameDecodeError` when ``frame`` is bytes that do not parse.
    """
    if isinstance(frame, pb.Frame):
        f = frame
    else:
        try:
            f = pb.Frame.FromString(frame)
        except (DecodeError, RuntimeError, ValueError, TypeError) as exc:
            counters.frames_malformed += 1
            raise FrameDecodeError(f"malformed frame ({len(frame)} bytes): {exc}") from exc
    out: list[m.Message] = []
    append = out.append
    get = _DECODERS.get
    skipped = 0
    for msg in f.messages:
        name = msg.WhichOneof("body")
        dec = get(name)
        if dec is not None:
            append(dec(msg))
            continue
        batch = _BATCH_DECODERS.get(name)
        if batch is None:
            skipped += 1
            continue
        try:
            out.extend(batch(msg))
        except _BadColumns:
            skipped += 1
    if skipped:
        counters.messages_skipped += skipped
        _log().warning(
            "peer_frame_messages_skipped",
            from_node=f.from_node,
            seq=f.seq,
            count=skipped,
            reason="empty or unknown message type, or batch columns of unequal length",
        )
    return f.from_node, f.seq, out
