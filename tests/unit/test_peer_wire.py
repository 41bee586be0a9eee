"""The frame codec: every message type round-trips, and nothing a peer sends can crash us."""

from __future__ import annotations

import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from disq.core import messages as m
from disq.core.job_record import JobRecordError
from disq.proto_gen import cluster_pb2 as pb
from disq.server.peer_wire import (
    ONEOF_CLASSES,
    FrameDecodeError,
    WireCounters,
    decode_frame,
    encode_frame,
)

NODE = "0123456789abcdef0123456789abcdef01234567"

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=12)
IDS = st.text(alphabet="0123456789abcdefD-", max_size=40)

MEMBERS = st.builds(
    m.Member,
    node_id=IDS,
    host=TEXT,
    grpc_port=U32,
    client_port=U32,
    incarnation=U32,
    # Open enum: values this build does not name must pass through unchanged too.
    state=st.sampled_from([m.ALIVE, m.SUSPECT, m.DEAD, m.LEFT]) | st.integers(0, 1000),
    leaving=st.booleans(),
)
# The fields every replicated job sets; what ADDJOB replicates leaves the others at their
# defaults, the counters travel on requeues (JOBS), and the rest (RARE) only for
# beanstalk jobs (whose fields travel only with beanstalk=True) and idempotency keys.
_JOB_CORE: dict[str, st.SearchStrategy[typing.Any]] = {
    "id": IDS,
    "queue": TEXT,
    "body": st.binary(max_size=64),
    "repl": U32,
    "ctime": U64,
    "delay_s": U32,
    "retry_s": U32,
    "ttl_remaining_s": U32,
}
_JOB_COUNTERS: dict[str, st.SearchStrategy[typing.Any]] = {
    "nacks": U32,
    "additional_deliveries": U32,
    "nodes_delivered": st.lists(IDS, max_size=3),
    "priority": U32,
}
# A REPLJOB carries the job's record (disq/core/job_record.py): its fields' widths, node ids
# of 40 characters, and no beanstalk alias (a copy never carries one: peer_wire.py _copy).
_RECORD_CORE = {**_JOB_CORE, "repl": st.integers(0, 2**16 - 1)}
_RECORD_COUNTERS = {
    **_JOB_COUNTERS,
    "nodes_delivered": st.lists(
        st.text(alphabet="0123456789abcdef", min_size=40, max_size=40), max_size=3
    ),
}
RECORD_JOBS = st.one_of(
    st.builds(m.JobData, **_RECORD_CORE),
    st.builds(m.JobData, **_RECORD_CORE, **_RECORD_COUNTERS),
    st.builds(
        m.JobData,
        **_RECORD_CORE,
        **_RECORD_COUNTERS,
        beanstalk=st.just(True),
        bstate=st.integers(0, 255),
        idempotency_key=TEXT,
    ),
)
COPIES = st.builds(m.ReplJob.of, RECORD_JOBS)
MESSAGES: st.SearchStrategy[m.Message] = st.one_of(
    st.builds(m.Ping, probe_id=U64, gossip=st.lists(MEMBERS, max_size=3)),
    st.builds(m.Ack, probe_id=U64, target=IDS, gossip=st.lists(MEMBERS, max_size=3)),
    st.builds(m.PingReq, probe_id=U64, target=IDS),
    COPIES,
    st.builds(m.GotJob, job_id=IDS),
    st.builds(m.Enqueue, job_id=IDS),
    st.builds(m.Queued, job_id=IDS, incr_nacks=st.booleans(), incr_deliveries=st.booleans()),
    st.builds(m.WillQueue, job_id=IDS),
    st.builds(m.SetAck, job_id=IDS, may_have=U32),
    st.builds(m.GotAck, job_id=IDS, known=st.booleans()),
    st.builds(m.DelJob, job_ids=st.lists(IDS, max_size=4)),
    st.builds(
        m.IdemKeys,
        queues=st.lists(st.just("q"), max_size=3),
        keys=st.lists(st.just("k"), max_size=3),
        job_ids=st.lists(IDS, max_size=3),
    ),
    st.builds(m.NeedJobs, queue=TEXT, count=U32),
    st.builds(m.YourJobs.of, st.lists(RECORD_JOBS, max_size=3)),
    st.builds(m.Working, job_id=IDS),
    st.builds(m.Pause, queue=TEXT, flags=st.integers(0, 3)),
)


def _job(i: int = 1) -> m.JobData:
    return m.JobData(
        id=f"D-0123abcd-{i:024x}-0e10",
        queue="q",
        body=b"\x00body\xff" * 3,
        repl=3,
        ctime=1_700_000_000_000_000_000 + i,
        delay_s=5,
        retry_s=300,
        ttl_remaining_s=86_400,
        nacks=2,
        additional_deliveries=1,
        nodes_delivered=["a" * 40, "b" * 40],
        priority=0,  # the most urgent beanstalk priority must not turn into the 1024 default
    )


MEMBER = m.Member("c" * 40, "10.0.0.3", 7710, 7711, 4, m.SUSPECT, leaving=True)

ONE_OF_EACH: list[m.Message] = [
    m.Ping(7, [MEMBER]),
    m.Ping(9, [MEMBER], meet=True),  # CLUSTER MEET / --join (issue 31)
    m.Ack(7, "d" * 40, [MEMBER, MEMBER]),
    m.PingReq(8, "e" * 40),
    m.ReplJob.of(_job()),
    m.GotJob("D-1"),
    m.Enqueue("D-2"),
    m.Queued("D-3", incr_nacks=True, incr_deliveries=False),
    m.WillQueue("D-4"),
    m.SetAck("D-5", 3),
    m.GotAck("D-6", known=True),
    m.DelJob(["D-7", "D-8"]),
    m.IdemKeys(["q", "q\u00e9"], ["k1", "spark/0/1"], ["D-7", "D-8"]),
    m.IdemKeys(["q"], ["k3"], ["-D-9"], ["q", "q2"], ["k1", "k2"]),  # a failed add; acks
    m.KeyVote(m.KV_PREPARE, "q", "spark/0/1", 3, "a" * 40),
    m.KeyVote(m.KV_PROMISE, "q\u00e9", "k", 3, "a" * 40, True, 2, "b" * 40, "D-12"),
    m.KeyVote(m.KV_ACCEPTED, "q", "k", 3, "a" * 40, False, 4, "c" * 40, decided="D-13"),
    m.KeyVotes(
        [m.KV_PREPARE, m.KV_PROMISE],
        ["q", "q\u00e9"],
        ["k1", "k2"],
        [1, 2],
        ["a" * 40, "b" * 40],
        [False, True],
        [0, 1],
        ["", "c" * 40],
        ["", "D-14"],
        ["", ""],
    ),
    m.NeedJobs("q", 10),
    m.YourJobs.of([_job(1), _job(2)]),
    m.Working("D-9"),
    m.Working("D-9", 30_000, 2, 3),  # a hold: a NACK DELAY or a queue's BACKOFF
    m.PolicySync(
        [
            m.PolicyEntry("q\u00e9", 5, "dlq", 1, 60, False, 1_700_000_000_000, "b" * 40),
            m.PolicyEntry("gone", deleted=True, version_ms=5, version_node="c" * 40),
        ],
        digest=0xFFFFFFFF,
        want=True,
        whole=True,
    ),
    m.Pause("q", m.PAUSE_IN | m.PAUSE_OUT),
    m.BeanstalkUpdate("D-10", 3, 7),
    m.Result("D-11", b"\x00value\r\n", 86_400_000),
    m.Result("D-11", b"", 0, deleted=True),
    m.GotResult("D-11"),
    m.ReplJob.of(m.JobData("D-11", "t", b"b", 2, 5, 0, 1, 60, beanstalk=True, bstate=3)),
    m.RouteSync(
        [
            m.RouteEntry(m.ROUTE_EXCHANGE, "celeryev", exchange_type="topic"),
            m.RouteEntry(m.ROUTE_BINDING, "celeryev", "q\u00e9", "worker.#", version_ms=5),
            m.RouteEntry(
                m.ROUTE_QUEUE,
                "reply",
                expires_ms=10_000,
                message_ttl_ms=300_000,
                deleted=True,
                version_ms=1_700_000_000_000,
                version_node="b" * 40,
            ),
        ],
        digest=0xFFFFFFFF,
        want=True,
        whole=True,
    ),
    m.SchedSync(
        [
            m.ScheduleDef("nightly", "30 2 * * *", "Europe/Berlin", "reports", b"\x00run"),
            m.ScheduleDef(
                "s\u00e9c",
                "@every 5s",
                "UTC",
                "q",
                b"",
                repl=2,
                retry_s=0,
                ttl_s=60,
                async_=True,
                misfire=m.MISFIRE_SKIP,
                catchup=0,
                paused=True,
                deleted=True,
                version_ms=1_700_000_000_000,
                version_node="a" * 40,
            ),
        ],
        ["nightly"],
        [1_700_000_000],
        ["D-15"],
        digest=0xFFFFFFFF,
        want=True,
    ),
]

# Every field at its proto3 default: the oneof must still say which message it is.
ALL_DEFAULTS: list[m.Message] = [
    m.Ping(0),
    m.Ack(0),
    m.PingReq(0, ""),
    m.ReplJob.of(m.JobData("", "", b"", 0, 0, 0, 0, 0, priority=0)),
    m.GotJob(""),
    m.Enqueue(""),
    m.Queued(""),
    m.WillQueue(""),
    m.SetAck("", 0),
    m.GotAck("", known=False),
    m.DelJob([]),
    m.IdemKeys([], [], []),
    m.KeyVote(0, "", "", 0, ""),
    m.KeyVotes(),
    m.NeedJobs("", 0),
    m.YourJobs([]),
    m.Working(""),
    m.Pause("", 0),
    m.BeanstalkUpdate("", 0, 0),
    m.Result("", b"", 0),
    m.GotResult(""),
    m.SchedSync(),
    m.RouteSync(),
    m.PolicySync(),
]


RECORDS = "records"  # a peer that reads the batch forms and JobRecords


def _round_trip(
    msgs: list[m.Message], seq: int = 42, columnar: bool | str = False
) -> list[m.Message]:
    counters = WireCounters()
    raw = encode_frame(NODE, seq, msgs, counters, bool(columnar), columnar == RECORDS)
    from_node, got_seq, out = decode_frame(raw, counters)
    assert (from_node, got_seq) == (NODE, seq)
    assert counters == WireCounters()
    return out


def test_the_samples_cover_every_message_class() -> None:
    classes = set(typing.get_args(m.Message))
    assert {type(x) for x in ONE_OF_EACH} == classes
    assert {type(x) for x in ALL_DEFAULTS} == classes
    assert set(ONEOF_CLASSES.values()) == classes


@pytest.mark.parametrize("columnar", [False, True, RECORDS])
@pytest.mark.parametrize("msg", ONE_OF_EACH, ids=lambda x: type(x).__name__)
def test_every_message_type_round_trips(msg: m.Message, columnar: bool | str) -> None:
    assert _round_trip([msg], columnar=columnar) == [msg]
    # Three in a row: with columnar, a run of ReplJob / GotJob travels as one batch message.
    assert _round_trip([msg, msg, msg], columnar=columnar) == [msg, msg, msg]


@pytest.mark.parametrize("columnar", [False, True, RECORDS])
@pytest.mark.parametrize("msg", ALL_DEFAULTS, ids=lambda x: type(x).__name__)
def test_messages_with_only_default_fields_keep_their_type(
    msg: m.Message, columnar: bool | str
) -> None:
    assert _round_trip([msg], columnar=columnar) == [msg]
    assert _round_trip([msg, msg], columnar=columnar) == [msg, msg]


@pytest.mark.parametrize("columnar", [False, True, RECORDS])
def test_a_frame_keeps_the_order_of_many_messages(columnar: bool | str) -> None:
    msgs: list[m.Message] = [m.ReplJob.of(_job(i)) for i in range(2000)]
    msgs[1000:1000] = ONE_OF_EACH
    assert _round_trip(msgs, seq=2**64 - 1, columnar=columnar) == msgs


def _kinds(raw: bytes) -> list[str | None]:
    return [x.WhichOneof("body") for x in pb.Frame.FromString(raw).messages]


def test_columnar_merges_runs_only_and_keeps_the_order() -> None:
    a, b, c = _job(1), _job(2), m.JobData("D-3", "q", b"x", 1, 3, 0, 60, 600)
    msgs: list[m.Message] = [
        m.ReplJob.of(a),
        m.ReplJob.of(b),
        m.ReplJob.of(c),
        m.SetAck(a.id, 3),  # must stay after the copies it refers to
        m.ReplJob.of(a),
        m.GotJob("D-1"),
        m.GotJob("D-2"),
        m.DelJob(["D-1"]),
        m.SetAck("D-1", 3),
        m.SetAck("D-2", 2),
        m.GotAck("D-1", True),
        m.GotAck("D-2", False),
        m.GotAck("D-3", True),
    ]
    raw = encode_frame(NODE, 1, msgs, columnar=True)
    assert _kinds(raw) == [
        "repl_jobs", "set_ack", "repl_job", "got_jobs", "del_job", "set_acks", "got_acks"
    ]  # fmt: skip
    assert decode_frame(raw)[2] == msgs
    # An older peer: one message per job, exactly as before.
    old = encode_frame(NODE, 1, msgs)
    assert _kinds(old) == [
        "repl_job", "repl_job", "repl_job", "set_ack", "repl_job", "got_job", "got_job",
        "del_job", "set_ack", "set_ack", "got_ack", "got_ack", "got_ack",
    ]  # fmt: skip
    assert decode_frame(old)[2] == msgs


def test_columnar_leaves_default_columns_empty_and_fills_the_others() -> None:
    plain = [m.ReplJob.of(m.JobData(f"D-{i}", "q", b"b", 3, i, 0, 300, 3600)) for i in range(4)]
    raw = encode_frame(NODE, 1, plain, columnar=True)
    (batch,) = pb.Frame.FromString(raw).messages
    cols = batch.repl_jobs
    assert list(cols.id) == ["D-0", "D-1", "D-2", "D-3"] and list(cols.ctime) == [0, 1, 2, 3]
    for name in (
        "nacks",
        "additional_deliveries",
        "nodes_delivered",
        "nodes_delivered_count",
        "priority",
        "beanstalk",
        "bstate",
        "beanstalk_id",
        "idempotency_key",
    ):
        assert len(getattr(cols, name)) == 0, name
    # One job off the default fills that column for the whole run; priority 0 (beanstalk's
    # most urgent) must not come back as the 1024 default.
    mixed = [*plain, m.ReplJob.of(_job(9))]
    cols = pb.Frame.FromString(encode_frame(NODE, 1, mixed, columnar=True)).messages[0].repl_jobs
    assert list(cols.priority) == [1024] * 4 + [0]
    assert list(cols.nodes_delivered_count) == [0, 0, 0, 0, 2]
    assert decode_frame(encode_frame(NODE, 1, mixed, columnar=True))[2] == mixed


def _batch_frame(columns: dict[str, list[typing.Any]], form: str = "repl_jobs") -> bytes:
    frame = pb.Frame(from_node=NODE, seq=1)
    msg = frame.messages.add()
    getattr(msg, form).SetInParent()
    for name, values in columns.items():
        getattr(getattr(msg, form), name).extend(values)
    frame.messages.add().working.job_id = "D-after"
    return frame.SerializeToString()


FULL: dict[str, list[typing.Any]] = {
    "id": ["D-1", "D-2"],
    "queue": ["q", "q"],
    "body": [b"a", b"b"],
    "repl": [1, 1],
    "ctime": [1, 2],
    "delay_s": [0, 0],
    "retry_s": [0, 0],
    "ttl_remaining_s": [60, 60],
}


@pytest.mark.parametrize(
    "broken",
    [
        {"queue": ["q"]},  # a required column short
        {"body": [b"a", b"b", b"c"]},  # ... or long
        {"nacks": [1]},  # an optional column neither empty nor full
        {"priority": [1, 2, 3]},
        {"idempotency_key": ["k"]},
        {"nodes_delivered_count": [1, 1], "nodes_delivered": ["n"]},  # counts past the list
        {"nodes_delivered_count": [0], "nodes_delivered": []},
    ],
)
def test_batch_columns_of_unequal_length_are_skipped_and_counted(
    broken: dict[str, list[typing.Any]],
) -> None:
    counters = WireCounters()
    with capture_logs() as logs:
        _, _, msgs = decode_frame(_batch_frame({**FULL, **broken}), counters)
    assert msgs == [m.Working("D-after")]  # the rest of the frame is served
    assert counters.messages_skipped == 1
    assert [e["event"] for e in logs] == ["peer_frame_messages_skipped"]
    # The same columns, whole, decode.
    assert len(decode_frame(_batch_frame(FULL))[2]) == 3


@pytest.mark.parametrize(
    ("form", "columns", "whole"),
    [
        ("set_acks", {"job_id": ["D-1", "D-2"], "may_have": [3]}, [m.SetAck("D-1", 3)]),
        ("got_acks", {"job_id": ["D-1"], "known": [True, False]}, [m.GotAck("D-1", True)]),
    ],
)
def test_ack_batches_of_unequal_length_are_skipped_and_counted(
    form: str, columns: dict[str, list[typing.Any]], whole: list[m.Message]
) -> None:
    counters = WireCounters()
    with capture_logs():
        _, _, msgs = decode_frame(_batch_frame(columns, form), counters)
    assert msgs == [m.Working("D-after")] and counters.messages_skipped == 1
    # Cut to equal length, the same message decodes.
    n = min(len(v) for v in columns.values())
    cut = {k: v[:n] for k, v in columns.items()}
    assert decode_frame(_batch_frame(cut, form))[2] == [*whole, m.Working("D-after")]


def test_a_bad_job_in_a_run_costs_only_itself() -> None:
    good = [m.ReplJob.of(m.JobData(f"D-{i}", "q", b"b", 3, i, 0, 300, 3600)) for i in range(3)]
    # A queue name that is no UTF-8 (names are any bytes): its record holds it, protobuf's
    # string columns, an older peer's form, cannot.
    bad = m.ReplJob.of(m.JobData("D-bad", "q\udcff", b"b", 2, 9, 0, 0, 60))
    run = [good[0], bad, good[1], good[2]]
    counters = WireCounters()
    with capture_logs():
        raw = encode_frame(NODE, 1, run, counters, columnar=True)
    assert counters.messages_unencodable == 1
    assert decode_frame(raw)[2] == good
    # As records, the bytes travel as they are: the whole run.
    raw = encode_frame(NODE, 1, run, counters, columnar=True, records=True)
    assert _kinds(raw) == ["job_records"] and decode_frame(raw)[2] == run


def test_a_job_field_out_of_its_record_is_refused_when_the_record_is_made() -> None:
    for bad in (
        m.JobData("D-1", "q", b"b", 2**16, 1, 0, 0, 60),  # repl is a u16
        m.JobData("D-1", "q", b"b", 1, 1, 0, 0, 60, priority=2**32),
        m.JobData("D-" + "x" * 39, "q", b"b", 1, 1, 0, 0, 60),  # an id over 40 bytes
        m.JobData("D-1", "q", b"b", 1, 1, 0, 0, 60, nodes_delivered=["short"]),
    ):
        with pytest.raises(JobRecordError):
            m.ReplJob.of(bad)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            COPIES,
            st.builds(m.GotJob, job_id=IDS),
            st.builds(m.SetAck, job_id=IDS, may_have=U32),
            st.builds(m.GotAck, job_id=IDS, known=st.booleans()),
            MESSAGES,
        ),
        max_size=16,
    ),
    U64,
)
def test_columnar_round_trip_property(msgs: list[m.Message], seq: int) -> None:
    counters = WireCounters()
    raw = encode_frame(NODE, seq, msgs, counters, columnar=True)
    assert decode_frame(raw, counters) == (NODE, seq, msgs)
    assert counters == WireCounters()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGES, max_size=12), U64, st.text(max_size=40))
def test_round_trip_property(msgs: list[m.Message], seq: int, from_node: str) -> None:
    counters = WireCounters()
    assert decode_frame(encode_frame(from_node, seq, msgs, counters), counters) == (
        from_node,
        seq,
        msgs,
    )
    assert counters == WireCounters()


def test_empty_frame() -> None:
    raw = encode_frame(NODE, 0, [])
    assert decode_frame(raw) == (NODE, 0, [])
    # Zero bytes are a valid, empty Frame in protobuf: nothing to do, nothing to fail.
    assert decode_frame(b"") == ("", 0, [])


def test_decode_accepts_a_parsed_frame() -> None:
    frame = pb.Frame.FromString(encode_frame(NODE, 3, ONE_OF_EACH))
    assert decode_frame(frame) == (NODE, 3, ONE_OF_EACH)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff",  # a tag that never ends
        b"\x1a\x10\x00",  # messages field longer than the data
        b"\x0a\x02\xff\xfe",  # from_node that is not UTF-8
        b"\x1a\x02\x52\x05",  # Message.got_job (field 10) truncated inside the frame
        b"\x07",  # field 0 is never valid
    ],
)
def test_malformed_bytes_raise_frame_decode_error_and_count(raw: bytes) -> None:
    counters = WireCounters()
    with pytest.raises(FrameDecodeError):
        decode_frame(raw, counters)
    assert counters.frames_malformed == 1


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_else(raw: bytes) -> None:
    counters = WireCounters()
    try:
        decode_frame(raw, counters)
    except FrameDecodeError:
        assert counters.frames_malformed == 1


def test_unknown_and_empty_messages_are_skipped_and_counted() -> None:
    good = encode_frame(NODE, 5, [m.GotJob("D-1")])
    # A Message whose oneof holds field 99 (a message type of a newer peer), then an empty
    # Message, then a good one: frames are merged when concatenated, keeping the order.
    unknown = (
        pb.Frame(messages=[pb.Message()])
        .SerializeToString()
        .replace(b"\x1a\x00", b"\x1a\x03\x98\x06\x01")
    )
    empty = pb.Frame(messages=[pb.Message()]).SerializeToString()
    tail = encode_frame(NODE, 5, [m.Working("D-2")])
    counters = WireCounters()
    with capture_logs() as logs:
        from_node, seq, msgs = decode_frame(good + unknown + empty + tail, counters)
    assert (from_node, seq, msgs) == (NODE, 5, [m.GotJob("D-1"), m.Working("D-2")])
    assert counters.messages_skipped == 2
    # One warning for the frame, not one per message.
    warnings = [e for e in logs if e["event"] == "peer_frame_messages_skipped"]
    assert len(warnings) == 1 and warnings[0]["count"] == 2


def test_unencodable_messages_are_skipped_and_the_rest_goes_out() -> None:
    bad_range = m.SetAck("D-1", may_have=2**32)  # uint32 overflow
    negative = m.NeedJobs("q", count=-1)
    # Well-typed values protobuf refuses (ill-typed ones are refused earlier, by the compiled
    # classes themselves): a lone surrogate is no UTF-8, a priority is a uint32.
    wrong_type = m.GotJob(job_id="D-\ud800")
    not_a_message = m.DelJob(["D-1", "D-\udc80"])
    bad_job = m.ReplJob.of(m.JobData("D-2", "q\udcff", b"body", 1, 1, 0, 0, 0))
    msgs: list[typing.Any] = [
        m.GotJob("D-0"),
        bad_range,
        negative,
        wrong_type,
        not_a_message,
        bad_job,
        m.Working("D-3"),
    ]
    counters = WireCounters()
    with capture_logs() as logs:
        raw = encode_frame(NODE, 1, msgs, counters)
    assert counters.messages_unencodable == 5
    assert [e["event"] for e in logs] == ["peer_frame_messages_unencodable"]
    assert decode_frame(raw) == (NODE, 1, [m.GotJob("D-0"), m.Working("D-3")])


def test_concatenated_frames_decode_as_one() -> None:
    # The link layer coalesces queued frames by concatenating their bytes: protobuf merges
    # them, repeated fields appended in order and the last seq winning.
    a = encode_frame(NODE, 1, ONE_OF_EACH[:5])
    b = encode_frame(NODE, 2, ONE_OF_EACH[5:])
    assert decode_frame(a + b) == (NODE, 2, ONE_OF_EACH)
