"""A queue's MAXDELIVERIES and DEADLETTER applied by the cluster (disq/core/disque/deadletter.py),
and QREDRIVE: three node cores wired in memory (Mesh), messages lost at will.

What must hold: a job is moved to its dead letter queue once (one dead letter, whatever the
copies and the deciders), with its body, headers, counters and where it came from; it is
never queued again in its own queue once spent; a move that cannot finish keeps the job
(held, neither queued nor dropped); QREDRIVE brings dead letters back with fresh counters."""

from __future__ import annotations

import itertools

import pytest

from disq.core import events as ev
from disq.core.disque.api import AddOptions, DisqueError
from disq.core.disque.deadletter import (
    HEADER_DELIVERIES,
    HEADER_NACKS,
    HEADER_ORIGINAL,
    HEADER_REASON,
    HEADER_SOURCE,
)
from disq.core.disque.job import ACKED, DJob
from disq.core.messages import Message, SetAck, Working
from disq.testing.mesh import Mesh

_tokens = itertools.count(1_000_000)  # far from the nodes' own counters


def _mesh(max_deliveries: int = 3, dead_letter: str = "dlq") -> Mesh:
    m = Mesh(3)
    m.nodes[1].qpolicy_set(m.now, "q", max_deliveries=max_deliveries, dead_letter=dead_letter)
    m.pump()
    assert all(m.nodes[i].qpolicy_get("q") for i in range(3))
    return m


def _add(m: Mesh, node: int = 2, retry_s: int = 300, headers: bool = False) -> str:
    hdrs = (("tenant", b"acme"), ("traceparent", b"00-abc-01")) if headers else None
    opts = AddOptions(timeout_ms=1000, repl=3, retry_s=retry_s, headers=hdrs)
    got = m.nodes[node].add_job(m.now, next(_tokens), "q", b"payload", opts)
    m.pump()
    ids = [t for nid in m.ids for t in m.replies[nid]]
    job_id = got if isinstance(got, str) else str(ids[-1][1])
    assert all(job_id in m.disque(i).jobs for i in range(3))
    return job_id


def _take(m: Mesh, queue: str = "q") -> tuple[int, DJob]:
    for i in range(3):
        got = m.nodes[i].get_job(m.now, next(_tokens), [queue], nohang=True)
        if isinstance(got, list) and got:
            m.pump()
            return i, got[0]
    raise AssertionError(f"nothing queued in {queue!r} on any node")


def _queued(m: Mesh, queue: str) -> int:
    return sum(m.disque(i).qlen(queue) for i in range(3))


def _dead_letters(m: Mesh) -> list[DJob]:
    """The dead letter jobs alive anywhere, one per id."""
    seen: dict[str, DJob] = {}
    for i in range(3):
        for j in m.disque(i).jobs.values():
            if j.queue == "dlq" and j.state != ACKED:
                seen.setdefault(j.id, j)
    return list(seen.values())


def _events(m: Mesh, kind: int) -> list[str]:
    """The job ids of every node's lifecycle events of ``kind`` so far."""
    return [job_id for nid in m.ids for k, job_id in m.events[nid] if k == kind]


def _original_gone(m: Mesh, job_id: str) -> bool:
    return all(
        job_id not in m.disque(i).jobs or m.disque(i).jobs[job_id].state == ACKED
        for i in range(3)
    )


def _header(j: DJob, key: str) -> bytes | None:
    return dict(j.headers or ()).get(key)


def test_nacked_after_each_of_three_deliveries_it_is_dead_lettered_once() -> None:
    m = _mesh()
    job_id = _add(m, headers=True)
    for delivery in range(1, 4):
        i, j = _take(m)
        assert j.id == job_id
        assert m.nodes[i].nack(m.now, [job_id]) == 1
        m.pump()
        if delivery < 3:
            assert _queued(m, "q") == 1 and _queued(m, "dlq") == 0
    assert _queued(m, "q") == 0
    [dead] = _dead_letters(m)
    assert dead.body == b"payload"
    assert _header(dead, "tenant") == b"acme" and _header(dead, "traceparent") == b"00-abc-01"
    assert _header(dead, HEADER_SOURCE) == b"q"
    assert _header(dead, HEADER_REASON) == b"maxdeliveries"
    assert _header(dead, HEADER_ORIGINAL) == job_id.encode()
    assert _header(dead, HEADER_NACKS) == b"3" and _header(dead, HEADER_DELIVERIES) == b"0"
    assert _queued(m, "dlq") == 1
    m.advance(2000)  # the ack's GC
    assert _original_gone(m, job_id)
    assert _events(m, ev.DEADLETTERED) == [job_id]
    # Nothing comes back to q, however long we wait (past every RETRY and hold).
    m.advance(400_000, step=1000)
    assert _queued(m, "q") == 0 and len(_dead_letters(m)) == 1


def test_a_retry_run_out_three_times_dead_letters_it_once() -> None:
    m = _mesh()
    job_id = _add(m, retry_s=2)
    for _delivery in range(3):
        _i, j = _take(m)
        assert j.id == job_id
        start = m.now
        while _queued(m, "q") == 0 and _queued(m, "dlq") == 0:
            assert m.now - start < 20_000
            m.advance(100)
    assert _queued(m, "q") == 0
    [dead] = _dead_letters(m)
    assert _header(dead, HEADER_DELIVERIES) == b"3" and _header(dead, HEADER_NACKS) == b"0"
    m.advance(10_000, step=100)
    assert _original_gone(m, job_id) and len(_dead_letters(m)) == 1
    assert _events(m, ev.DEADLETTERED) == [job_id]


def test_without_a_dead_letter_queue_the_job_is_dropped_and_counted() -> None:
    m = _mesh(max_deliveries=1, dead_letter="")
    job_id = _add(m)
    i, _j = _take(m)
    assert m.nodes[i].nack(m.now, [job_id]) == 1
    m.pump()
    m.advance(2000)
    assert _original_gone(m, job_id) and _queued(m, "q") == 0 and not _dead_letters(m)
    assert m.disque(i).stats["jobs_dead_letter_dropped"] == 1
    assert _events(m, ev.DEADLETTERED) == [job_id]


def test_a_nack_delay_at_the_limit_moves_the_job_without_waiting() -> None:
    m = _mesh(max_deliveries=1)
    job_id = _add(m)
    i, _j = _take(m)
    assert m.nodes[i].nack(m.now, [job_id], delay_ms=60_000) == 1
    m.pump()
    assert len(_dead_letters(m)) == 1 and _queued(m, "q") == 0


def test_two_deciders_at_once_make_one_dead_letter() -> None:
    """Every holder's hold and the decider's ack are lost (no WORKING, no SETACK arrives):
    each holder's RETRY runs out and decides on its own. The key vote binds one dead letter;
    every copy of the original goes."""
    m = _mesh(max_deliveries=1)
    job_id = _add(m, retry_s=2)
    i, _j = _take(m)

    def lose_holds(src: int, dst: int, msg: Message) -> bool:
        return isinstance(msg, Working | SetAck)

    m.drop = lose_holds
    assert m.nodes[i].nack(m.now, [job_id]) == 1
    m.pump()
    m.advance(15_000, step=50)
    m.drop = None
    m.advance(5_000, step=50)
    deciders = [k for k in range(3) if m.disque(k).stats.get("dead_letter_moves")]
    assert len(deciders) >= 2, deciders
    assert len(_dead_letters(m)) == 1
    assert _queued(m, "q") == 0 and _original_gone(m, job_id)


def test_a_move_without_a_majority_keeps_the_job_held_until_it_can_finish() -> None:
    m = _mesh(max_deliveries=1)
    job_id = _add(m)
    i, _j = _take(m)
    others = [nid for k, nid in enumerate(m.ids) if k != i]
    m.cut = set(others)  # the decider alone: its keyed add cannot be bound
    assert m.nodes[i].nack(m.now, [job_id]) == 1
    m.pump()
    m.advance(30_000, step=100)
    assert not _dead_letters(m) or all(
        m.disque(k).jobs.get(d.id) is None for d in _dead_letters(m) for k in range(3) if k != i
    )
    assert _queued(m, "q") == 0
    assert m.disque(i).jobs[job_id].state != ACKED  # held, not dropped
    assert m.disque(i).stats["dead_letter_retries"] >= 1
    m.cut = set()
    m.advance(30_000, step=100)
    assert len(_dead_letters(m)) == 1 and _queued(m, "q") == 0
    m.advance(5000, step=100)
    assert _original_gone(m, job_id)


def _spend(m: Mesh, n: int) -> list[str]:
    ids = [_add(m) for _ in range(n)]
    for _ in range(n):
        i, j = _take(m)
        assert m.nodes[i].nack(m.now, [j.id]) == 1
        m.pump()
    m.advance(2000)
    assert len(_dead_letters(m)) == n
    return ids


def _redrive(m: Mesh, queue: str, to: str = "", count: int = 0) -> int:
    total = 0
    for node in m.nodes:
        token = next(_tokens)
        got = node.qredrive(m.now, token, queue, to, count)
        m.pump()
        if isinstance(got, int):
            total += got
            continue
        nid = m.ids[m.nodes.index(node)]
        [answer] = [r for t, r in m.replies[nid] if t == token]
        total += int(str(answer))
    return total


def test_qredrive_moves_dead_letters_back_with_fresh_counters() -> None:
    m = _mesh(max_deliveries=1)
    _spend(m, 3)
    assert _redrive(m, "dlq", count=2) == 2
    m.advance(2000)
    assert len(_dead_letters(m)) == 1 and _queued(m, "q") == 2
    _i, j = _take(m)
    assert j.body == b"payload" and j.nacks == 0 and j.add_deliveries == 0
    assert _header(j, HEADER_SOURCE) is None and j.headers is None  # the move's headers go
    assert _redrive(m, "dlq", to="elsewhere") == 1
    m.advance(2000)
    assert not _dead_letters(m) and _queued(m, "elsewhere") == 1
    assert len(_events(m, ev.REDRIVEN)) == 3
    assert _redrive(m, "dlq") == 0


def test_qredrive_leaves_jobs_without_a_source_and_refuses_its_own_queue() -> None:
    m = _mesh()
    m.nodes[0].add_job(m.now, next(_tokens), "dlq", b"x", AddOptions(timeout_ms=1000, repl=1))
    m.pump()
    assert _redrive(m, "dlq") == 0 and _queued(m, "dlq") == 1
    with pytest.raises(DisqueError, match="another queue"):
        m.nodes[0].qredrive(m.now, next(_tokens), "dlq", "dlq", 0)
    assert _redrive(m, "dlq", to="back") == 1
    m.advance(1000)
    assert _queued(m, "back") == 1 and _queued(m, "dlq") == 0
