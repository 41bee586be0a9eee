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

The counts are kept as jobs move, never computed on demand: ``_count`` at registration
(``_register``, ``_forget``, an AOF replay's ``_recount``) and the state changes that cross a
place (``_to_queued``, ``_to_active`` from a queue, ``_to_acked``, ``_undelay``). Moves
between wait-repl and active change nothing. ``counts_from_scratch`` is the simulator's check.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr, trait

from disq.core.disque.job import ACKED, ACTIVE, AWAITS_DELAY, BEANSTALK_ORIGIN, QUEUED, DJob
from disq.core.disque.parts import CoreParts


@trait
@mypyc_attr(allow_interpreted_subclasses=True)  # DisqueCore's subclasses
class CountsMixin(CoreParts):
    """The not-queued jobs per queue (see the module's docstring)."""

    def _count(self, j: DJob, n: int) -> None:
        """``j`` joins (``n`` 1) or leaves (-1) the counts of its queue, if it is counted
        (held, live and not queued)."""
        state = j.state
        if state == QUEUED or state == ACKED or j.flags & BEANSTALK_ORIGIN:
            return
        counts = self._qcounts
        c = counts.get(j.queue)
        if c is None:
            c = counts[j.queue] = [0, 0]
        c[0] += n
        if j.flags & AWAITS_DELAY:
            c[1] += n
        if c[0] == 0:
            del counts[j.queue]

    def _to_queued(self, j: DJob) -> None:
        """``j`` (held, not queued) is queued here: no longer delayed."""
        self._count(j, -1)
        j.flags &= ~AWAITS_DELAY
        j.state = QUEUED

    def _to_active(self, j: DJob) -> None:
        """``j`` leaves its queue here (delivered, exported, dequeued) and stays held."""
        j.state = ACTIVE
        self._count(j, 1)

    def _to_acked(self, j: DJob) -> None:
        self._count(j, -1)
        j.state = ACKED

    def _undelay(self, j: DJob) -> None:
        """``j`` was queued somewhere: its delay is over."""
        if j.flags & AWAITS_DELAY:
            self._count(j, -1)
            j.flags &= ~AWAITS_DELAY
            self._count(j, 1)

    def _recount(self) -> None:
        """The counts made again from the jobs held (after an AOF replay, which fills the
        job table in bulk)."""
        self._qcounts = self.counts_from_scratch()

    def counts_from_scratch(self) -> dict[str, list[int]]:
        """``{queue: [not queued, delayed]}`` computed from every job held."""
        out: dict[str, list[int]] = {}
        for j in self.jobs.values():
            if j.state == QUEUED or j.state == ACKED or j.flags & BEANSTALK_ORIGIN:
                continue
            c = out.get(j.queue)
            if c is None:
                c = out[j.queue] = [0, 0]
            c[0] += 1
            if j.flags & AWAITS_DELAY:
                c[1] += 1
        return out

    def queue_counts(self, queue: str) -> tuple[int, int, int]:
        """``(jobs, active, delayed)`` of ``queue`` here: every live job held (queued ones
        too), the delivered or waiting ones, the delayed ones."""
        q = self.queues.get(queue)
        queued = len(q) if q is not None else 0
        c = self._qcounts.get(queue)
        if c is None:
            return queued, 0, 0
        return queued + c[0], c[0] - c[1], c[1]
