"""Counters that travel with the job (nacks, additional deliveries) and the idle-queue GC,
on the pure Disque core wired by the in-memory mesh (no IO, fake clock).

The rule under test (core.py ``_enqueue``): a requeue that is not the job's first queueing
counts an additional delivery on whichever node does it, a NACK counts a nack; the QUEUED
broadcast carries the new counters and every copy keeps the larger of its own and the
message's; the counters ride in REPLJOB, YOURJOBS, a drain's handoff and the AOF records.
"""

from __future__ import annotations

import random

from disq.core.disque.api import PENDING, AddOptions
from disq.core.disque.core import DisqueCore
from disq.core.disque.job import ACTIVE, QUEUED, DJob
from disq.core.disque.memory import (
    QUEUE_IDLE_GC_MS,
    QUEUE_IDLE_GC_PRESSURE_MS,
    QUEUE_IDLE_GC_WARN_MS,
    QUEUE_OVERHEAD_BYTES,
)
from disq.core.messages import PAUSE_IN, Message, Queued
from disq.persistence.framing import iter_frames
from disq.server.peer_wire import decode_frame, encode_frame
from disq.testing.mesh import Mesh


def _add(m: Mesh, i: int, token: int, queue: str = "q", *, repl: int, retry_s: int = 1) -> str:
    r = m.disque(i).add_job(
        m.now, token, queue, b"body", AddOptions(timeout_ms=5000, repl=repl, retry_s=retry_s)
    )
    m.pump()
    if isinstance(r, str):
        return r
    [(_, job_id)] = [x for x in m.replies[m.ids[i]] if x[0] == token]
    assert isinstance(job_id, str)
    return job_id


def _get(m: Mesh, i: int, queue: str = "q") -> DJob:
    got = m.disque(i).get_job(m.now, 900, [queue], nohang=True)
    assert isinstance(got, list) and len(got) == 1
    return got[0]


def _queued_on(m: Mesh, job_id: str) -> list[int]:
    return [
        i
        for i in range(len(m.ids))
        if job_id in m.disque(i).jobs and m.disque(i).jobs[job_id].state == QUEUED
    ]


def _counters(m: Mesh, i: int, job_id: str) -> tuple[int, int]:
    j = m.disque(i).jobs[job_id]
    return j.nacks, j.add_deliveries


def _restored(m: Mesh, i: int) -> DisqueCore:
    """Node ``i`` restarted from the records its Readies wrote."""
    frames = list(iter_frames(b"".join(m.aof[m.ids[i]])))
    fresh = DisqueCore(m.views[m.ids[i]], random.Random(99), m.now)
    fresh.restore(m.now, frames)
    return fresh


# ------------------------------------------------------------------ requeue elsewhere
def test_a_requeue_on_another_node_counts_the_delivery_it_never_saw() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, repl=3)
    assert _get(m, 0).id == job_id  # delivered on node 0 only
    assert _counters(m, 1, job_id) == (0, 0) and _counters(m, 2, job_id) == (0, 0)
    m.cut = {m.ids[0]}  # the delivering node is gone: only 1 and 2 can requeue it
    m.advance(2500)
    [where] = [i for i in _queued_on(m, job_id) if i != 0]  # node 0 requeued its own too
    # Whichever requeued counted the delivery, and the other copy agrees (even if both
    # requeued at once: the counters merge by maximum, so one redelivery counts once).
    assert _counters(m, 1, job_id) == (0, 1) and _counters(m, 2, job_id) == (0, 1)
    again = _get(m, where)
    assert again.id == job_id and again.add_deliveries == 1


def test_every_copy_agrees_after_a_requeue_in_a_healthy_cluster() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, repl=3)
    _get(m, 0)
    m.advance(1700)  # RETRY 1 s (+-250 ms jitter): requeued once, somewhere
    assert len(_queued_on(m, job_id)) == 1
    assert [_counters(m, i, job_id) for i in range(3)] == [(0, 1)] * 3


def test_a_job_never_delivered_is_not_counted() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, repl=3)
    m.advance(5000)  # queued on node 0 all along: WILLQUEUE finds it, nobody requeues
    assert _queued_on(m, job_id) == [0]
    assert [_counters(m, i, job_id) for i in range(3)] == [(0, 0)] * 3


def test_nacks_are_counted_on_every_copy_and_carried_by_later_queued() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, repl=3)
    _get(m, 0)

    def lose_to_2(src: int, dst: int, msg: Message) -> bool:
        return dst == 2 and isinstance(msg, Queued)

    assert m.disque(0).nack(m.now, [job_id]) == 1
    m.pump(drop=lose_to_2)
    assert _counters(m, 0, job_id) == (1, 0) and _counters(m, 1, job_id) == (1, 0)
    assert _counters(m, 2, job_id) == (0, 0)  # its QUEUED was lost
    # The next QUEUED node 2 hears (here node 1's, as if node 1 requeued) carries nacks too.
    m.disque(1).jobs[job_id].add_deliveries = 1
    m.disque(2).on_message(m.now, m.ids[1], Queued(job_id, False, True, 1, 1))
    assert _counters(m, 2, job_id) == (1, 1)


def test_queued_merges_by_maximum_and_counts_an_old_peers_flags() -> None:
    m = Mesh(2)
    job_id = _add(m, 0, 1, repl=2)
    core = m.disque(1)
    core.on_message(m.now, m.ids[0], Queued(job_id, False, True, 0, 3))
    assert _counters(m, 1, job_id) == (0, 3)
    # The same requeue heard twice, or two nodes that requeued at once: no double count.
    core.on_message(m.now, m.ids[0], Queued(job_id, False, True, 0, 3))
    core.on_message(m.now, m.ids[0], Queued(job_id, False, True, 0, 2))
    assert _counters(m, 1, job_id) == (0, 3)
    # A peer that sends only Disque's INCR_* flags (no counters): counted by the flags.
    core.on_message(m.now, m.ids[0], Queued(job_id, True, False))
    core.on_message(m.now, m.ids[0], Queued(job_id, False, True))
    assert _counters(m, 1, job_id) == (1, 4)


def test_queued_carries_its_counters_over_the_wire() -> None:
    msgs: list[Message] = [Queued("D-1", False, True, 2, 5), Queued("D-2", True)]
    assert decode_frame(encode_frame("n" * 40, 1, msgs)) == ("n" * 40, 1, msgs)


# ------------------------------------------------------------------ federation, handoff
def test_yourjobs_carries_the_counters_to_the_importer() -> None:
    m = Mesh(2)
    job_id = _add(m, 1, 1, repl=1, retry_s=60)
    for _ in range(2):
        _get(m, 1)
        assert m.disque(1).nack(m.now, [job_id]) == 1
    _get(m, 1)
    m.advance(61_000, step=100)  # its RETRY requeues it: one additional delivery
    assert _counters(m, 1, job_id) == (2, 1) and _queued_on(m, job_id) == [1]
    assert m.disque(0).get_job(m.now, 7, ["q"], timeout_ms=0) is PENDING
    m.advance(3000)
    [(_, served)] = [x for x in m.replies[m.ids[0]] if x[0] == 7]
    assert isinstance(served, list) and served[0].id == job_id
    assert (served[0].nacks, served[0].add_deliveries) == (2, 1)


def test_a_drain_handoff_carries_the_counters_and_the_move_counts_nothing() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, repl=1, retry_s=300)
    _get(m, 0)
    assert m.disque(0).nack(m.now, [job_id]) == 1  # queued again on node 0, nacks 1
    m.views[m.ids[0]].leaving = True
    assert m.disque(0).handoff.start(m.now) == 1
    m.pump()
    [holder] = _queued_on(m, job_id)
    assert holder in (1, 2)
    # The ENQUEUE that queued it there is a move, not a redelivery.
    assert _counters(m, holder, job_id) == (1, 0)


def test_a_handed_off_delivered_job_counts_its_redelivery_on_the_new_holder() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, repl=1, retry_s=2)
    _get(m, 0)  # delivered, then its node drains: the job moves with REPLJOB only
    m.views[m.ids[0]].leaving = True
    assert m.disque(0).handoff.start(m.now) == 1
    m.pump()
    [holder] = [i for i in (1, 2) if job_id in m.disque(i).jobs]
    assert m.disque(holder).jobs[job_id].state == ACTIVE
    m.advance(5000)
    assert _queued_on(m, job_id) == [holder]
    assert _counters(m, holder, job_id) == (0, 1)


# ------------------------------------------------------------------ restart
def test_a_restart_from_the_aof_keeps_the_counters() -> None:
    m = Mesh(3)
    job_id = _add(m, 0, 1, repl=3)
    _get(m, 0)
    assert m.disque(0).nack(m.now, [job_id]) == 1
    m.pump()
    _get(m, 0)
    m.cut = {m.ids[0]}
    m.advance(2500)  # node 1 or 2 requeues: both count, both log the job again
    for i in (1, 2):
        assert _counters(m, i, job_id) == (1, 1)
        fresh = _restored(m, i)
        j = fresh.jobs[job_id]
        assert (j.nacks, j.add_deliveries) == (1, 1)
        # A rewritten AOF too.
        snap = list(iter_frames(b"".join(m.disque(i).aof.snapshot_records(m.now))))
        third = DisqueCore(m.views[m.ids[i]], random.Random(7), m.now)
        third.restore(m.now, snap)
        assert (third.jobs[job_id].nacks, third.jobs[job_id].add_deliveries) == (1, 1)


def test_an_enqueue_once_restart_counts_no_delivery() -> None:
    m = Mesh(1)
    job_id = _add(m, 0, 1, repl=1, retry_s=5)
    frames = list(iter_frames(b"".join(m.aof[m.ids[0]])))
    fresh = DisqueCore(m.views[m.ids[0]], random.Random(3), m.now)
    fresh.aof_enqueue_once = True
    fresh.restore(m.now, frames)
    assert fresh.jobs[job_id].state == QUEUED
    assert (fresh.jobs[job_id].nacks, fresh.jobs[job_id].add_deliveries) == (0, 0)


# ------------------------------------------------------------------ idle queue GC
def _empty_queues(m: Mesh, n: int) -> list[str]:
    core = m.disque(0)
    names = [f"e{k}" for k in range(n)]
    for k, name in enumerate(names):
        job_id = core.add_job(m.now, k, name, b"x", AddOptions(timeout_ms=0, repl=1))
        assert isinstance(job_id, str) and core.del_job(m.now, [job_id]) == 1
    m.pump()
    assert set(names) <= set(core.queues)
    return names


def _kept_queues(m: Mesh) -> None:
    """A queue with a blocked client, a paused one and one with a job: never evicted."""
    core = m.disque(0)
    assert core.get_job(m.now, 5000, ["blocked"], timeout_ms=0) is PENDING
    core.inspect.pause(m.now, "paused", PAUSE_IN, bcast=False)
    assert isinstance(
        core.add_job(m.now, 5001, "full", b"x", AddOptions(timeout_ms=0, repl=1)), str
    )


def test_empty_queues_are_evicted_after_disques_idle_time() -> None:
    m = Mesh(1)
    names = _empty_queues(m, 50)
    _kept_queues(m)
    core = m.disque(0)
    m.advance(QUEUE_IDLE_GC_MS - 2000, step=1000)
    assert set(names) <= set(core.queues)  # not idle long enough yet
    m.advance(4000, step=1000)
    assert sorted(core.queues) == ["blocked", "full", "paused"]


def test_memory_warning_one_evicts_empty_queues_after_ten_seconds() -> None:
    m = Mesh(1)
    names = _empty_queues(m, 100)
    _kept_queues(m)
    core = m.disque(0)
    used = core.memory.used_bytes + len(core.queues) * QUEUE_OVERHEAD_BYTES
    core.memory.max_bytes = used * 100 // 80  # 80%: level 1
    assert core.update_memory(m.now) == 1
    m.advance(QUEUE_IDLE_GC_WARN_MS - 2000, step=500)
    assert set(names) <= set(core.queues)
    m.advance(4000, step=500)
    assert sorted(core.queues) == ["blocked", "full", "paused"]


def test_memory_pressure_evicts_empty_queues_after_two_seconds_then_clears() -> None:
    m = Mesh(1)
    names = _empty_queues(m, 1000)
    _kept_queues(m)
    core = m.disque(0)
    core.memory.max_bytes = 1  # CONFIG SET maxmemory 1: the queues alone are over it
    assert core.update_memory(m.now) == 3
    m.advance(QUEUE_IDLE_GC_PRESSURE_MS + 1500, step=100)
    assert not set(names) & set(core.queues)
    assert sorted(core.queues) == ["blocked", "full", "paused"]
    # What is left still counts (three queues and a job): the level stays where it is.
    assert core.memory.warning == 3
    core.memory.max_bytes = 10 << 20
    assert core.update_memory(m.now) == 0
