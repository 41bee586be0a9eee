"""Frames between nodes: disq.core.messages objects <-> the protobuf of proto/disq/v1/cluster.proto.

Pure conversion, no IO: disq/server/peer_link.py moves the bytes. This is the hot path of
replication (one frame can carry thousands of REPLJOBs), so:

- Encoding fills the frame's sub-messages in place, field by field (``add().repl_job.job.id =
  ...``). With the upb backend that measured about 3x faster than building each message with
  keyword constructors and copying it into the frame.
- Decoding dispatches on ``WhichOneof`` through a dict and builds the slotted dataclasses with
  positional arguments.
- A message whose proto fields are its class's fields one for one (scalars and lists of
  scalars) has no code of its own: one codec, made per class from ``m.FIELDS``, serves them
  all; the batch forms' columns likewise.
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
from operator import attrgetter
from typing import Any

from google.protobuf.message import DecodeError

from disq.core import messages as m
from disq.core.job_record import without_headers
from disq.persistence.policy_records import PolicyRecordError, decode_policy, encode_policy
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
def _set_fields(t: Any, x: Any, fields: Iterable[str]) -> None:
    """Copies the scalar ``fields`` of ``x`` onto the proto message ``t``, one for one."""
    for f in fields:
        setattr(t, f, getattr(x, f))


def _fill_member(t: pb.Member, x: m.Member) -> None:
    _set_fields(t, x, m.FIELDS[m.Member])  # the state an open enum: any int goes through


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


def _enc_repl_job(t: pb.Message, x: m.ReplJob) -> None:
    _fill_job(t.repl_job.job, x.job)


def _enc_your_jobs(t: pb.Message, x: m.YourJobs) -> None:
    s = t.your_jobs
    s.SetInParent()  # an empty list assigns nothing, and the oneof must still say your_jobs
    add = s.jobs.add
    for j in x.jobs:
        _fill_job(add(), j)


def _enc_your_records(t: pb.Message, x: m.YourJobs) -> None:
    s = t.your_jobs
    s.SetInParent()
    s.records.extend(x.records)


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


def _enc_policy_sync(t: pb.Message, x: m.PolicySync) -> None:
    s = t.policy_sync
    s.SetInParent()  # an empty table still travels (it says "in sync")
    s.entries.extend([encode_policy(e) for e in x.entries])
    s.digest = x.digest
    s.want = x.want
    s.whole = x.whole


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


def _batched(
    msgs: Sequence[m.Message], records: bool, headers: bool = True
) -> Iterable[tuple[Any, Any]]:
    """``(encoder, payload)`` per message to write, runs of the batchable classes merged: a
    batch's payload is the list of its messages. With ``records``, every run of ReplJob
    (one job too) goes as JobRecords (without their headers unless ``headers``)."""
    get = _encoders(records, headers).get
    for cls, group in groupby(msgs, type):
        if records and cls is m.ReplJob:
            yield (_enc_job_records if headers else _enc_job_records_bare), list(group)
            continue
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
    records: bool = False,
    headers: bool = True,
) -> bytes:
    """Serialize one Frame carrying ``msgs`` in order. Never raises for a bad message.

    ``columnar``: the receiver reads the batch forms (ReplJobs, GotJobs, SetAcks, GotAcks);
    runs of ReplJob, GotJob, SetAck and GotAck are sent that way. An older peer gets one
    message per job. ``records`` (with ``columnar``): the receiver reads JobRecords, which
    carry the REPLJOBs' records as they are. Not ``headers`` (a build before job headers,
    which refuses a record with them): the records go without their headers section
    (job_record.py's ``without_headers``), the job without its headers; the older forms
    (pb Job, ReplJobs' columns) never carry them.
    """
    frame = pb.Frame(from_node=from_node, seq=seq)
    messages = frame.messages
    add = messages.add
    get = _encoders(records, headers).get
    bad: list[str] = []
    todo: Iterable[tuple[Any, Any]] = (
        _batched(msgs, records, headers) if columnar else ((get(type(x)), x) for x in msgs)
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
_MEMBER_FIELDS = attrgetter(*m.FIELDS[m.Member])


def _member(g: pb.Member) -> m.Member:
    return m.Member(*_MEMBER_FIELDS(g))


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
    _column(s.beanstalk_id, n, 0)  # checked; not kept (``_copy``)
    beanstalk_id = repeat(0, n)
    return list(
        map(
            m.ReplJob.of,
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


def _dec_ping(t: pb.Message) -> m.Ping:
    s = t.ping
    return m.Ping(s.probe_id, [_member(g) for g in s.gossip], s.meet)


def _dec_ack(t: pb.Message) -> m.Ack:
    s = t.ack
    return m.Ack(s.probe_id, s.target, [_member(g) for g in s.gossip])


def _dec_repl_job(t: pb.Message) -> m.ReplJob:
    return m.ReplJob.of(_copy(_job(t.repl_job.job)))


def _copy(d: m.JobData) -> m.JobData:
    """An older peer's copy without its beanstalk alias: the alias names the sender's engine
    job, and the record this copy becomes is kept as it is (a restart would take a nonzero
    alias for this node's own)."""
    d.beanstalk_id = 0
    return d


def _enc_job_records(t: pb.Message, run: list[m.ReplJob]) -> None:
    t.job_records.record.extend([x.record for x in run])


def _enc_job_records_bare(t: pb.Message, run: list[m.ReplJob]) -> None:
    t.job_records.record.extend([without_headers(x.record) for x in run])


def _enc_your_records_bare(t: pb.Message, x: m.YourJobs) -> None:
    s = t.your_jobs
    s.SetInParent()
    s.records.extend([without_headers(r) for r in x.records])


def _dec_job_records(t: pb.Message) -> list[m.ReplJob]:
    return list(map(m.ReplJob, t.job_records.record))


def _dec_your_jobs(t: pb.Message) -> m.YourJobs:
    s = t.your_jobs
    if s.records:
        return m.YourJobs(list(s.records))
    return m.YourJobs.of([_copy(_job(j)) for j in s.jobs])


def _entries(
    raws: Iterable[bytes], decode: Callable[[bytes], Any], error: type[Exception]
) -> list[Any]:
    """A sync's records, decoded; a bad one is skipped (and counted), not the whole sync."""
    entries = []
    for raw in raws:
        try:
            entries.append(decode(raw))
        except error:
            COUNTERS.messages_skipped += 1
    return entries


def _dec_sched_sync(t: pb.Message) -> m.SchedSync:
    s = t.sched_sync
    return m.SchedSync(
        _entries(s.entries, decode_def, ScheduleRecordError),
        list(s.tick_names),
        list(s.tick_s),
        list(s.tick_jobs),
        s.digest,
        s.want,
    )


def _dec_route_sync(t: pb.Message) -> m.RouteSync:
    s = t.route_sync
    return m.RouteSync(
        _entries(s.entries, decode_entry, RouteRecordError), s.digest, s.want, s.whole
    )


def _dec_policy_sync(t: pb.Message) -> m.PolicySync:
    s = t.policy_sync
    return m.PolicySync(
        _entries(s.entries, decode_policy, PolicyRecordError), s.digest, s.want, s.whole
    )


# ---------------------------------------------------------------------------- the tables
Encoder = Callable[[pb.Message, Any], None]  # fills a Message from a message (or a run)
Decoder = Callable[[pb.Message], Any]  # a message (or a batch's list) from a Message
Codec = tuple[Encoder, Decoder]


def _field_codec(name: str, cls: type) -> Codec:
    """The codec of a message whose proto fields are its class's fields one for one
    (``m.FIELDS``, which the drift test holds to the proto): scalars, or lists of scalars."""
    fields = m.FIELDS[cls]
    desc = pb.Message.DESCRIPTOR.fields_by_name[name].message_type
    assert desc is not None  # every field of Message's oneof is a message
    lists = {f.name for f in desc.fields if f.is_repeated}
    scalars = [f for f in fields if f not in lists]
    columns = [f for f in fields if f in lists]
    plan = [f in lists for f in fields]
    body = attrgetter(name)
    read = _reader(fields)

    def enc(t: pb.Message, x: Any) -> None:
        s = body(t)
        s.SetInParent()  # selects the oneof even when every field is at its default
        _set_fields(s, x, scalars)
        for f in columns:
            getattr(s, f).extend(getattr(x, f))

    def dec(t: pb.Message) -> Any:
        got = read(body(t))
        if columns:  # a repeated field reads as a view into the Message: the message owns a copy
            return cls(*[list(v) if many else v for many, v in zip(plan, got, strict=True)])
        return cls(*got)

    return enc, dec


def _reader(fields: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields' values as a tuple, read in one C call."""
    if len(fields) > 1:
        return attrgetter(*fields)
    one = attrgetter(fields[0])  # of one name attrgetter gives the value itself
    return lambda x: (one(x),)


def _column_codec(name: str, cls: type) -> Codec:
    """The codec of a batch form whose columns are ``cls``'s fields: entry i of each column
    is the run's message i."""
    fields = m.FIELDS[cls]
    getters = [(f, attrgetter(f)) for f in fields]

    def enc(t: pb.Message, run: list[Any]) -> None:
        s = getattr(t, name)
        for f, get in getters:
            getattr(s, f).extend(list(map(get, run)))

    def dec(t: pb.Message) -> list[Any]:
        s = getattr(t, name)
        columns = [getattr(s, f) for f in fields]
        if len({len(c) for c in columns}) > 1:
            raise _BadColumns
        return list(map(cls, *columns))

    return enc, dec


def _codecs(
    classes: dict[str, type], own: dict[str, Codec], make: Callable[[str, type], Codec]
) -> tuple[dict[type, Encoder], dict[str | None, Decoder]]:
    """Encoders by class and decoders by oneof field: ``own``'s, else ``make``'s."""
    encoders: dict[type, Encoder] = {}
    decoders: dict[str | None, Decoder] = {}
    for name, cls in classes.items():
        encoders[cls], decoders[name] = own[name] if name in own else make(name, cls)
    return encoders, decoders


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
    "policy_sync": m.PolicySync,
    "result": m.Result,
    "got_result": m.GotResult,
}
"""Field of ``Message.body`` -> the core's class; the drift test holds it to the proto."""

BATCH_FORMS: dict[str, type] = {
    "repl_jobs": m.ReplJob,
    "got_jobs": m.GotJob,
    "set_acks": m.SetAck,
    "got_acks": m.GotAck,
}
"""Field of ``Message.body`` -> the core's class each entry of that batch form becomes."""

RECORD_FORMS: dict[str, type] = {"job_records": m.ReplJob}
"""Field of ``Message.body`` -> the core's class each record of that form becomes."""

# The messages with code of their own (nested messages, records, optional columns); every
# other one is field for field.
_ENCODERS, _DECODERS = _codecs(
    ONEOF_CLASSES,
    {
        "ping": (_enc_ping, _dec_ping),
        "ack": (_enc_ack, _dec_ack),
        "repl_job": (_enc_repl_job, _dec_repl_job),
        "your_jobs": (_enc_your_jobs, _dec_your_jobs),
        "sched_sync": (_enc_sched_sync, _dec_sched_sync),
        "route_sync": (_enc_route_sync, _dec_route_sync),
        "policy_sync": (_enc_policy_sync, _dec_policy_sync),
    },
    _field_codec,
)
_BATCH_ENCODERS, _BATCH_DECODERS = _codecs(
    BATCH_FORMS, {"repl_jobs": (_enc_repl_jobs, _dec_repl_jobs)}, _column_codec
)
_BATCH_DECODERS["job_records"] = _dec_job_records
# For a peer that reads records: YOURJOBS as the jobs' records too.
_RECORD_ENCODERS = {**_ENCODERS, m.YourJobs: _enc_your_records}
_BARE_RECORD_ENCODERS = {**_ENCODERS, m.YourJobs: _enc_your_records_bare}


def _encoders(records: bool, headers: bool) -> dict[type, Encoder]:
    if not records:
        return _ENCODERS
    return _RECORD_ENCODERS if headers else _BARE_RECORD_ENCODERS


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
