"""The beanstalk job record: beanstalkd's fields, a per-node integer id, its tube.

Disque jobs have their own record (``disq.core.disque.job.DJob``): ARCHITECTURE.md says why
the two cores keep two job models. A replicated beanstalk job links to its Disque record
through ``replica``.

``__slots__`` matters: a node holds millions of these, and the budget is 600 bytes per
100-byte job including the indexes, so there is no per-instance dict and counters are plain
small ints (CPython caches them, so they cost only the slot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disq.core.beanstalk.session import Session
    from disq.core.beanstalk.tube import Tube

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


class Job:
    __slots__ = (
        "body",
        "buries",
        "ctime_ms",
        "deadline_ms",
        "delay_ms",
        "id",
        "kicks",
        "pri",
        "releases",
        "replica",
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
    replica: ReplicaLink | None

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
        self.replica = None

    def __repr__(self) -> str:
        return f"Job(id={self.id}, tube={self.tube.name!r}, state={STATE_NAMES[self.state]})"
