"""Jobs' results kept by every node (disq/core/disque/results.py): RESULT SET, GET, WAIT and
DEL on the in-memory mesh (pure cores, fake clock, Readies applied as the runtime applies
them), and the RESP door's grammar and errors over a real core."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from disq.core.disque.api import (
    NOREPL_EXPIRED,
    NOREPL_NODES,
    NOREPL_TIMEOUT,
    PENDING,
    AddOptions,
    DisqueError,
)
from disq.core.disque.core import DisqueCore
from disq.core.disque.job import ACKED
from disq.core.disque.results import RESULT_OVERHEAD_BYTES
from disq.core.messages import GotResult, Message, Result
from disq.doors.resp_door import RespDoor
from disq.persistence.cluster_records import (
    REC_RESULT,
    REC_RESULTDEL,
    ClusterRecordError,
    decode_result,
    encode_result,
)
from disq.persistence.framing import iter_frames
from disq.protocol.resp import RespParser
from disq.testing.mesh import Mesh
from tests.unit.test_disque_commands import PEER, FakeNode, StaticView, cmd, err, make_door, route

JOB_ID = "D-0123abcd-" + "A" * 24 + "-05a1"
OTHER_ID = "D-0123abcd-" + "B" * 24 + "-05a1"


def _values(m: Mesh, job_id: str = JOB_ID) -> list[bytes | None]:
    return [m.disque(i).results.get(m.now, job_id) for i in range(len(m.ids))]


def _replies(m: Mesh, i: int) -> list[tuple[int, object]]:
    return list(m.replies[m.ids[i]])


def _restart(m: Mesh, i: int, rewritten: bool = False) -> DisqueCore:
    """Node ``i`` restarted from the records its Readies wrote (or from a rewrite of them)."""
    if rewritten:
        records = b"".join(m.disque(i).aof.snapshot_records(m.now))
    else:
        records = b"".join(m.aof[m.ids[i]])
    return m.restart_disque(i, records, 90 + i)


def _result_records(m: Mesh, i: int) -> list[int]:
    return [
        t for t, _ in iter_frames(b"".join(m.aof[m.ids[i]])) if t in (REC_RESULT, REC_RESULTDEL)
    ]


# ------------------------------------------------------------------ SET and GET
def test_set_answers_once_the_copies_are_written_and_every_node_serves_it() -> None:
    m = Mesh(3)
    assert m.disque(0).results.set(m.now, 1, JOB_ID, b"\x00forty-two\r\n") is PENDING
    assert _replies(m, 0) == []  # nothing answered before the peers' GOTRESULT
    m.pump()
    assert _replies(m, 0) == [(1, "OK")]
    assert _values(m) == [b"\x00forty-two\r\n"] * 3
    # Each node logged the result (the peers before their GOTRESULT left: the Ready's order).
    assert [_result_records(m, i) for i in range(3)] == [[REC_RESULT]] * 3


def test_set_waits_for_the_copies_it_asks_for() -> None:
    m = Mesh(3)
    m.drop = lambda src, dst, msg: isinstance(msg, GotResult) and src == 2
    assert m.disque(0).results.set(m.now, 1, JOB_ID, b"v", repl=3) is PENDING
    m.pump()
    assert _replies(m, 0) == []  # node 2's copy exists, its answer was lost
    assert m.disque(0).results.set(m.now, 2, OTHER_ID, b"w", repl=2) is PENDING
    m.pump()
    assert _replies(m, 0) == [(2, "OK")]  # two holders: this node and node 1


def test_replicate_one_answers_at_once_and_still_reaches_every_node() -> None:
    m = Mesh(3)
    assert m.disque(1).results.set(m.now, 1, JOB_ID, b"v", repl=1) == "OK"
    m.pump()
    assert _values(m) == [b"v"] * 3


def test_a_set_replaces_the_value_and_its_memory() -> None:
    m = Mesh(2)
    core = m.disque(0)
    before = core.memory.used_bytes
    core.results.set(m.now, 1, JOB_ID, b"x" * 100)
    m.pump()
    assert core.memory.used_bytes == before + 100 + RESULT_OVERHEAD_BYTES
    core.results.set(m.now, 2, JOB_ID, b"y" * 10)
    m.pump()
    assert core.memory.used_bytes == before + 10 + RESULT_OVERHEAD_BYTES
    assert _values(m) == [b"y" * 10] * 2


def test_a_silent_peer_is_sent_the_result_again() -> None:
    """The first RESULT to node 2 is lost (a link not yet up drops it): a resend, while the
    set waits, gives node 2 its copy and the set its answer."""
    m = Mesh(3)
    lost: list[Message] = []

    def drop_first(src: int, dst: int, msg: Message) -> bool:
        if isinstance(msg, Result) and dst == 2 and not lost:
            lost.append(msg)
            return True
        return False

    m.drop = drop_first
    m.disque(0).results.set(m.now, 1, JOB_ID, b"v", repl=3, timeout_ms=5000)
    m.pump()
    assert lost and _replies(m, 0) == [] and _values(m)[2] is None
    m.advance(1000)
    assert _replies(m, 0) == [(1, "OK")]
    assert _values(m) == [b"v"] * 3


# ------------------------------------------------------------------ restarts
@pytest.mark.parametrize("rewritten", [False, True], ids=["aof", "rewritten-aof"])
def test_a_restarted_node_serves_the_results_it_logged(rewritten: bool) -> None:
    m = Mesh(3)
    m.disque(0).results.set(m.now, 1, JOB_ID, b"kept")
    m.disque(0).results.set(m.now, 2, OTHER_ID, b"gone")
    m.pump()
    assert m.disque(2).results.delete(m.now, OTHER_ID) == 1
    m.pump()
    for i in range(3):
        fresh = _restart(m, i, rewritten)
        assert fresh.results.get(m.now, JOB_ID) == b"kept"
        assert fresh.results.get(m.now, OTHER_ID) is None
        assert fresh.memory.used_bytes == len(b"kept") + RESULT_OVERHEAD_BYTES


def test_a_replay_skips_results_whose_ttl_passed_on_the_wall_clock() -> None:
    m = Mesh(1)
    m.disque(0).results.set(m.now, 1, JOB_ID, b"v", ttl_s=10)
    m.pump()
    m.now += 10_001  # the node was down while the TTL passed
    fresh = _restart(m, 0)
    assert fresh.results.get(m.now, JOB_ID) is None
    assert fresh.results.table == {} and fresh.memory.used_bytes == 0


def test_the_result_record_round_trips_and_refuses_damage() -> None:
    payload = encode_result(JOB_ID, 1_795_000_000_000, b"\x00v\r\n")
    assert decode_result(payload) == (JOB_ID, 1_795_000_000_000, b"\x00v\r\n")
    with pytest.raises(ClusterRecordError):
        decode_result(payload[:20])


# ------------------------------------------------------------------ WAIT
def test_wait_on_another_node_blocks_then_wakes_when_the_result_is_set() -> None:
    m = Mesh(3)
    waiter = m.disque(2).results
    assert waiter.wait(m.now, 7, JOB_ID, 0) is PENDING
    m.advance(30_000)  # TIMEOUT 0: it waits for as long as it takes
    assert _replies(m, 2) == []
    m.disque(0).results.set(m.now, 1, JOB_ID, b"done")
    m.pump()
    assert _replies(m, 2) == [(7, b"done")]
    assert waiter.waits == {}
    # Already there: answered at once.
    assert waiter.wait(m.now, 8, JOB_ID, 100) == b"done"


def test_wait_times_out_with_null() -> None:
    m = Mesh(3)
    assert m.disque(1).results.wait(m.now, 7, JOB_ID, 500) is PENDING
    m.advance(490)
    assert _replies(m, 1) == []
    m.advance(20)
    assert _replies(m, 1) == [(7, None)]
    m.disque(0).results.set(m.now, 1, JOB_ID, b"late")
    m.pump()
    assert _replies(m, 1) == [(7, None)]  # answered once


def test_a_waiter_that_went_away_is_not_answered() -> None:
    m = Mesh(2)
    m.disque(1).results.wait(m.now, 7, JOB_ID, 0)
    m.disque(1).cancel(7)  # the client disconnected
    m.disque(0).results.set(m.now, 1, JOB_ID, b"v")
    m.pump()
    assert _replies(m, 1) == []
    assert m.disque(1).results.waits_by_key == {}


# ------------------------------------------------------------------ DEL and expiry
def test_del_removes_it_on_every_node() -> None:
    m = Mesh(3)
    m.disque(0).results.set(m.now, 1, JOB_ID, b"v")
    m.pump()
    assert m.disque(1).results.delete(m.now, JOB_ID) == 1
    m.pump()
    assert _values(m) == [None] * 3
    assert all(m.disque(i).results.table == {} for i in range(3))
    assert m.disque(2).results.delete(m.now, JOB_ID) == 0
    assert [_result_records(m, i)[-1] for i in range(3)] == [REC_RESULTDEL] * 3


def test_each_node_drops_it_at_its_ttl() -> None:
    m = Mesh(3)
    m.disque(0).results.set(m.now, 1, JOB_ID, b"v", ttl_s=2)
    m.pump()
    m.advance(1990)
    assert _values(m) == [b"v"] * 3
    m.advance(20)
    # The timer ran (the mesh ticks a node only at its next_deadline_ms): the entry is gone.
    assert all(m.disque(i).results.table == {} for i in range(3))
    assert all(m.disque(i).memory.used_bytes == 0 for i in range(3))


def test_flushall_drops_the_results_and_answers_their_clients() -> None:
    m = Mesh(3)
    m.cut = {m.ids[1], m.ids[2]}
    core = m.disque(0)
    assert core.results.set(m.now, 1, JOB_ID, b"v") is PENDING
    assert core.results.wait(m.now, 2, OTHER_ID, 0) is PENDING
    core.flush.flushall(log_deletes=True)
    m.pump()
    assert _replies(m, 0) == [(1, DisqueError("NOREPL", NOREPL_EXPIRED)), (2, None)]
    assert core.results.table == {} and core.results.count() == 0
    assert _result_records(m, 0) == [REC_RESULT, REC_RESULTDEL]  # a restart finds none


# ------------------------------------------------------------------ refusals
def test_norepl_at_the_timeout_when_peers_are_cut_and_the_result_stays() -> None:
    m = Mesh(3)
    m.cut = {m.ids[1], m.ids[2]}
    assert m.disque(0).results.set(m.now, 1, JOB_ID, b"v", timeout_ms=1000) is PENDING
    m.advance(990)
    assert _replies(m, 0) == []
    m.advance(20)
    assert _replies(m, 0) == [(1, DisqueError("NOREPL", NOREPL_TIMEOUT))]
    assert m.disque(0).results.get(m.now, JOB_ID) == b"v"  # as an ADDJOB's, where it landed


def test_norepl_at_once_when_too_few_peers_are_reachable() -> None:
    m = Mesh(3)
    m.views[m.ids[0]].down = {m.ids[1], m.ids[2]}
    with pytest.raises(DisqueError) as exc:
        m.disque(0).results.set(m.now, 1, JOB_ID, b"v", repl=2)
    assert exc.value == DisqueError("NOREPL", NOREPL_NODES)
    assert m.disque(0).results.get(m.now, JOB_ID) is None
    with pytest.raises(DisqueError):  # the default: min(3, nodes known)
        m.disque(0).results.set(m.now, 2, JOB_ID, b"v")
    assert m.disque(0).results.set(m.now, 3, JOB_ID, b"v", repl=1) == "OK"


def test_oom_over_maxmemory() -> None:
    m = Mesh(1)
    core = m.disque(0)
    core.memory.max_bytes = 1000
    core.results.set(m.now, 1, JOB_ID, b"x" * 900)
    m.pump()  # the Ready updates the memory level
    with pytest.raises(DisqueError) as exc:
        core.results.set(m.now, 2, OTHER_ID, b"v")
    assert exc.value.code == "OOM"


# ------------------------------------------------------------------ the RESP door
@pytest.fixture
def tokens() -> Iterator[int]:
    return itertools.count(1)


def test_resp_set_get_del(tokens: Iterator[int]) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    assert d.feed(cmd("RESULT", "SET", JOB_ID, b"a\r\nb", "TTL", 60)) == b"+OK\r\n"
    assert d.feed(cmd("RESULT", "get", JOB_ID)) == b"$4\r\na\r\nb\r\n"
    assert d.feed(cmd("RESULT", "GET", OTHER_ID)) == b"$-1\r\n"
    assert d.feed(cmd("RESULT", "DEL", JOB_ID)) == b":1\r\n"
    assert d.feed(cmd("RESULT", "DEL", JOB_ID)) == b":0\r\n"
    assert d.feed(cmd("HELLO", 3))[:1] == b"%"
    assert d.feed(cmd("RESULT", "GET", JOB_ID)) == b"_\r\n"


def test_resp_set_blocks_until_a_peer_holds_it(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("RESULT", "SET", JOB_ID, "v") + cmd("PING")) == b""
    assert [(dest, type(msg)) for dest, msg in node.disque.outbox] == [(PEER, Result)]
    node.disque.on_message(node.clock + 1, PEER, GotResult(JOB_ID))
    assert route(node, d) == {0: b"+OK\r\n+PONG\r\n"}


def test_resp_set_timeout_is_norepl(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("RESULT", "SET", JOB_ID, "v", "REPLICATE", 2, "TIMEOUT", 100)) == b""
    node.disque.tick(node.clock + 101)
    assert route(node, d) == {0: err("NOREPL " + NOREPL_TIMEOUT)}


def test_resp_wait_blocks_wakes_times_out_and_is_cancelled_by_a_close(
    tokens: Iterator[int],
) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("RESULT", "WAIT", JOB_ID, 0)) == b""
    node.disque.on_message(node.clock + 1, PEER, Result(JOB_ID, b"val", 60_000))
    assert route(node, d) == {0: b"$3\r\nval\r\n"}
    assert d.feed(cmd("RESULT", "WAIT", JOB_ID, 10)) == b"$3\r\nval\r\n"  # here: at once
    assert d.feed(cmd("RESULT", "WAIT", OTHER_ID, 10)) == b""
    node.disque.tick(node.clock + 11)
    assert route(node, d) == {0: b"$-1\r\n"}
    d2 = make_door(node, tokens)
    assert d2.feed(cmd("RESULT", "WAIT", OTHER_ID, 0)) == b""
    d2.close()
    assert node.disque.results.waits == {}


KEY_ERR = "ERR a result key is 1 to 255 printable ASCII bytes, no space"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("SET", JOB_ID), "ERR wrong number of arguments for 'result set' command"),
        (("GET", JOB_ID, "x"), "ERR wrong number of arguments for 'result get' command"),
        (("WAIT", JOB_ID), "ERR wrong number of arguments for 'result wait' command"),
        (("DEL",), "ERR wrong number of arguments for 'result' command"),
        (("PUT", JOB_ID), "ERR unknown RESULT subcommand 'PUT'. Try SET, GET, WAIT, DEL"),
        (("GET", "has space"), KEY_ERR),
        (("GET", "k" * 256), KEY_ERR),
        (("SET", "", "v"), KEY_ERR),
        (("WAIT", "\u00e9", 10), KEY_ERR),
        (("SET", "task-1", "v", "ACK"), "BADID Invalid Job ID format."),
        (("SET", JOB_ID, "v", "TTL", 0), "ERR TTL must be between 1 and 4294967295"),
        (("SET", JOB_ID, "v", "TTL", "x"), "ERR TTL must be between 1 and 4294967295"),
        (("SET", JOB_ID, "v", "REPLICATE", 0), "ERR REPLICATE must be between 1 and 65535"),
        (("SET", JOB_ID, "v", "TIMEOUT", -1), "ERR timeout is negative"),
        (("SET", JOB_ID, "v", "TIMEOUT", "s"), "ERR timeout is not an integer or out of range"),
        (("SET", JOB_ID, "v", "TTL"), "ERR syntax error"),
        (("SET", JOB_ID, "v", "ASYNC", 1), "ERR syntax error"),
        (("WAIT", JOB_ID, -5), "ERR timeout is negative"),
        (("SET", JOB_ID, "v", "REPLICATE", 3), "NOREPL " + NOREPL_NODES),
    ],
)
def test_resp_errors_keep_the_connection_serving(
    tokens: Iterator[int], args: tuple[str | int, ...], error: str
) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    assert d.feed(cmd("RESULT", *args)) == err(error)
    assert d.feed(cmd("RESULT")) == err("ERR wrong number of arguments for 'result' command")
    assert d.feed(cmd("PING")) == b"+PONG\r\n"
    assert node.disque.results.table == {}


def test_a_value_over_the_bulk_limit_is_refused_as_a_job_body_is(tokens: Iterator[int]) -> None:
    node = FakeNode()
    refusals = []
    for request in (cmd("ADDJOB", "q", b"x" * 17, 0), cmd("RESULT", "SET", JOB_ID, b"x" * 17)):
        d = RespDoor(node, tokens.__next__, parser=RespParser(max_bulk_bytes=16))  # type: ignore[arg-type]
        refusals.append((d.feed(request), d.client.closing))
    assert refusals == [(err("ERR Protocol error: invalid bulk length"), True)] * 2
    assert node.disque.results.table == {} and node.disque.jobs == {}


def test_resp_oom(tokens: Iterator[int]) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    node.disque.memory.warning = 3
    assert d.feed(cmd("RESULT", "SET", JOB_ID, "v")) == err(
        "OOM command not allowed when used memory > 'maxmemory'."
    )
    node.disque.memory.warning = 0
    node.disk_full = "no space left on the AOF's disk"
    assert d.feed(cmd("RESULT", "SET", JOB_ID, "v")) == err("OOM no space left on the AOF's disk")
    assert node.disque.results.table == {}


def test_any_printable_key_is_a_result_key_on_every_node() -> None:
    # A Celery task's id keys its result: no job behind it.
    m = Mesh(3)
    key = "celery-task-meta-2f1c0e9a-5b7d-4c3e-9a61-0d2b8f4e7a10"
    assert m.disque(0).results.set(m.now, 1, key, b"42", repl=3) is PENDING
    m.pump()
    assert _replies(m, 0) == [(1, "OK")]
    assert [m.disque(i).results.get(m.now, key) for i in range(3)] == [b"42"] * 3


def test_set_with_ack_acks_the_job_once_the_copies_hold_the_result() -> None:
    m = Mesh(3)
    d0 = m.disque(0)
    assert d0.add_job(m.now, 1, "q", b"work", AddOptions(timeout_ms=0, repl=3, async_=True))
    m.pump()
    [job_id] = list(d0.jobs)
    assert d0.results.set(m.now, 2, job_id, b"done", repl=3, ack=True) is PENDING
    assert d0.jobs[job_id].state != ACKED  # not before the copies hold the result
    m.pump()
    assert (2, "OK") in _replies(m, 0)
    assert all(job_id not in m.disque(i).jobs for i in range(3))  # acked and collected
    assert _values(m, job_id) == [b"done"] * 3


def test_set_with_ack_answered_norepl_leaves_the_job_to_run_again() -> None:
    m = Mesh(3)
    d0 = m.disque(0)
    d0.add_job(m.now, 1, "q", b"work", AddOptions(timeout_ms=0, repl=1, async_=True))
    [job_id] = list(d0.jobs)
    m.pump()
    m.cut = {m.ids[1], m.ids[2]}
    assert d0.results.set(m.now, 2, job_id, b"v", repl=3, timeout_ms=100, ack=True) is PENDING
    m.advance(200)
    assert (2, DisqueError("NOREPL", NOREPL_TIMEOUT)) in _replies(m, 0)
    assert d0.jobs[job_id].state != ACKED


def test_resp_set_with_ack(tokens: Iterator[int]) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    job_id = d.feed(cmd("ADDJOB", "q", "work", 0))[1:-2].decode()
    assert d.feed(cmd("GETJOB", "FROM", "q"))[:1] == b"*"
    assert d.feed(cmd("RESULT", "SET", job_id, "7", "ACK")) == b"+OK\r\n"
    assert d.feed(cmd("RESULT", "GET", job_id)) == b"$1\r\n7\r\n"
    assert node.disque.jobs.get(job_id) is None or node.disque.jobs[job_id].state == ACKED


def test_show_tells_the_result_kept_under_the_jobs_id(tokens: Iterator[int]) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    job_id = d.feed(cmd("ADDJOB", "q", "work", 0))[1:-2].decode()
    assert b"result" not in d.feed(cmd("SHOW", job_id))
    assert d.feed(cmd("RESULT", "SET", job_id, "the-value")) == b"+OK\r\n"
    shown = d.feed(cmd("SHOW", job_id))
    assert shown.endswith(b"$6\r\nresult\r\n$9\r\nthe-value\r\n")


def test_a_peer_cut_off_during_a_set_learns_it_when_its_link_comes_up() -> None:
    m = Mesh(3)
    m.cut = {m.ids[2]}
    assert m.disque(0).results.set(m.now, 1, "k-set", b"v", repl=2) is PENDING
    m.pump()
    assert _replies(m, 0) == [(1, "OK")]
    assert m.disque(0).results.set(m.now, 2, "k-gone", b"x", repl=1) == "OK"
    m.pump()
    assert m.disque(0).results.delete(m.now, "k-gone") == 1
    m.pump()
    assert m.disque(2).results.get(m.now, "k-set") is None  # it missed both
    assert m.disque(0).results.owed[m.ids[1]] == {}  # node 1 confirmed the set
    m.cut = set()
    m.nodes[0].on_link_up(m.now, m.ids[2])
    m.pump()
    assert m.disque(2).results.get(m.now, "k-set") == b"v"
    assert m.disque(2).results.get(m.now, "k-gone") is None
    assert m.disque(0).results.owed[m.ids[2]] == {}  # confirmed now: owed no more


def test_what_a_peer_is_owed_is_bounded() -> None:
    from disq.core.disque import results as results_mod

    m = Mesh(2)
    m.cut = {m.ids[1]}
    r = m.disque(0).results
    old, results_mod.OWED_MAX = results_mod.OWED_MAX, 3
    try:
        for i in range(5):
            r.set(m.now, 10 + i, f"k{i}", b"v", repl=1)
    finally:
        results_mod.OWED_MAX = old
    assert list(r.owed[m.ids[1]]) == ["k2", "k3", "k4"]  # the newest kept


def test_a_jobs_result_is_kept_as_widely_as_its_job_by_default() -> None:
    m = Mesh(3)
    d0 = m.disque(0)
    d0.add_job(m.now, 1, "q", b"work", AddOptions(timeout_ms=0, repl=2, async_=True))
    m.pump()
    [job_id] = list(d0.jobs)
    m.cut = {m.ids[2]}
    assert d0.results.set(m.now, 2, "no-job-key", b"v", timeout_ms=1000) is PENDING
    assert d0.results.set(m.now, 3, job_id, b"v") is PENDING
    m.advance(1100)
    assert (2, DisqueError("NOREPL", NOREPL_TIMEOUT)) in _replies(m, 0)  # wanted 3
    assert (3, "OK") in _replies(m, 0)  # two holders were enough


def test_a_jobs_result_goes_with_its_job_at_its_ttl_on_every_node() -> None:
    m = Mesh(3)
    d0 = m.disque(0)
    d0.add_job(m.now, 1, "q", b"work", AddOptions(timeout_ms=0, repl=3, ttl_s=10, async_=True))
    m.pump()
    [job_id] = list(d0.jobs)
    assert d0.results.set(m.now, 2, job_id, b"v", ack=True) is PENDING  # no TTL given
    assert d0.results.set(m.now, 3, "task-9", b"w", repl=1) == "OK"  # not a job: one day
    m.pump()
    assert all(job_id not in m.disque(i).jobs for i in range(3))  # acked and collected
    m.advance(9_000)
    assert _values(m, job_id) == [b"v"] * 3  # outlives the ack, read after it
    m.advance(1_500)
    assert _values(m, job_id) == [None] * 3  # gone at the job's TTL, on every node
    assert m.disque(0).results.get(m.now, "task-9") == b"w"
