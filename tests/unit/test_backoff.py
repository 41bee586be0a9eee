"""A queue's BACKOFF (QPOLICY, disq/core/policy/; applied by requeue.py): every requeue of
a delivered job (a NACK without DELAY, a RETRY run out) waits min(base * 2^(deliveries-1),
max) seconds plus jitter on every holder, never early, the job queued on no node meanwhile;
the counters agree on every copy. Three node cores wired in memory (Mesh)."""

from __future__ import annotations

from disq.core.disque.api import AddOptions
from disq.testing.mesh import Mesh

BASE_S, MAX_S = 2, 10


def _mesh() -> Mesh:
    m = Mesh(3)
    m.nodes[0].qpolicy_set(m.now, "q", backoff_base_s=BASE_S, backoff_max_s=MAX_S)
    m.pump()
    assert all(m.nodes[i].qpolicy_get("q") for i in range(3))
    return m


def _add(m: Mesh, retry_s: int) -> str:
    m.disque(0).add_job(m.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3, retry_s=retry_s))
    m.pump()
    [job_id] = list(m.disque(0).jobs)
    return job_id


def _take(m: Mesh) -> tuple[int, str]:
    """The node that has the job queued delivers it: (node, id)."""
    for i in range(3):
        got = m.disque(i).get_job(m.now, 2, ["q"], nohang=True)
        if isinstance(got, list) and got:
            m.pump()
            return i, got[0].id
    raise AssertionError("the job is queued on no node")


def _queued(m: Mesh) -> int:
    return sum(m.disque(i).qlen("q") for i in range(3))


def _wait_until_queued(m: Mesh, limit_ms: int) -> int:
    """Advance until some node queues the job; how long that took. Checked every 50 ms."""
    start = m.now
    while _queued(m) == 0:
        assert m.now - start < limit_ms, "never queued again"
        m.advance(50)
    return m.now - start


def _expected_s(deliveries: int) -> int:
    return min(BASE_S * 2 ** (deliveries - 1), MAX_S)


def test_nacks_wait_the_backoff_growing_never_early_on_any_node() -> None:
    m = _mesh()
    _add(m, retry_s=300)
    waits = []
    for delivery in range(1, 6):
        i, job_id = _take(m)
        assert m.nodes[i].nack(m.now, [job_id]) == 1
        m.pump()
        waited = _wait_until_queued(m, 20_000)
        want_ms = _expected_s(delivery) * 1000
        # Never early: not before the backoff; jitter (a tenth at most, 250 ms) and
        # WILLQUEUE's exchange (a step) at most after it.
        assert want_ms <= waited <= want_ms * 11 // 10 + 400, (delivery, waited)
        waits.append(waited)
        copies = [m.disque(k).jobs[job_id] for k in range(3)]
        assert [c.nacks for c in copies] == [delivery] * 3
        assert [c.add_deliveries for c in copies] == [0, 0, 0]
        assert _queued(m) == 1
    assert waits[0] < waits[1] < waits[2] and waits[3] >= MAX_S * 1000 <= waits[4]


def test_a_retry_run_out_waits_the_backoff_and_counts_one_delivery() -> None:
    m = _mesh()
    retry_s = 3
    _add(m, retry_s=retry_s)
    for delivery in range(1, 4):
        _i, job_id = _take(m)
        # The RETRY runs out, then the backoff: queued on no node before both.
        waited = _wait_until_queued(m, 30_000)
        want_ms = (retry_s + _expected_s(delivery)) * 1000
        assert want_ms <= waited <= want_ms * 11 // 10 + 1000, (delivery, waited)
        copies = [m.disque(k).jobs[job_id] for k in range(3)]
        assert [c.add_deliveries for c in copies] == [delivery] * 3
        assert [c.nacks for c in copies] == [0, 0, 0]
        assert _queued(m) == 1


def test_an_explicit_delay_wins_and_a_deleted_policy_stops_the_backoff() -> None:
    m = _mesh()
    _add(m, retry_s=300)
    i, job_id = _take(m)
    assert m.nodes[i].nack(m.now, [job_id], delay_ms=500) == 1
    m.pump()
    assert _wait_until_queued(m, 5_000) < BASE_S * 1000
    m.nodes[1].qpolicy_del(m.now, "q")
    m.pump()
    i, job_id = _take(m)
    assert m.nodes[i].nack(m.now, [job_id]) == 1
    m.pump()
    assert _queued(m) == 1  # Disque's NACK: queued at once


def test_a_job_with_delay_is_not_backed_off_at_its_first_queueing() -> None:
    m = _mesh()
    m.disque(0).add_job(
        m.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3, retry_s=300, delay_s=1)
    )
    m.pump()
    assert _wait_until_queued(m, 3_000) <= 1_500
