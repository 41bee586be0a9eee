"""Queue policies the cluster keeps (QPOLICY): per queue, a delivery limit, a dead letter
queue and a requeue backoff, set on any node and known by every node.

Kept as the routes table is kept (disq/core/routes/table.py, whose rules this follows):

- **Entries, last writer wins.** A queue's policy is one entry, versioned ``(wall ms, node
  id)``; a SET or a DEL is a new version and the highest wins on every node, so concurrent
  changes end the same everywhere. A SET replaces the whole policy (fields not given are
  unset): merging fields of concurrent SETs would need a version per field, for no use a
  client asked for. A DEL is a tombstone kept ``TOMBSTONE_KEEP_MS`` (a day), so a node that
  missed it cannot bring the policy back; past ``TOMBSTONES_MAX`` the oldest go first.
- **Peers.** A change is pushed to every peer at once (PolicySync); every ``SYNC_MS`` each
  node sends each reachable peer a digest, two nodes whose digests differ swap whole tables,
  and a link that comes up gets the whole table. Entries are QPOLICY records in the AOF
  (disq/persistence/policy_records.py), replayed at start and kept by rewrites.
- **Bounds.** At most ``POLICIES_MAX`` live policies; names as the routes table's (1 to 1000
  bytes); MAXDELIVERIES 1 to 1,000,000; a backoff's base 0 or more, its max at least the
  base and at most 30 days.

**BACKOFF** (applied by disq/core/disque/requeue.py, which asks ``backoff_s``): every
requeue of a delivered job of the queue (a NACK without DELAY, a RETRY run out) waits
``min(base * 2^(deliveries-1), max)`` seconds, plus a jitter of up to a tenth of it (never
less: jitter only adds), on every holder, as a NACK DELAY waits. ``deliveries`` is the
delivery that failed: ``nacks + additional_deliveries + 1`` before this requeue counts it
(the first delivery is the add's; each nack and each RETRY run out brought one more), so
the first failure waits ``base``, the second ``2 * base``. The counters are the copies'
shared ones (the maximum of each wins), so every holder computes the same delay.

**MAXDELIVERIES and DEADLETTER are stored, not applied yet.** The design they need, so
that a job is dead-lettered exactly once although every holder of a copy may requeue it
(Disque's objection to dead letter queues: several nodes would each move the same job):

1. *One decider per job.* Only the node that would requeue the job decides: a requeue is
   already single-winner (WILLQUEUE asks the other holders first, a QUEUED answer stops
   it, and two copies queued at once keep the one of ``compare_ids_by_job``'s winner).
   A requeue whose count reaches MAXDELIVERIES becomes a dead-letter move instead.
2. *The move is a keyed add.* The dead letter job is added to the DEADLETTER queue with the
   idempotency key ``deadletter:<job id>`` (disq/core/disque/keyvote.py: a key binds one
   job cluster-wide by a majority vote). Two nodes deciding at once (a partition, a lost
   QUEUED) both propose; the vote binds one job and the other add answers the first's id.
   Without a majority the move waits (the job stays held, never requeued nor dropped).
3. *Then the original is acked*, only once the keyed add is bound (its reply says so), by
   the ordinary ACKJOB path (SETACK to every holder): a crash between the two leaves a
   bound key and a live job, and the next decider's add of the same key answers the bound
   id and goes on to the ack. So the dead letter queue gets the job once and the original
   is not delivered again once every holder learned the ack.
4. *Counters agree.* The decision reads ``nacks + additional_deliveries``; copies merge
   those by maximum, so a copy that missed a count decides later, never twice (the key).
"""

from __future__ import annotations

import heapq
import zlib
from typing import Final

from disq.core.chunks import chunked
from disq.core.disque.api import ClusterView
from disq.core.messages import Message, PolicyEntry, PolicySync
from disq.persistence.framing import frame
from disq.persistence.policy_records import REC_QPOLICY, decode_policy, encode_policy

POLICIES_MAX: Final = 100_000
NAME_MAX_BYTES: Final = 1000
MAX_DELIVERIES_MAX: Final = 1_000_000
BACKOFF_MAX_S: Final = 30 * 86400
TOMBSTONE_KEEP_MS: Final = 86400 * 1000
TOMBSTONES_MAX: Final = 200_000
SYNC_MS: Final = 2000  # digest to every reachable peer
PRUNE_MS: Final = 60_000  # tombstones drop at whole minutes: every node drops the same ones
SYNC_CHUNK_BYTES: Final = 1 << 20
_SHIFT_MAX: Final = 32  # 2^32 seconds is past any max: no bigger shift is computed


class PolicyError(Exception):
    """A policy change refused, nothing stored: ``code`` is ERR or LIMIT."""

    def __init__(self, message: str, code: str = "ERR") -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


def _check_name(what: str, name: str) -> None:
    if not name:
        raise PolicyError(f"{what} name must not be empty")
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES:
        raise PolicyError(f"{what} name is longer than {NAME_MAX_BYTES} bytes")


def _entry_crc(e: PolicyEntry) -> int:
    text = (
        f"{e.queue}\0{e.max_deliveries}\0{e.dead_letter}\0{e.backoff_base_s}\0"
        f"{e.backoff_max_s}\0{int(e.deleted)}\0{e.version_ms}\0{e.version_node}"
    )
    return zlib.crc32(text.encode("utf-8", "surrogateescape"))


def describe(e: PolicyEntry) -> list[tuple[str, object]]:
    """The policy's set fields as (name, value) pairs (QPOLICY GET, QSTAT)."""
    out: list[tuple[str, object]] = []
    if e.max_deliveries:
        out.append(("maxdeliveries", e.max_deliveries))
    if e.dead_letter:
        out.append(("deadletter", e.dead_letter))
    if e.backoff_max_s:
        out.append(("backoff-base", e.backoff_base_s))
        out.append(("backoff-max", e.backoff_max_s))
    return out


def _queue_of(e: PolicyEntry) -> str:
    return e.queue


class Policies:
    """The queue policies of the cluster, as this node holds them."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.wall_offset_ms = 0
        self.persist = False
        self.aof_out: list[bytes] = []
        self.outbox: list[tuple[str, Message]] = []
        self.table: dict[str, PolicyEntry] = {}  # queue -> entry, tombstones included
        self.live = 0
        self.tombstones = 0
        # Per instance so a test can lower them (compiled, Final constants are inlined).
        self.policies_max = POLICIES_MAX
        self.tombstones_max = TOMBSTONES_MAX
        self.sync_chunk_bytes = SYNC_CHUNK_BYTES
        self.stats: dict[str, int] = {"syncs_sent": 0, "syncs_merged": 0}
        self._started_ms = -1
        self._sync_at_ms = 0
        self._tomb_heap: list[tuple[int, str]] = []  # (version, queue)
        self._digest_sum = 0  # order-free: the sum of the entries' CRCs

    # ------------------------------------------------------------------ commands
    def set(
        self,
        now_ms: int,
        queue: str,
        max_deliveries: int = 0,
        dead_letter: str = "",
        backoff_base_s: int = 0,
        backoff_max_s: int = 0,
    ) -> None:
        """The queue's whole policy (fields 0 or "": unset). Raises PolicyError, storing
        nothing: a bad name or bound, an empty policy, the table full."""
        _check_name("queue", queue)
        if not 0 <= max_deliveries <= MAX_DELIVERIES_MAX:
            raise PolicyError(f"MAXDELIVERIES must be between 1 and {MAX_DELIVERIES_MAX}")
        if dead_letter:
            _check_name("dead letter queue", dead_letter)
            if dead_letter == queue:
                raise PolicyError("a queue cannot be its own DEADLETTER queue")
        if backoff_max_s or backoff_base_s:
            if not 0 <= backoff_base_s <= backoff_max_s <= BACKOFF_MAX_S or not backoff_max_s:
                raise PolicyError(
                    f"BACKOFF needs 0 <= base <= max, 0 < max <= {BACKOFF_MAX_S} seconds"
                )
        if not (max_deliveries or dead_letter or backoff_max_s):
            raise PolicyError("a policy needs MAXDELIVERIES, DEADLETTER or BACKOFF")
        cur = self.table.get(queue)
        if cur is None or cur.deleted:
            if self.live >= self.policies_max:
                raise PolicyError(f"too many queue policies (at most {self.policies_max})", "LIMIT")
        elif (cur.max_deliveries, cur.dead_letter, cur.backoff_base_s, cur.backoff_max_s) == (
            max_deliveries,
            dead_letter,
            backoff_base_s,
            backoff_max_s,
        ):
            return  # the same policy: nothing changes, nothing to sync
        self._local_change(
            now_ms,
            PolicyEntry(queue, max_deliveries, dead_letter, backoff_base_s, backoff_max_s),
        )

    def get(self, queue: str) -> PolicyEntry | None:
        e = self.table.get(queue)
        return None if e is None or e.deleted else e

    def delete(self, now_ms: int, queue: str) -> bool:
        """The queue's policy; False when it had none."""
        _check_name("queue", queue)
        if self.get(queue) is None:
            return False
        self._local_change(now_ms, PolicyEntry(queue, deleted=True))
        return True

    def limit(self, queue: str) -> tuple[int, str]:
        """``queue``'s MAXDELIVERIES (0: none) and DEADLETTER queue ("": none)."""
        e = self.table.get(queue)
        if e is None or e.deleted:
            return 0, ""
        return e.max_deliveries, e.dead_letter

    def live_entries(self) -> list[PolicyEntry]:
        """Every live policy, by queue name (the dashboard, QPOLICY LIST)."""
        return sorted((e for e in self.table.values() if not e.deleted), key=_queue_of)

    def backoff_s(self, queue: str, deliveries: int) -> int:
        """Seconds a requeue of ``queue``'s job after its ``deliveries``-th delivery waits
        (before jitter); -1: the queue has no backoff."""
        e = self.table.get(queue)
        if e is None or e.deleted or not e.backoff_max_s:
            return -1
        shift = min(max(deliveries - 1, 0), _SHIFT_MAX)
        return min(e.backoff_base_s << shift, e.backoff_max_s)

    def _local_change(self, now_ms: int, e: PolicyEntry) -> None:
        cur = self.table.get(e.queue)
        e.version_ms = now_ms + self.wall_offset_ms
        if cur is not None and e.version_ms <= cur.version_ms:
            e.version_ms = cur.version_ms + 1  # a later change here is always a newer version
        e.version_node = self.view.my_id
        self._apply(now_ms, e)
        peers = self.view.all_peers()
        for peer in peers:
            self.outbox.append((peer, PolicySync(entries=[e])))
        self.stats["syncs_sent"] += len(peers)

    # ------------------------------------------------------------------ the table
    def _apply(self, now_ms: int, e: PolicyEntry) -> bool:
        """Take ``e`` if it is newer than what is held; log it. True: taken."""
        cur = self.table.get(e.queue)
        if cur is not None and (cur.version_ms, cur.version_node) >= (
            e.version_ms,
            e.version_node,
        ):
            return False
        if e.deleted and e.version_ms < self._keep_edge(now_ms):
            return False  # would be pruned at once (a peer that has not pruned it yet)
        self.table[e.queue] = e
        if cur is not None:
            self._digest_sum -= _entry_crc(cur)
            if cur.deleted:
                self.tombstones -= 1
            else:
                self.live -= 1
        self._digest_sum += _entry_crc(e)
        if e.deleted:
            self.tombstones += 1
            heapq.heappush(self._tomb_heap, (e.version_ms, e.queue))
        else:
            self.live += 1
        if self.persist:
            self.aof_out.append(frame(REC_QPOLICY, encode_policy(e)))
        return True

    def digest(self) -> int:
        """A digest of the whole table (0 never: it means "no digest" on the wire)."""
        return (self._digest_sum & 0xFFFFFFFF) or 1

    # ------------------------------------------------------------------ peers
    def on_message(self, now_ms: int, sender: str, msg: PolicySync) -> None:
        took = False
        for e in msg.entries:
            if self._apply(now_ms, e):
                took = True
        if took:
            self.stats["syncs_merged"] += 1
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
            lambda e: len(e.queue) + len(e.dead_letter) + 64,
            self.sync_chunk_bytes,
        )
        full, rest = chunks[:-1], chunks[-1]
        for i, chunk in enumerate(full):
            self.outbox.append((peer, PolicySync(entries=chunk, want=want and i == 0)))
        first = not full
        digest = self.digest() if not rest and first else 0
        self.outbox.append(
            (peer, PolicySync(entries=rest, want=want and first, whole=True, digest=digest))
        )
        self.stats["syncs_sent"] += 1

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> int:
        # Nothing to compare: a peer with policies probes this node, and its empty answer
        # brings them all.
        return self._sync_at_ms if self.table else -1

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
                    self.outbox.append((peer, PolicySync(digest=digest)))

    def _start(self, now_ms: int) -> None:
        self._started_ms = now_ms
        self._sync_at_ms = now_ms + SYNC_MS

    def _keep_edge(self, now_ms: int) -> int:
        """Tombstones older than this (wall ms) are dropped: the keep time, whole PRUNE_MS."""
        return (now_ms + self.wall_offset_ms - TOMBSTONE_KEEP_MS) // PRUNE_MS * PRUNE_MS

    def _prune(self, now_ms: int) -> None:
        edge = self._keep_edge(now_ms)
        heap = self._tomb_heap
        while heap and (heap[0][0] < edge or self.tombstones > self.tombstones_max):
            version, queue = heapq.heappop(heap)
            e = self.table.get(queue)
            if e is None or not e.deleted or e.version_ms != version:
                continue  # replaced since
            del self.table[queue]
            self.tombstones -= 1
            self._digest_sum -= _entry_crc(e)
        if len(heap) > 2 * self.tombstones + 1024:
            # Entries of tombstones replaced since wait for their day: rebuild.
            self._tomb_heap = [(e.version_ms, q) for q, e in self.table.items() if e.deleted]
            heapq.heapify(self._tomb_heap)

    # ------------------------------------------------------------------ persistence
    def restore(self, now_ms: int, records: list[tuple[int, bytes]]) -> None:
        """Replay QPOLICY records."""
        if self._started_ms < 0:
            self._start(now_ms)
        persist, self.persist = self.persist, False
        for rtype, payload in records:
            if rtype == REC_QPOLICY:
                self._apply(now_ms, decode_policy(payload))
        self.persist = persist

    def snapshot_records(self) -> list[bytes]:
        return [frame(REC_QPOLICY, encode_policy(e)) for e in self.table.values()]

    def has_output(self) -> bool:
        return bool(self.aof_out or self.outbox)
