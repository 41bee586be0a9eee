"""The drain handoff of the Disque core (disq/core/disque/handoff.py), on the in-memory mesh."""

from __future__ import annotations

from disq.core.disque.api import AddOptions
from disq.core.disque.job import ACTIVE, QUEUED
from disq.core.messages import GotJob
from disq.testing.mesh import Mesh


def _add(m: Mesh, i: int, token: int, body: bytes, repl: int) -> str:
    r = m.disque(i).add_job(
        m.now, token, "q", body, AddOptions(timeout_ms=5000, repl=repl, retry_s=300)
    )
    m.pump()
    if isinstance(r, str):
        return r
    [(_tok, job_id)] = [x for x in m.replies[m.ids[i]] if x[0] == token]
    assert isinstance(job_id, str)
    return job_id


def _leave(m: Mesh, i: int) -> None:
    m.views[m.ids[i]].leaving = True
    for nid in m.ids:
        view = m.views[nid]
        if nid != m.ids[i]:
            view.down = view.down | {m.ids[i]}  # peers stop choosing a leaving node


def _queued_on(m: Mesh, job_id: str) -> list[int]:
    return [
        i
        for i in range(len(m.ids))
        if job_id in m.disque(i).jobs and m.disque(i).jobs[job_id].state == QUEUED
    ]


def test_queued_jobs_are_handed_off_and_queued_elsewhere_at_once() -> None:
    m = Mesh(3)
    solo = [_add(m, 0, t, b"s%d" % t, repl=1) for t in range(1, 4)]
    dual = [_add(m, 0, t, b"d%d" % t, repl=2) for t in range(4, 7)]
    for job_id in solo:
        assert job_id not in m.disque(1).jobs and job_id not in m.disque(2).jobs
    _leave(m, 0)
    core = m.disque(0)
    assert core.handoff.start(m.now) == 6
    m.pump()
    assert core.handoff.pending() == 0
    assert core.jobs == {}  # every copy forgotten here once another node confirmed
    for job_id in solo + dual:
        assert len(_queued_on(m, job_id)) == 1, job_id
    for job_id in dual:
        # The holder of the second copy got it: no third copy was made.
        assert sum(job_id in m.disque(i).jobs for i in (1, 2)) == 1
    for job_id in solo:
        # The new holder's copy does not list the leaving node: its ack GC needs no answer
        # from a node that is gone.
        [holder] = [i for i in (1, 2) if job_id in m.disque(i).jobs]
        assert m.ids[0] not in m.disque(holder).jobs[job_id].delivered
    got = [m.disque(i).get_job(m.now, 99, ["q"], nohang=True, count=10) for i in (1, 2)]
    ids = {j.id for g in got if isinstance(g, list) for j in g}
    assert ids == set(solo + dual)


def test_active_single_copy_is_replicated_not_queued() -> None:
    m = Mesh(2)
    job_id = _add(m, 0, 1, b"x", repl=1)
    got = m.disque(0).get_job(m.now, 2, ["q"], nohang=True)
    assert isinstance(got, list) and got[0].id == job_id
    _leave(m, 0)
    assert m.disque(0).handoff.start(m.now) == 1
    m.pump()
    assert m.disque(0).handoff.pending() == 0
    j = m.disque(1).jobs[job_id]
    assert j.state == ACTIVE  # a consumer has it: queued again only at RETRY


def test_silent_peer_is_replaced_and_no_peer_keeps_the_job() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, b"x", repl=1)
    _leave(m, 0)
    core = m.disque(0)
    core.handoff.start(m.now)
    first = core.handoff.in_flight[job_id].target  # type: ignore[index]
    m.cut = {first}
    m.pump()
    assert core.handoff.pending() == 1
    m.cut = set()
    m.now += 1000
    core.handoff.tick(m.now)
    m.pump()
    assert core.handoff.pending() == 0
    other = 3 - m.ids.index(first)
    assert m.disque(other).jobs[job_id].state == QUEUED

    # Nowhere to go: nothing pending, and the job stays queued here for a restart.
    m2 = Mesh(2)
    job2 = _add(m2, 0, 1, b"y", repl=1)
    _leave(m2, 0)
    m2.views[m2.ids[0]].down = {m2.ids[1]}
    core2 = m2.disque(0)
    core2.aof_out.clear()
    assert core2.handoff.start(m2.now) == 0
    assert core2.jobs[job2].state == QUEUED
    # Put back, not redelivered: no delivery counted, no record written again (a drain
    # on a full disk wrote every job once more and failed: tests/integration/test_disk_full).
    assert core2.jobs[job2].add_deliveries == 0
    assert core2.aof_out == []


def test_gotjob_of_an_ordinary_add_still_counts() -> None:
    m = Mesh(2)
    job_id = _add(m, 0, 1, b"z", repl=2)
    assert m.disque(0).jobs[job_id].state == QUEUED
    # A stray GOTJOB for a job not being handed off goes to replication (ignored here).
    m.nodes[0].on_peer_messages(m.now, m.ids[1], [GotJob(job_id)])
    assert m.disque(0).jobs[job_id].state == QUEUED


def test_a_peer_whose_link_is_down_is_not_chosen() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, b"x", repl=1)
    _leave(m, 0)
    core = m.disque(0)
    core.handoff.start(m.now, usable=lambda n: n != m.ids[1])
    m.pump()
    assert core.handoff.pending() == 0
    assert job_id in m.disque(2).jobs and job_id not in m.disque(1).jobs
