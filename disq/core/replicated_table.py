"""A table every node holds whole, last writer wins: the machinery the routes table
(disq/core/routes/table.py) and the queue policies (disq/core/policy/table.py) share. Kept
the way the schedule table is kept (disq/core/schedule/scheduler.py, "the table" and
"peers"). The owner says what an entry means (its key, its CRC, its record, its message)
and checks its commands; ``VersionedTable`` keeps the entries by these rules:

- **Entries, last writer wins.** An entry is versioned ``(wall ms, node id)``; a change is a
  new version and the highest wins on every node, so concurrent changes end the same
  everywhere. A change made here is always newer than what this node holds (its version is
  the wall clock, or one past the held version when the clock is behind it).
- **Tombstones.** A delete is a tombstone kept ``TOMBSTONE_KEEP_MS`` (a day), so a node that
  missed it cannot bring the entry back; past ``tombstones_max`` the oldest go first (a
  churn of deletes must not grow the table without bound; the price is that a node cut off
  for longer than that churn could bring an old entry back). They are dropped once older
  than the keep edge rounded down to whole ``PRUNE_MS``, so every node drops the same ones
  whenever it prunes (its digest round): nodes that pruned at different moments would
  otherwise disagree on every digest under a churn of tombstones, and swap whole tables
  every round. A tombstone already past the edge is not taken (a peer that has not pruned
  it yet).
- **Peers.** A change is pushed to every peer at once; every ``SYNC_MS`` each node sends
  each reachable peer a digest of its table (order-free: the sum of the entries' CRCs, kept
  up to date entry by entry), two nodes whose digests differ swap whole tables (the one
  that sees the mismatch sends its own with ``want`` set, the other answers with its own),
  and a link that comes up gets the whole table. A whole table travels in messages of about
  ``sync_chunk_bytes``; its last says ``whole`` (the receiver has heard everything the
  sender held), and carries the digest when the table is empty, so the peer knows it is in
  sync.
- **The AOF.** Every entry taken is a record of the owner's type, written before anything
  that depends on it leaves (the Ready rule), replayed at start (as a peer's entries merge:
  the highest version wins) and kept by rewrites (``snapshot_records``).

Pure, as the other cores: ``now_ms`` is the node clock, ``wall_offset_ms`` turns it into the
wall clock versions are in.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Final, Generic, Protocol, TypeVar

from disq.core.chunks import chunked
from disq.core.disque.api import ClusterView
from disq.core.messages import Message
from disq.persistence.framing import frame

TOMBSTONE_KEEP_MS: Final = 86400 * 1000
TOMBSTONES_MAX: Final = 200_000
SYNC_MS: Final = 2000  # digest to every reachable peer
PRUNE_MS: Final = 60_000  # tombstones drop at whole minutes: every node drops the same ones
SYNC_CHUNK_BYTES: Final = 1 << 20  # a whole table travels in messages of about this size


class Entry(Protocol):
    """What the table reads of an entry; the rest is the owner's."""

    version_ms: int
    version_node: str
    deleted: bool


K = TypeVar("K")
E = TypeVar("E", bound=Entry)


class VersionedTable(Generic[K, E]):
    """Entries by key, tombstones included, as this node holds them. The owner gives what
    an entry is: ``key``, ``crc`` (the digest's part), ``size`` (about its bytes on the
    wire), ``sync`` (its peer message from entries, digest, want, whole), ``rec_type``,
    ``encode`` and ``decode`` (its AOF record); ``taken(now_ms, e, replay)`` is told of
    every entry taken, after it is in the table (``replay``: from the AOF)."""

    def __init__(
        self,
        view: ClusterView,
        *,
        key: Callable[[E], K],
        crc: Callable[[E], int],
        size: Callable[[E], int],
        sync: Callable[[list[E], int, bool, bool], Message],
        rec_type: int,
        encode: Callable[[E], bytes],
        decode: Callable[[bytes], E],
        stats: dict[str, int],
        taken: Callable[[int, E, bool], None] | None = None,
    ) -> None:
        self.view = view
        self.key = key
        self.crc = crc
        self.size = size
        self.sync = sync
        self.rec_type = rec_type
        self.encode = encode
        self.decode = decode
        self.taken = taken
        # The owner's counters: syncs_sent and syncs_merged are counted here.
        self.stats = stats
        self.wall_offset_ms = 0
        self.persist = False
        self.aof_out: list[bytes] = []
        self.outbox: list[tuple[str, Message]] = []
        self.table: dict[K, E] = {}
        self.tombstones = 0
        # Per instance so a test can lower them (compiled, the module's Final constants are
        # inlined where they are used).
        self.tombstones_max = TOMBSTONES_MAX
        self.sync_chunk_bytes = SYNC_CHUNK_BYTES
        self._started_ms = -1
        self._sync_at_ms = 0
        self._tomb_heap: list[tuple[int, K]] = []  # (version, key)
        self._digest_sum = 0  # order-free: the sum of the entries' CRCs

    def wall(self, now_ms: int) -> int:
        return now_ms + self.wall_offset_ms

    # ------------------------------------------------------------------ changes
    def local_change(self, now_ms: int, e: E) -> None:
        """A change made here: versioned newer than what is held, taken, pushed to peers."""
        cur = self.table.get(self.key(e))
        e.version_ms = self.wall(now_ms)
        if cur is not None and e.version_ms <= cur.version_ms:
            e.version_ms = cur.version_ms + 1  # a later change here is always a newer version
        e.version_node = self.view.my_id
        self.apply(now_ms, e, False)
        peers = self.view.all_peers()
        for peer in peers:
            self.outbox.append((peer, self.sync([e], 0, False, False)))
        self.stats["syncs_sent"] += len(peers)

    def apply(self, now_ms: int, e: E, replay: bool) -> bool:
        """Take ``e`` if it is newer than what is held; log it. True: taken."""
        key = self.key(e)
        cur = self.table.get(key)
        if cur is not None and (cur.version_ms, cur.version_node) >= (
            e.version_ms,
            e.version_node,
        ):
            return False
        if e.deleted and e.version_ms < self._keep_edge(now_ms):
            return False  # would be pruned at once (a peer that has not pruned it yet)
        self.table[key] = e
        if cur is not None:
            self._digest_sum -= self.crc(cur)
            if cur.deleted:
                self.tombstones -= 1
        self._digest_sum += self.crc(e)
        if e.deleted:
            self.tombstones += 1
            heapq.heappush(self._tomb_heap, (e.version_ms, key))
        if self.persist:
            self.aof_out.append(frame(self.rec_type, self.encode(e)))
        if self.taken is not None:
            self.taken(now_ms, e, replay)
        return True

    def digest(self) -> int:
        """A digest of the whole table (0 never: it means "no digest" on the wire)."""
        return (self._digest_sum & 0xFFFFFFFF) or 1

    # ------------------------------------------------------------------ peers
    def on_sync(
        self, now_ms: int, sender: str, entries: list[E], digest: int, want: bool, whole: bool
    ) -> bool:
        """A peer's message; True when it shows this node holds all the peer held (a whole
        table's last, or a digest equal to this node's)."""
        took = False
        for e in entries:
            if self.apply(now_ms, e, False):
                took = True
        if took:
            self.stats["syncs_merged"] += 1
        caught_up = whole or (digest != 0 and not entries and digest == self.digest())
        if want:
            self.send_all(sender, want=False)
        elif digest and not entries and digest != self.digest():
            self.send_all(sender, want=True)
        return caught_up

    def send_all(self, peer: str, want: bool) -> None:
        """The whole table to ``peer`` (a link came up, or digests differ)."""
        chunks = chunked(self.table.values(), self.size, self.sync_chunk_bytes)
        full, rest = chunks[:-1], chunks[-1]
        for i, chunk in enumerate(full):
            self.outbox.append((peer, self.sync(chunk, 0, want and i == 0, False)))
        first = not full
        # An empty table still says so: the peer then knows it is in sync.
        digest = self.digest() if not rest and first else 0
        self.outbox.append((peer, self.sync(rest, digest, want and first, True)))
        self.stats["syncs_sent"] += 1

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> int:
        # Nothing to compare: a peer with entries probes this node, and its empty answer
        # brings them all.
        return self._sync_at_ms if self.table else -1

    def tick(self, now_ms: int) -> None:
        """The digest round: prune, then a digest to every reachable peer."""
        if self._started_ms < 0:
            self._start(now_ms)
        if now_ms >= self._sync_at_ms:
            self._sync_at_ms = now_ms + SYNC_MS
            self._prune(now_ms)
            peers = self.view.reachable_peers()
            if peers and self.table:
                digest = self.digest()
                for peer in peers:
                    self.outbox.append((peer, self.sync([], digest, False, False)))

    def _start(self, now_ms: int) -> None:
        self._started_ms = now_ms
        self._sync_at_ms = now_ms + SYNC_MS

    def _keep_edge(self, now_ms: int) -> int:
        """Tombstones older than this (wall ms) are dropped: the keep time, whole PRUNE_MS."""
        return (self.wall(now_ms) - TOMBSTONE_KEEP_MS) // PRUNE_MS * PRUNE_MS

    def _prune(self, now_ms: int) -> None:
        """Drop the tombstones past the keep edge, and the oldest past ``tombstones_max``."""
        edge = self._keep_edge(now_ms)
        heap = self._tomb_heap
        while heap and (heap[0][0] < edge or self.tombstones > self.tombstones_max):
            version, key = heapq.heappop(heap)
            e = self.table.get(key)
            if e is None or not e.deleted or e.version_ms != version:
                continue  # replaced since
            del self.table[key]
            self.tombstones -= 1
            self._digest_sum -= self.crc(e)
        if len(heap) > 2 * self.tombstones + 1024:
            # Entries of tombstones replaced since (a key set again) wait for their day:
            # rebuild from the table so a churn cannot grow the heap past it.
            self._tomb_heap = [(e.version_ms, k) for k, e in self.table.items() if e.deleted]
            heapq.heapify(self._tomb_heap)

    # ------------------------------------------------------------------ persistence
    def restore(self, now_ms: int, records: list[tuple[int, bytes]]) -> None:
        """Replay the owner's records (``replay`` set: nothing logged again)."""
        if self._started_ms < 0:
            self._start(now_ms)
        persist, self.persist = self.persist, False
        for rtype, payload in records:
            if rtype == self.rec_type:
                self.apply(now_ms, self.decode(payload), True)
        self.persist = persist

    def snapshot_records(self) -> list[bytes]:
        return [frame(self.rec_type, self.encode(e)) for e in self.table.values()]

    def has_output(self) -> bool:
        return bool(self.aof_out or self.outbox)
