"""The routes table (disq/core/routes/): topic matching as kombu does it, route() for the
three types, last-writer-wins merges, tombstones, digests and whole-table swaps, limits,
transient queues expiring by the clock the test passes, the purge of a deleted queue, and
the ROUTE records (encode/decode, replay, rewrite). Node cores wired in memory (Mesh)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from kombu.transport.virtual.exchange import TopicExchange

from disq.core.disque.api import AddOptions
from disq.core.messages import (
    ROUTE_BINDING,
    ROUTE_EXCHANGE,
    ROUTE_QUEUE,
    RouteEntry,
    RouteSync,
)
from disq.core.routes import table as rt
from disq.core.routes.table import RouteError, Routes
from disq.core.routes.topic import topic_matches
from disq.persistence.framing import iter_frames
from disq.persistence.route_records import (
    REC_ROUTE,
    RouteRecordError,
    decode_entry,
    encode_entry,
)
from disq.testing.mesh import Mesh, StaticView

T0 = 1_780_000_000_000  # wall ms


def _mesh(n: int) -> Mesh:
    mesh = Mesh(n, now_ms=T0)
    for node in mesh.nodes:
        node.set_persist(True)
    return mesh


def _routes(mesh: Mesh, i: int = 0) -> Routes:
    r = mesh.nodes[i].routes
    assert r is not None
    return r


class _Purger:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def purge_queue(self, now_ms: int, queue: str, before_ctime: int = 0) -> int:
        self.calls.append((queue, before_ctime))
        return 7


def _alone(my_id: str = "a" * 40, peers: list[str] | None = None) -> tuple[Routes, _Purger]:
    purger = _Purger()
    return Routes(StaticView(my_id, peers or []), purger), purger


# ------------------------------------------------------------------ topic patterns
WORDS = ["", "a", "b", "x", "ab", "*", "#"]
KEYS = ["", "a", "x", "a.b", "a.x", "b.x", "a.b.x", "x.a", "a.", ".x", "a..b", "a.b.c.x", "ab"]


def _kombu(pattern: str, key: str) -> bool:
    topic = TopicExchange(channel=None)
    return topic._match(topic.key_to_pattern(pattern), key) is not None


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("*", "a", True),
        ("*", "", False),
        ("*", "a.b", False),
        ("#", "", True),
        ("#", "a.b.c", True),
        ("a.#", "a.b.c", True),
        ("a.#", "a.", True),
        ("a.#", "a", False),  # kombu: '#' is '.*?' after a literal dot (AMQP would match)
        ("#.x", "b.x", True),
        ("#.x", "a.b.x", True),
        ("#.x", ".x", True),
        ("#.x", "x", False),
        ("a.*.x", "a.b.x", True),
        ("a.*.x", "a..x", False),  # '*' is one word, never empty
        ("a.*.x", "a.b.c.x", False),
        ("a..b", "a..b", True),  # empty words are literal
        ("a..b", "a.b", False),
        ("*.nyse.#", "stock.nyse.ibm", True),
        ("stock.*", "stock.usd", True),
        ("a#", "a#", True),  # a wildcard inside a word is plain text
        ("a#", "ab", False),
    ],
)
def test_topic_cases(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def test_topic_matching_agrees_with_kombu_on_every_combination() -> None:
    patterns = {".".join(p) for n in (1, 2, 3) for p in itertools.product(WORDS, repeat=n)}
    checked = 0
    for pattern in sorted(patterns):
        if any(w not in ("*", "#") and ("*" in w or "#" in w) for w in pattern.split(".")):
            continue  # kombu's regex accident (see topic.py): not what anyone binds
        for key in KEYS:
            assert topic_matches(pattern, key) == _kombu(pattern, key), (pattern, key)
            checked += 1
    assert checked > 3000


# ------------------------------------------------------------------ the table alone
def test_route_for_the_three_types_and_the_default_exchange() -> None:
    r, _ = _alone()
    now = T0
    r.declare_exchange(now, "d", "direct")
    r.declare_exchange(now, "f", "fanout")
    r.declare_exchange(now, "t", "topic")
    r.bind(now, "q2", "d", "k")
    r.bind(now, "q1", "d", "k")
    r.bind(now, "q3", "d", "other")
    r.bind(now, "fb", "f", "x")
    r.bind(now, "fa", "f", "y")
    r.bind(now, "fa", "f", "z")  # two bindings, one queue: once
    r.bind(now, "all", "t", "#")
    r.bind(now, "all", "t", "a.*")
    r.bind(now, "ax", "t", "a.*")
    assert r.route("d", "k") == ["q1", "q2"]
    assert r.route("d", "nope") == []
    assert r.route("f", "whatever") == ["fa", "fb"]
    assert r.route("t", "a.b") == ["all", "ax"]
    assert r.route("t", "b") == ["all"]
    assert r.route("missing", "k") is None
    assert r.route("", "plain") == ["plain"] and r.route("", "") == []
    assert r.route("d", "k") == ["q1", "q2"]  # again, from the cache
    r.unbind(now, "q1", "d", "k")
    assert r.route("d", "k") == ["q2"]  # the cache follows changes


def test_declare_checks_and_stores_nothing_on_bad_input() -> None:
    r, _ = _alone()
    now = T0
    r.declare_exchange(now, "e", "direct")
    bad: list[tuple[Any, str, str]] = [
        (lambda: r.declare_exchange(now, "x", "x-consistent-hash"), "ERR", "not supported"),
        (lambda: r.declare_exchange(now, "e", "topic"), "PRECONDITION_FAILED", "current is"),
        (lambda: r.declare_exchange(now, "", "direct"), "ERR", "default exchange"),
        (lambda: r.delete_exchange(now, ""), "ERR", "default exchange"),
        (lambda: r.bind(now, "q", "", "k"), "ERR", "default exchange"),
        (lambda: r.bind(now, "q", "nope", "k"), "NOT_FOUND", "'nope'"),
        (lambda: r.declare_exchange(now, "nope", "", passive=True), "NOT_FOUND", "'nope'"),
        (lambda: r.declare_exchange(now, "é" * 501, "direct"), "ERR", "longer than 1000"),
        (lambda: r.bind(now, "q", "e", "k" * 1001), "ERR", "routing key is longer"),
        (lambda: r.bind(now, "", "e", "k"), "ERR", "queue name must not be empty"),
        (lambda: r.declare_queue(now, "q" * 1001), "ERR", "longer than 1000"),
        (lambda: r.declare_queue(now, "q", expires_ms=-1), "ERR", "expires_ms"),
    ]
    before = dict(r.table)
    for call, code, text in bad:
        with pytest.raises(RouteError, match=text) as info:
            call()
        assert info.value.code == code
    assert r.table == before
    r.declare_exchange(now, "e", "direct")  # the same again: no new version, no push
    r.declare_exchange(now, "e", "anything", passive=True)  # type ignored when passive
    assert len(r.table) == 1


def test_limits_refuse_with_a_clear_error() -> None:
    r, _ = _alone()
    assert (r.exchanges_max, r.bindings_max, r.queues_max) == (10_000, 100_000, 100_000)
    r.exchanges_max, r.bindings_max, r.queues_max = 2, 2, 1
    r.declare_exchange(T0, "a", "direct")
    r.declare_exchange(T0, "b", "direct")
    with pytest.raises(RouteError, match=r"too many exchanges \(at most 2\)") as info:
        r.declare_exchange(T0, "c", "direct")
    assert info.value.code == "LIMIT"
    r.bind(T0, "q1", "a")
    r.bind(T0, "q2", "a")
    with pytest.raises(RouteError, match="too many bindings"):
        r.bind(T0, "q3", "a")
    r.bind(T0, "q2", "a")  # an existing binding is no new one
    r.declare_queue(T0, "t1", expires_ms=1000)
    with pytest.raises(RouteError, match="too many declared queues"):
        r.declare_queue(T0, "t2")
    r.declare_queue(T0, "t1", expires_ms=1000)  # a renewal is no new declaration
    r.delete_exchange(T0, "b")
    r.declare_exchange(T0, "c", "fanout")  # a tombstone does not count
    assert sorted(r.exchanges) == ["a", "c"]


def test_deleting_an_exchange_deletes_its_bindings() -> None:
    r, _ = _alone()
    r.declare_exchange(T0, "e", "fanout")
    r.bind(T0, "q1", "e")
    r.bind(T0, "q2", "e", "k")
    assert r.delete_exchange(T0 + 1, "e") is True
    assert r.route("e", "") is None and r.binding_list() == [] and r.binding_count == 0
    assert r.shared.tombstones == 3
    r.declare_exchange(T0 + 2, "e", "fanout")  # declared again: no binding comes back
    assert r.route("e", "") == []


def test_lww_merge_is_the_same_in_any_order_and_ties_break_by_node() -> None:
    def entry(kind: int, v: int, node: str, **kw: Any) -> RouteEntry:
        return RouteEntry(kind, "e", version_ms=T0 + v, version_node=node, **kw)

    entries = [
        entry(ROUTE_EXCHANGE, 10, "a", exchange_type="direct"),
        entry(ROUTE_EXCHANGE, 12, "a", exchange_type="topic"),
        entry(ROUTE_EXCHANGE, 12, "b", exchange_type="fanout"),  # same ms: node b wins
        entry(ROUTE_EXCHANGE, 11, "c", deleted=True),
        RouteEntry(ROUTE_BINDING, "e", "q", "k", version_ms=T0 + 5, version_node="a"),
        RouteEntry(ROUTE_BINDING, "e", "q", "k", deleted=True, version_ms=T0 + 6, version_node="a"),
    ]
    outcomes = set()
    for order in itertools.permutations(entries):
        r, _ = _alone()
        r.on_message(T0, "x" * 40, RouteSync(entries=list(order)))
        outcomes.add((tuple(sorted(r.exchanges.items())), tuple(r.binding_list()), r.digest()))
    assert len(outcomes) == 1
    ((exchanges, bindings, _digest),) = outcomes
    assert exchanges == (("e", "fanout"),) and bindings == ()


def test_a_tombstone_past_the_keep_time_is_not_taken_from_a_peer() -> None:
    r, _ = _alone()
    old = T0 - rt.TOMBSTONE_KEEP_MS - rt.PRUNE_MS
    tomb = RouteEntry(ROUTE_EXCHANGE, "e", deleted=True, version_ms=old, version_node="b")
    r.on_message(T0, "b" * 40, RouteSync(entries=[tomb]))
    assert not r.table and r.digest() == 1  # pruned everywhere already: not brought back


def test_the_digest_does_not_depend_on_the_order_entries_came_in() -> None:
    r1, _ = _alone()
    r2, _ = _alone("b" * 40)
    r1.declare_exchange(T0, "x", "direct")
    r1.bind(T0, "q", "x", "k")
    r1.delete_exchange(T0 + 1, "x")
    entries = list(r1.table.values())
    r2.on_message(T0, "a" * 40, RouteSync(entries=entries[::-1]))
    assert r2.digest() == r1.digest() != 1
    r2.declare_exchange(T0 + 2, "y", "fanout")
    assert r2.digest() != r1.digest()


def test_a_local_change_is_always_a_newer_version() -> None:
    r, _ = _alone()
    r.declare_exchange(T0, "e", "direct")
    r.delete_exchange(T0 - 5_000, "e")  # the wall clock stepped back
    assert r.route("e", "") is None
    assert r.table[(ROUTE_EXCHANGE, "e", "", "")].version_ms == T0 + 1


def test_tombstones_are_pruned_after_a_day_and_capped() -> None:
    r, _ = _alone()
    for i in range(5):
        r.declare_queue(T0 + i, f"q{i}", expires_ms=0, message_ttl_ms=1)
        r.delete_queue(T0 + i, f"q{i}")
    assert r.shared.tombstones == 5
    r.tick(T0)  # starts the clocks
    r.shared.tombstones_max = 3
    r.tick(T0 + rt.PRUNE_MS)
    assert r.shared.tombstones == 3 and sorted(k[1] for k in r.table) == ["q2", "q3", "q4"]
    r.tick(T0 + rt.TOMBSTONE_KEEP_MS + 10 * rt.PRUNE_MS)
    assert r.shared.tombstones == 0 and not r.table


# ------------------------------------------------------------------ transient queues
def test_a_transient_queue_expires_by_the_clock_with_its_bindings_and_is_purged() -> None:
    r, purger = _alone()
    r.declare_exchange(T0, "bc", "fanout")
    r.declare_queue(T0, "reply", expires_ms=10_000)
    r.declare_queue(T0, "kept", expires_ms=10_000)
    r.bind(T0, "reply", "bc")
    r.bind(T0, "kept", "bc")
    r.tick(T0)
    assert r.next_deadline_ms() == T0 + 2_000  # the digest round comes first
    r.tick(T0 + 6_000)
    r.declare_queue(T0 + 6_000, "kept", expires_ms=10_000)  # renewed
    assert r.next_deadline_ms() == T0 + 8_000
    r.tick(T0 + 9_999)
    assert r.route("bc", "") == ["kept", "reply"]
    r.tick(T0 + 10_000)
    assert r.route("bc", "") == ["kept"] and "reply" not in r.queues
    assert purger.calls == [("reply", (T0 + 10_000) * 1_000_000)]  # jobs made before it
    assert r.stats == {**r.stats, "queues_expired": 1, "jobs_purged": 7}
    r.tick(T0 + 16_000)
    assert r.route("bc", "") == []


def test_a_node_cut_off_from_the_majority_expires_nothing_until_it_is_back() -> None:
    mesh = _mesh(3)
    a = _routes(mesh, 0)
    a.declare_queue(mesh.now, "reply", expires_ms=5_000)
    assert not a.synced
    mesh.advance(2 * rt.SYNC_MS + 100)
    a.declare_queue(mesh.now, "reply", expires_ms=5_000)
    for i in range(3):
        assert _routes(mesh, i).synced  # the push, then peers' digests equal to their own
    mesh.views[mesh.ids[2]].down = set(mesh.ids[:2])  # node 2 sees nobody
    mesh.cut = {mesh.ids[2]}
    for _ in range(4):  # the lease renewed on node 0 every 2 s: node 2 never hears of it
        mesh.advance(2_000)
        a.declare_queue(mesh.now, "reply", expires_ms=5_000)
    c = _routes(mesh, 2)
    assert "reply" in c.queues and c.stats["queues_expired"] == 0  # no majority: no verdict
    assert 0 <= c.next_deadline_ms() <= mesh.now + rt.SYNC_MS  # no spinning on the lease
    mesh.views[mesh.ids[2]].down = set()
    mesh.cut = set()
    mesh.advance(rt.SYNC_MS + 100)  # a digest round: node 2 learns the renewal
    assert all("reply" in _routes(mesh, i).queues for i in range(3))
    assert c.stats["queues_expired"] == 0
    mesh.advance(5_100)  # nobody renews it now: it goes everywhere
    assert all("reply" not in _routes(mesh, i).queues for i in range(3))


def test_a_restarted_node_judges_leases_only_after_a_peers_whole_table() -> None:
    mesh = _mesh(2)
    a = _routes(mesh, 0)
    a.declare_queue(mesh.now, "reply", expires_ms=5_000)
    mesh.pump()
    old = b"".join(mesh.aof[mesh.ids[1]])
    mesh.advance(4_000)
    a.declare_queue(mesh.now, "reply", expires_ms=5_000)  # renewed while node 1 is "down"
    # Node 1 comes back from its AOF, which holds the old declaration, its lease past.
    back = Mesh(2, now_ms=mesh.now + 2_000)
    back.ids, back.views = mesh.ids, mesh.views
    core = back.nodes[1]
    core.restore(back.now, [(t, bytes(p)) for t, p in iter_frames(old)])
    r = core.routes
    assert r is not None and not r.synced
    core.tick(back.now)
    assert "reply" in r.queues and r.stats["queues_expired"] == 0
    renewal = a.table[(ROUTE_QUEUE, "reply", "", "")]
    r.on_message(back.now, mesh.ids[0], RouteSync(entries=[renewal], whole=True))
    assert r.synced
    core.tick(back.now)
    assert "reply" in r.queues  # the renewal's lease has not passed
    core.tick(back.now + 3_100)
    assert "reply" not in r.queues and r.stats["queues_expired"] == 1


def test_a_peers_queue_tombstone_purges_here_but_replay_does_not() -> None:
    r, purger = _alone()
    tomb = RouteEntry(ROUTE_QUEUE, "q", deleted=True, version_ms=T0, version_node="b" * 40)
    r.on_message(T0, "b" * 40, RouteSync(entries=[tomb]))
    assert purger.calls == [("q", T0 * 1_000_000)]
    fresh, fresh_purger = _alone()
    fresh.restore(T0, [(REC_ROUTE, encode_entry(tomb))])
    assert fresh_purger.calls == [] and fresh.table == r.table


def test_delete_queue_purges_only_jobs_made_before_it_on_every_node() -> None:
    mesh = _mesh(3)
    for i in range(3):  # each node queues its own jobs of "q"
        mesh.disque(i).add_job(mesh.now, i + 1, "q", b"old", AddOptions(timeout_ms=0, repl=1))
    a = _routes(mesh, 0)
    mesh.now += 5
    assert a.delete_queue(mesh.now, "q") == 1  # node 0's own
    mesh.pump()
    assert [len(mesh.disque(i).queues["q"]) for i in range(3)] == [0, 0, 0]
    # A job published after the delete stays when a late copy of the tombstone comes.
    mesh.now += 5
    mesh.disque(1).add_job(mesh.now, 9, "q", b"new", AddOptions(timeout_ms=0, repl=1))
    late = a.table[(ROUTE_QUEUE, "q", "", "")]
    _routes(mesh, 1).on_message(mesh.now, mesh.ids[0], RouteSync(entries=[late]))
    assert len(mesh.disque(1).queues["q"]) == 1


# ------------------------------------------------------------------ between nodes
def test_a_change_on_one_node_routes_on_the_others_after_one_push() -> None:
    mesh = _mesh(3)
    a = _routes(mesh, 0)
    a.declare_exchange(mesh.now, "ev", "topic")
    a.bind(mesh.now, "audit", "ev", "task.#")
    assert a.route("ev", "task.x") == ["audit"]  # at once here
    mesh.pump()
    for i in (1, 2):
        assert _routes(mesh, i).route("ev", "task.x") == ["audit"]
        assert _routes(mesh, i).digest() == a.digest()


def test_a_node_that_missed_changes_converges_on_the_digest_round() -> None:
    mesh = _mesh(3)
    mesh.cut = {mesh.ids[2]}
    a = _routes(mesh, 0)
    a.declare_exchange(mesh.now, "f", "fanout")
    a.bind(mesh.now, "q", "f")
    mesh.pump()
    c = _routes(mesh, 2)
    c.declare_exchange(mesh.now + 1, "only-c", "direct")  # a change the others missed
    mesh.pump()
    assert c.route("f", "") is None and a.route("only-c", "") is None
    mesh.cut = set()
    mesh.advance(rt.SYNC_MS + 100)
    digests = {_routes(mesh, i).digest() for i in range(3)}
    assert len(digests) == 1
    assert c.route("f", "") == ["q"] and a.route("only-c", "k") == []


def test_a_link_up_gets_the_whole_table() -> None:
    mesh = _mesh(2)
    mesh.cut = {mesh.ids[1]}
    a = _routes(mesh, 0)
    a.declare_exchange(mesh.now, "f", "fanout")
    mesh.pump()
    mesh.cut = set()
    mesh.nodes[0].on_link_up(mesh.now, mesh.ids[1])
    mesh.pump()
    assert _routes(mesh, 1).route("f", "") == []


def test_a_whole_table_travels_in_chunks() -> None:
    r, _ = _alone("a" * 40, ["b" * 40])
    r.shared.sync_chunk_bytes = 500
    r.declare_exchange(T0, "e", "direct")
    for i in range(40):
        r.bind(T0, f"q{i}", "e", "k")
    r.outbox.clear()
    r.on_link_up(T0, "b" * 40)
    msgs = [m for _, m in r.outbox]
    assert len(msgs) > 2 and sum(len(m.entries) for m in msgs if isinstance(m, RouteSync)) == 41
    other, _ = _alone("b" * 40)
    for m in msgs:
        assert isinstance(m, RouteSync)
        other.on_message(T0, "a" * 40, m)
    assert other.digest() == r.digest() and other.route("e", "k") == r.route("e", "k")


# ------------------------------------------------------------------ records
def test_route_records_round_trip_and_refuse_garbage() -> None:
    entries = [
        RouteEntry(ROUTE_EXCHANGE, "celeryev", exchange_type="topic", version_ms=1),
        RouteEntry(ROUTE_BINDING, "x", "q\u00e9", "a.#", version_ms=2, version_node="n" * 40),
        RouteEntry(ROUTE_QUEUE, "r", expires_ms=1 << 40, message_ttl_ms=5, deleted=True),
    ]
    for e in entries:
        assert decode_entry(encode_entry(e)) == e
    with pytest.raises(RouteRecordError):
        decode_entry(b"\x00" * 5)
    with pytest.raises(RouteRecordError, match="length"):
        decode_entry(encode_entry(entries[0]) + b"x")
    bad_kind = bytearray(encode_entry(entries[0]))
    bad_kind[24] = 9
    with pytest.raises(RouteRecordError, match="unknown kind"):
        decode_entry(bytes(bad_kind))


def test_the_table_survives_replay_and_a_rewrite() -> None:
    mesh = _mesh(1)
    r = _routes(mesh)
    r.declare_exchange(mesh.now, "t", "topic")
    r.bind(mesh.now, "q", "t", "a.*")
    r.declare_queue(mesh.now, "tmp", expires_ms=60_000, message_ttl_ms=1000)
    r.declare_exchange(mesh.now, "gone", "fanout")
    r.delete_exchange(mesh.now, "gone")
    mesh.pump()
    log = b"".join(mesh.aof[mesh.ids[0]])
    rewritten = b"".join(r.snapshot_records())
    for raw in (log, rewritten):
        fresh = Mesh(1, now_ms=mesh.now)
        core = fresh.nodes[0]
        core.restore(fresh.now, [(t, bytes(p)) for t, p in iter_frames(raw)])
        back = core.routes
        assert back is not None
        assert back.table == r.table and back.digest() == r.digest()
        assert back.route("t", "a.b") == ["q"] and back.message_ttl_ms("tmp") == 1000
        assert back.next_deadline_ms() <= mesh.now + 60_000  # the lease is timed again
