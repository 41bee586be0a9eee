"""The per-queue counts of jobs held but not queued (disq/core/disque/counts.py), on the
Disque core with a fake clock: kept as jobs move, equal to a count from scratch after every
step, and shown by QSTAT (``jobs``, ``active``, ``delayed``)."""

from __future__ import annotations

import random
from typing import Any

from disq.core.disque.api import PENDING, AddOptions
from disq.core.disque.core import DisqueCore
from disq.core.disque.counts import from_scratch
from disq.persistence.framing import iter_frames
from disq.testing.mesh import Mesh


def counts(core: DisqueCore, queue: str = "q") -> tuple[int, int, int]:
    """``(jobs, active, delayed)``, after checking the kept counts against a recount."""
    assert core.counts.by_queue == from_scratch(core.jobs.values())
    q = core.queues.get(queue)
    return core.counts.of(queue, len(q) if q is not None else 0)


def stat(core: DisqueCore, now_ms: int, queue: str = "q") -> dict[str, object] | None:
    pairs = core.inspect.qstat(now_ms, queue)
    return None if pairs is None else dict(pairs)


def add(m: Mesh, i: int, body: bytes = b"x", **kw: Any) -> str:
    r = m.disque(i).add_job(m.now, 1, "q", body, AddOptions(timeout_ms=1000, **kw))
    if r is PENDING:
        m.pump()
        [(_, r)] = m.replies[m.ids[i]]
        m.replies[m.ids[i]].clear()
    assert isinstance(r, str), r
    return r


def test_a_delayed_job_is_delayed_then_queued_then_active_then_gone() -> None:
    m = Mesh(1, 1)
    core = m.disque(0)
    assert stat(core, m.now) is None and counts(core) == (0, 0, 0)
    job_id = add(m, 0, repl=1, delay_s=2)
    assert counts(core) == (1, 0, 1)
    # No queue record yet (nothing was queued): QSTAT answers the counts all the same.
    s = stat(core, m.now)
    assert s is not None and (s["len"], s["jobs"], s["active"], s["delayed"]) == (0, 1, 0, 1)
    m.advance(2100)
    assert core.qlen("q") == 1 and counts(core) == (1, 0, 0)
    got = core.get_job(m.now, 2, ["q"], nohang=True)
    assert isinstance(got, list) and [j.id for j in got] == [job_id]
    assert counts(core) == (1, 1, 0)
    assert core.acks.ack_job(m.now, [job_id]) == 1
    assert counts(core) == (0, 0, 0)
    s = stat(core, m.now)
    assert s is not None and (s["len"], s["jobs"], s["active"], s["delayed"]) == (0, 0, 0, 0)


def test_requeue_nack_delete_expiry_and_flush_keep_the_counts() -> None:
    m = Mesh(1, 1)
    core = m.disque(0)
    a = add(m, 0, b"a", repl=1, retry_s=1)
    b = add(m, 0, b"b", repl=1, retry_s=1, ttl_s=5)
    assert counts(core) == (2, 0, 0)
    got = core.get_job(m.now, 2, ["q"], count=2, nohang=True)
    assert isinstance(got, list) and len(got) == 2
    assert counts(core) == (2, 2, 0)
    m.advance(1500)  # RETRY: both back in the queue
    assert core.qlen("q") == 2 and counts(core) == (2, 0, 0)
    core.get_job(m.now, 3, ["q"], count=2, nohang=True)
    assert core.nack(m.now, [a]) == 1
    assert counts(core) == (2, 1, 0)
    assert core.del_job(m.now, [a]) == 1
    assert counts(core) == (1, 1, 0)
    m.advance(5000)  # b's TTL
    assert b not in core.jobs and counts(core) == (0, 0, 0)
    add(m, 0, b"c", repl=1, delay_s=10)
    add(m, 0, b"d", repl=1)
    assert counts(core) == (2, 0, 1)
    core.flush.flushall()
    assert counts(core) == (0, 0, 0)


def test_every_copy_counts_and_an_ack_clears_them_all() -> None:
    m = Mesh(3, 2)
    job_id = add(m, 0, repl=3, delay_s=1)
    assert [counts(m.disque(i)) for i in range(3)] == [(1, 0, 1)] * 3
    m.advance(1300)
    # The creator queued it; the copies wait for its RETRY (they were not told of the first
    # queueing: Disque announces none), still counted as held.
    assert counts(m.disque(0)) == (1, 0, 0)
    assert [counts(m.disque(i))[0] for i in (1, 2)] == [1, 1]
    got = m.disque(0).get_job(m.now, 2, ["q"], nohang=True)
    assert isinstance(got, list) and len(got) == 1
    assert counts(m.disque(0)) == (1, 1, 0)
    assert m.disque(0).acks.ack_job(m.now, [job_id]) == 1
    m.advance(100)
    assert [counts(m.disque(i)) for i in range(3)] == [(0, 0, 0)] * 3


def test_a_restart_from_the_aof_counts_what_it_brought_back() -> None:
    m = Mesh(1, 3)
    core = m.disque(0)
    add(m, 0, b"a", repl=1, delay_s=30)
    add(m, 0, b"b", repl=1)
    got = core.get_job(m.now, 2, ["q"], nohang=True)
    assert isinstance(got, list) and len(got) == 1
    assert counts(core) == (2, 1, 1)
    m.pump()  # the records written
    frames = list(iter_frames(b"".join(m.aof[m.ids[0]])))
    again = DisqueCore(m.views[m.ids[0]], random.Random(5), m.now)
    again.restore(m.now, frames)
    # Jobs come back active (Disque's rule), the delayed one still delayed.
    assert counts(again) == (2, 1, 1)
    third = DisqueCore(m.views[m.ids[0]], random.Random(6), m.now)
    third.aof_enqueue_once = True
    third.restore(m.now, frames)
    assert third.qlen("q") == 2 and counts(third) == (2, 0, 0)
