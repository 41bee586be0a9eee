"""Queue policies (disq/core/policy/, QPOLICY): the RESP grammar and its errors (nothing
changes), QSTAT's extra pairs, last-writer-wins between nodes, digests and whole-table swaps
(a node that missed a change, a link up), tombstones, bounds, the QPOLICY records (replay,
rewrite) and the wire. Node cores wired in memory (Mesh)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from disq.core.messages import Message, PolicyEntry, PolicySync
from disq.core.policy.table import Policies, PolicyError, describe
from disq.persistence.framing import iter_frames
from disq.persistence.policy_records import (
    REC_QPOLICY,
    PolicyRecordError,
    decode_policy,
    encode_policy,
)
from disq.server import peer_wire
from disq.testing.mesh import Mesh
from tests.unit.test_disque_commands import FakeNode, cmd, err, make_door

T0 = 1_780_000_000_000


def _mesh(n: int) -> Mesh:
    mesh = Mesh(n, now_ms=T0)
    for node in mesh.nodes:
        node.set_persist(True)
    return mesh


def _pol(mesh: Mesh, i: int) -> Policies:
    p = mesh.nodes[i].policies
    assert p is not None
    return p


@pytest.fixture
def tokens() -> Iterator[int]:
    return itertools.count(1)


def test_resp_set_get_del_and_qstat(tokens: Iterator[int]) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    assert d.feed(cmd("QPOLICY", "GET", "q")) == b"$-1\r\n"
    ok = cmd("QPOLICY", "SET", "q", "MAXDELIVERIES", 5, "DEADLETTER", "dlq", "BACKOFF", 2, 60)
    assert d.feed(ok) == b"+OK\r\n"
    assert d.feed(cmd("QPOLICY", "GET", "q")) == (
        b"*8\r\n$13\r\nmaxdeliveries\r\n:5\r\n$10\r\ndeadletter\r\n$3\r\ndlq\r\n"
        b"$12\r\nbackoff-base\r\n:2\r\n$11\r\nbackoff-max\r\n:60\r\n"
    )
    # QSTAT: disq's pairs, then the policy's.
    d.feed(cmd("ADDJOB", "q", "work", 0))
    stat = d.feed(cmd("QSTAT", "q"))
    assert stat.endswith(b"$11\r\nbackoff-max\r\n:60\r\n")
    assert b"$7\r\ndelayed\r\n:0\r\n$13\r\nmaxdeliveries" in stat
    # A SET replaces the whole policy.
    assert d.feed(cmd("QPOLICY", "SET", "q", "BACKOFF", 0, 10)) == b"+OK\r\n"
    assert d.feed(cmd("QPOLICY", "GET", "q")) == (
        b"*4\r\n$12\r\nbackoff-base\r\n:0\r\n$11\r\nbackoff-max\r\n:10\r\n"
    )
    assert d.feed(cmd("QPOLICY", "DEL", "q")) == b":1\r\n"
    assert d.feed(cmd("QPOLICY", "DEL", "q")) == b":0\r\n"
    assert d.feed(cmd("QPOLICY", "GET", "q")) == b"$-1\r\n"
    assert b"maxdeliveries" not in d.feed(cmd("QSTAT", "q"))


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("SET", "q"), "ERR a policy needs MAXDELIVERIES, DEADLETTER or BACKOFF"),
        (
            ("SET", "q", "MAXDELIVERIES", 0),
            "ERR MAXDELIVERIES value '0' is not an integer 1..1000000",
        ),
        (
            ("SET", "q", "MAXDELIVERIES", 1_000_001),
            "ERR MAXDELIVERIES value '1000001' is not an integer 1..1000000",
        ),
        (
            ("SET", "q", "MAXDELIVERIES", "x"),
            "ERR MAXDELIVERIES value 'x' is not an integer 1..1000000",
        ),
        (("SET", "q", "MAXDELIVERIES"), "ERR MAXDELIVERIES needs a value"),
        (("SET", "q", "BACKOFF", 5), "ERR BACKOFF max needs a value"),
        (
            ("SET", "q", "BACKOFF", -1, 5),
            "ERR BACKOFF base value '-1' is not an integer 0..2592000",
        ),
        (("SET", "q", "BACKOFF", 5, 4), "ERR BACKOFF max must be at least its base"),
        (("SET", "q", "BACKOFF", 0, 0), "ERR BACKOFF max value '0' is not an integer 1..2592000"),
        (
            ("SET", "q", "BACKOFF", 1, 2592001),
            "ERR BACKOFF max value '2592001' is not an integer 1..2592000",
        ),
        (("SET", "q", "DEADLETTER"), "ERR DEADLETTER needs a queue name"),
        (("SET", "q", "DEADLETTER", "q"), "ERR a queue cannot be its own DEADLETTER queue"),
        (("SET", "q", "DEADLETTER", ""), "ERR DEADLETTER queue name must not be empty"),
        (
            ("SET", "q", "MAXDELIVERIES", 3, "MAXDELIVERIES", 4),
            "ERR QPOLICY SET option 'MAXDELIVERIES' given twice",
        ),
        (
            ("SET", "q", "RETRY", 3),
            "ERR unknown QPOLICY SET option 'RETRY' (MAXDELIVERIES, DEADLETTER, BACKOFF)",
        ),
        (("SET", "", "MAXDELIVERIES", 3), "ERR queue name must not be empty"),
        (("SET", "x" * 1001, "MAXDELIVERIES", 3), "ERR queue name is longer than 1000 bytes"),
        (("GET", "q", "extra"), "ERR wrong number of arguments for 'qpolicy get' command"),
        (("DEL", ""), "ERR queue name must not be empty"),
        (("LIST", "q"), "ERR wrong number of arguments for 'qpolicy list' command"),
        (("LOST", "q"), "ERR unknown QPOLICY subcommand 'LOST'. Try SET, GET, DEL, LIST."),
    ],
)
def test_resp_errors_change_nothing(
    tokens: Iterator[int], args: tuple[str | int, ...], error: str
) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    assert d.feed(cmd("QPOLICY", "SET", "q", "MAXDELIVERIES", 7)) == b"+OK\r\n"
    before = d.feed(cmd("QPOLICY", "GET", "q"))
    assert d.feed(cmd("QPOLICY", *args)) == err(error)
    assert d.feed(cmd("QPOLICY", "GET", "q")) == before
    assert d.feed(cmd("QPOLICY", "GET", "")) == b"$-1\r\n"
    assert d.feed(cmd("QPOLICY", "GET")) == err(
        "ERR wrong number of arguments for 'qpolicy' command"
    )


def test_list_answers_every_policy_by_queue_name(tokens: Iterator[int]) -> None:
    node = FakeNode()
    d = make_door(node, tokens)
    assert d.feed(cmd("QPOLICY", "LIST")) == b"*0\r\n"
    assert d.feed(cmd("QPOLICY", "SET", "b", "MAXDELIVERIES", 2, "DEADLETTER", "b-dead")) == (
        b"+OK\r\n"
    )
    assert d.feed(cmd("QPOLICY", "SET", "a", "BACKOFF", 1, 8)) == b"+OK\r\n"
    assert d.feed(cmd("QPOLICY", "SET", "c", "MAXDELIVERIES", 1)) == b"+OK\r\n"
    assert d.feed(cmd("QPOLICY", "DEL", "c")) == b":1\r\n"
    assert d.feed(cmd("QPOLICY", "LIST")) == (
        b"*4\r\n$1\r\na\r\n*4\r\n$12\r\nbackoff-base\r\n:1\r\n$11\r\nbackoff-max\r\n:8\r\n"
        b"$1\r\nb\r\n*4\r\n$13\r\nmaxdeliveries\r\n:2\r\n$10\r\ndeadletter\r\n$6\r\nb-dead\r\n"
    )


def test_a_set_reaches_every_node_and_concurrent_sets_converge() -> None:
    m = _mesh(3)
    m.nodes[0].qpolicy_set(m.now, "q", max_deliveries=3)
    m.pump()
    assert all(m.nodes[i].qpolicy_get("q") == [("maxdeliveries", 3)] for i in range(3))
    # Two nodes set the same queue at the same wall ms, before hearing each other: the
    # higher (version, node id) wins everywhere, whatever order the messages arrive in.
    m.nodes[1].qpolicy_set(m.now + 1, "q", backoff_base_s=1, backoff_max_s=8)
    m.nodes[2].qpolicy_set(m.now + 1, "q", dead_letter="dlq")
    m.pump()
    seen = [m.nodes[i].qpolicy_get("q") for i in range(3)]
    assert seen[0] == seen[1] == seen[2]
    winner = max(m.ids[1], m.ids[2])
    assert _pol(m, 0).table["q"].version_node == winner
    # A DEL is a tombstone every node takes.
    assert m.nodes[0].qpolicy_del(m.now + 2, "q") == 1
    m.pump()
    assert all(m.nodes[i].qpolicy_get("q") is None for i in range(3))
    assert len({_pol(m, i).digest() for i in range(3)}) == 1


def test_a_node_that_missed_changes_catches_up_by_digest() -> None:
    m = _mesh(3)
    m.cut.add(m.ids[2])
    m.nodes[0].qpolicy_set(m.now, "a", max_deliveries=2)
    m.nodes[1].qpolicy_set(m.now, "b", backoff_base_s=0, backoff_max_s=5)
    m.pump()
    assert m.nodes[2].qpolicy_get("a") is None
    m.cut.clear()
    m.advance(2_500)  # one digest round
    assert m.nodes[2].qpolicy_get("a") == [("maxdeliveries", 2)]
    assert m.nodes[2].qpolicy_get("b") == [("backoff-base", 0), ("backoff-max", 5)]


def test_a_link_up_sends_the_whole_table() -> None:
    m = _mesh(2)
    m.cut.add(m.ids[1])
    m.nodes[0].qpolicy_set(m.now, "a", max_deliveries=2)
    m.pump()
    m.cut.clear()
    m.nodes[0].on_link_up(m.now, m.ids[1])
    m.pump()
    assert m.nodes[1].qpolicy_get("a") == [("maxdeliveries", 2)]


def test_an_older_entry_or_a_stale_tombstone_is_not_taken() -> None:
    m = _mesh(1)
    p = _pol(m, 0)
    p.set(m.now, "q", max_deliveries=4)
    newer = p.table["q"]
    p.on_message(m.now, "x" * 40, PolicySync([PolicyEntry("q", 9, version_ms=1, version_node="z")]))
    assert p.get("q") is newer
    old_tomb = PolicyEntry("q", deleted=True, version_ms=T0 - 3 * 86_400_000, version_node="z" * 40)
    p.on_message(m.now, "x" * 40, PolicySync([old_tomb]))
    assert p.get("q") is newer


def test_the_table_is_bounded() -> None:
    m = _mesh(1)
    p = _pol(m, 0)
    p.policies_max = 2
    p.set(m.now, "a", max_deliveries=1)
    p.set(m.now, "b", max_deliveries=1)
    with pytest.raises(PolicyError) as exc:
        p.set(m.now, "c", max_deliveries=1)
    assert exc.value.code == "LIMIT" and p.get("c") is None
    p.set(m.now, "a", max_deliveries=2)  # a change of a held one still goes
    assert p.delete(m.now, "b")
    p.set(m.now, "c", max_deliveries=1)  # a tombstone frees its place


def test_tombstones_are_pruned_after_a_day() -> None:
    m = _mesh(1)
    p = _pol(m, 0)
    p.set(m.now, "q", max_deliveries=1)
    p.delete(m.now, "q")
    assert p.shared.tombstones == 1
    m.advance(86_400_000 + 120_000, step=60_000)
    assert "q" not in p.table and p.shared.tombstones == 0


def test_records_replay_and_rewrite() -> None:
    m = _mesh(1)
    m.nodes[0].qpolicy_set(m.now, "q", 5, "dlq", 1, 30)
    m.nodes[0].qpolicy_set(m.now, "r", max_deliveries=1)
    m.nodes[0].qpolicy_del(m.now, "r")
    m.pump()
    logged = [(t, bytes(p)) for t, p in iter_frames(b"".join(m.aof[m.ids[0]]))]
    assert [t for t, _ in logged if t == REC_QPOLICY] == [REC_QPOLICY] * 3
    for records in (logged, list(iter_frames(b"".join(_pol(m, 0).snapshot_records())))):
        fresh = Policies(m.views[m.ids[0]])
        fresh.restore(m.now, [(t, bytes(p)) for t, p in records])
        assert fresh.get("q") is not None and describe(fresh.get("q")) == [  # type: ignore[arg-type]
            ("maxdeliveries", 5),
            ("deadletter", "dlq"),
            ("backoff-base", 1),
            ("backoff-max", 30),
        ]
        assert fresh.get("r") is None and fresh.table["r"].deleted
        assert fresh.digest() == _pol(m, 0).digest()


def test_a_damaged_record_is_refused() -> None:
    good = encode_policy(PolicyEntry("q", 1, "d", 0, 0, False, 5, "n"))
    assert decode_policy(good).queue == "q"
    for bad in (b"", good[:-1], good + b"x", encode_policy(PolicyEntry("", 1))):
        with pytest.raises(PolicyRecordError):
            decode_policy(bad)


def test_policy_sync_on_the_wire() -> None:
    e = PolicyEntry("q", 3, "dlq", 1, 9, False, T0, "n" * 40)
    msgs: list[Message] = [PolicySync([e], 0, True, True), PolicySync(digest=77)]
    frame = peer_wire.encode_frame("a" * 40, 1, msgs)
    _, _, back = peer_wire.decode_frame(frame)
    assert isinstance(back[0], PolicySync) and isinstance(back[1], PolicySync)
    got = back[0].entries[0]
    assert [
        getattr(got, f)
        for f in (
            "queue",
            "max_deliveries",
            "dead_letter",
            "backoff_base_s",
            "backoff_max_s",
            "version_ms",
            "version_node",
        )
    ] == ["q", 3, "dlq", 1, 9, T0, "n" * 40]
    assert back[0].want and back[0].whole and back[1].digest == 77
