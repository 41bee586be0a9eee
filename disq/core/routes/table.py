"""Exchanges, bindings and queue declarations the cluster keeps (issue 29): the routes table.

kombu's Redis transport keeps its binding table in Redis, so every producer of every process
routes a fanout or topic message the same way; disq keeps it on every node, the way the
schedule table is kept (disq/core/schedule/scheduler.py, "the table" and "peers"):

- **Entries, last writer wins.** An exchange (name, type), a binding (exchange, queue,
  routing key) or a queue declaration (name, ``expires_ms``, ``message_ttl_ms``) is
  versioned ``(wall ms, node id)``; a change is a new version and the highest wins on every
  node, so concurrent changes end the same everywhere. A delete is a tombstone kept
  ``TOMBSTONE_KEEP_MS`` (a day), so a node that missed it cannot bring the entry back; past
  ``TOMBSTONES_MAX`` the oldest go first (a churn of transient queues must not grow the
  table without bound; the price is that a node cut off for longer than that churn could
  bring an old entry back).
- **Peers.** A change is pushed to every peer at once (RouteSync); every ``SYNC_MS`` each
  node sends each reachable peer a digest of its table, two nodes whose digests differ swap
  whole tables, and a link that comes up gets the whole table. Entries are ROUTE records in
  the AOF (disq/persistence/route_records.py), written before anything that depends on them
  leaves (the Ready rule), replayed at start and kept by rewrites.
- **Transient queues.** A queue declared with ``expires_ms`` > 0 (RabbitMQ's x-expires) is a
  lease from its version's wall time; a re-declare is a new version and renews it. Any node
  that sees the lease passed deletes the queue (a tombstone of its own: several nodes doing
  it at once is harmless, the highest tombstone wins), with its bindings. A node judges
  leases only on a table it knows is current: after a peer's whole table reached it (a
  node back from a restart holds the declarations of before, not their renewals), and
  while it reaches a majority (a node cut off misses renewals, and its tombstones would
  delete live queues when the cut heals). The price: a cluster without a majority expires
  nothing until it has one again.
- **A deleted queue is purged.** Each node, when it applies a queue's tombstone (its own or
  a peer's), acks its own queued jobs of that queue that were created before the tombstone
  (ctime, the creation wall time, below the tombstone's version): nothing piles up in a
  queue nobody reads, and a job published to the same name after the delete stays. Replay
  purges nothing (the purge's DELJOB records are in the file already).

Pure, as the other cores: ``now_ms`` is the node clock, ``wall_offset_ms`` turns it into
the wall clock versions and leases are in.
"""

from __future__ import annotations

import heapq
import zlib
from typing import Final, Protocol

from disq.core.chunks import chunked
from disq.core.disque.api import ClusterView
from disq.core.messages import (
    ROUTE_BINDING,
    ROUTE_EXCHANGE,
    ROUTE_QUEUE,
    Message,
    RouteEntry,
    RouteSync,
)
from disq.core.routes.topic import Token, compile_pattern, matches
from disq.persistence.framing import frame
from disq.persistence.route_records import REC_ROUTE, decode_entry, encode_entry

EXCHANGE_TYPES: Final = ("direct", "fanout", "topic")
EXCHANGES_MAX: Final = 10_000
BINDINGS_MAX: Final = 100_000
QUEUES_MAX: Final = 100_000
NAME_MAX_BYTES: Final = 1000
ROUTING_KEY_MAX_BYTES: Final = 1000
LEASE_MAX_MS: Final = 1 << 47  # expires_ms and message_ttl_ms: a sane bound, ~4,400 years
TOMBSTONE_KEEP_MS: Final = 86400 * 1000
TOMBSTONES_MAX: Final = 200_000
SYNC_MS: Final = 2000  # digest to every reachable peer
# Tombstones are dropped once older than the keep edge rounded down to whole PRUNE_MS, so
# every node drops the same ones whenever it prunes (its digest round): nodes that pruned at
# different moments would otherwise disagree on every digest under a churn of tombstones,
# and swap whole tables every round.
PRUNE_MS: Final = 60_000
SYNC_CHUNK_BYTES: Final = 1 << 20  # a whole table travels in messages of about this size
ROUTE_CACHE_MAX: Final = 4096  # (exchange, routing key) -> queues, cleared on any change

# Stable error codes (the gRPC API maps them to status codes and ErrorInfo reasons).
ERR: Final = "ERR"  # a bad argument
NOT_FOUND: Final = "NOT_FOUND"
PRECONDITION_FAILED: Final = "PRECONDITION_FAILED"
LIMIT: Final = "LIMIT"


class RouteError(Exception):
    """A routes change refused, nothing stored: ``code`` is one of ERR, NOT_FOUND,
    PRECONDITION_FAILED, LIMIT."""

    def __init__(self, message: str, code: str = ERR) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


class QueuePurger(Protocol):
    def purge_queue(self, now_ms: int, queue: str, before_ctime: int = 0) -> int: ...


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _check_name(what: str, name: str) -> None:
    if not name:
        raise RouteError(f"{what} name must not be empty")
    if _size(name) > NAME_MAX_BYTES:
        raise RouteError(f"{what} name is longer than {NAME_MAX_BYTES} bytes")


def _check_exchange_name(name: str) -> None:
    if not name:
        raise RouteError("the default exchange '' cannot be declared, deleted or bound")
    _check_name("exchange", name)


def _check_key(key: str) -> None:
    if _size(key) > ROUTING_KEY_MAX_BYTES:
        raise RouteError(f"routing key is longer than {ROUTING_KEY_MAX_BYTES} bytes")


def _entry_crc(e: RouteEntry) -> int:
    text = f"{e.kind}\0{e.name}\0{e.queue}\0{e.routing_key}\0{e.version_ms}\0{e.version_node}"
    return zlib.crc32(text.encode("utf-8", "surrogateescape"))


class Routes:
    """The routes table of the cluster, as this node holds it."""

    def __init__(self, view: ClusterView, purger: QueuePurger | None) -> None:
        self.view = view
        self.purger = purger
        self.wall_offset_ms = 0
        self.persist = False
        self.aof_out: list[bytes] = []
        self.outbox: list[tuple[str, Message]] = []
        self.table: dict[tuple[int, str, str, str], RouteEntry] = {}
        # Live indexes of the table (tombstones excluded).
        self.exchanges: dict[str, str] = {}  # name -> type
        self.bindings: dict[str, dict[tuple[str, str], None]] = {}  # exchange -> (queue, key)
        self.queues: dict[str, RouteEntry] = {}  # declarations
        # queue -> its bindings (exchange, key): deleting a queue does not walk them all.
        self._by_queue: dict[str, dict[tuple[str, str], None]] = {}
        self.binding_count = 0
        self.tombstones = 0
        # The bounds, per instance so a test can lower them (compiled, the module's Final
        # constants are inlined where they are used).
        self.exchanges_max = EXCHANGES_MAX
        self.bindings_max = BINDINGS_MAX
        self.queues_max = QUEUES_MAX
        self.tombstones_max = TOMBSTONES_MAX
        self.sync_chunk_bytes = SYNC_CHUNK_BYTES
        self.stats: dict[str, int] = {
            "queues_expired": 0,
            "jobs_purged": 0,
            "syncs_sent": 0,
            "syncs_merged": 0,
        }
        self._expiry: list[tuple[int, str, int]] = []  # (wall deadline, queue, version_ms)
        self._cache: dict[tuple[str, str], list[str]] = {}
        self._patterns: dict[str, list[Token]] = {}
        self._started_ms = -1
        # Leases are judged on this node's copy of the table, so it expires nothing before a
        # peer's whole table reached it (a node back from a restart holds the declarations
        # of before, not their renewals) nor while it cannot reach a majority (a node cut
        # off misses renewals: its tombstones would delete live queues once the cut heals).
        self.synced = False
        self._sync_at_ms = 0
        self._tomb_heap: list[tuple[int, tuple[int, str, str, str]]] = []  # (version, key)
        # An order-free digest kept up to date entry by entry: the sum of the entries' CRCs.
        self._digest_sum = 0

    # ------------------------------------------------------------------ clocks
    def _wall(self, now_ms: int) -> int:
        return now_ms + self.wall_offset_ms

    # ------------------------------------------------------------------ commands
    def declare_exchange(
        self, now_ms: int, name: str, exchange_type: str, passive: bool = False
    ) -> None:
        """Raises RouteError (nothing stored): a bad name or type, a type clash, the limit;
        with ``passive``, only NOT_FOUND when it does not exist."""
        _check_exchange_name(name)
        cur = self.exchanges.get(name)
        if passive:
            if cur is None:
                raise RouteError(f"no exchange {name!r}", NOT_FOUND)
            return
        if exchange_type not in EXCHANGE_TYPES:
            raise RouteError(
                f"exchange type {exchange_type!r} is not supported "
                f"(supported: {', '.join(EXCHANGE_TYPES)})"
            )
        if cur is not None:
            if cur != exchange_type:
                raise RouteError(
                    f"inequivalent arg 'type' for exchange {name!r}: "
                    f"received {exchange_type!r} but current is {cur!r}",
                    PRECONDITION_FAILED,
                )
            return  # the same declaration: nothing changes, nothing to sync
        if len(self.exchanges) >= self.exchanges_max:
            raise RouteError(f"too many exchanges (at most {self.exchanges_max})", LIMIT)
        self._local_change(now_ms, RouteEntry(ROUTE_EXCHANGE, name, exchange_type=exchange_type))

    def delete_exchange(self, now_ms: int, name: str) -> bool:
        """The exchange and its bindings; False when it did not exist."""
        _check_exchange_name(name)
        etype = self.exchanges.get(name)
        if etype is None:
            return False
        for queue, key in list(self.bindings.get(name, {})):
            self._local_change(now_ms, RouteEntry(ROUTE_BINDING, name, queue, key, deleted=True))
        self._local_change(
            now_ms, RouteEntry(ROUTE_EXCHANGE, name, exchange_type=etype, deleted=True)
        )
        return True

    def declare_queue(
        self, now_ms: int, name: str, expires_ms: int = 0, message_ttl_ms: int = 0
    ) -> None:
        """A queue's options; with ``expires_ms`` a lease that this call (re)starts."""
        _check_name("queue", name)
        if not 0 <= expires_ms <= LEASE_MAX_MS:
            raise RouteError(f"expires_ms must be 0 (never) to {LEASE_MAX_MS}")
        if not 0 <= message_ttl_ms <= LEASE_MAX_MS:
            raise RouteError(f"message_ttl_ms must be 0 (none) to {LEASE_MAX_MS}")
        cur = self.queues.get(name)
        if cur is None:
            if len(self.queues) >= self.queues_max:
                raise RouteError(f"too many declared queues (at most {self.queues_max})", LIMIT)
        elif cur.expires_ms == 0 == expires_ms and cur.message_ttl_ms == message_ttl_ms:
            return  # nothing to renew, nothing changes: a producer re-declares often
        self._local_change(
            now_ms,
            RouteEntry(ROUTE_QUEUE, name, expires_ms=expires_ms, message_ttl_ms=message_ttl_ms),
        )

    def delete_queue(self, now_ms: int, name: str) -> int:
        """The declaration (a tombstone even for a queue never declared: every node purges
        when it learns it) and every binding of the queue; the jobs purged here."""
        _check_name("queue", name)
        before = self.stats["jobs_purged"]
        self._delete_queue(now_ms, name)
        return self.stats["jobs_purged"] - before

    def _delete_queue(self, now_ms: int, name: str) -> None:
        for exchange, key in list(self._by_queue.get(name, {})):
            self._local_change(now_ms, RouteEntry(ROUTE_BINDING, exchange, name, key, deleted=True))
        self._local_change(now_ms, RouteEntry(ROUTE_QUEUE, name, deleted=True))

    def bind(self, now_ms: int, queue: str, exchange: str, routing_key: str = "") -> None:
        _check_name("queue", queue)
        _check_exchange_name(exchange)
        _check_key(routing_key)
        if exchange not in self.exchanges:
            raise RouteError(f"no exchange {exchange!r}", NOT_FOUND)
        if (queue, routing_key) in self.bindings.get(exchange, {}):
            return
        if self.binding_count >= self.bindings_max:
            raise RouteError(f"too many bindings (at most {self.bindings_max})", LIMIT)
        self._local_change(now_ms, RouteEntry(ROUTE_BINDING, exchange, queue, routing_key))

    def unbind(self, now_ms: int, queue: str, exchange: str, routing_key: str = "") -> bool:
        _check_name("queue", queue)
        _check_exchange_name(exchange)
        _check_key(routing_key)
        if (queue, routing_key) not in self.bindings.get(exchange, {}):
            return False
        self._local_change(
            now_ms, RouteEntry(ROUTE_BINDING, exchange, queue, routing_key, deleted=True)
        )
        return True

    def _local_change(self, now_ms: int, e: RouteEntry) -> None:
        cur = self.table.get(e.key())
        e.version_ms = self._wall(now_ms)
        if cur is not None and e.version_ms <= cur.version_ms:
            e.version_ms = cur.version_ms + 1  # a later change here is always a newer version
        e.version_node = self.view.my_id
        self._apply(now_ms, e, True)
        peers = self.view.all_peers()
        for peer in peers:
            self.outbox.append((peer, RouteSync(entries=[e])))
        self.stats["syncs_sent"] += len(peers)

    # ------------------------------------------------------------------ routing
    def route(self, exchange: str, routing_key: str) -> list[str] | None:
        """The queues a message published to ``exchange`` with ``routing_key`` goes to,
        each once, sorted; None when the exchange is unknown. The default exchange ``""``
        names the queue by the routing key."""
        if not exchange:
            return [routing_key] if routing_key else []
        etype = self.exchanges.get(exchange)
        if etype is None:
            return None
        cache_key = (exchange, routing_key)
        hit = self._cache.get(cache_key)
        if hit is not None:
            return list(hit)
        pairs = self.bindings.get(exchange, {})
        found: set[str] = set()
        if etype == "fanout":
            found = {queue for queue, _ in pairs}
        elif etype == "direct":
            found = {queue for queue, key in pairs if key == routing_key}
        else:
            for queue, key in pairs:
                if queue not in found and matches(self._pattern(key), routing_key):
                    found.add(queue)
        out = sorted(found)
        if len(self._cache) >= ROUTE_CACHE_MAX:
            self._cache.clear()
        self._cache[cache_key] = out
        return list(out)

    def _pattern(self, key: str) -> list[Token]:
        tokens = self._patterns.get(key)
        if tokens is None:
            if len(self._patterns) >= ROUTE_CACHE_MAX:
                self._patterns.clear()
            tokens = self._patterns[key] = compile_pattern(key)
        return tokens

    def message_ttl_ms(self, queue: str) -> int:
        """The declared x-message-ttl of ``queue`` (0: none)."""
        d = self.queues.get(queue)
        return 0 if d is None else d.message_ttl_ms

    def binding_list(self) -> list[tuple[str, str, str]]:
        """Every live binding as (exchange, queue, routing key), sorted."""
        return sorted(
            (exchange, queue, key)
            for exchange, pairs in self.bindings.items()
            for queue, key in pairs
        )

    # ------------------------------------------------------------------ the table
    def _apply(self, now_ms: int, e: RouteEntry, purge: bool) -> bool:
        """Take ``e`` if it is newer than what is held; log it. True: taken."""
        key = e.key()
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
            self._digest_sum -= _entry_crc(cur)
            if cur.deleted:
                self.tombstones -= 1
        self._digest_sum += _entry_crc(e)
        if e.deleted:
            self.tombstones += 1
            heapq.heappush(self._tomb_heap, (e.version_ms, key))
        if self.persist:
            self.aof_out.append(frame(REC_ROUTE, encode_entry(e)))
        if e.kind == ROUTE_EXCHANGE:
            self._cache.clear()
            if e.deleted:
                self.exchanges.pop(e.name, None)
            else:
                self.exchanges[e.name] = e.exchange_type
        elif e.kind == ROUTE_BINDING:
            self._cache.clear()
            pairs = self.bindings.get(e.name)
            pair = (e.queue, e.routing_key)
            by_queue = self._by_queue.get(e.queue)
            if e.deleted:
                if pairs is not None and pair in pairs:
                    del pairs[pair]
                    self.binding_count -= 1
                    if not pairs:
                        del self.bindings[e.name]
                if by_queue is not None:
                    by_queue.pop((e.name, e.routing_key), None)
                    if not by_queue:
                        del self._by_queue[e.queue]
            else:
                if pairs is None:
                    pairs = self.bindings[e.name] = {}
                if pair not in pairs:
                    pairs[pair] = None
                    self.binding_count += 1
                if by_queue is None:
                    by_queue = self._by_queue[e.queue] = {}
                by_queue[(e.name, e.routing_key)] = None
        elif e.deleted:
            self.queues.pop(e.name, None)
            if purge and self.purger is not None:
                # Only the jobs created before the delete (ctime: wall ms * 1e6).
                purged = self.purger.purge_queue(now_ms, e.name, e.version_ms * 1_000_000)
                self.stats["jobs_purged"] += purged
        else:
            self.queues[e.name] = e
            if e.expires_ms > 0:
                heapq.heappush(self._expiry, (e.version_ms + e.expires_ms, e.name, e.version_ms))
        return True

    def digest(self) -> int:
        """A digest of the whole table (0 never: it means "no digest" on the wire)."""
        return (self._digest_sum & 0xFFFFFFFF) or 1

    # ------------------------------------------------------------------ peers
    def on_message(self, now_ms: int, sender: str, msg: RouteSync) -> None:
        took = False
        for e in msg.entries:
            if self._apply(now_ms, e, True):
                took = True
        if took:
            self.stats["syncs_merged"] += 1
        if msg.whole or (msg.digest and not msg.entries and msg.digest == self.digest()):
            self.synced = True
        if msg.want:
            self._send_all(sender, want=False)
        elif msg.digest and not msg.entries and msg.digest != self.digest():
            self._send_all(sender, want=True)

    def on_link_up(self, now_ms: int, peer: str) -> None:
        """A link came up (a node joined or came back): it gets the whole table."""
        self._send_all(peer, want=False)

    def _send_all(self, peer: str, want: bool) -> None:
        chunks = chunked(
            self.table.values(),
            lambda e: len(e.name) + len(e.queue) + len(e.routing_key) + 64,
            self.sync_chunk_bytes,
        )
        full, rest = chunks[:-1], chunks[-1]
        for i, chunk in enumerate(full):
            self.outbox.append((peer, RouteSync(entries=chunk, want=want and i == 0)))
        first = not full
        self.outbox.append(
            (
                peer,
                RouteSync(
                    entries=rest,
                    want=want and first,
                    whole=True,
                    # An empty table still says so: the peer then knows it is in sync.
                    digest=self.digest() if not rest and first else 0,
                ),
            )
        )
        self.stats["syncs_sent"] += 1

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> int:
        if not self.table:
            # Nothing to compare or expire: a peer with routes probes this node, and its
            # empty answer brings them all.
            return -1
        when = self._sync_at_ms
        heap = self._expiry
        # A lease this node may not judge now is looked at again in the next digest round.
        while heap and self._may_expire():
            deadline, name, version = heap[0]
            d = self.queues.get(name)
            if d is None or d.version_ms != version:
                heapq.heappop(heap)  # renewed or deleted since
                continue
            when = min(when, deadline - self.wall_offset_ms)
            break
        return when

    def tick(self, now_ms: int) -> None:
        if self._started_ms < 0:
            self._start(now_ms)
        if now_ms >= self._sync_at_ms:
            self._sync_at_ms = now_ms + SYNC_MS
            self._prune(now_ms)
            peers = self.view.reachable_peers()
            if peers and self.table:
                digest = self.digest()
                for peer in peers:
                    self.outbox.append((peer, RouteSync(digest=digest)))
        size = self.view.cluster_size()
        if size > 1 and 2 * (len(self.view.reachable_peers()) + 1) <= size:
            # Cut off: renewals may be passing this node by. Back with a majority, it judges
            # again only once a peer's whole table (or an equal digest) says it caught up.
            self.synced = False
        if self._may_expire():
            self._expire(now_ms)

    def _may_expire(self) -> bool:
        """Whether this node may judge leases now (see ``synced``)."""
        size = self.view.cluster_size()
        if size <= 1:
            return True
        return self.synced and 2 * (len(self.view.reachable_peers()) + 1) > size

    def _start(self, now_ms: int) -> None:
        self._started_ms = now_ms
        self._sync_at_ms = now_ms + SYNC_MS

    def _expire(self, now_ms: int) -> None:
        wall = self._wall(now_ms)
        heap = self._expiry
        while heap and heap[0][0] <= wall:
            _deadline, name, version = heapq.heappop(heap)
            d = self.queues.get(name)
            if d is None or d.version_ms != version:
                continue  # renewed or deleted since
            self.stats["queues_expired"] += 1
            self._delete_queue(now_ms, name)

    def _keep_edge(self, now_ms: int) -> int:
        """Tombstones older than this (wall ms) are dropped: the keep time, whole PRUNE_MS."""
        return (self._wall(now_ms) - TOMBSTONE_KEEP_MS) // PRUNE_MS * PRUNE_MS

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
            self._digest_sum -= _entry_crc(e)
        if len(heap) > 2 * self.tombstones + 1024:
            # Entries of tombstones replaced since (a queue declared again) wait for their
            # day: rebuild from the table so a churn cannot grow the heap past it.
            self._tomb_heap = [(e.version_ms, k) for k, e in self.table.items() if e.deleted]
            heapq.heapify(self._tomb_heap)

    # ------------------------------------------------------------------ persistence
    def restore(self, now_ms: int, records: list[tuple[int, bytes]]) -> None:
        """Replay ROUTE records (no purge: the purges' own records are in the file)."""
        if self._started_ms < 0:
            self._start(now_ms)
        persist, self.persist = self.persist, False
        for rtype, payload in records:
            if rtype == REC_ROUTE:
                self._apply(now_ms, decode_entry(payload), False)
        self.persist = persist

    def snapshot_records(self) -> list[bytes]:
        return [frame(REC_ROUTE, encode_entry(e)) for e in self.table.values()]

    def has_output(self) -> bool:
        return bool(self.aof_out or self.outbox)
