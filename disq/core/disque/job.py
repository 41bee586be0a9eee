"""Disque jobs: the record a cluster node holds for every job it knows (reference 2.3).

Kept apart from the beanstalk ``Job`` because the two index differently: a Disque job is
named by its 40-char id everywhere (queues, timers, messages), a beanstalk job by a per-node
integer. The fields mirror Disque's ``job.h`` so its design notes apply line by line.
"""

from __future__ import annotations

from disq.core.constants import DEFAULT_PRIORITY, JOB_OVERHEAD_BYTES
from disq.core.job_record import (
    AT_ADD_DELIVERIES,
    AT_BEANSTALK,
    AT_BEANSTALK_ID,
    AT_BSTATE,
    AT_CTIME,
    AT_DELAY,
    AT_NACKS,
    AT_NODES,
    AT_PRIORITY,
    AT_QUEUE_LEN,
    AT_REPL,
    AT_RETRY,
    ID_LEN,
    RECORD,
    Headers,
    body_end,
    decode_trailer,
    headers_bytes,
    pack_record,
    u16,
    u32,
    u64,
)

# States, Disque's numbers (wait-repl 0, active 1, queued 2, acked 3).
WAIT_REPL = 0
ACTIVE = 1
QUEUED = 2
ACKED = 3

STATE_NAMES = ("wait-repl", "active", "queued", "acked")
STATE_BY_NAME = {name: i for i, name in enumerate(STATE_NAMES)}

# Flags.
BCAST_QUEUED = 1  # broadcast QUEUED when this node re-queues the job
BCAST_WILLQUEUE = 2  # wake 500 ms before the requeue to ask the others (WILLQUEUE)
DELIVERED = 4  # this node delivered the job at least once
# disq: beanstalk jobs replicated through the cluster (issue: beanstalk door in a cluster).
BEANSTALK_ORIGIN = 8  # put through a beanstalk door; a takeover puts it in the local engine
BEANSTALK_OWNED = 16  # the local beanstalk engine holds the live job (``bid``): this record
# only answers the holders (WILLQUEUE -> QUEUED) and tells them of changes and deletion
AWAITS_DELAY = 32  # made with a DELAY, not yet seen queued (counts.py's "delayed")
ACK_LOGGED = 64  # its ACKJOB record is in the AOF: a DELJOB is logged when the job goes
LOGGED_AT_ADD = 128  # a sync add's own copy, logged as its REPLJOBs left (replication.py)
NACK_WAIT = 256  # NACKed with a DELAY: its requeue at the delay's end is no new delivery
DEAD_LETTERING = 512  # its move to a dead letter queue (or a QREDRIVE's) is out (deadletter.py)


# The empty confirmation set every job starts with, shared: a set per job costs 216 bytes and
# one more object for the collector to scan, for the many jobs that never collect one.
NO_NODES: frozenset[str] = frozenset()


class AwakeEntry:
    """A job's entry in the core's timer heaps (core.py ``_awake``): when the timer next
    looks at it, and its id. Ordered by time, then id, as Disque's awakeme skiplist
    (skiplistCompareJobsToAwake). Immutable once made: the heaps delete lazily, and an
    entry is live while ``at_ms`` is its job's ``awake_ms``.

    Why a class and not an ``(awake_ms, id)`` tuple: compiled, the time is a native int in
    the object, where the tuple held a boxed int of its own: 64 bytes an entry instead of
    96 (CPython 3.11), one per job."""

    __slots__ = ("at_ms", "job_id")

    def __init__(self, at_ms: int, job_id: str) -> None:
        self.at_ms = at_ms
        self.job_id = job_id

    def __lt__(self, other: AwakeEntry) -> bool:
        if self.at_ms != other.at_ms:
            return self.at_ms < other.at_ms
        return self.job_id < other.job_id

    def __repr__(self) -> str:
        return f"AwakeEntry({self.at_ms}, {self.job_id})"


class DJobRare:
    """The fields of a DJob that nearly every job keeps at their default, apart: a job gets
    one of these only once one of them changes (a DELAY, a NACK or a requeue counted, an
    idempotency key, an ack's GC retries, a beanstalk job's id, state or priority).

    Why: a native class has a slot per attribute whether it is used or not. Eight slots
    moved here shrink every DJob from 224 to 160 bytes (CPython 3.11, compiled; the
    allocator rounds to 16), a tenth of what a queued job costs; a job that needs them pays
    112 bytes more, and each read of one of them costs a check of ``_rare``."""

    __slots__ = (
        "add_deliveries",
        "bid",
        "bstate",
        "delay_s",
        "gc_retry",
        "idem_key",
        "nacks",
        "priority",
    )

    def __init__(self) -> None:
        self.delay_s = 0
        self.nacks = 0
        self.add_deliveries = 0
        self.gc_retry = 0
        self.priority = DEFAULT_PRIORITY
        self.bstate = 0
        self.bid = 0
        self.idem_key = ""


class DJobRareHeaders(DJobRare):
    """A DJobRare with the job's headers: a job gets one only if its add gave headers, so the
    slot costs nothing to the many jobs without (nor to those with only a DELAY or a key).
    ``headers_size``: their share of the memory estimate, computed once."""

    __slots__ = ("headers", "headers_size")

    def __init__(self, headers: Headers) -> None:
        super().__init__()
        self.headers = headers
        self.headers_size = headers_bytes(headers)


class DJob:
    __slots__ = (
        "_rare",
        "awake_ms",
        "body",
        "confirmed",
        "ctime",
        "delivered",
        "etime_ms",
        "flags",
        "id",
        "qtime_ms",
        "queue",
        "queued_at",
        "repl",
        "retry_s",
        "state",
    )

    def __init__(
        self,
        job_id: str,
        queue: str,
        body: bytes,
        repl: int,
        ctime: int,
        delay_s: int,
        retry_s: int,
        etime_ms: int,
    ) -> None:
        self.id = job_id
        self.queue = queue
        self.body = body
        self.repl = repl
        self.ctime = ctime  # ms * 1e6 at the creating node, strictly increasing there
        self.retry_s = retry_s
        self.etime_ms = etime_ms  # TTL end, this node's clock
        self.state = WAIT_REPL
        self.flags = 0
        # delay_s, nacks, add_deliveries, gc_retry, priority, bstate, bid, idem_key: the
        # properties below, kept in a DJobRare once one of them leaves its default.
        self._rare: DJobRare | None = None
        if delay_s:
            self.delay_s = delay_s
            self.flags = AWAITS_DELAY
        # Nodes that may have a copy. Shared (NO_NODES, or the core's one-node set for a
        # REPLICATE 1 job) until deliver_to() makes the job its own.
        self.delivered: set[str] | frozenset[str] = NO_NODES
        # GOTJOB (wait-repl) or GOTACK (acked) senders. Most jobs never need one (a queued
        # REPLICATE 1 job, every copy): they share NO_NODES until confirm() makes their own.
        self.confirmed: set[str] | frozenset[str] = NO_NODES
        self.qtime_ms = 0  # next requeue; 0 = never
        self.awake_ms = 0  # when the timer next looks at the job
        # The node this copy last heard queued or worked on the job ("": unknown, e.g.
        # restored from the AOF): whose death brings its requeue forward (dead_peers.py).
        self.queued_at = ""

    def _more(self) -> DJobRare:
        """The job's DJobRare, made on the first field that leaves its default."""
        r = self._rare
        if r is None:
            r = self._rare = DJobRare()
        return r

    @property
    def delay_s(self) -> int:
        r = self._rare
        return 0 if r is None else r.delay_s

    @delay_s.setter
    def delay_s(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().delay_s = value

    @property
    def nacks(self) -> int:
        r = self._rare
        return 0 if r is None else r.nacks

    @nacks.setter
    def nacks(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().nacks = value

    @property
    def add_deliveries(self) -> int:
        r = self._rare
        return 0 if r is None else r.add_deliveries

    @add_deliveries.setter
    def add_deliveries(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().add_deliveries = value

    @property
    def gc_retry(self) -> int:
        r = self._rare
        return 0 if r is None else r.gc_retry

    @gc_retry.setter
    def gc_retry(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().gc_retry = value

    @property
    def priority(self) -> int:
        r = self._rare
        return DEFAULT_PRIORITY if r is None else r.priority

    @priority.setter
    def priority(self, value: int) -> None:
        if value != DEFAULT_PRIORITY or self._rare is not None:
            self._more().priority = value

    @property
    def bstate(self) -> int:
        """Beanstalk state the owner last reported (0 ready, 3 buried)."""
        r = self._rare
        return 0 if r is None else r.bstate

    @bstate.setter
    def bstate(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().bstate = value

    @property
    def bid(self) -> int:
        """Owned beanstalk jobs: the local engine's numeric id (0: none)."""
        r = self._rare
        return 0 if r is None else r.bid

    @bid.setter
    def bid(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().bid = value

    @property
    def idem_key(self) -> str:
        """The ADDJOB's idempotency key ("": none)."""
        r = self._rare
        return "" if r is None else r.idem_key

    @idem_key.setter
    def idem_key(self, value: str) -> None:
        if value or self._rare is not None:
            self._more().idem_key = value

    @property
    def headers(self) -> Headers | None:
        """The add's headers, in its order (None: none)."""
        r = self._rare
        return (r.headers or None) if isinstance(r, DJobRareHeaders) else None

    @headers.setter
    def headers(self, value: Headers | None) -> None:
        r = self._rare
        if isinstance(r, DJobRareHeaders):
            if value:
                r.headers = value
                r.headers_size = headers_bytes(value)
            else:
                r.headers = ()
                r.headers_size = 0
        elif value:
            h = self._rare = DJobRareHeaders(value)
            if r is not None:  # keep what the job's plain DJobRare held
                h.delay_s, h.nacks, h.add_deliveries = r.delay_s, r.nacks, r.add_deliveries
                h.gc_retry, h.priority, h.bstate = r.gc_retry, r.priority, r.bstate
                h.bid, h.idem_key = r.bid, r.idem_key

    def mem_bytes(self) -> int:
        """The job's share of the memory estimate (maxmemory): body, overhead, headers."""
        r = self._rare
        extra = r.headers_size if isinstance(r, DJobRareHeaders) else 0
        return len(self.body) + JOB_OVERHEAD_BYTES + extra

    def deliver_to(self, *nodes: str) -> None:
        """Add ``nodes`` to those that may have a copy (the set is made on the first)."""
        d = self.delivered
        if type(d) is set:
            d.update(nodes)
        else:
            self.delivered = {*d, *nodes}

    def confirm(self, node: str) -> None:
        """Count ``node``'s GOTJOB or GOTACK (the set is made on the first one)."""
        c = self.confirmed
        if type(c) is set:
            c.add(node)
        else:
            self.confirmed = {node}

    def __lt__(self, other: DJob) -> bool:
        """Queue order (queue.py): ctime, then the id between jobs of different nodes. A
        queue's skiplist holds the jobs themselves, so this order must not change while a
        job is queued: neither ctime nor id is ever assigned after __init__."""
        if self.ctime != other.ctime:
            return self.ctime < other.ctime
        return self.id < other.id

    def __repr__(self) -> str:
        return f"DJob({self.id}, {self.queue!r}, {STATE_NAMES[self.state]})"


def serialize(j: DJob, ttl_ms: int, bid: int, nodes: list[str] | None = None) -> bytes:
    """serializeJob: the job's record (disq/core/job_record.py) with ``ttl_ms`` left and the
    beanstalk alias ``bid`` (0 in a peer's copy), what a REPLJOB carries and the AOF keeps;
    ``nodes``: the holders it names (None: every node it was delivered to)."""
    return pack_record(
        j.id,
        j.queue,
        j.body,
        j.repl,
        j.ctime,
        j.delay_s,
        j.retry_s,
        ttl_ms,
        j.nacks,
        j.add_deliveries,
        j.priority,
        bool(j.flags & BEANSTALK_ORIGIN),
        j.bstate,
        bid,
        sorted(j.delivered) if nodes is None else nodes,
        j.idem_key,
        j.headers,
    )


def deserialize(
    buf: bytes, p: int, end: int, etime_ms: int, names: dict[bytes, str], me: bytes
) -> DJob:
    """deserializeJob: the record at ``buf[p:end]`` as a DJob expiring at ``etime_ms``, with
    the fields the record holds and the flag they imply (BEANSTALK_ORIGIN); the caller sets
    its state and the rest. ``names`` interns queue names (most jobs share a few queues);
    ``delivered`` stays NO_NODES when it names no node but ``me``. Raises JobRecordError
    for a record whose lengths do not add up."""
    stop = body_end(buf, p, end)
    n_nodes = u16(buf, p + AT_NODES)
    pos = p + RECORD.size
    qpos = pos + ID_LEN * n_nodes
    bpos = qpos + u32(buf, p + AT_QUEUE_LEN)
    raw = buf[qpos:bpos]
    queue = names.get(raw)
    if queue is None:
        queue = names[raw] = raw.decode("utf-8", "surrogateescape")
    j = DJob(
        buf[p : p + ID_LEN].rstrip(b"\0").decode(),  # a short id is padded (a test's)
        queue,
        buf[bpos:stop],
        u16(buf, p + AT_REPL),
        u64(buf, p + AT_CTIME),
        u32(buf, p + AT_DELAY),
        u32(buf, p + AT_RETRY),
        etime_ms,
    )
    j.nacks = u32(buf, p + AT_NACKS)
    j.add_deliveries = u32(buf, p + AT_ADD_DELIVERIES)
    if n_nodes > 1 or (n_nodes == 1 and buf[pos:qpos] != me):
        j.delivered = {buf[a : a + ID_LEN].decode() for a in range(pos, qpos, ID_LEN)}
    j.priority = u32(buf, p + AT_PRIORITY)
    if stop < end:
        key, headers = decode_trailer(buf[stop:end])
        j.idem_key = key
        j.headers = headers
    if buf[p + AT_BEANSTALK]:
        j.flags |= BEANSTALK_ORIGIN
        j.bstate = buf[p + AT_BSTATE]
        j.bid = u64(buf, p + AT_BEANSTALK_ID)
    return j
