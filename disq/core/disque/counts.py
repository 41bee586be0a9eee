"""Per-queue counts of the jobs this node holds that are not queued here: the ones a queue's
QLEN does not show. QSTAT reports them (``jobs``, ``active``, ``delayed``, after Disque's own
fields) so a client can wait until a queue is wholly done on every node: Dramatiq's
``join`` (disq/integrations/dramatiq.py) sums them over the nodes.

A job held here and live (not acked, not a beanstalk job: those live in a beanstalk engine)
is in one of three places:

- queued here: in its DQueue (QLEN);
- delayed: made with a DELAY and not yet queued (``AWAITS_DELAY``, job.py): its creator
  holds it until the delay ends; a copy elsewhere keeps the mark until it sees the job
  queued (its own requeue, a QUEUED from a peer), since the first queueing is not announced;
- active: the rest, delivered and waiting for an ACKJOB or its RETRY, a copy waiting for its
  RETRY, an add waiting for its copies (wait-repl).

The counts are kept as jobs move, never computed on demand: ``add`` at registration (the
core's ``_register`` and ``_forget``; ``rebuild`` after an AOF replay) and the state changes
that cross a place (``to_queued``, ``to_active`` from a queue, ``to_acked``, ``undelay``).
Moves between wait-repl and active change nothing. ``from_scratch`` is the simulator's check.

A component of the core (it owns its table and sees only the job it is handed): the core
calls it at each move; it never calls back.
"""

from __future__ import annotations

from collections.abc import Iterable

from disq.core.disque.job import ACKED, ACTIVE, AWAITS_DELAY, BEANSTALK_ORIGIN, QUEUED, DJob


def _counted(j: DJob) -> bool:
    """Held, live and not queued (the module's docstring)."""
    return not (j.state == QUEUED or j.state == ACKED or j.flags & BEANSTALK_ORIGIN)


class QueueCounts:
    """The not-queued jobs per queue: ``by_queue[queue] = [not queued, delayed]``."""

    def __init__(self) -> None:
        self.by_queue: dict[str, list[int]] = {}

    def add(self, j: DJob, n: int) -> None:
        """``j`` joins (``n`` 1) or leaves (-1) the counts of its queue, if it is counted."""
        if not _counted(j):
            return
        counts = self.by_queue
        c = counts.get(j.queue)
        if c is None:
            c = counts[j.queue] = [0, 0]
        c[0] += n
        if j.flags & AWAITS_DELAY:
            c[1] += n
        if c[0] == 0:
            del counts[j.queue]

    def to_queued(self, j: DJob) -> None:
        """``j`` (held, not queued) is queued here: no longer delayed."""
        self.add(j, -1)
        j.flags &= ~AWAITS_DELAY
        j.state = QUEUED

    def to_active(self, j: DJob) -> None:
        """``j`` leaves its queue here (delivered, exported, dequeued) and stays held."""
        j.state = ACTIVE
        self.add(j, 1)

    def to_acked(self, j: DJob) -> None:
        self.add(j, -1)
        j.state = ACKED

    def undelay(self, j: DJob) -> None:
        """``j`` was queued somewhere: its delay is over."""
        if j.flags & AWAITS_DELAY:
            self.add(j, -1)
            j.flags &= ~AWAITS_DELAY
            self.add(j, 1)

    def rebuild(self, jobs: Iterable[DJob]) -> None:
        """The counts made again from ``jobs`` (after an AOF replay fills the table in bulk)."""
        self.by_queue = from_scratch(jobs)

    def clear(self) -> None:
        self.by_queue.clear()

    def of(self, queue: str, queued: int) -> tuple[int, int, int]:
        """``(jobs, active, delayed)`` of ``queue`` with ``queued`` jobs in its queue here:
        every live job held (queued ones too), the delivered or waiting ones, the delayed
        ones."""
        c = self.by_queue.get(queue)
        if c is None:
            return queued, 0, 0
        return queued + c[0], c[0] - c[1], c[1]


def from_scratch(jobs: Iterable[DJob]) -> dict[str, list[int]]:
    """``{queue: [not queued, delayed]}`` computed from ``jobs``."""
    out: dict[str, list[int]] = {}
    for j in jobs:
        if not _counted(j):
            continue
        c = out.get(j.queue)
        if c is None:
            c = out[j.queue] = [0, 0]
        c[0] += 1
        if j.flags & AWAITS_DELAY:
            c[1] += 1
    return out
