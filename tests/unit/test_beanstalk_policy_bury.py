"""A queue policy's MAXDELIVERIES on beanstalk tubes (disq/core/beanstalk/core.py, "Queue
policies"): a job reserved that many times since its last kick that comes back (a release,
its TTR run out, its session closed) is buried, not queued again. Node cores wired in memory
(Mesh), the policy set on another node and known through the cluster."""

from __future__ import annotations

import pytest

from disq.core import events as ev
from disq.core.beanstalk import errors
from disq.core.beanstalk.core import BeanstalkCore
from disq.core.beanstalk.model import BURIED, DELAYED, READY, RESERVED, Job, Session
from disq.core.messages import BSTATE_BURIED
from disq.core.node_core import NodeCore
from disq.persistence import records
from disq.persistence.framing import iter_frames
from disq.testing.mesh import Mesh

TTR_MS = 5_000


def _mesh(n: int = 2, max_deliveries: int = 2, replicate: int = 1) -> Mesh:
    m = Mesh(n, beanstalk_replicate=replicate)
    for i in range(n):
        m.beanstalk(i).events.enabled = True
    m.nodes[n - 1].qpolicy_set(m.now, "t", max_deliveries=max_deliveries)
    m.pump()
    assert m.nodes[0].qpolicy_get("t") == [("maxdeliveries", max_deliveries)]
    return m


def _worker(core: BeanstalkCore, tube: str = "t") -> Session:
    s = core.open_session()
    core.use(s, tube)
    core.watch(s, tube)
    core.ignore(s, "default")
    return s


def _one_job(
    max_deliveries: int = 2, tube: str = "t", ttr_ms: int = TTR_MS
) -> tuple[Mesh, BeanstalkCore, Session, int]:
    """A mesh whose tube "t" has the policy, node 0's beanstalk core, a worker on ``tube``
    and the job it put there."""
    m = _mesh(max_deliveries=max_deliveries)
    core = m.beanstalk(0)
    s = _worker(core, tube)
    return m, core, s, core.put(s, 0, 0, ttr_ms, b"x", m.now)


def _reserve(m: Mesh, core: BeanstalkCore, s: Session) -> Job:
    job = core.reserve(s, 0, m.now)
    assert isinstance(job, Job) and job.state == RESERVED
    return job


def _events(m: Mesh, job_id: int, node: int = 0) -> list[int]:
    m.pump()
    return [k for k, j in m.events[m.ids[node]] if j == str(job_id)]


def _round(m: Mesh, core: BeanstalkCore, s: Session, job_id: int) -> Job:
    """Reserve the tube's job (it must be ``job_id``) and release it, as a client would."""
    job = _reserve(m, core, s)
    assert job.id == job_id
    core.release(s, job_id, job.pri, 0, m.now)
    return job


def test_the_release_past_maxdeliveries_buries() -> None:
    m, core, s, job_id = _one_job()
    job = _round(m, core, s, job_id)
    assert job.state == READY and core.policy_buried == 0  # 1 reserve of 2: queued again
    _round(m, core, s, job_id)
    assert job.state == BURIED and job.reserves == 2 and job.releases == 2 and job.buries == 1
    assert core.policy_buried == 1 and core.buried_count == 1 and core.ready_count == 0
    assert core.peek_buried(s) is job
    kinds = _events(m, job_id)
    assert kinds.count(ev.BURIED) == 1 and kinds[-2:] == [ev.NACKED, ev.BURIED]
    # The bury is logged: a restart finds the job buried.
    last = [p for t, p in iter_frames(b"".join(m.aof[m.ids[0]])) if t == records.REC_UPDATE][-1]
    fields = records.decode_update_fields(last)
    assert fields[0] == job_id and fields[3] == BURIED
    # Buried, it is not reserved again.
    with pytest.raises(errors.TimedOut):
        core.reserve(s, 0, m.now)


def test_a_release_with_a_delay_past_the_limit_buries_too() -> None:
    m, core, s, job_id = _one_job(max_deliveries=1)
    job = _reserve(m, core, s)
    core.release(s, job_id, 3, 10_000, m.now)
    assert job.state == BURIED and job.pri == 3 and core.delayed_count == 0
    assert not job.tube.delayed


def test_the_ttr_running_out_past_the_limit_buries() -> None:
    m, core, s, job_id = _one_job(ttr_ms=1000)
    job = _reserve(m, core, s)
    m.advance(1100)
    assert job.state == READY and job.timeouts == 1  # the first time: queued again
    _reserve(m, core, s)
    m.advance(1100)
    assert job.state == BURIED and job.timeouts == 2 and job.reserves == 2
    assert core.policy_buried == 1 and s.reserved == {}
    kinds = _events(m, job_id)
    assert kinds.count(ev.REQUEUED) == 1 and kinds.count(ev.BURIED) == 1
    assert kinds[-1] == ev.BURIED


def test_a_closed_session_past_the_limit_buries() -> None:
    m, core, s, job_id = _one_job()
    _round(m, core, s, job_id)
    job = _reserve(m, core, s)
    core.close_session(s, m.now)  # the worker died holding it
    assert job.state == BURIED and core.policy_buried == 1


def test_a_tube_without_a_policy_is_unaffected() -> None:
    m, core, s, job_id = _one_job(tube="other")
    for _ in range(5):
        job = _round(m, core, s, job_id)
        assert job.state == READY
    assert job.reserves == 5 and core.policy_buried == 0 and job.buries == 0


def test_a_node_without_a_cluster_has_no_policies() -> None:
    core = BeanstalkCore()
    NodeCore(core)
    s = _worker(core)
    job_id = core.put(s, 0, 0, TTR_MS, b"x", 0)
    for _ in range(3):
        job = core.reserve(s, 0, 0)
        assert job is not None
        core.release(s, job_id, 0, 0, 0)
        assert job.state == READY


def test_a_kick_gives_maxdeliveries_more_reserves() -> None:
    m, core, s, job_id = _one_job()
    _round(m, core, s, job_id)
    job = _round(m, core, s, job_id)
    assert job.state == BURIED
    assert core.kick(s, 1, m.now) == 1 and job.state == READY
    _round(m, core, s, job_id)
    assert job.state == READY and job.reserves == 3  # one of the two since the kick
    _round(m, core, s, job_id)
    assert job.state == BURIED and job.reserves == 4 and core.policy_buried == 2
    core.kick_job(job_id, m.now)  # kick-job too
    _round(m, core, s, job_id)
    assert job.state == READY


def test_a_restart_counts_a_kicked_jobs_reserves_afresh() -> None:
    """``kick_reserves`` is not logged: a restart counts a kicked job's reserves from the
    count the AOF kept (its kick's), so it is not buried at its first release."""
    m, core, s, job_id = _one_job()
    _round(m, core, s, job_id)
    _round(m, core, s, job_id)
    assert core.kick(s, 1, m.now) == 1
    _round(m, core, s, job_id)  # one of the two since the kick
    m.pump()
    fresh = BeanstalkCore(persist=True)
    fresh.restore(iter_frames(b"".join(m.aof[m.ids[0]])))
    fresh.max_reserves = lambda tube: 2
    kicked = _round(m, fresh, _worker(fresh), job_id)
    assert kicked.state == READY and kicked.kicks == 1


def test_kicking_a_delayed_job_does_not_reset_the_count() -> None:
    m, core, s, job_id = _one_job()
    job = _reserve(m, core, s)
    core.release(s, job_id, 0, 60_000, m.now)
    assert job.state == DELAYED
    assert core.kick(s, 1, m.now) == 1 and job.state == READY
    _round(m, core, s, job_id)
    assert job.state == BURIED and job.reserves == 2


def test_deleting_the_policy_stops_burying() -> None:
    m, core, s, job_id = _one_job()
    _round(m, core, s, job_id)
    assert m.nodes[1].qpolicy_del(m.now, "t") == 1
    m.pump()
    assert m.nodes[0].qpolicy_get("t") is None
    for _ in range(3):
        job = _round(m, core, s, job_id)
        assert job.state == READY
    assert job.reserves == 4 and core.policy_buried == 0


def test_a_replicated_job_is_buried_once_by_its_owner() -> None:
    m = _mesh(n=3, replicate=3)
    owner = m.nodes[0]
    core = owner.beanstalk
    s = _worker(core)
    job_id = core.put(s, 0, 0, TTR_MS, b"x", m.now)
    owner.beanstalk_put(s, job_id, m.now)
    m.pump()
    link = core.jobs[job_id].replica
    assert link is not None
    _round(m, core, s, job_id)
    m.pump()
    job = _round(m, core, s, job_id)
    m.pump()
    assert job.state == BURIED
    assert [m.beanstalk(i).policy_buried for i in range(3)] == [1, 0, 0]
    # The holders learn it as they learn a bury: a takeover would keep the job buried.
    assert all(m.disque(i).jobs[link.disque_id].bstate == BSTATE_BURIED for i in (1, 2))
