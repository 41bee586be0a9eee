"""Jobs' results, kept by every node: RESULT SET, GET, WAIT and DEL (disq's addition to
Disque's commands; the RESP door's grammar is in disq/doors/disque/results.py).

A result is small, read anywhere, and must outlive the node that set it: so every node keeps
every result (where a job's copies live on a few nodes). A set is stored here (its RESULT
record logged before any answer) and sent to every reachable peer as a RESULT message; each
peer stores and logs it, then answers GOTRESULT (the Ready's rule, records before messages,
makes the answer mean "on disk"). The set is answered OK once ``repl`` nodes hold it, this
one included, or NOREPL at its timeout; like an ADDJOB that timed out, the result stays
where it landed. Peers that have not answered are sent it again every ``RESEND_MS`` while
the set waits (a link that was down dropped the first).

A waiter (RESULT WAIT) blocks until the result arrives here, by a local set or a peer's
RESULT, or its timeout passes (answered None). Each node drops a result at its own clock's
TTL: the TTL travels as the time left, as a job's does; a DEL travels as a RESULT with
``deleted`` set, to every peer.

A peer that has not confirmed a set (unreachable then, down, or its answer not back yet) is
owed it: each peer's ``owed`` keys, dropped at its GOTRESULT, are sent again when its link
comes up (a node that was down or cut off during a set learns it when it is back), as are
deletes it may have missed. Bounded per peer (``OWED_MAX``, the oldest forgotten first): a
peer away for that many sets learns only the newest. A node that joins later, or loses its
AOF, learns nothing older than its join (no anti-entropy over the whole table). Deletes keep
no tombstone: a DEL that races another node's resend of the same key to a returning peer can
leave that peer a copy until its TTL.

A result's key is a job's id, or any key of 1 to ``RESULT_KEY_MAX_BYTES`` printable ASCII
bytes (Celery's and Dramatiq's backends key results by task and message ids). A set with
``ack`` acks its job once the result is held by ``repl`` nodes (a worker's "done, and here
is the value"): never before, so a worker that dies in between leaves the job to run again,
and its result is never lost behind an ack. A set answered NOREPL acks nothing.

A component of the core (``core.results``) owning its table, its waiters and their timers.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Protocol

from disq.core.constants import TICK_BATCH
from disq.core.disque.api import (
    NOREPL_EXPIRED,
    NOREPL_NODES,
    NOREPL_TIMEOUT,
    PENDING,
    DisqueError,
    Pending,
)
from disq.core.disque.host import CoreHost
from disq.core.disque.memory import MemoryLevels
from disq.core.messages import GotResult, Result
from disq.persistence.cluster_records import (
    REC_RESULT,
    REC_RESULTDEL,
    decode_result,
    decode_resultdel,
    encode_result,
    encode_resultdel,
)
from disq.persistence.framing import frame

if TYPE_CHECKING:
    from disq.core.disque.ack import Acks

DEFAULT_RESULT_TTL_S = 86400  # Celery's result_expires
DEFAULT_RESULT_TIMEOUT_MS = 5000
RESEND_MS = 500  # silent peers of a waiting set are sent the result again this often
# What a result costs besides its value (its table entry, id, tuple and heap entry), for the
# memory levels: the order of a job's overhead, less the queue and timer entries.
RESULT_OVERHEAD_BYTES = 200
OOM_MSG = "command not allowed when used memory > 'maxmemory'."
OWED_MAX = 100_000  # keys owed to one peer before the oldest are forgotten
RESULT_KEY_MAX_BYTES = 255  # the AOF record keeps the key's length in one byte


def valid_result_key(key: bytes) -> bool:
    """1 to RESULT_KEY_MAX_BYTES printable ASCII bytes, no space: a job id, a task id."""
    return 0 < len(key) <= RESULT_KEY_MAX_BYTES and all(0x21 <= c <= 0x7E for c in key)


class ResultsHost(CoreHost, Protocol):
    """What the results need of the core beyond its outboxes: its memory estimate, and its
    acks (a set with ``ack``)."""

    memory: MemoryLevels
    acks: Acks


class SetWait:
    """A RESULT SET waiting for its copies."""

    def __init__(
        self, key: str, needed: int, me: str, deadline_ms: int, now_ms: int, ack: bool
    ) -> None:
        self.key: str = key
        self.ack: bool = ack  # ack the job whose id is ``key`` once held
        self.needed: int = needed
        self.holders: set[str] = {me}
        self.deadline_ms: int = deadline_ms  # 0: forever
        self.resend_ms: int = now_ms + RESEND_MS


class Results:
    """The results this node keeps, the sets waiting for copies, the waiters."""

    def __init__(self, host: ResultsHost) -> None:
        self.host: ResultsHost = host
        self.table: dict[str, tuple[bytes, int]] = {}  # key -> (value, expiry node ms)
        self.expiry: list[tuple[int, str]] = []  # (expiry ms, key), lazy deletion
        self.sets: dict[int, SetWait] = {}  # token -> a set waiting for copies
        self.sets_by_key: dict[str, list[int]] = {}
        self.waits: dict[int, tuple[str, int]] = {}  # token -> (key, deadline ms; 0 none)
        self.waits_by_key: dict[str, list[int]] = {}
        self.timers: list[tuple[int, int]] = []  # (ms, token): deadlines and resends, lazy
        self.owed: dict[str, dict[str, None]] = {}  # peer -> keys it has not confirmed

    def count(self) -> int:
        """Clients blocked here: sets waiting for copies, waiters (INFO's blocked_clients)."""
        return len(self.sets) + len(self.waits)

    # ------------------------------------------------------------------ commands
    def set(
        self,
        now_ms: int,
        token: int,
        key: str,
        value: bytes,
        ttl_s: int | None = None,
        repl: int | None = None,
        timeout_ms: int = DEFAULT_RESULT_TIMEOUT_MS,
        ack: bool = False,
    ) -> str | Pending:
        """RESULT SET: "OK" when this node alone suffices, else PENDING (OK or NOREPL in
        ``replies``); ``repl`` None: a job's own level for its id, else min(3, nodes). Raises
        OOM over maxmemory, NOREPL when too few peers are reachable
        (as ADDJOB: nothing is stored then). ``ack``: ACKJOB ``key`` (a job id) once OK.
        ``ttl_s`` None: a job's result goes when its job's TTL ends (garbage-collected with
        the job, on every node, whether the job was acked before or not); any other key's
        after one day (Celery's ``result_expires``)."""
        host = self.host
        if host.memory.warning >= 3:
            raise DisqueError("OOM", OOM_MSG)
        job = host.jobs.get(key)
        if repl is None:
            # A job's result is kept as widely as its job; any other key on min(3, nodes).
            repl = job.repl if job is not None else min(3, host.view.cluster_size())
        peers = host.view.reachable_peers()
        if repl - 1 > len(peers):
            raise DisqueError("NOREPL", NOREPL_NODES)
        if ttl_s is not None:
            ttl_ms = ttl_s * 1000
        elif job is not None:
            ttl_ms = max(1000, job.etime_ms - now_ms)
        else:
            ttl_ms = DEFAULT_RESULT_TTL_S * 1000
        self._store(key, value, now_ms + ttl_ms)
        msg = Result(key, value, ttl_ms)
        for node in peers:
            host._send(node, msg)
        self._owe(host.view.all_peers(), key)
        if repl <= 1:
            if ack:
                host.acks.ack_job(now_ms, [key])
            return "OK"
        deadline = now_ms + timeout_ms if timeout_ms > 0 else 0
        w = SetWait(key, repl, host.my_id, deadline, now_ms, ack)
        self.sets[token] = w
        self.sets_by_key.setdefault(key, []).append(token)
        if deadline:
            heapq.heappush(self.timers, (deadline, token))
        heapq.heappush(self.timers, (w.resend_ms, token))
        return PENDING

    def get(self, now_ms: int, key: str) -> bytes | None:
        """RESULT GET: the value, or None (none here, or its TTL passed)."""
        got = self.table.get(key)
        if got is None or got[1] < now_ms:
            return None
        return got[0]

    def wait(self, now_ms: int, token: int, key: str, timeout_ms: int) -> bytes | Pending:
        """RESULT WAIT: the value if here, else PENDING until it arrives (the value in
        ``replies``) or ``timeout_ms`` passes (None; 0: wait forever)."""
        value = self.get(now_ms, key)
        if value is not None:
            return value
        deadline = now_ms + timeout_ms if timeout_ms > 0 else 0
        self.waits[token] = (key, deadline)
        self.waits_by_key.setdefault(key, []).append(token)
        if deadline:
            heapq.heappush(self.timers, (deadline, token))
        return PENDING

    def delete(self, now_ms: int, key: str) -> int:
        """RESULT DEL: dropped here (1, or 0 when not here) and on every peer."""
        host = self.host
        n = self._drop(key, log=True)
        msg = Result(key, b"", 0, True)
        reachable = set(host.view.reachable_peers())
        peers = host.view.all_peers()
        for node in peers:
            host._send(node, msg)
        # Deletes are not confirmed: a peer out of reach now hears it at its link's next up.
        self._owe([p for p in peers if p not in reachable], key)
        return n

    def cancel(self, token: int) -> None:
        """The client of ``token`` went away: it stops waiting (a set's result stays)."""
        w = self.waits.pop(token, None)
        if w is not None:
            _unlist(self.waits_by_key, w[0], token)
        s = self.sets.pop(token, None)
        if s is not None:
            _unlist(self.sets_by_key, s.key, token)

    def reset(self, log: bool) -> None:
        """FLUSHALL (flush.py, which zeroes the memory estimate): every result gone, a set
        waiting is answered NOREPL, a waiter its timeout's None."""
        replies = self.host.replies
        for token in self.sets:
            replies.append((token, DisqueError("NOREPL", NOREPL_EXPIRED)))
        for token in self.waits:
            replies.append((token, None))
        if log:
            for key in self.table:
                self._log_del(key)
        self.table.clear()
        self.expiry.clear()
        self.sets.clear()
        self.sets_by_key.clear()
        self.waits.clear()
        self.waits_by_key.clear()
        self.timers.clear()
        self.owed.clear()

    # ------------------------------------------------------------------ messages
    def on_result(self, now_ms: int, sender: str, msg: Result) -> None:
        """A peer's set (stored, then GOTRESULT) or delete. A node over maxmemory keeps no
        copy and says nothing: the setter counts the copies that exist."""
        if msg.deleted:
            self._drop(msg.job_id, log=True)
            return
        if msg.ttl_ms <= 0 or self.host.memory.warning >= 3:
            return
        self._store(msg.job_id, msg.value, now_ms + msg.ttl_ms)
        self.host._send(sender, GotResult(msg.job_id))

    def on_gotresult(self, now_ms: int, sender: str, msg: GotResult) -> None:
        owed = self.owed.get(sender)
        if owed:
            owed.pop(msg.job_id, None)
        tokens = self.sets_by_key.get(msg.job_id)
        if not tokens:
            return
        for token in list(tokens):
            w = self.sets[token]
            w.holders.add(sender)
            if len(w.holders) >= w.needed:
                self._answer_set(token, "OK")
                if w.ack:
                    self.host.acks.ack_job(now_ms, [w.key])

    def on_link_up(self, now_ms: int, peer: str) -> None:
        """``peer``'s link came up: what it is owed, set or deleted since. A set stays owed
        until its GOTRESULT; a delete, owed only to the peers out of reach when it was made,
        is sent once (a lost one leaves the copy to its TTL)."""
        owed = self.owed.get(peer)
        if not owed:
            return
        host = self.host
        table = self.table
        for key in list(owed):
            got = table.get(key)
            if got is None or got[1] < now_ms:
                host._send(peer, Result(key, b"", 0, True))
                del owed[key]
            else:
                host._send(peer, Result(key, got[0], got[1] - now_ms))

    def _owe(self, peers: list[str], key: str) -> None:
        owed_by = self.owed
        for node in peers:
            owed = owed_by.get(node)
            if owed is None:
                owed = owed_by[node] = {}
            owed.pop(key, None)
            owed[key] = None  # the newest last: the oldest go first when over the bound
            if len(owed) > OWED_MAX:
                del owed[next(iter(owed))]

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self, nxt: int) -> int:
        """The earlier of ``nxt`` and when :meth:`tick` must run: a timer once passed."""
        if self.expiry and self.expiry[0][0] < nxt:
            nxt = self.expiry[0][0] + 1
        if self.timers and self.timers[0][0] < nxt:
            nxt = self.timers[0][0] + 1
        return nxt

    def tick(self, now_ms: int) -> None:
        table, expiry = self.table, self.expiry
        budget = TICK_BATCH
        while budget and expiry and expiry[0][0] < now_ms:
            at, key = heapq.heappop(expiry)
            got = table.get(key)
            if got is not None and got[1] == at:
                budget -= 1
                self._drop(key, log=False)  # the replay skips it by its expiry
        timers = self.timers
        while timers and timers[0][0] < now_ms:
            at, token = heapq.heappop(timers)
            w = self.waits.get(token)
            if w is not None and w[1] == at:
                del self.waits[token]
                _unlist(self.waits_by_key, w[0], token)
                self.host.replies.append((token, None))
                continue
            s = self.sets.get(token)
            if s is None:
                continue
            if s.deadline_ms == at:
                self.host.stats["noreply_timeouts"] += 1
                self._answer_set(token, DisqueError("NOREPL", NOREPL_TIMEOUT))
            elif s.resend_ms == at:
                self._resend(s, now_ms)
                s.resend_ms = now_ms + RESEND_MS
                heapq.heappush(timers, (s.resend_ms, token))

    # ------------------------------------------------------------------ the AOF
    def restore(self, now_ms: int, records: list[tuple[int, bytes]]) -> None:
        """The RESULT and RESULTDEL records of a replayed file, in file order (last wins);
        those whose TTL passed are skipped."""
        off = self.host.wall_offset_ms
        kept: dict[str, tuple[bytes, int]] = {}
        for rtype, payload in records:
            if rtype == REC_RESULT:
                key, expire_wall_ms, value = decode_result(payload)
                kept[key] = (value, expire_wall_ms - off)
            elif rtype == REC_RESULTDEL:
                kept.pop(decode_resultdel(payload), None)
        for key, (value, at_ms) in kept.items():
            if at_ms >= now_ms:
                self._store(key, value, at_ms)

    def records(self, now_ms: int) -> list[bytes]:
        """What a rewritten AOF keeps: every result whose TTL has not passed."""
        off = self.host.wall_offset_ms
        return [
            frame(REC_RESULT, encode_result(key, at_ms + off, value))
            for key, (value, at_ms) in self.table.items()
            if at_ms >= now_ms
        ]

    # ------------------------------------------------------------------ helpers
    def _store(self, key: str, value: bytes, at_ms: int) -> None:
        """Keep ``value`` until ``at_ms`` (node clock), log it, wake its waiters."""
        host = self.host
        table = self.table
        old = table.get(key)
        if old is not None:
            host.memory.used_bytes -= len(old[0]) + RESULT_OVERHEAD_BYTES
        table[key] = (value, at_ms)
        host.memory.used_bytes += len(value) + RESULT_OVERHEAD_BYTES
        expiry = self.expiry
        heapq.heappush(expiry, (at_ms, key))
        if len(expiry) > 2 * len(table) + 64:  # replaced results left stale entries
            self.expiry = [(at, i) for i, (_, at) in table.items()]
            heapq.heapify(self.expiry)
        if host.persist:
            host.aof_out.append(
                frame(REC_RESULT, encode_result(key, at_ms + host.wall_offset_ms, value))
            )
        tokens = self.waits_by_key.pop(key, None)
        if tokens:
            for token in tokens:
                del self.waits[token]
                host.replies.append((token, value))

    def _drop(self, key: str, log: bool) -> int:
        old = self.table.pop(key, None)
        if old is None:
            return 0
        self.host.memory.used_bytes -= len(old[0]) + RESULT_OVERHEAD_BYTES
        if log:
            self._log_del(key)
        return 1

    def _log_del(self, key: str) -> None:
        if self.host.persist:
            self.host.aof_out.append(frame(REC_RESULTDEL, encode_resultdel(key)))

    def _answer_set(self, token: int, result: str | DisqueError) -> None:
        s = self.sets.pop(token)
        _unlist(self.sets_by_key, s.key, token)
        self.host.replies.append((token, result))

    def _resend(self, s: SetWait, now_ms: int) -> None:
        """The result again to the reachable peers that have not answered (a link that was
        down dropped it), with the time it has left; nothing once it is gone here."""
        got = self.table.get(s.key)
        if got is None or got[1] < now_ms:
            return
        msg = Result(s.key, got[0], got[1] - now_ms)
        host = self.host
        for node in host.view.reachable_peers():
            if node not in s.holders:
                host._send(node, msg)


def _unlist(by_job: dict[str, list[int]], key: str, token: int) -> None:
    tokens = by_job.get(key)
    if tokens is not None:
        if token in tokens:
            tokens.remove(token)
        if not tokens:
            del by_job[key]
