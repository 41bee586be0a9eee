"""A node's AOF replayed into fresh cores gives back what the file says (issue 31, item 3).

The node's reader leaves the Disque core's LOADJOB and DELJOB records in the file's buffer
(``read_aof(by_offset=...)``) and the core decodes them in place; these tests hold that path
to the file: a history of many jobs in several queues (REPLICATE 1 to 3, delayed, at most
once, keyed, consumed, nacked, acked, deleted, expired while down), written to a real file
with a torn tail, replays to exactly the jobs a plain decode of every record (last record
wins) gives, field by field, to the same state as the records path the simulator takes, and
a controlled restart queues exactly the jobs the file holds.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.constants import JOB_OVERHEAD_BYTES
from disq.core.disque.api import AddOptions
from disq.core.disque.core import REQUEUE_JITTER_MS, DisqueCore
from disq.core.disque.job import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    QUEUED,
    DJob,
)
from disq.core.messages import JobData
from disq.core.node_core import NodeCore
from disq.persistence import framing
from disq.persistence.aof_reader import read_aof
from disq.persistence.aof_writer import AOF_NAME, AofWriter
from disq.persistence.cluster_records import (
    JOB_RECORD_TYPES,
    REC_DELJOB,
    REC_JOB,
    REC_LOADJOB,
    ClusterRecordError,
    encode_deljob,
    encode_loadjob,
    to_core_records,
)
from disq.persistence.framing import HEADER, frame, iter_frames
from disq.testing.mesh import Mesh

QUEUES = ["orders", "mail", "q", "fila-é"]  # one name not ASCII: queue names are any bytes
DOWN_MS = 20_000  # how long the node is down before it replays


def _history(seed: int) -> Mesh:
    """Three nodes; node 0 takes 600 adds and a mix of everything that follows an add."""
    c = Mesh(3, seed)
    core = c.disque(0)
    rng = random.Random(seed)
    added: list[str] = []
    for i in range(600):
        retry_s = 0 if i % 5 == 0 else 60  # at most once: REPLICATE 1 only
        repl = 1 if retry_s == 0 else (1, 1, 2, 3)[i % 4]
        delay_s = 30 if i % 7 == 0 else 0
        reply = core.add_job(
            c.now,
            i + 1,
            QUEUES[i % len(QUEUES)],
            b"body-%d-" % i + bytes(rng.randrange(256) for _ in range(i % 40)),
            AddOptions(
                timeout_ms=1000,
                repl=repl,
                delay_s=delay_s,
                retry_s=retry_s,
                # Some expire while the node is down (DOWN_MS): the replay drops them.
                ttl_s=10 if i % 13 == 0 and not delay_s else 3600,
                idem_key=f"key-{i}" if i % 11 == 0 else "",
            ),
        )
        c.pump()
        if isinstance(reply, str):
            added.append(reply)
        else:
            [(_token, job_id)] = c.replies[c.ids[0]][-1:]
            assert isinstance(job_id, str)
            added.append(job_id)
        if i % 50 == 49:
            c.advance(100)
    got = core.get_job(c.now, 10_000, QUEUES, nohang=True, count=200)
    assert isinstance(got, list) and got
    taken = [j.id for j in got]
    core.acks.ack_job(c.now, taken[:80])  # acked: DELJOB once every copy agrees (GC)
    core.nack(c.now, taken[80:120])  # counters in the next LOADJOB
    core.del_job(c.now, added[::17])  # deleted here: DELJOB at once
    c.advance(5000)
    return c


def _fields(j: DJob) -> tuple[object, ...]:
    return (
        j.id,
        j.queue,
        j.body,
        j.repl,
        j.ctime,
        j.delay_s,
        j.retry_s,
        j.etime_ms,
        j.nacks,
        j.add_deliveries,
        j.priority,
        j.idem_key,
        sorted(j.delivered),
        j.flags,
        j.bid,
        j.state,
    )


def _fresh(c: Mesh, seed: int = 7) -> tuple[NodeCore, DisqueCore]:
    disque = DisqueCore(c.views[c.ids[0]], random.Random(seed), c.now)
    return NodeCore(BeanstalkCore(persist=False), disque), disque


def _write(path: Path, c: Mesh, tail: bytes = b"") -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / AOF_NAME).write_bytes(HEADER + b"".join(c.aof[c.ids[0]]) + tail)


def test_the_history_covers_what_the_replay_must_handle() -> None:
    c = _history(1)
    kinds = [kind for kind, _ in to_core_records(list(iter_frames(b"".join(c.aof[c.ids[0]]))))]
    assert kinds.count("LOADJOB") > 500 and kinds.count("DELJOB") > 100
    assert "IDEMKEY" in kinds
    states = {j.state for j in c.disque(0).jobs.values()}
    assert {ACTIVE, QUEUED} <= states and ACKED not in states  # the acks were collected


@pytest.mark.parametrize("seed", [1, 2])
def test_a_replay_from_the_file_gives_every_job_the_file_holds_field_by_field(
    tmp_path: Path, seed: int
) -> None:
    c = _history(seed)
    torn = frame(REC_LOADJOB, b"z" * 300)[:150]  # a crash mid-write: cut, never replayed
    _write(tmp_path, c, tail=torn)
    writer = AofWriter(tmp_path)
    try:
        result = writer.load(by_offset=JOB_RECORD_TYPES)
    finally:
        writer.close()
    assert result.torn_bytes == len(torn)
    assert {rtype for rtype, _ in result.records}.isdisjoint(JOB_RECORD_TYPES)
    now = c.now + DOWN_MS
    node, disque = _fresh(c)
    jobs = node.restore(now, result.records, result.buf, result.offsets)

    # The reference: every record decoded on its own, in file order, the last one wins.
    expected = {}
    for kind, payload in to_core_records(list(iter_frames(b"".join(c.aof[c.ids[0]])))):
        if kind == "LOADJOB":
            expected[payload.id] = payload  # type: ignore[attr-defined]
        elif kind == "DELJOB":
            expected.pop(payload, None)  # type: ignore[arg-type]
    expected = {k: d for k, d in expected.items() if d.expire_ms >= now}
    assert jobs == len(disque.jobs) == len(expected) > 300
    assert list(disque.jobs) == list(expected)  # and in the order a replay meets them
    live = c.disque(0).jobs
    for job_id, d in expected.items():
        j = disque.jobs[job_id]
        assert (j.queue, j.body, j.repl, j.ctime) == (d.queue, d.body, d.repl, d.ctime)
        assert (j.delay_s, j.retry_s, j.etime_ms) == (d.delay_s, d.retry_s, d.expire_ms)
        assert (j.nacks, j.add_deliveries) == (d.nacks, d.additional_deliveries)
        assert j.priority == d.priority
        assert j.idem_key == d.idempotency_key
        assert j.delivered == {*d.nodes_delivered, c.ids[0]}
        assert j.state == ACTIVE  # Disque's model: back active, requeued by their retry
        # Its first queueing counts a delivery, unless it is still in its DELAY.
        in_delay = d.delay_s and now <= d.ctime // 1_000_000 + d.delay_s * 1000
        assert j.flags & BCAST_QUEUED == (0 if in_delay else BCAST_QUEUED)
        if d.retry_s:
            assert j.flags & BCAST_WILLQUEUE
            base = now + (d.delay_s + d.retry_s) * 1000
            assert base <= j.qtime_ms < base + REQUEUE_JITTER_MS
        else:
            assert j.qtime_ms == 0
        # What the running node had of the job, but its counters and its state.
        k = live[job_id]
        assert (k.queue, k.body, k.ctime, k.etime_ms, k.idem_key) == (
            j.queue,
            j.body,
            j.ctime,
            j.etime_ms,
            j.idem_key,
        )
    # Every live job not expired while the node was down came back; nothing else did.
    assert set(expected) == {i for i, k in live.items() if k.etime_ms >= now}
    # One timer entry per job, at the time the job's own rule gives.
    assert sorted((e.at_ms, e.job_id) for e in disque._awake) == sorted(
        (disque._awake_time(j), j.id) for j in disque.jobs.values()
    )
    assert all(j.awake_ms == disque._awake_time(j) for j in disque.jobs.values())
    assert disque.memory.used_bytes == sum(
        len(j.body) + JOB_OVERHEAD_BYTES for j in disque.jobs.values()
    )


def test_the_in_place_replay_and_the_records_replay_give_the_same_state(tmp_path: Path) -> None:
    c = _history(3)
    _write(tmp_path, c)
    now = c.now + DOWN_MS
    result = read_aof(tmp_path / AOF_NAME, by_offset=JOB_RECORD_TYPES)
    a_node, a = _fresh(c)
    a_node.restore(now, result.records, result.buf, result.offsets)
    b_node, b = _fresh(c)  # the same seed: the same requeue jitter, job by job
    b_node.restore(now, list(iter_frames(b"".join(c.aof[c.ids[0]]))))
    assert [_fields(j) for j in a.jobs.values()] == [_fields(j) for j in b.jobs.values()]
    assert [j.qtime_ms for j in a.jobs.values()] == [j.qtime_ms for j in b.jobs.values()]
    assert sorted((e.at_ms, e.job_id) for e in a._awake) == sorted(
        (e.at_ms, e.job_id) for e in b._awake
    )
    assert a.keys.taken == b.keys.taken and a.keys.tentative == b.keys.tentative
    assert a.memory.used_bytes == b.memory.used_bytes


def test_a_controlled_restart_queues_what_the_file_holds_in_ctime_order(tmp_path: Path) -> None:
    c = _history(4)
    _write(tmp_path, c)
    result = read_aof(tmp_path / AOF_NAME, by_offset=JOB_RECORD_TYPES)
    now = c.now + DOWN_MS
    node, disque = _fresh(c)
    disque.aof_enqueue_once = True
    node.restore(now, result.records, result.buf, result.offsets)

    def queued_at_load(j: DJob) -> bool:
        """restore()'s rule: at least once, and a keyed job only if its key is its own."""
        if not j.retry_s:
            return False
        hit = disque.keys.taken.get((j.queue, j.idem_key)) if j.idem_key else None
        return hit is None or (
            hit[0] == j.id and (j.queue, j.idem_key) not in disque.keys.tentative
        )

    assert any(not queued_at_load(j) for j in disque.jobs.values())
    for name in QUEUES:
        want = sorted(
            (j.ctime, j.id) for j in disque.jobs.values() if j.queue == name and queued_at_load(j)
        )
        assert want, name
        assert [(j.ctime, j.id) for j in disque.inspect.qpeek(name, 10_000)] == want
        assert all(j.state == QUEUED for j in disque.jobs.values() if (j.ctime, j.id) in want)
    assert disque.aof_enqueue_once is False


def test_scan_split_checks_every_record_as_scan_does() -> None:
    rng = random.Random(5)
    records = [
        (rng.choice((1, 2, 16, 17, 18)), rng.randbytes(rng.randrange(60))) for _ in range(300)
    ]
    data = HEADER + b"".join(frame(t, p) for t, p in records)
    mask = framing.type_mask(JOB_RECORD_TYPES)
    for trial in range(60):
        buf = bytearray(data)
        if trial:
            at = rng.randrange(framing.HEADER_SIZE, len(buf))
            if trial % 3:
                buf[at] ^= 1 << rng.randrange(8)  # a flipped bit
            else:
                del buf[at:]  # a torn tail
        whole: list[tuple[int, bytes]] = []
        bad = framing.scan(bytes(buf), framing.HEADER_SIZE, whole)
        rest: list[tuple[int, bytes]] = []
        offsets: list[int] = []
        assert framing.scan_split(bytes(buf), framing.HEADER_SIZE, rest, offsets, mask) == bad
        split = [
            (buf[o + 8], bytes(buf[o + 9 : o + 8 + int.from_bytes(buf[o : o + 4], "little")]))
            for o in offsets
        ]
        assert split == [r for r in whole if r[0] in JOB_RECORD_TYPES]
        assert rest == [r for r in whole if r[0] not in JOB_RECORD_TYPES]


def test_a_job_record_whose_fields_do_not_fit_it_stops_the_replay() -> None:
    c = _history(1)
    frames = list(iter_frames(b"".join(c.aof[c.ids[0]])))
    _, d = _fresh(c)
    job = next(p for t, p in frames if t == REC_JOB)
    old = encode_loadjob(to_core_records([(REC_JOB, job)])[0][1])  # an older build's record
    for rtype, payload in ((REC_JOB, job), (REC_LOADJOB, old)):
        _, d = _fresh(c)
        with pytest.raises(ClusterRecordError):
            d.restore(c.now, [(rtype, payload[:-1])])  # the body runs past its record
        _, d = _fresh(c)
        with pytest.raises(ClusterRecordError):
            d.restore(c.now, [(rtype, payload[:50])])  # shorter than its fixed fields
    _, d = _fresh(c)
    with pytest.raises(ClusterRecordError):
        d.restore(c.now, [(REC_DELJOB, encode_deljob(job[8:48].decode()) + b"x")])


def test_every_field_of_a_loadjob_record_comes_back() -> None:
    """Values unlike any default, and a job put through a beanstalk door that this node
    owned: its record links back to the engine's job (relinks), with no requeue of its own."""
    c = Mesh(3, 1)
    me, other = c.ids[0], c.ids[1]
    now = c.now
    owned = JobData(
        id="D-" + me[:8] + "-" + "a" * 24 + "-05a1",
        queue="tube-\u00e9",
        body=bytes(range(256)) * 3,
        repl=3,
        ctime=now * 1_000_000 - 123_456_789,
        delay_s=0,
        retry_s=45,
        ttl_remaining_s=0,
        nacks=70_000,
        additional_deliveries=2**31 + 5,
        nodes_delivered=[me, other],
        priority=7,
        beanstalk=True,
        bstate=3,
        beanstalk_id=2**40 + 9,
        idempotency_key="k\u00e9y",
        expire_ms=now + 3_600_000,
    )
    plain = JobData(
        id="D-" + other[:8] + "-" + "b" * 24 + "-05a1",
        queue="q",
        body=b"",
        repl=2,
        ctime=(now - 5000) * 1_000_000,
        delay_s=600,
        retry_s=300,
        ttl_remaining_s=0,
        nodes_delivered=[other],
        expire_ms=now + 7_200_000,
    )
    _, d = _fresh(c)
    d.restore(now, [(REC_LOADJOB, encode_loadjob(owned)), (REC_LOADJOB, encode_loadjob(plain))])
    j = d.jobs[owned.id]
    assert (j.queue, j.body, j.repl, j.ctime, j.retry_s) == (
        owned.queue,
        owned.body,
        3,
        owned.ctime,
        45,
    )
    assert (j.nacks, j.add_deliveries, j.priority) == (70_000, 2**31 + 5, 7)
    assert (j.bstate, j.bid, j.idem_key, j.etime_ms) == (3, 2**40 + 9, "k\u00e9y", now + 3_600_000)
    assert j.delivered == {me, other}
    assert j.flags & BEANSTALK_ORIGIN and j.flags & BEANSTALK_OWNED
    assert not j.flags & BCAST_WILLQUEUE and j.qtime_ms == 0 and d.bridge.relinks == [j]
    k = d.jobs[plain.id]
    assert (k.queue, k.body, k.repl, k.delay_s, k.retry_s) == ("q", b"", 2, 600, 300)
    assert k.delivered == {me, other} and k.bid == 0 and not k.flags & BEANSTALK_ORIGIN
    assert not k.flags & BCAST_QUEUED  # still in its DELAY
    base = now + 900 * 1000
    assert base <= k.qtime_ms < base + REQUEUE_JITTER_MS
