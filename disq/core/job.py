"""The job record shared by every door (beanstalk, RESP, gRPC) and by the cluster.

One class for both worlds (design.md section 3): a beanstalk job is a Disque job whose
priority matters and whose retry is its TTR. The cluster fields exist from the start so the
AOF record and the memory footprint do not change shape when replication arrives.

``__slots__`` matters: a node holds millions of these, and the budget is 600 bytes per
100-byte job including the indexes, so there is no per-instance dict and counters are plain
small ints (CPython caches them, so they cost only the slot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disq.core.session import Session
    from disq.core.tube import Tube

# States. Ints, not an Enum: they are compared on every command.
READY = 0
RESERVED = 1
DELAYED = 2
BURIED = 3
WAIT_REPL = 4  # cluster: waiting for the replication level (Disque's wait-repl)
ACKED = 5  # cluster: acked, waiting for the ack garbage collection

STATE_NAMES = ("ready", "reserved", "delayed", "buried", "wait-repl", "acked")

URGENT_THRESHOLD = 1024  # beanstalkd: pri < 1024 is "urgent"
DEFAULT_PRIORITY = 1024  # Disque jobs: all equal, so ready order is arrival order

# Ready and timer indexes store one int per job: (priority or time) << 64 | id. Comparing
# ints is the cheapest ordering CPython has, and one int is far smaller than a tuple.
KEY_SHIFT = 64
ID_MASK = (1 << 64) - 1


class ClusterState:
    """What a replicated job carries besides its beanstalk fields (design.md section 3).

    Attached only to jobs that live in a cluster, so a standalone node pays one empty slot
    per job instead of eight (memory and put latency both count here).
    """

    __slots__ = (
        "additional_deliveries",
        "disque_id",
        "expire_ms",
        "nacks",
        "nodes_confirmed",
        "nodes_delivered",
        "repl",
        "requeue_ms",
    )

    def __init__(self, disque_id: str, repl: int, expire_ms: int) -> None:
        self.disque_id = disque_id  # D-<node8>-<24 chars>-<ttl4hex>
        self.repl = repl  # replication factor asked for
        self.expire_ms = expire_ms  # TTL end: every holder drops its copy then
        self.requeue_ms = 0  # next requeue (Disque's qtime); 0: never
        self.nacks = 0
        self.additional_deliveries = 0
        self.nodes_delivered: set[str] = set()  # may hold a copy
        self.nodes_confirmed: set[str] = set()  # confirmed a copy (GOTJOB / GOTACK)


class Job:
    __slots__ = (
        "body",
        "buries",
        "cluster",
        "ctime_ms",
        "deadline_ms",
        "delay_ms",
        "id",
        "kicks",
        "pri",
        "releases",
        "reserver",
        "reserves",
        "state",
        "timeouts",
        "ttr_ms",
        "tube",
    )

    id: int
    tube: Tube
    body: bytes
    pri: int
    delay_ms: int
    ttr_ms: int  # beanstalk TTR; Disque's RETRY for cluster jobs
    ctime_ms: int
    state: int
    deadline_ms: int  # delay end (delayed) or TTR end (reserved)
    reserver: Session | None
    reserves: int
    timeouts: int
    releases: int
    buries: int
    kicks: int
    cluster: ClusterState | None

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
        self.delay_ms = delay_ms
        self.ttr_ms = ttr_ms
        self.ctime_ms = ctime_ms
        self.state = READY
        self.deadline_ms = 0
        self.reserver = None
        self.reserves = 0
        self.timeouts = 0
        self.releases = 0
        self.buries = 0
        self.kicks = 0
        self.cluster = None

    @property
    def ready_key(self) -> int:
        return (self.pri << KEY_SHIFT) | self.id

    @property
    def timer_key(self) -> int:
        return (self.deadline_ms << KEY_SHIFT) | self.id

    def __repr__(self) -> str:
        return f"Job(id={self.id}, tube={self.tube.name!r}, state={STATE_NAMES[self.state]})"
