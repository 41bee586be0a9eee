"""The replicated table both the routes table and the queue policies keep
(disq/core/replicated_table.py), driven directly: last writer wins, tombstones (kept, pruned,
capped), the digest, whole tables on a link up, convergence by digest exchange, replay."""

from __future__ import annotations

import itertools
import zlib

from disq.core.messages import Message, PolicyEntry, PolicySync
from disq.core.replicated_table import PRUNE_MS, SYNC_MS, TOMBSTONE_KEEP_MS, VersionedTable
from disq.persistence.framing import iter_frames
from disq.persistence.policy_records import REC_QPOLICY, decode_policy, encode_policy

T0 = 1_780_000_000_000  # the wall clock at node time 0


class View:
    def __init__(self, me: str, nodes: list[str]) -> None:
        self.my_id = me
        self.leaving = False
        self.nodes = nodes

    def cluster_size(self) -> int:
        return len(self.nodes)

    def reachable_peers(self) -> list[str]:
        return [n for n in self.nodes if n != self.my_id]

    def all_peers(self) -> list[str]:
        return self.reachable_peers()


def _crc(e: PolicyEntry) -> int:
    return zlib.crc32(
        repr((e.queue, e.max_deliveries, e.deleted, e.version_ms, e.version_node)).encode()
    )


def _key(e: PolicyEntry) -> str:
    return e.queue


def _table(
    me: str = "a", nodes: tuple[str, ...] = ("a", "b"), taken: list[tuple[str, bool]] | None = None
) -> VersionedTable[str, PolicyEntry]:
    told = [] if taken is None else taken
    t: VersionedTable[str, PolicyEntry] = VersionedTable(
        View(me, list(nodes)),
        key=_key,
        crc=_crc,
        size=lambda e: len(e.queue) + 64,
        sync=PolicySync,
        rec_type=REC_QPOLICY,
        encode=encode_policy,
        decode=decode_policy,
        stats={"syncs_sent": 0, "syncs_merged": 0},
        taken=lambda _now, e, replay: told.append((e.queue, replay)),
    )
    t.wall_offset_ms = T0
    return t


def _entry(queue: str, n: int, version_ms: int, node: str, deleted: bool = False) -> PolicyEntry:
    return PolicyEntry(queue, n, deleted=deleted, version_ms=version_ms, version_node=node)


def _held(t: VersionedTable[str, PolicyEntry]) -> dict[str, tuple[int, bool, int, str]]:
    return {
        k: (e.max_deliveries, e.deleted, e.version_ms, e.version_node) for k, e in t.table.items()
    }


def _deliver(tables: dict[str, VersionedTable[str, PolicyEntry]], now_ms: int) -> int:
    """Every queued message to its peer until none is left; how many went."""
    sent = 0
    while any(t.outbox for t in tables.values()):
        for name, t in tables.items():
            out = list(t.outbox)
            t.outbox.clear()
            for peer, msg in out:
                assert isinstance(msg, PolicySync)
                tables[peer].on_sync(now_ms, name, msg.entries, msg.digest, msg.want, msg.whole)
                sent += 1
    return sent


def test_last_writer_wins_whatever_the_order() -> None:
    versions = [
        _entry("q", 1, T0 + 5, "a"),
        _entry("q", 2, T0 + 7, "a"),
        _entry("q", 3, T0 + 7, "b"),  # the same ms: the higher node id wins
        _entry("q", 4, T0 + 6, "c", deleted=True),
    ]
    outcomes = set()
    for order in itertools.permutations(versions):
        t = _table()
        for e in order:
            t.apply(0, e, False)
        outcomes.add((tuple(_held(t).items()), t.digest()))
    assert outcomes == {((("q", (3, False, T0 + 7, "b")),), _crc(versions[2]) or 1)}


def test_a_local_change_is_newer_than_what_is_held_and_goes_to_every_peer() -> None:
    t = _table(nodes=("a", "b", "c"))
    t.apply(0, _entry("q", 1, T0 + 1000, "b"), False)  # a peer whose clock is ahead
    t.local_change(0, PolicyEntry("q", 2))
    assert _held(t) == {"q": (2, False, T0 + 1001, "a")}
    assert [peer for peer, _ in t.outbox] == ["b", "c"]
    assert t.stats["syncs_sent"] == 2


def test_a_tombstone_outlives_older_versions_then_is_pruned_after_the_keep_time() -> None:
    t = _table()
    t.tick(0)
    t.local_change(0, PolicyEntry("q", 1))
    t.local_change(1, PolicyEntry("q", deleted=True))
    assert t.tombstones == 1
    # A peer that missed the delete sends the old entry back: the tombstone holds.
    assert not t.apply(2, _entry("q", 1, T0, "a"), False)
    assert _held(t)["q"][1] is True
    # Still there a little before the keep time has passed (pruned at digest rounds only).
    day = TOMBSTONE_KEEP_MS
    t.tick(day)
    assert "q" in t.table
    t.tick(day + 2 * PRUNE_MS)
    assert not t.table and t.tombstones == 0 and t.digest() == 1
    # One that old is not taken again from a peer that has not pruned it yet.
    assert not t.apply(day + 2 * PRUNE_MS, _entry("q", 0, T0 + 1, "a", deleted=True), False)
    assert not t.table


def test_past_the_cap_the_oldest_tombstones_go_first() -> None:
    t = _table()
    t.tick(0)
    for i in range(5):
        t.apply(0, _entry(f"q{i}", 0, T0 + 10 - i, "b", deleted=True), False)  # q4 oldest
    t.apply(0, _entry("live", 1, T0 - 50, "b"), False)
    t.tombstones_max = 3
    t.tick(SYNC_MS)
    assert t.tombstones == 3
    assert sorted(t.table) == ["live", "q0", "q1", "q2"]


def test_the_digest_is_equal_exactly_when_the_tables_are() -> None:
    entries = [_entry(f"q{i}", i + 1, T0 + i, "a") for i in range(20)]
    a, b = _table(), _table()
    for e in entries:
        a.apply(0, e, False)
    for e in reversed(entries):
        b.apply(0, e, False)
    assert a.digest() == b.digest() != 1  # the order does not count
    b.apply(0, _entry("q3", 4, T0 + 3, "b"), False)  # the same but for a newer version
    assert a.digest() != b.digest()
    a.apply(0, _entry("q3", 4, T0 + 3, "b"), False)
    assert a.digest() == b.digest()
    b.apply(0, _entry("q5", 0, T0 + 99, "b", deleted=True), False)  # a tombstone counts
    assert a.digest() != b.digest()
    assert _table().digest() == 1  # never 0: that means "no digest" on the wire


def test_a_link_up_gets_the_whole_table_in_chunks() -> None:
    t = _table()
    for i in range(30):
        t.apply(0, _entry(f"queue-{i:02}", 1, T0 + i, "a"), False)
    t.sync_chunk_bytes = 300
    t.send_all("b", want=False)
    msgs: list[Message] = [m for peer, m in t.outbox if peer == "b"]
    assert len(msgs) == len(t.outbox) > 1
    syncs = [m for m in msgs if isinstance(m, PolicySync)]
    assert len(syncs) == len(msgs)
    assert [m.whole for m in syncs] == [False] * (len(syncs) - 1) + [True]
    assert not any(m.want for m in syncs)
    sent = [e.queue for m in syncs for e in m.entries]
    assert sent == list(t.table)
    # An empty table still says so, with its digest: the peer knows it is in sync.
    empty = _table()
    empty.send_all("b", want=False)
    ((peer, last),) = empty.outbox
    assert isinstance(last, PolicySync)
    assert peer == "b" and last.whole and not last.entries and last.digest == 1


def test_two_tables_converge_by_digest_exchange() -> None:
    a, b = _table("a"), _table("b")
    tables = {"a": a, "b": b}
    for t in tables.values():
        t.tick(0)
    for i in range(10):
        a.apply(0, _entry(f"q{i}", 1, T0 + i, "a"), False)
    for i in range(5, 15):
        b.apply(0, _entry(f"q{i}", 2, T0 + 100 + i, "b"), False)
    b.apply(0, _entry("q0", 0, T0 + 500, "b", deleted=True), False)
    assert a.digest() != b.digest()
    # Neither pushed anything: the digest round finds the difference, a whole-table swap ends it.
    a.tick(SYNC_MS)
    assert [type(m) for _, m in a.outbox] == [PolicySync]
    assert _deliver(tables, SYNC_MS) >= 3  # the digest, b's table (want), a's table
    assert _held(a) == _held(b)
    assert a.digest() == b.digest()
    assert _held(a)["q0"][1] is True and _held(a)["q7"][0] == 2
    # The next round: equal digests, nothing swapped; the peer learns it is caught up.
    b.tick(2 * SYNC_MS)
    ((_, probe),) = b.outbox
    b.outbox.clear()
    assert isinstance(probe, PolicySync)
    assert a.on_sync(2 * SYNC_MS, "b", probe.entries, probe.digest, probe.want, probe.whole)
    assert not a.outbox


def test_replay_logs_nothing_and_rebuilds_the_same_table() -> None:
    taken: list[tuple[str, bool]] = []
    t = _table(taken=taken)
    t.persist = True
    t.local_change(0, PolicyEntry("q", 3))
    t.local_change(1, PolicyEntry("r", 4))
    t.local_change(2, PolicyEntry("q", deleted=True))
    assert len(t.aof_out) == 3
    assert taken == [("q", False), ("r", False), ("q", False)]  # the owner is told of each
    taken.clear()
    back = _table(taken=taken)
    back.persist = True
    back.restore(5, list(iter_frames(b"".join(t.snapshot_records()))))
    assert _held(back) == _held(t) and back.digest() == t.digest()
    assert back.tombstones == 1 and not back.aof_out and not back.outbox
    assert back.persist
    assert sorted(taken) == [("q", True), ("r", True)]  # told: from the AOF
