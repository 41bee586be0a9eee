"""AOF payloads of cluster jobs: round trips and refusal of damaged payloads."""

from __future__ import annotations

import pytest

from disq.core.messages import JobData
from disq.persistence import (
    cluster_records,
    policy_records,
    records,
    route_records,
    schedule_records,
)
from disq.persistence.cluster_records import (
    REC_ACKJOB,
    REC_DELJOB,
    REC_IDEMKEY,
    REC_LOADJOB,
    ClusterRecordError,
    decode_ackjob,
    decode_deljob,
    decode_idemkeys,
    decode_loadjob,
    encode_ackjob,
    encode_deljob,
    encode_idemkeys,
    encode_loadjob,
    to_core_records,
)

JOB_ID = "D-0123abcd-" + "A" * 24 + "-05a1"


def job(**kw: object) -> JobData:
    base: dict[str, object] = dict(
        id=JOB_ID,
        queue="q\u00e9",
        body=b"\x00body\r\n",
        repl=3,
        ctime=1_795_000_000_000_000_001,
        delay_s=5,
        retry_s=60,
        ttl_remaining_s=0,  # an AOF record: the expiry is absolute
        expire_ms=1_795_000_086_400_000,
        nacks=2,
        additional_deliveries=4,
        nodes_delivered=["a" * 40, "b" * 40],
        priority=7,
    )
    base.update(kw)
    return JobData(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "d",
    [
        job(),
        job(nodes_delivered=[], body=b"", queue=""),
        job(beanstalk=True, bstate=3, beanstalk_id=2**63),
        job(idempotency_key="spark/q1/batch-7/part-3/row-42"),
        job(queue="bin\udcff", idempotency_key="k\udcfe"),  # any bytes, as RESP names them
    ],
)
def test_loadjob_round_trip(d: JobData) -> None:
    assert decode_loadjob(encode_loadjob(d)) == d


def test_deljob_round_trip_and_core_records_in_file_order() -> None:
    recs = [
        (REC_LOADJOB, encode_loadjob(job())),
        (1, b"beanstalk record, ignored here"),
        (REC_DELJOB, encode_deljob(JOB_ID)),
    ]
    assert decode_deljob(encode_deljob(JOB_ID)) == JOB_ID
    assert to_core_records(recs) == [("LOADJOB", job()), ("DELJOB", JOB_ID)]


@pytest.mark.parametrize("cut", [0, 10, 60, -1])
def test_damaged_payloads_are_refused(cut: int) -> None:
    data = encode_loadjob(job())
    keyed = encode_loadjob(job(idempotency_key="key"))
    with pytest.raises(ClusterRecordError):
        decode_loadjob(keyed[:-1])
    with pytest.raises(ClusterRecordError):
        decode_loadjob(data[:cut])
    with pytest.raises(ClusterRecordError):
        decode_loadjob(data + b"x")


@pytest.mark.parametrize("payload", [b"", b"D-short", encode_deljob(JOB_ID) + b"x"])
def test_damaged_deljob_is_refused(payload: bytes) -> None:
    with pytest.raises(ClusterRecordError):
        decode_deljob(payload)


def test_idemkey_round_trip_in_file_order() -> None:
    entries = [("q", "spark/0/1", JOB_ID, 1_700_000_000_000), ("q\u00e9", "k" * 256, "D-x", 5)]
    payload = encode_idemkeys(entries)
    assert decode_idemkeys(payload) == entries
    recs = [(REC_DELJOB, encode_deljob(JOB_ID)), (REC_IDEMKEY, payload)]
    assert to_core_records(recs) == [("DELJOB", JOB_ID), ("IDEMKEY", entries)]
    assert decode_idemkeys(encode_idemkeys([])) == []


@pytest.mark.parametrize("cut", [1, 5, 20, -1])
def test_damaged_idemkey_is_refused(cut: int) -> None:
    payload = encode_idemkeys([("q", "k", JOB_ID, 7)])
    with pytest.raises(ClusterRecordError):
        decode_idemkeys(payload[:cut])
    with pytest.raises(ClusterRecordError):
        decode_idemkeys(payload + b"x")


def test_ackjob_round_trip_and_core_record() -> None:
    payload = encode_ackjob(JOB_ID, 1_795_000_086_400_000)
    assert decode_ackjob(payload) == (JOB_ID, 1_795_000_086_400_000)
    recs = [(REC_LOADJOB, encode_loadjob(job())), (REC_ACKJOB, payload)]
    assert to_core_records(recs) == [("LOADJOB", job()), ("ACKJOB", JOB_ID)]


@pytest.mark.parametrize("payload", [b"", encode_deljob(JOB_ID), encode_ackjob(JOB_ID, 1) + b"x"])
def test_damaged_ackjob_is_refused(payload: bytes) -> None:
    with pytest.raises(ClusterRecordError):
        decode_ackjob(payload)


def test_every_aof_record_type_is_its_own() -> None:
    """One AOF holds the beanstalk, job, schedule and route records: a type taken twice
    would have one module's replay decode another's records."""
    types: dict[int, str] = {}
    for module in (records, cluster_records, schedule_records, route_records, policy_records):
        for name, value in vars(module).items():
            if name.startswith("REC_") and isinstance(value, int):
                assert value not in types, f"{name} = {value} is {types[value]} too"
                types[value] = name
    assert len(types) >= 11
