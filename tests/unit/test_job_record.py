"""A job's one record (disq/core/job_record.py): the bytes a REPLJOB carries are the bytes every
holder's AOF keeps, the creator's included, and a restart reads them back; a record that does
not add up is refused whole, and the node goes on. Pure cores on the in-memory mesh."""

from __future__ import annotations

import random

import pytest

from disq.core.disque.api import AddOptions
from disq.core.disque.core import DisqueCore
from disq.core.disque.job import ACTIVE, QUEUED, deserialize, serialize
from disq.core.job_record import JobRecordError
from disq.core.messages import GotJob, JobData, ReplJob, data_of, record_of
from disq.persistence.cluster_records import REC_JOB, decode_job, to_core_records
from disq.persistence.framing import iter_frames
from disq.testing.mesh import Mesh


def _job_records(m: Mesh, i: int) -> list[bytes]:
    return [p for t, p in iter_frames(b"".join(m.aof[m.ids[i]])) if t == REC_JOB]


def _add(m: Mesh, body: bytes) -> str:
    opts = AddOptions(timeout_ms=5000, repl=3, retry_s=30, ttl_s=600, delay_s=0)
    assert m.disque(0).add_job(m.now, 1, "q", body, opts) is not None
    m.pump()
    [(_, job_id)] = m.replies[m.ids[0]]
    assert isinstance(job_id, str)
    return job_id


def test_every_holder_logs_the_record_the_creator_sent_byte_for_byte() -> None:
    m = Mesh(3)
    job_id = _add(m, b"body \x00\xff")
    logged = [_job_records(m, i) for i in range(3)]
    assert all(len(records) == 1 for records in logged)
    # After each node's 8-byte write time, the same record on the three nodes.
    assert len({records[0][8:] for records in logged}) == 1
    d = decode_job(logged[1][0])
    assert (d.id, d.queue, d.body, d.repl, d.retry_s) == (job_id, "q", b"body \x00\xff", 3, 30)
    assert sorted(d.nodes_delivered) == sorted(m.ids)


def test_a_restart_reads_back_what_the_record_holds() -> None:
    m = Mesh(3)
    job_id = _add(m, b"b")
    before = m.disque(1).jobs[job_id]
    fresh = DisqueCore(m.views[m.ids[1]], random.Random(1), m.now)
    fresh.restore(m.now, list(iter_frames(b"".join(m.aof[m.ids[1]]))))
    j = fresh.jobs[job_id]
    assert j.state == ACTIVE and before.state == ACTIVE
    assert (j.queue, j.body, j.repl, j.ctime, j.retry_s) == (
        before.queue,
        before.body,
        before.repl,
        before.ctime,
        before.retry_s,
    )
    assert j.delivered == before.delivered
    assert abs(j.etime_ms - before.etime_ms) <= 1  # the TTL left, counted from the write
    assert m.disque(0).jobs[job_id].state == QUEUED


def test_a_record_round_trips_through_every_view_of_it() -> None:
    d = JobData(
        "D-0123abcd-" + "a" * 24 + "-0e10",
        "fila-\udcff",  # queue names are any bytes
        b"\x00body",
        3,
        17,
        5,
        60,
        86_400,
        nacks=2,
        additional_deliveries=4,
        nodes_delivered=["b" * 40, "c" * 40],
        priority=7,
        beanstalk=True,
        bstate=3,
        idempotency_key="order-42",
    )
    record = record_of(d)
    assert data_of(record) == d
    j = deserialize(record, 0, len(record), 1_000, {}, b"")
    assert serialize(j, 86_400_000, 0) == record
    assert [r[0] for r in to_core_records([(REC_JOB, bytes(8) + record)])] == ["LOADJOB"]


@pytest.mark.parametrize("cut", [0, 1, 50, -1])
def test_a_record_that_does_not_add_up_is_refused_and_the_node_goes_on(cut: int) -> None:
    good = record_of(JobData("D-" + "1" * 38, "q", b"body", 1, 1, 0, 0, 60))
    with pytest.raises(JobRecordError):
        deserialize(good[:cut], 0, len(good[:cut]), 0, {}, b"")
    m = Mesh(2)
    node = m.nodes[1]
    node.contain_errors = True
    node.on_peer_messages(m.now, m.ids[0], [ReplJob(good[:cut]), GotJob("D-x")])
    assert node.message_errors == 1 and "ReplJob" in node.errors[0][0]
    node.on_peer_messages(m.now, m.ids[0], [ReplJob(good)])  # the next copy is taken
    assert m.disque(1).jobs["D-" + "1" * 38].state == ACTIVE
