"""An answered ACKJOB survives a power cut of every node (ack.py, ACKJOB records), on the pure
Disque core wired by the in-memory mesh (no IO, fake clock).

The acker logs the ack (ACKJOB) before its answer leaves; its SETACKs may be lost with the
machines. After every node restarts from its records, the acker still knows the job is acked:
its GC (and its SETACK answer to a holder's WILLQUEUE) ends the copies that missed the ack,
which would otherwise come back active and be queued again by their RETRY.
"""

from __future__ import annotations

import pytest

from disq.core.disque.api import AddOptions
from disq.core.disque.job import ACKED, ACTIVE, QUEUED
from disq.persistence.cluster_records import REC_ACKJOB, REC_DELJOB, REC_JOB
from disq.persistence.framing import iter_frames
from disq.testing.mesh import Mesh


def _add(m: Mesh, i: int, *, repl: int = 3) -> str:
    opts = AddOptions(timeout_ms=5000, repl=repl, retry_s=1)
    assert m.disque(i).add_job(m.now, 1, "q", b"body", opts) is not None
    m.pump()
    [(_, job_id)] = m.replies[m.ids[i]]
    assert isinstance(job_id, str)
    return job_id


def _records(m: Mesh, i: int, job_id: str) -> list[int]:
    """The types of node ``i``'s records about ``job_id``, in file order."""
    out = []
    for rtype, payload in iter_frames(b"".join(m.aof[m.ids[i]])):
        at = 8 if rtype == REC_JOB else 0  # a JOB record: its time, then the job's record
        if bytes(payload[at : at + 40]).decode(errors="replace") == job_id:
            out.append(rtype)
    return out


def _power_cut(m: Mesh, rewritten: int | None = None) -> None:
    """Every node restarted at once from the records its Readies wrote (each written before
    anything it covered left); node ``rewritten`` from a rewrite of its AOF instead."""
    for i, nid in enumerate(m.ids):
        if i == rewritten:
            records = b"".join(m.disque(i).aof.snapshot_records(m.now))
        else:
            records = b"".join(m.aof[nid])
        m.restart_disque(i, records, 50 + i)


def _never_queued_again(m: Mesh, job_id: str, ms: int) -> None:
    """Over ``ms`` (many RETRYs), no node queues the job, and every node drops it."""
    for _ in range(ms // 100):
        m.advance(100)
        queued = [i for i in range(3) if (j := m.disque(i).jobs.get(job_id)) and j.state == QUEUED]
        assert not queued, f"the acked job was queued again on {queued}"
    assert all(job_id not in m.disque(i).jobs for i in range(3))


@pytest.mark.parametrize("rewritten", [None, 0], ids=["aof", "rewritten-aof"])
def test_an_ack_whose_setacks_were_lost_with_the_power_stays_acked(rewritten: int | None) -> None:
    m = Mesh(3)
    job_id = _add(m, 0)
    got = m.disque(0).get_job(m.now, 2, ["q"], nohang=True)
    assert isinstance(got, list) and [j.id for j in got] == [job_id]
    m.cut = {m.ids[0]}  # the SETACKs never arrive: then every machine loses power
    assert m.disque(0).acks.ack_job(m.now, [job_id]) == 1
    m.pump()
    assert _records(m, 0, job_id) == [REC_JOB, REC_ACKJOB]
    assert [m.disque(i).jobs[job_id].state for i in (1, 2)] == [ACTIVE, ACTIVE]
    _power_cut(m, rewritten)
    assert m.disque(0).jobs[job_id].state == ACKED
    assert m.disque(0).jobs[job_id].delivered == set(m.ids)  # the holders it asks
    m.cut = set()
    _never_queued_again(m, job_id, 5000)
    # The GC over, the acker logged the job's end: a later restart does not start it again.
    assert _records(m, 0, job_id)[-1] == REC_DELJOB
    _power_cut(m)
    assert all(job_id not in m.disque(i).jobs for i in range(3))


def test_an_ack_for_a_job_the_acker_never_held_stays_acked() -> None:
    """A dummy ack (the job's copies are on nodes 1 and 2 only) is logged as a bare ACKJOB;
    restored, it asks every node, as the dummy ack did."""
    m = Mesh(3)
    job_id = _add(m, 1, repl=2)
    holders = [i for i in range(3) if job_id in m.disque(i).jobs]
    acker = next(i for i in range(3) if i not in holders)
    m.cut = {m.ids[acker]}
    assert m.disque(acker).acks.ack_job(m.now, [job_id]) == 0  # not known here: a dummy ack
    m.pump()
    assert _records(m, acker, job_id) == [REC_ACKJOB]
    _power_cut(m)
    restored = m.disque(acker).jobs[job_id]
    assert restored.state == ACKED and not restored.delivered  # every node is asked
    m.cut = set()
    _never_queued_again(m, job_id, 5000)
