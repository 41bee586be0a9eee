"""Exchanges, bindings and queue declarations the cluster keeps (issue 29): the routes table.

kombu's Redis transport keeps its binding table in Redis, so every producer of every process
routes a fanout or topic message the same way; disq keeps it on every node, as a
``VersionedTable`` (disq/core/replicated_table.py: last writer wins, tombstones kept a day,
digests and whole-table swaps between peers; its docstring has the rules):

- **Entries.** An exchange (name, type), a binding (exchange, queue, routing key) or a
  queue declaration (name, ``expires_ms``, ``message_ttl_ms``), each versioned ``(wall ms,
  node id)``. A delete is a tombstone; past ``TOMBSTONES_MAX`` the oldest go first (a churn
  of transient queues must not grow the table without bound). Changes travel as RouteSync;
  entries are ROUTE records in the AOF (disq/persistence/route_records.py).
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

from disq.core.disque.api import ClusterView
from disq.core.messages import (
    ROUTE_BINDING,
    ROUTE_EXCHANGE,
    ROUTE_QUEUE,
    Message,
    RouteEntry,
    RouteSync,
)
from disq.core.replicated_table import PRUNE_MS as PRUNE_MS
from disq.core.replicated_table import SYNC_CHUNK_BYTES as SYNC_CHUNK_BYTES
from disq.core.replicated_table import SYNC_MS as SYNC_MS
from disq.core.replicated_table import TOMBSTONE_KEEP_MS as TOMBSTONE_KEEP_MS
from disq.core.replicated_table import TOMBSTONES_MAX as TOMBSTONES_MAX
from disq.core.replicated_table import VersionedTable
from disq.core.routes.topic import Token, compile_pattern, matches
from disq.persistence.route_records import REC_ROUTE, decode_entry, encode_entry

EXCHANGE_TYPES: Final = ("direct", "fanout", "topic")
EXCHANGES_MAX: Final = 10_000
BINDINGS_MAX: Final = 100_000
QUEUES_MAX: Final = 100_000
NAME_MAX_BYTES: Final = 1000
ROUTING_KEY_MAX_BYTES: Final = 1000
LEASE_MAX_MS: Final = 1 << 47  # expires_ms and message_ttl_ms: a sane bound, ~4,400 years
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


def _wire_size(e: RouteEntry) -> int:
    return len(e.name) + len(e.queue) + len(e.routing_key) + 64


def _key(e: RouteEntry) -> tuple[int, str, str, str]:
    return e.key()


class Routes:
    """The routes table of the cluster, as this node holds it."""

    def __init__(self, view: ClusterView, purger: QueuePurger | None) -> None:
        self.view = view
        self.purger = purger
        self.stats: dict[str, int] = {
            "queues_expired": 0,
            "jobs_purged": 0,
            "syncs_sent": 0,
            "syncs_merged": 0,
        }
        # The entries, tombstones included, and their sync with peers.
        self.shared: VersionedTable[tuple[int, str, str, str], RouteEntry] = VersionedTable(
            view,
            key=_key,
            crc=_entry_crc,
            size=_wire_size,
            sync=RouteSync,
            rec_type=REC_ROUTE,
            encode=encode_entry,
            decode=decode_entry,
            stats=self.stats,
            taken=self._index,
        )
        self.table = self.shared.table  # the same dict, as are aof_out and outbox
        self.aof_out: list[bytes] = self.shared.aof_out
        self.outbox: list[tuple[str, Message]] = self.shared.outbox
        # Live indexes of the table (tombstones excluded).
        self.exchanges: dict[str, str] = {}  # name -> type
        self.bindings: dict[str, dict[tuple[str, str], None]] = {}  # exchange -> (queue, key)
        self.queues: dict[str, RouteEntry] = {}  # declarations
        # queue -> its bindings (exchange, key): deleting a queue does not walk them all.
        self._by_queue: dict[str, dict[tuple[str, str], None]] = {}
        self.binding_count = 0
        # The bounds, per instance so a test can lower them (compiled, the module's Final
        # constants are inlined where they are used).
        self.exchanges_max = EXCHANGES_MAX
        self.bindings_max = BINDINGS_MAX
        self.queues_max = QUEUES_MAX
        self._expiry: list[tuple[int, str, int]] = []  # (wall deadline, queue, version_ms)
        self._cache: dict[tuple[str, str], list[str]] = {}
        self._patterns: dict[str, list[Token]] = {}
        # Leases are judged on this node's copy of the table, so it expires nothing before a
        # peer's whole table reached it (a node back from a restart holds the declarations
        # of before, not their renewals) nor while it cannot reach a majority (a node cut
        # off misses renewals: its tombstones would delete live queues once the cut heals).
        self.synced = False

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
        self.shared.local_change(now_ms, e)

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
    def _index(self, now_ms: int, e: RouteEntry, replay: bool) -> None:
        """``e`` was taken into the table: the live indexes follow; a queue's tombstone
        purges the queue (not on replay: the purge's records are in the file)."""
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
            if not replay and self.purger is not None:
                # Only the jobs created before the delete (ctime: wall ms * 1e6).
                purged = self.purger.purge_queue(now_ms, e.name, e.version_ms * 1_000_000)
                self.stats["jobs_purged"] += purged
        else:
            self.queues[e.name] = e
            if e.expires_ms > 0:
                heapq.heappush(self._expiry, (e.version_ms + e.expires_ms, e.name, e.version_ms))

    def digest(self) -> int:
        """A digest of the whole table (0 never: it means "no digest" on the wire)."""
        return self.shared.digest()

    # ------------------------------------------------------------------ peers
    def on_message(self, now_ms: int, sender: str, msg: RouteSync) -> None:
        if self.shared.on_sync(now_ms, sender, msg.entries, msg.digest, msg.want, msg.whole):
            self.synced = True

    def on_link_up(self, now_ms: int, peer: str) -> None:
        """A link came up (a node joined or came back): it gets the whole table."""
        self.shared.send_all(peer, want=False)

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> int:
        if not self.table:
            # Nothing to compare or expire: a peer with routes probes this node, and its
            # empty answer brings them all.
            return -1
        when = self.shared.next_deadline_ms()
        heap = self._expiry
        # A lease this node may not judge now is looked at again in the next digest round.
        while heap and self._may_expire():
            deadline, name, version = heap[0]
            d = self.queues.get(name)
            if d is None or d.version_ms != version:
                heapq.heappop(heap)  # renewed or deleted since
                continue
            when = min(when, deadline - self.shared.wall_offset_ms)
            break
        return when

    def tick(self, now_ms: int) -> None:
        self.shared.tick(now_ms)
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

    def _expire(self, now_ms: int) -> None:
        wall = self.shared.wall(now_ms)
        heap = self._expiry
        while heap and heap[0][0] <= wall:
            _deadline, name, version = heapq.heappop(heap)
            d = self.queues.get(name)
            if d is None or d.version_ms != version:
                continue  # renewed or deleted since
            self.stats["queues_expired"] += 1
            self._delete_queue(now_ms, name)

    # ------------------------------------------------------------------ persistence
    def restore(self, now_ms: int, records: list[tuple[int, bytes]]) -> None:
        """Replay ROUTE records (no purge: the purges' own records are in the file)."""
        self.shared.restore(now_ms, records)

    def snapshot_records(self) -> list[bytes]:
        return self.shared.snapshot_records()

    def has_output(self) -> bool:
        return self.shared.has_output()
