"""Queue policies the cluster keeps (QPOLICY): per queue, a delivery limit, a dead letter
queue and a requeue backoff, set on any node and known by every node.

Kept as the routes table is kept, as a ``VersionedTable`` (disq/core/replicated_table.py:
last writer wins, tombstones kept a day, digests and whole-table swaps between peers; its
docstring has the rules):

- **Entries.** A queue's policy is one entry, versioned ``(wall ms, node id)``; a SET or a
  DEL is a new version. A SET replaces the whole policy (fields not given are unset):
  merging fields of concurrent SETs would need a version per field, for no use a client
  asked for. A DEL is a tombstone. Changes travel as PolicySync; entries are QPOLICY
  records in the AOF (disq/persistence/policy_records.py).
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

**MAXDELIVERIES and DEADLETTER** are applied by disq/core/disque/deadletter.py (which asks
``limit``): a job that failed MAXDELIVERIES deliveries is moved to the DEADLETTER queue once
(one decider, a keyed add bound by a majority vote, then the ack), or dropped without one.
Beanstalk tubes bury at the limit instead (the beanstalk engine asks the same ``limit``).
"""

from __future__ import annotations

import zlib
from typing import Final

from disq.core.disque.api import ClusterView
from disq.core.messages import Message, PolicyEntry, PolicySync
from disq.core.replicated_table import PRUNE_MS as PRUNE_MS
from disq.core.replicated_table import SYNC_CHUNK_BYTES as SYNC_CHUNK_BYTES
from disq.core.replicated_table import SYNC_MS as SYNC_MS
from disq.core.replicated_table import TOMBSTONE_KEEP_MS as TOMBSTONE_KEEP_MS
from disq.core.replicated_table import TOMBSTONES_MAX as TOMBSTONES_MAX
from disq.core.replicated_table import VersionedTable
from disq.persistence.policy_records import REC_QPOLICY, decode_policy, encode_policy

POLICIES_MAX: Final = 100_000
NAME_MAX_BYTES: Final = 1000
MAX_DELIVERIES_MAX: Final = 1_000_000
BACKOFF_MAX_S: Final = 30 * 86400
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


def _wire_size(e: PolicyEntry) -> int:
    return len(e.queue) + len(e.dead_letter) + 64


class Policies:
    """The queue policies of the cluster, as this node holds them."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.stats: dict[str, int] = {"syncs_sent": 0, "syncs_merged": 0}
        self.shared: VersionedTable[str, PolicyEntry] = VersionedTable(
            view,
            key=_queue_of,
            crc=_entry_crc,
            size=_wire_size,
            sync=PolicySync,
            rec_type=REC_QPOLICY,
            encode=encode_policy,
            decode=decode_policy,
            stats=self.stats,
        )
        # queue -> entry, tombstones included; the same dict, as are aof_out and outbox.
        self.table = self.shared.table
        self.aof_out: list[bytes] = self.shared.aof_out
        self.outbox: list[tuple[str, Message]] = self.shared.outbox
        # Per instance so a test can lower it (compiled, Final constants are inlined).
        self.policies_max = POLICIES_MAX

    @property
    def live(self) -> int:
        """Live policies: the table's entries but its tombstones."""
        return len(self.table) - self.shared.tombstones

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
        self.shared.local_change(now_ms, e)

    def digest(self) -> int:
        """A digest of the whole table (0 never: it means "no digest" on the wire)."""
        return self.shared.digest()

    # ------------------------------------------------------------------ peers
    def on_message(self, now_ms: int, sender: str, msg: PolicySync) -> None:
        self.shared.on_sync(now_ms, sender, msg.entries, msg.digest, msg.want, msg.whole)

    def on_link_up(self, now_ms: int, peer: str) -> None:
        """A link came up (a node joined or came back): it gets the whole table."""
        self.shared.send_all(peer, want=False)

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> int:
        return self.shared.next_deadline_ms()

    def tick(self, now_ms: int) -> None:
        self.shared.tick(now_ms)

    # ------------------------------------------------------------------ persistence
    def restore(self, now_ms: int, records: list[tuple[int, bytes]]) -> None:
        """Replay QPOLICY records."""
        self.shared.restore(now_ms, records)

    def snapshot_records(self) -> list[bytes]:
        return self.shared.snapshot_records()

    def has_output(self) -> bool:
        return self.shared.has_output()
