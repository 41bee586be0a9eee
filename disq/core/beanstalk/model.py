"""The beanstalk core's data model: jobs, tubes and sessions, which point at each other.

A job knows its tube and the session that reserved it; a tube holds its buried jobs and the
sessions waiting on it; a session its tubes and its reserved jobs. They live in one module
because each refers to the others: split in three, the modules would import each other.

**Jobs.** beanstalkd's fields, a per-node integer id, its tube. Disque jobs have their own
record (``disq.core.disque.job.DJob``): ARCHITECTURE.md says why the two cores keep two job
models. A replicated beanstalk job links to its Disque record through ``replica``.

``__slots__`` matters: a node holds millions of these, and the budget is 600 bytes per
100-byte job including the indexes, so there is no per-instance dict and counters are plain
small ints (CPython caches them, so they cost only the slot); the counters most jobs never
move live in a ``JobRare`` made on the first change.

**Tubes.** A tube (beanstalk) is a queue (Disque): ready, delayed and buried jobs plus its
waiters.

**Sessions.** A client's view of the engine: the beanstalk connection state. beanstalkd ties
reservations to the connection (TTR, ``touch``, DEADLINE_SOON, release on close); Disque's
GETJOB deliveries are not tied to one. A Session carries the first kind.
"""

from __future__ import annotations

from collections import OrderedDict

from sortedcontainers import SortedList

# States. Ints, not an Enum: they are compared on every command.
READY = 0
RESERVED = 1
DELAYED = 2
BURIED = 3

STATE_NAMES = ("ready", "reserved", "delayed", "buried")

URGENT_THRESHOLD = 1024  # beanstalkd: pri < 1024 is "urgent"

# Ready and timer indexes store one int per job: (priority or time) << 64 | id. Comparing
# ints is the cheapest ordering CPython has, and one int is far smaller than a tuple.
KEY_SHIFT = 64
ID_MASK = (1 << 64) - 1


class ReplicaLink:
    """What a replicated beanstalk job carries: the Disque core's record that holds its
    copies on other nodes (``--beanstalk-replicate``).

    Attached only to replicated jobs, so a standalone node pays one empty slot per job.
    """

    __slots__ = ("disque_id", "repl")

    def __init__(self, disque_id: str, repl: int) -> None:
        self.disque_id = disque_id  # D-<node8>-<24 chars>-<ttl4hex>
        self.repl = repl  # replication factor asked for


class JobRare:
    """The fields of a Job that nearly every job keeps at their default, apart: a job gets
    one of these once one of them changes (a put with a delay, a release, a bury, a kick, a
    TTR that ran out, a replicated job's link).

    Why: a slot per attribute is paid whether it is used or not. Six slots moved here take
    a compiled Job from 176 to 128 bytes (CPython 3.11, the allocator rounds to 16); a job
    that needs them (and ``kick_reserves``, which lives only here) pays about 110 bytes
    more, and each read of one of them a check of ``_rare``."""

    __slots__ = ("buries", "delay_ms", "kick_reserves", "kicks", "releases", "replica", "timeouts")

    def __init__(self) -> None:
        self.delay_ms = 0
        self.timeouts = 0
        self.releases = 0
        self.buries = 0
        self.kicks = 0
        # ``reserves`` when a kick last took the job out of buried: a queue policy's
        # MAXDELIVERIES counts the reserves since (core.py). In memory only: not in the AOF.
        self.kick_reserves = 0
        self.replica: ReplicaLink | None = None


class Job:
    __slots__ = (
        "_rare",
        "body",
        "ctime_ms",
        "deadline_ms",
        "id",
        "pri",
        "reserver",
        "reserves",
        "state",
        "ttr_ms",
        "tube",
    )

    id: int
    tube: Tube
    body: bytes
    pri: int
    ttr_ms: int  # beanstalk TTR; Disque's RETRY for cluster jobs
    ctime_ms: int
    state: int
    deadline_ms: int  # delay end (delayed) or TTR end (reserved)
    reserver: Session | None
    reserves: int
    # delay_ms, timeouts, releases, buries, kicks, kick_reserves, replica: the properties
    # below, kept in a JobRare once one of them leaves its default.
    _rare: JobRare | None

    def __init__(
        self,
        job_id: int,
        tube: Tube,
        body: bytes,
        pri: int,
        delay_ms: int,
        ttr_ms: int,
        ctime_ms: int,
    ) -> None:
        self.id = job_id
        self.tube = tube
        self.body = body
        self.pri = pri
        self._rare = None
        if delay_ms:
            self.delay_ms = delay_ms
        self.ttr_ms = ttr_ms
        self.ctime_ms = ctime_ms
        self.state = READY
        self.deadline_ms = 0
        self.reserver = None
        self.reserves = 0

    def _more(self) -> JobRare:
        """The job's JobRare, made on the first field that leaves its default."""
        r = self._rare
        if r is None:
            r = self._rare = JobRare()
        return r

    @property
    def delay_ms(self) -> int:
        r = self._rare
        return 0 if r is None else r.delay_ms

    @delay_ms.setter
    def delay_ms(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().delay_ms = value

    @property
    def timeouts(self) -> int:
        r = self._rare
        return 0 if r is None else r.timeouts

    @timeouts.setter
    def timeouts(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().timeouts = value

    @property
    def releases(self) -> int:
        r = self._rare
        return 0 if r is None else r.releases

    @releases.setter
    def releases(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().releases = value

    @property
    def buries(self) -> int:
        r = self._rare
        return 0 if r is None else r.buries

    @buries.setter
    def buries(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().buries = value

    @property
    def kicks(self) -> int:
        r = self._rare
        return 0 if r is None else r.kicks

    @kicks.setter
    def kicks(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().kicks = value

    @property
    def kick_reserves(self) -> int:
        r = self._rare
        return 0 if r is None else r.kick_reserves

    @kick_reserves.setter
    def kick_reserves(self, value: int) -> None:
        if value or self._rare is not None:
            self._more().kick_reserves = value

    @property
    def replica(self) -> ReplicaLink | None:
        """A replicated job's link to its Disque record (None: not replicated)."""
        r = self._rare
        return None if r is None else r.replica

    @replica.setter
    def replica(self, value: ReplicaLink | None) -> None:
        if value is not None or self._rare is not None:
            self._more().replica = value

    def __repr__(self) -> str:
        return f"Job(id={self.id}, tube={self.tube.name!r}, state={STATE_NAMES[self.state]})"


class Tube:
    """Ready jobs are a skiplist-like SortedList of ``pri << 64 | id`` ints.

    beanstalkd uses a binary heap per tube; a sorted list gives the same O(log n) take plus
    ordered iteration, which peek, kick and Disque's QPEEK/QSCAN need. Buried jobs are a
    FIFO (an insertion-ordered dict, so ``kick-job`` and ``delete`` remove from the middle
    in O(1)).
    """

    __slots__ = (
        "buried",
        "cmd_delete",
        "cmd_pause",
        "delayed",
        "name",
        "pause_ms",
        "pause_until_ms",
        "ready",
        "reserved_count",
        "total_jobs",
        "urgent_count",
        "using_count",
        "waiting",
        "watching_count",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready: SortedList = SortedList()
        self.delayed: SortedList = SortedList()  # (deadline_ms << 64 | id)
        self.buried: dict[int, Job] = {}
        # Sessions waiting in reserve, served from the front: an OrderedDict, as a dict's
        # next(iter()) walks every slot deleted before the first live one.
        self.waiting: OrderedDict[Session, None] = OrderedDict()
        self.reserved_count = 0
        self.urgent_count = 0
        self.using_count = 0
        self.watching_count = 0
        self.total_jobs = 0
        self.cmd_delete = 0
        self.cmd_pause = 0
        self.pause_ms = 0
        self.pause_until_ms = 0

    def is_unused(self) -> bool:
        return not (
            self.ready
            or self.delayed
            or self.buried
            or self.reserved_count
            or self.using_count
            or self.watching_count
            or self.waiting
        )

    def __repr__(self) -> str:
        return f"Tube({self.name!r})"


class Session:
    __slots__ = (
        "closed",
        "id",
        "is_producer",
        "is_worker",
        "reserved",
        "soonest_ms",
        "use",
        "wait_deadline_ms",
        "wait_wake_ms",
        "waiting",
        "watch",
    )

    def __init__(self, session_id: int, default_tube: Tube) -> None:
        self.id = session_id
        self.use = default_tube
        # beanstalkd keeps the watch list in an array whose removal moves the last item into
        # the hole; list-tubes-watched shows that order, so we keep it the same way.
        self.watch: list[Tube] = [default_tube]
        self.reserved: dict[int, Job] = {}
        # Cached soonest deadline of the reserved jobs: -1 none, -2 unknown (recompute).
        # Every reserve asks for it (DEADLINE_SOON), so it must not cost a scan each time.
        self.soonest_ms = -1
        self.waiting = False
        self.wait_deadline_ms = -1  # -1: no timeout (plain reserve)
        self.wait_wake_ms = -1
        self.is_producer = False
        self.is_worker = False
        self.closed = False

    def soonest_deadline_ms(self) -> int:
        """Deadline of the reserved job that expires first, or -1."""
        soonest = self.soonest_ms
        if soonest == -2:
            reserved = self.reserved
            soonest = min(j.deadline_ms for j in reserved.values()) if reserved else -1
            self.soonest_ms = soonest
        return soonest

    def __hash__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return f"Session({self.id})"
