"""NACK ... DELAY (disq's): the job waits the delay on every holder, then is queued again,
counted as one nack and no new delivery; never early; a WORKING of an older build's kind
still postpones by RETRY. The RESP grammar over a real core."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from disq.core.disque.api import AddOptions, DisqueError
from disq.core.messages import Working
from disq.testing.mesh import Mesh
from tests.unit.test_disque_commands import FakeNode, cmd, err, make_door


def _delivered(m: Mesh, retry_s: int = 2) -> str:
    m.disque(0).add_job(m.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3, retry_s=retry_s))
    m.pump()
    got = m.disque(0).get_job(m.now, 2, ["q"], nohang=True)
    assert isinstance(got, list)
    return got[0].id


def _queued(m: Mesh) -> int:
    return sum(m.disque(i).qlen("q") for i in range(3))


def test_a_delayed_nack_keeps_the_job_out_of_every_queue_then_queues_it_once() -> None:
    m = Mesh(3)
    job_id = _delivered(m, retry_s=2)
    assert m.disque(0).nack(m.now, [job_id], delay_ms=10_000) == 1
    m.pump()
    assert all(m.disque(i).jobs[job_id].nacks == 1 for i in range(3))
    # Longer than RETRY (2 s), shorter than the delay: no node queues it.
    start = m.now
    while m.now < start + 9_900:
        m.advance(100)
        assert _queued(m) == 0, f"queued {m.now - start} ms after a 10 s NACK DELAY"
    m.advance(1_000)  # the delay, the jitter (at most 250 ms) and WILLQUEUE's exchange
    assert _queued(m) == 1
    copies = [m.disque(i).jobs[job_id] for i in range(3)]
    assert [j.nacks for j in copies] == [1, 1, 1]
    assert [j.add_deliveries for j in copies] == [0, 0, 0]  # a nack, not a RETRY run out


def test_a_delay_of_zero_is_disques_nack() -> None:
    m = Mesh(3)
    job_id = _delivered(m)
    assert m.disque(0).nack(m.now, [job_id], delay_ms=0) == 1
    m.pump()
    assert m.disque(0).qlen("q") == 1


def test_a_queued_or_unknown_job_is_not_nacked() -> None:
    m = Mesh(3)
    m.disque(0).add_job(m.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3))
    m.pump()
    [job_id] = list(m.disque(0).jobs)
    assert m.disque(0).nack(m.now, [job_id, "D-" + "0" * 36 + "1"], delay_ms=5_000) == 0
    assert m.disque(0).qlen("q") == 1


def test_a_working_without_a_delay_still_postpones_by_retry() -> None:
    # An older peer's WORKING has no delay_ms: the copy requeues after its RETRY, as before.
    m = Mesh(3)
    job_id = _delivered(m, retry_s=2)
    j = m.disque(1).jobs[job_id]
    m.disque(1).on_message(m.now, m.ids[0], Working(job_id))
    assert m.now + 2_000 <= j.qtime_ms <= m.now + 2_250


def test_over_maxmemory_a_delayed_nack_is_oom() -> None:
    m = Mesh(3)
    job_id = _delivered(m)
    m.disque(0).memory.warning = 3
    with pytest.raises(DisqueError) as exc:
        m.disque(0).nack(m.now, [job_id], delay_ms=1_000)
    assert exc.value.code == "OOM"


@pytest.fixture
def tokens() -> Iterator[int]:
    return itertools.count(1)


def test_resp_nack_delay(tokens: Iterator[int]) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    job_id = d.feed(cmd("ADDJOB", "q", "work", 0, "RETRY", 1))[1:-2].decode()
    assert d.feed(cmd("GETJOB", "FROM", "q"))[:1] == b"*"
    assert d.feed(cmd("NACK", job_id, "DELAY", 30)) == b":1\r\n"
    job = node.disque.jobs[job_id]
    assert job.nacks == 1 and node.disque.qlen("q") == 0
    assert 30_000 <= job.qtime_ms - node.clock <= 30_250
    assert d.feed(cmd("NACK", "DELAY", 5)) == b":0\r\n"  # no ids: nothing, as Disque's NACK


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("D-nope", "DELAY", 5), "BADID Invalid Job ID format."),
        (("{id}", "DELAY", -1), "ERR DELAY must be between 0 and 2592000"),
        (("{id}", "DELAY", "soon"), "ERR DELAY must be between 0 and 2592000"),
        (("{id}", "DELAY", 2592001), "ERR DELAY must be between 0 and 2592000"),
        (("{id}", "DELAY"), "BADID Invalid Job ID format."),
    ],
)
def test_resp_nack_delay_errors_change_nothing(
    tokens: Iterator[int], args: tuple[str | int, ...], error: str
) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    job_id = d.feed(cmd("ADDJOB", "q", "work", 0))[1:-2].decode()
    assert d.feed(cmd("GETJOB", "FROM", "q"))[:1] == b"*"
    argv = [job_id if a == "{id}" else a for a in args]
    assert d.feed(cmd("NACK", *argv)) == err(error)
    assert node.disque.jobs[job_id].nacks == 0
    assert d.feed(cmd("PING")) == b"+PONG\r\n"
