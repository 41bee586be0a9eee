"""The pure engine, driven by a fake clock: every time rule without sleeping."""

from __future__ import annotations

import pytest

from disq.core.beanstalk import errors
from disq.core.beanstalk.core import BeanstalkCore, Limits
from disq.core.beanstalk.model import BURIED, DELAYED, READY, RESERVED, Job, Session


def make() -> tuple[BeanstalkCore, Session]:
    engine = BeanstalkCore()
    return engine, engine.open_session()


def test_ids_start_at_one_and_ready_order_is_pri_then_id() -> None:
    e, s = make()
    ids = [e.put(s, pri, 0, 10_000, b"x", 0) for pri in (5, 1, 5, 0)]
    assert ids == [1, 2, 3, 4]
    got = []
    for _ in ids:
        job = e.reserve(s, 0, 0)
        assert isinstance(job, Job)
        got.append(job.id)
    assert got == [4, 2, 1, 3]


def test_reserve_takes_lowest_across_watched_tubes_only() -> None:
    e, s = make()
    e.use(s, "a")
    e.put(s, 10, 0, 1000, b"a", 0)
    e.use(s, "b")
    e.put(s, 5, 0, 1000, b"b", 0)
    e.use(s, "c")
    e.put(s, 1, 0, 1000, b"c", 0)
    e.watch(s, "a")
    e.watch(s, "b")
    job = e.reserve(s, 0, 0)
    assert job is not None and job.body == b"b"


def test_ttr_zero_becomes_one_second_and_expires_on_tick() -> None:
    e, s = make()
    e.put(s, 0, 0, 0, b"x", 0)
    job = e.reserve(s, 0, 0)
    assert job is not None and job.ttr_ms == 1000
    # Due once passed (disq/core/timers.py): now_ms 1000 may be 999.1 ms after a reserve
    # read as 0; at 1001 the second has surely run out.
    assert job.deadline_ms == 1000 and e.next_deadline_ms() == 1001
    e.tick(1000)
    assert job.state == RESERVED
    e.tick(1001)
    assert job.state == READY and job.timeouts == 1 and e.job_timeouts == 1
    assert s.reserved == {}


def test_deadline_soon_only_when_nothing_ready() -> None:
    e, s = make()
    e.put(s, 0, 0, 1, b"x", 0)
    e.reserve(s, 0, 0)
    with pytest.raises(errors.DeadlineSoon):
        e.reserve(s, -1, 200)
    e.put(s, 0, 0, 1, b"y", 200)
    job = e.reserve(s, -1, 200)
    assert job is not None and job.body == b"y"


def test_blocked_reserve_woken_by_deadline_soon() -> None:
    e, s = make()
    e.put(s, 0, 0, 5000, b"x", 0)
    e.reserve(s, 0, 0)  # deadline 5000
    assert e.reserve(s, -1, 0) is None
    assert e.next_deadline_ms() == 4001  # the margin's start, once passed
    e.tick(4000)
    assert e.wakeups == []
    e.tick(4001)
    assert e.wakeups == [(s, "DEADLINE_SOON")]
    assert not s.waiting and e.waiting_count == 0


def test_blocked_reserve_woken_by_put_and_by_timeout() -> None:
    e, waiter = make()
    producer = e.open_session()
    assert e.reserve(waiter, -1, 0) is None
    assert e.waiting_count == 1
    e.put(producer, 0, 0, 10, b"hi", 5)
    assert len(e.wakeups) == 1
    s, job = e.wakeups.pop()
    assert s is waiter and isinstance(job, Job) and job.state == RESERVED
    e.delete(waiter, job.id, 10)
    assert e.reserve(waiter, 2000, 10) is None
    e.tick(2010)
    assert e.wakeups == []
    e.tick(2011)
    assert e.wakeups == [(waiter, "TIMED_OUT")]


def test_reserve_with_timeout_zero_times_out_at_once() -> None:
    e, s = make()
    with pytest.raises(errors.TimedOut):
        e.reserve(s, 0, 0)


def test_waiters_are_served_in_arrival_order() -> None:
    e, producer = make()
    w1, w2 = e.open_session(), e.open_session()
    e.reserve(w1, -1, 0)
    e.reserve(w2, -1, 0)
    e.put(producer, 0, 0, 10, b"1", 0)
    e.put(producer, 0, 0, 10, b"2", 0)
    assert [(s, j.body) for s, j in e.wakeups if isinstance(j, Job)] == [(w1, b"1"), (w2, b"2")]


def test_delayed_job_becomes_ready_and_wakes_waiter() -> None:
    e, s = make()
    other = e.open_session()
    e.put(s, 0, 3000, 10, b"later", 0)
    assert e.delayed_count == 1
    assert e.reserve(other, -1, 0) is None
    e.tick(3000)
    assert e.wakeups == []
    e.tick(3001)
    assert len(e.wakeups) == 1 and e.delayed_count == 0


def test_kick_buried_first_then_delayed_soonest_first() -> None:
    e, s = make()
    e.put(s, 0, 5000, 10, b"d5", 0)
    e.put(s, 0, 1000, 10, b"d1", 0)
    for body in (b"b1", b"b2"):
        job_id = e.put(s, 0, 0, 10, body, 0)
        e.reserve(s, 0, 0)
        e.bury(s, job_id, 0, 0)
    assert e.kick(s, 1, 0) == 1
    assert e.peek_buried(s).body == b"b2"
    assert e.kick(s, 10, 0) == 1  # only buried jobs while any are buried
    assert e.delayed_count == 2
    assert e.kick(s, 1, 0) == 1
    assert e.peek_delayed(s).body == b"d5"
    ready = sorted(e.jobs[i].body for i in e.jobs if e.jobs[i].state == READY)
    assert ready == [b"b1", b"b2", b"d1"]
    assert all(e.jobs[i].kicks == 1 for i in e.jobs if e.jobs[i].state == READY)


def test_kick_job_only_buried_or_delayed() -> None:
    e, s = make()
    ready_id = e.put(s, 0, 0, 10, b"r", 0)
    delayed_id = e.put(s, 0, 9000, 10, b"d", 0)
    with pytest.raises(errors.NotFound):
        e.kick_job(ready_id, 0)
    e.kick_job(delayed_id, 0)
    assert e.jobs[delayed_id].state == READY
    with pytest.raises(errors.NotFound):
        e.kick_job(delayed_id, 0)


def test_delete_reserved_by_other_is_not_found() -> None:
    e, s = make()
    other = e.open_session()
    job_id = e.put(s, 0, 0, 10, b"x", 0)
    e.reserve(s, 0, 0)
    for op in (
        lambda: e.delete(other, job_id, 0),
        lambda: e.release(other, job_id, 0, 0, 0),
        lambda: e.bury(other, job_id, 0, 0),
        lambda: e.touch(other, job_id, 0),
    ):
        with pytest.raises(errors.NotFound):
            op()
    e.delete(s, job_id, 0)
    assert job_id not in e.jobs


def test_close_releases_reserved_jobs_and_serves_waiters() -> None:
    e, s = make()
    waiter = e.open_session()
    job_id = e.put(s, 0, 0, 100, b"x", 0)
    e.reserve(s, 0, 0)
    e.reserve(waiter, -1, 0)
    e.close_session(s, 10)
    assert e.wakeups and e.wakeups[0][0] is waiter
    assert e.jobs[job_id].reserver is waiter


def test_release_with_delay_and_touch() -> None:
    e, s = make()
    job_id = e.put(s, 3, 0, 10_000, b"x", 0)
    e.reserve(s, 0, 0)
    e.touch(s, job_id, 5000)
    assert e.jobs[job_id].deadline_ms == 15000
    e.release(s, job_id, 7, 2000, 6000)
    job = e.jobs[job_id]
    assert job.state == DELAYED and job.pri == 7 and job.releases == 1
    e.tick(8000)
    assert job.state == DELAYED
    e.tick(8001)
    assert job.state == READY


def test_pause_tube_holds_reservations_until_unpaused() -> None:
    e, s = make()
    e.put(s, 0, 0, 10, b"x", 0)
    e.pause_tube("default", 2000, 0)
    assert e.reserve(s, -1, 0) is None
    e.tick(2000)
    assert e.wakeups == []
    e.tick(2001)
    assert len(e.wakeups) == 1


def test_pause_zero_unpauses_at_once() -> None:
    e, s = make()
    e.put(s, 0, 0, 10, b"x", 0)
    e.pause_tube("default", 86_400_000, 0)
    assert e.reserve(s, -1, 0) is None
    e.pause_tube("default", 0, 10)
    assert len(e.wakeups) == 1


def test_ignore_last_tube_refused_and_watch_order_swaps_like_beanstalkd() -> None:
    e, s = make()
    with pytest.raises(errors.NotIgnored):
        e.ignore(s, "default")
    for name in ("a", "b", "c"):
        e.watch(s, name)
    assert e.ignore(s, "default") == 3
    assert [t.name for t in s.watch] == ["c", "a", "b"]


def test_unused_tubes_are_dropped() -> None:
    e, s = make()
    e.use(s, "tmp")
    job_id = e.put(s, 0, 0, 10, b"x", 0)
    e.use(s, "default")
    assert "tmp" in e.tubes
    e.delete(s, job_id, 0)
    assert "tmp" not in e.tubes


def test_draining_spends_an_id() -> None:
    e, s = make()
    e.draining = True
    with pytest.raises(errors.Draining):
        e.put(s, 0, 0, 10, b"x", 0)
    e.draining = False
    assert e.put(s, 0, 0, 10, b"x", 0) == 2


def test_max_memory_refuses_and_keeps_what_was_accepted() -> None:
    e = BeanstalkCore(Limits(max_memory_bytes=10_000))
    s = e.open_session()
    accepted = []
    with pytest.raises(errors.OutOfMemory):
        for _ in range(1000):
            accepted.append(e.put(s, 0, 0, 10, b"x" * 100, 0))
    assert accepted and all(i in e.jobs for i in accepted)
    e.delete(s, accepted[0], 0)
    e.put(s, 0, 0, 10, b"x" * 100, 0)  # room again


def test_mass_expiry_is_processed_in_bounded_batches() -> None:
    e, s = make()
    for _ in range(25_000):
        e.put(s, 0, 1000, 10, b"", 0)
    e.tick(1001)
    assert e.delayed_count == 15_000
    assert e.next_deadline_ms() <= 1001
    e.tick(1001)
    e.tick(1001)
    assert e.delayed_count == 0 and e.ready_count == 25_000


def test_reserve_job_takes_any_unreserved_state() -> None:
    e, s = make()
    other = e.open_session()
    delayed_id = e.put(s, 0, 5000, 10, b"d", 0)
    job = e.reserve_job(s, delayed_id, 0)
    assert job.state == RESERVED
    with pytest.raises(errors.NotFound):
        e.reserve_job(other, delayed_id, 0)
    e.release(s, delayed_id, 0, 0, 0)
    assert e.jobs[delayed_id].state == READY
    e.reserve_job(s, delayed_id, 0)
    e.bury(s, delayed_id, 0, 0)
    assert e.jobs[delayed_id].state == BURIED
    assert e.reserve_job(other, delayed_id, 0).reserver is other
