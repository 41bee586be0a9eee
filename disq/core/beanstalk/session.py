"""A client's view of the engine: the beanstalk connection state.

beanstalkd ties reservations to the connection (TTR, ``touch``, DEADLINE_SOON, release on
close); Disque's GETJOB deliveries are not tied to one. A Session carries the first kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disq.core.beanstalk.job import Job
    from disq.core.beanstalk.tube import Tube


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
