"""The job record shared by every door (beanstalk, RESP, gRPC) and by the cluster.

One class for both worlds (design.md section 3): a beanstalk job is a Disque job whose
priority matters and whose retry is its TTR. The cluster fields exist from the start so the
AOF record and the memory footprint do not change shape when replication arrives.

``__slots__`` matters: a node holds millions of these, and the budget is 600 bytes per
100-byte job including the indexes, so there is no per-instance dict and counters are plain
small ints (CPython caches them, so they cost only the slot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


class Job:
    __slots__ = (
        # Cluster fields (design.md section 3); None/0 on a standalone node.
        "additional_deliveries",
        "body",
        "buries",
        "ctime_ms",
        "deadline_ms",
        "delay_ms",
        "disque_id",
        "expire_ms",
        "id",
        "kicks",
        "nacks",
        "nodes_confirmed",
        "nodes_delivered",
        "pri",
        "releases",
        "repl",
        "requeue_ms",
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
    ttr_ms: int
    ctime_ms: int
    state: int
    deadline_ms: int
    reserver: Session | None
    reserves: int
    timeouts: int
    releases: int
    buries: int
    kicks: int
    disque_id: str | None
    repl: int
    expire_ms: int
    requeue_ms: int
    nacks: int
    additional_deliveries: int
    nodes_delivered: Any
    nodes_confirmed: Any

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
        self.disque_id = None
        self.repl = 1
        self.expire_ms = 0
        self.requeue_ms = 0
        self.nacks = 0
        self.additional_deliveries = 0
        self.nodes_delivered = None
        self.nodes_confirmed = None

    @property
    def ready_key(self) -> int:
        return (self.pri << KEY_SHIFT) | self.id

    @property
    def timer_key(self) -> int:
        return (self.deadline_ms << KEY_SHIFT) | self.id

    def __repr__(self) -> str:
        return f"Job(id={self.id}, tube={self.tube.name!r}, state={STATE_NAMES[self.state]})"
