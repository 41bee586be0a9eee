"""Job lifecycle events, recorded by the cores as they happen (issue 5's event log).

The cores append to an :class:`EventBuffer`, columnar: one array per field and two lists that
hold references to the job's own id and queue strings, so recording an event creates no
Python object per event (a struct or tuple per event would, on every ADDJOB and GETJOB). The
node drains the buffer after each batch of commands and gives the events their sequence
numbers in the event log (disq/persistence/event_log.py).
"""

from __future__ import annotations

from array import array

# Stable codes: they are stored in the log and travel over gRPC (api.proto EventKind).
ENQUEUED = 1  # added on this node (ADDJOB accepted, beanstalk put)
REPLICATED = 2  # this node took a copy (REPLJOB)
DELIVERED = 3  # handed to a consumer (GETJOB, reserve); attempt = delivery number
ACKED = 4  # ACKJOB / FASTACK here
NACKED = 5  # NACK (beanstalk: release)
REQUEUED = 6  # queued again by its retry timer (beanstalk: TTR ran out)
EXPIRED = 7  # TTL reached
BURIED = 8
KICKED = 9
DELETED = 10  # DELJOB / beanstalk delete
# Schedules (disq/core/schedule/): the tick's job id (TICK_SKIPPED: the key of the last tick
# dropped), attempt = seconds late (TICK_SKIPPED: ticks dropped), size = the tick (Unix s).
TICK_FIRED = 11  # a schedule's tick added its job here
TICK_LATE = 12  # ... more than 2 s after its time (a misfire caught up, or a slow cluster)
TICK_SKIPPED = 13  # ticks dropped by the misfire policy (SKIP, or past CATCHUP n)
# Queue policies (disq/core/policy/, disq/core/disque/deadletter.py), on the deciding node:
# job id = the job given up on, queue = its queue, attempt = its deliveries, size = its body.
DEADLETTERED = 14  # past its queue's MAXDELIVERIES: moved to the DEADLETTER queue, or dropped
REDRIVEN = 15  # QREDRIVE moved it (a dead letter) back: job id = the dead letter's

KIND_NAMES: dict[int, str] = {
    ENQUEUED: "enqueued",
    REPLICATED: "replicated",
    DELIVERED: "delivered",
    ACKED: "acked",
    NACKED: "nacked",
    REQUEUED: "requeued",
    EXPIRED: "expired",
    BURIED: "buried",
    KICKED: "kicked",
    DELETED: "deleted",
    TICK_FIRED: "tick-fired",
    TICK_LATE: "tick-late",
    TICK_SKIPPED: "tick-skipped",
    DEADLETTERED: "deadlettered",
    REDRIVEN: "redriven",
}
KIND_BY_NAME = {v: k for k, v in KIND_NAMES.items()}


class EventBuffer:
    """Events not yet in the log. ``enabled`` False records nothing (tests, benchmarks of
    the bare core)."""

    __slots__ = ("attempts", "enabled", "job_ids", "kinds", "queues", "sizes", "times")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.kinds = array("B")
        self.times = array("q")
        self.attempts = array("I")
        self.sizes = array("I")
        self.queues: list[str] = []
        self.job_ids: list[str | int] = []  # int: a beanstalk job's numeric id

    def add(
        self, kind: int, now_ms: int, queue: str, job_id: str | int, attempt: int, size: int
    ) -> None:
        if not self.enabled:
            return
        self.kinds.append(kind)
        self.times.append(now_ms)
        # Conditionals, not min(): compiled, a comparison of two ints is native and min()
        # a call into the interpreter's builtin, twice on every event.
        self.attempts.append(attempt if attempt <= 0xFFFFFFFF else 0xFFFFFFFF)
        self.sizes.append(size if size <= 0xFFFFFFFF else 0xFFFFFFFF)
        self.queues.append(queue)
        self.job_ids.append(job_id)

    def __len__(self) -> int:
        return len(self.kinds)

    def take(self) -> EventBuffer:
        """The buffered events; this buffer starts empty again."""
        out = EventBuffer(self.enabled)
        out.kinds, self.kinds = self.kinds, out.kinds
        out.times, self.times = self.times, out.times
        out.attempts, self.attempts = self.attempts, out.attempts
        out.sizes, self.sizes = self.sizes, out.sizes
        out.queues, self.queues = self.queues, out.queues
        out.job_ids, self.job_ids = self.job_ids, out.job_ids
        return out
