"""The two clocks (issue 23): deadlines on the monotonic node clock never move when the wall
clock is stepped, forwards or backwards; what is absolute on disk or on the wire (a Disque
job's ctime, the AOF's expiries and delay ends) stays wall-clock. Fake clocks, no sleeping."""

from __future__ import annotations

from typing import Any

import pytest

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.beanstalk.model import DELAYED, READY, RESERVED
from disq.core.disque.api import AddOptions, DisqueError
from disq.core.messages import JobData, ReplJob
from disq.core.node_core import NodeCore
from disq.persistence import records
from disq.persistence.cluster_records import to_core_records
from disq.persistence.framing import iter_frames
from disq.server.clock import NodeClock
from disq.testing.mesh import Mesh

T0 = 1_700_000_000_000  # node clock at the start of each test, ms
HOUR_MS = 3_600_000
STEPS = pytest.mark.parametrize("step", [HOUR_MS, -HOUR_MS], ids=["forwards", "backwards"])


class FakeTime:
    """A monotonic and a wall clock, in ns, that a test moves together or apart."""

    def __init__(self) -> None:
        self.mono = 7_000_123_456  # a monotonic clock starts anywhere
        self.wall = T0 * 1_000_000 + 654_321

    def run(self, ms: float) -> None:
        self.mono += int(ms * 1_000_000)
        self.wall += int(ms * 1_000_000)


# ------------------------------------------------------------------ the node clock
def test_node_clock_reads_the_wall_clock_at_start_and_ignores_its_steps() -> None:
    t = FakeTime()
    clock = NodeClock(lambda: t.mono, lambda: t.wall)
    assert clock.now_ms() == clock.wall_ms() == T0
    assert clock.wall_offset_ms() == 0
    t.run(1500.2)  # the wall clock started 0.65 ms into its millisecond
    assert clock.now_ms() == T0 + 1500 and clock.wall_offset_ms() == 0
    t.wall += HOUR_MS * 1_000_000  # NTP (or date -s) steps the wall clock an hour ahead
    assert clock.now_ms() == T0 + 1500  # the node clock did not move
    assert clock.wall_ms() == T0 + 1500 + HOUR_MS
    assert clock.wall_offset_ms() == HOUR_MS
    t.wall -= 2 * HOUR_MS * 1_000_000  # and two hours back
    assert clock.now_ms() == T0 + 1500 and clock.wall_offset_ms() == -HOUR_MS
    t.run(10)
    assert clock.now_ms() == T0 + 1510 and clock.wall_offset_ms() == -HOUR_MS


def test_node_clock_offset_ignores_a_slew_under_half_a_millisecond() -> None:
    t = FakeTime()
    clock = NodeClock(lambda: t.mono, lambda: t.wall)
    t.wall += 400_000  # NTP's slew: 0.4 ms over some time
    assert clock.wall_offset_ms() == 0
    t.wall += 200_000
    assert clock.wall_offset_ms() == 1


# ------------------------------------------------------------------ beanstalk
@STEPS
def test_beanstalk_deadlines_do_not_move_when_the_wall_clock_steps(step: int) -> None:
    e = BeanstalkCore(persist=True)
    node = NodeCore(e)
    s = e.open_session()
    delayed = e.put(s, 0, 2000, 60_000, b"d", T0)  # delay 2 s
    ttr = e.put(s, 0, 0, 3000, b"t", T0)
    assert e.reserve(s, 0, T0) is e.jobs[ttr]  # TTR 3 s
    other = e.open_session()
    assert e.reserve(other, 4000, T0) is None  # reserve-with-timeout 4 s
    before = (e.jobs[delayed].deadline_ms, e.jobs[ttr].deadline_ms, e.next_deadline_ms())
    node.set_wall_offset(step, T0)
    assert (e.jobs[delayed].deadline_ms, e.jobs[ttr].deadline_ms, e.next_deadline_ms()) == before
    # Each fires at its node-clock time, once passed, whatever the wall clock says.
    e.tick(T0 + 2000)
    assert e.jobs[delayed].state == DELAYED
    e.tick(T0 + 2001)
    assert e.jobs[delayed].state != DELAYED  # ready, and handed to the waiting reserve
    assert [w[0] for w in e.wakeups] == [other]
    e.wakeups.clear()
    e.tick(T0 + 3000)
    assert e.jobs[ttr].state == RESERVED
    e.tick(T0 + 3001)
    assert e.jobs[ttr].state == READY


@STEPS
def test_beanstalk_pause_and_reserve_timeout_do_not_move_when_the_wall_clock_steps(
    step: int,
) -> None:
    e = BeanstalkCore()
    node = NodeCore(e)
    s = e.open_session()
    e.put(s, 0, 0, 60_000, b"x", T0)
    e.pause_tube("default", 1000, T0)
    waiter = e.open_session()
    assert e.reserve(waiter, 500, T0) is None
    node.set_wall_offset(step, T0)
    e.tick(T0 + 500)
    assert e.wakeups == []
    e.tick(T0 + 501)
    assert e.wakeups == [(waiter, "TIMED_OUT")]
    e.wakeups.clear()
    assert e.reserve(waiter, -1, T0 + 501) is None
    e.tick(T0 + 1000)
    assert e.wakeups == []  # still paused at its end
    e.tick(T0 + 1001)
    assert [w[0] for w in e.wakeups] == [waiter]


def _beanstalk_records(e: BeanstalkCore) -> list[tuple[int, bytes]]:
    recs = list(iter_frames(b"".join(e.aof_out)))
    e.aof_out.clear()
    return recs


@STEPS
def test_beanstalk_aof_keeps_wall_clock_times_and_replay_brings_them_back(step: int) -> None:
    e = BeanstalkCore(persist=True)
    node = NodeCore(e)
    s = e.open_session()
    node.set_wall_offset(step, T0)  # the wall clock was stepped before these commands
    job_id = e.put(s, 0, 5000, 60_000, b"x", T0)
    [(rtype, payload)] = _beanstalk_records(e)
    f = records.PUT_STRUCT.unpack_from(payload, 0)
    assert rtype == records.REC_PUT
    assert f[4] == T0 + step  # ctime: wall clock
    assert f[6] == T0 + 5000 + step  # the delay's end: wall clock
    assert e.jobs[job_id].deadline_ms == T0 + 5000  # in memory: node clock
    e.kick_job(job_id, T0 + 10)
    e.reserve(s, 0, T0 + 10)
    e.release(s, job_id, 0, 3000, T0 + 20)
    recs = _beanstalk_records(e)
    update = records.decode_update_fields(recs[-1][1])
    assert update[3] == DELAYED and update[4] == T0 + 3020 + step
    # A restart: a new node clock (a new anchor), the same wall clock. Replay puts the
    # delay's end back on the new node clock, where it still ends at the same wall time.
    again = BeanstalkCore(persist=True)
    new_anchor = -250  # the new process's node clock reads 250 ms less than the wall clock
    again.wall_offset_ms = -new_anchor
    again.restore([(records.REC_PUT, payload), *recs])
    job = again.jobs[job_id]
    assert job.state == DELAYED
    assert job.deadline_ms + again.wall_offset_ms == T0 + 3020 + step
    assert job.ctime_ms + again.wall_offset_ms == T0 + step


# ------------------------------------------------------------------ Disque
def _repljobs(mesh: Mesh) -> list[JobData]:
    seen: list[JobData] = []

    def watch(src: int, dst: int, msg: Any) -> bool:
        if isinstance(msg, ReplJob):
            seen.append(msg.job)
        return False  # deliver everything

    mesh.pump(watch)
    return seen


@STEPS
def test_disque_deadlines_do_not_move_and_ctime_and_aof_stay_wall_clock(step: int) -> None:
    mesh = Mesh(2, now_ms=T0)
    d0, d1 = mesh.disque(0), mesh.disque(1)
    job_id = d0.add_job(
        T0,
        1,
        "q",
        b"x",
        AddOptions(timeout_ms=0, repl=2, delay_s=2, retry_s=5, ttl_s=60, async_=True),
    )
    assert isinstance(job_id, str)
    [sent] = _repljobs(mesh)
    j0, j1 = d0.jobs[job_id], d1.jobs[job_id]
    assert j0.ctime == sent.ctime == T0 * 1_000_000  # no step yet: wall == node clock
    assert sent.ttl_remaining_s == 60  # the wire carries the TTL left, not an absolute time
    deadlines = [(j.etime_ms, j.qtime_ms, j.awake_ms) for j in (j0, j1)]
    assert j0.etime_ms == T0 + 60_000 and j0.qtime_ms == T0 + 2000

    for node in mesh.nodes:
        node.set_wall_offset(step, T0)
    assert [(j.etime_ms, j.qtime_ms, j.awake_ms) for j in (j0, j1)] == deadlines
    # What is written now is wall-clock: the job's absolute expiry in its LOADJOB record.
    [(kind, data)] = to_core_records(list(iter_frames(b"".join(d0.aof.snapshot_records(T0)))))
    assert kind == "LOADJOB" and isinstance(data, JobData)
    assert data.expire_ms == T0 + 60_000 + step and data.ctime == T0 * 1_000_000
    # A job added after the step: its ctime is the wall clock's (and still after the first
    # job's when the clock went back: ctimes only grow on a node).
    later = d0.add_job(
        T0 + 10, 2, "q", b"y", AddOptions(timeout_ms=0, repl=2, ttl_s=60, async_=True)
    )
    assert isinstance(later, str)
    [sent_later] = _repljobs(mesh)
    if step > 0:
        assert sent_later.ctime == (T0 + 10 + step) * 1_000_000
    else:
        assert sent_later.ctime == T0 * 1_000_000 + 1
    assert sent_later.ttl_remaining_s == 60

    # The DELAY ends at its node-clock time, once passed: queued at +2001, not at +2000.
    mesh.advance(2000, step=1)
    assert d0.qlen("q") == 1  # the job added without a delay
    mesh.advance(1, step=1)
    assert d0.qlen("q") == 2
    # The TTL too: gone at +60001, whatever the wall clock did.
    mesh.advance(60_000 - 2001 - 1, step=1000)
    mesh.advance(60_000 - mesh.now + T0, step=1)
    assert job_id in d0.jobs
    mesh.advance(1, step=1)
    assert job_id not in d0.jobs and job_id not in d1.jobs


@STEPS
def test_disque_replay_takes_the_aof_wall_times_back_to_the_node_clock(step: int) -> None:
    mesh = Mesh(1, now_ms=T0)
    d0 = mesh.disque(0)
    mesh.nodes[0].set_wall_offset(step, T0)
    job_id = d0.add_job(T0, 1, "q", b"x", AddOptions(timeout_ms=0, repl=1, delay_s=30, ttl_s=100))
    assert isinstance(job_id, str)
    mesh.pump()
    frames = list(iter_frames(b"".join(mesh.aof[mesh.ids[0]])))
    [(_, data)] = [r for r in to_core_records(frames) if r[0] == "LOADJOB"]
    assert isinstance(data, JobData)
    assert data.ctime == (T0 + step) * 1_000_000 and data.expire_ms == T0 + 100_000 + step
    # Restarted 10 s later (wall), with a node clock anchored on the wall clock again.
    again = Mesh(1, now_ms=T0 + step + 10_000).disque(0)
    again.view = d0.view
    again.restore(T0 + step + 10_000, frames)
    j = again.jobs[job_id]
    assert j.etime_ms == T0 + step + 100_000  # 90 s left, as on the wall clock
    # Still in its DELAY (20 s left on the wall clock): its first queueing is to come.
    assert j.qtime_ms > T0 + step + 10_000


@STEPS
def test_working_judges_half_the_ttl_on_the_node_clock_across_a_step(step: int) -> None:
    """WORKING refuses once half a job's TTL has passed (Disque's TOOLATE): time that passed,
    not what the wall clock says, so a step neither refuses a young job nor lets an old one
    be postponed past its half."""
    mesh = Mesh(1, now_ms=T0)
    d0 = mesh.disque(0)
    young = d0.add_job(T0, 1, "q", b"y", AddOptions(timeout_ms=0, repl=1, ttl_s=600))
    old = d0.add_job(T0, 2, "q", b"o", AddOptions(timeout_ms=0, repl=1, ttl_s=100))
    assert isinstance(young, str) and isinstance(old, str)
    mesh.nodes[0].set_wall_offset(step, T0 + 1000)
    assert d0.working(T0 + 2000, young) > 0  # 2 s of 600
    assert d0.working(T0 + 2000, old) > 0  # 2 s of 100
    with pytest.raises(DisqueError) as e:
        d0.working(T0 + 51_000, old)  # 51 s of 100
    assert e.value.code == "TOOLATE"
    assert d0.working(T0 + 51_000, young) > 0
    # A job added after the step is judged from its own (stepped) ctime.
    later = d0.add_job(T0 + 52_000, 3, "q", b"l", AddOptions(timeout_ms=0, repl=1, ttl_s=100))
    assert isinstance(later, str)
    assert d0.working(T0 + 53_000, later) > 0


# ------------------------------------------------------------------ the runtime
class _FakeLoop:
    """What NodeRuntime's timer and flush use of a loop, run by hand."""

    def __init__(self) -> None:
        self.later: list[tuple[float, Any]] = []
        self.soon: list[Any] = []

    def call_later(self, delay: float, cb: Any) -> Any:
        self.later.append((delay, cb))
        return _Handle()

    def call_soon(self, cb: Any) -> Any:
        self.soon.append(cb)
        return _Handle()


class _Handle:
    def cancel(self) -> None:
        pass


def test_runtime_follows_a_wall_clock_step_and_rearms_a_timer_that_ran_early() -> None:
    from disq.server.node_config import NodeConfig
    from disq.server.runtime import NodeRuntime

    t = FakeTime()
    loop = _FakeLoop()
    rt = NodeRuntime(NodeConfig(), loop, NodeClock(lambda: t.mono, lambda: t.wall))  # type: ignore[arg-type]
    e = rt.beanstalk
    s = e.open_session()
    e.put(s, 0, 1000, 60_000, b"x", rt.now_ms())  # delay 1 s from T0
    rt.after_commands(None, rt.now_ms())
    [(delay_s, on_timer)] = loop.later
    assert delay_s == 1.001  # armed for the first millisecond past the delay's end
    t.wall += HOUR_MS * 1_000_000  # the wall clock is stepped an hour ahead
    loop.soon.pop()()  # the flush: it tells the cores the new offset
    assert e.wall_offset_ms == HOUR_MS
    [job] = e.jobs.values()
    assert job.deadline_ms == T0 + 1000  # the delay did not move
    loop.later.clear()
    t.run(1000.2)  # the timer runs early (asyncio may): nothing is due at T0 + 1000
    assert rt.now_ms() == T0 + 1000
    on_timer()
    assert job.state == DELAYED
    [(delay_s, on_timer)] = loop.later  # re-armed, at least a millisecond on: no spinning
    assert delay_s == 0.001
    t.run(1)
    on_timer()
    assert job.state == READY
