"""Memory (Disque's getMemoryWarningLevel and what its levels trigger), from this core's
estimate of its jobs' size (``used_bytes``: each job's ``mem_bytes``, its body, headers and
JOB_OVERHEAD_BYTES) and the beanstalk engine's.

A component of the core: it owns the accounting (the core adds and subtracts a job's bytes
as it registers and forgets it) and the level; the core hands it the job table and its way
to drop a job when the level asks for eviction.
"""

from __future__ import annotations

from collections.abc import Callable

from disq.core.disque.job import ACKED, DJob

# What an empty queue record costs (DQueue, its SortedList and dicts, the name, the entry in
# ``queues``), measured with tracemalloc on CPython 3.11: about 780 bytes. Queues are memory
# in Disque's measure too (zmalloc counts everything), so they count towards the levels: a
# node with many empty queues reaches the warning levels, and those speed up their GC.
QUEUE_OVERHEAD_BYTES = 800

# Disque's evictIdleQueues: an empty queue without blocked clients and not paused is
# destroyed once idle this long; 1/30 of it at memory warning 1, 2 s from level 2 on.
QUEUE_IDLE_GC_MS = 300_000
QUEUE_IDLE_GC_WARN_MS = QUEUE_IDLE_GC_MS // 30
QUEUE_IDLE_GC_PRESSURE_MS = 2000


class MemoryLevels:
    """Disque's memory warning levels over the core's estimate of its jobs' size."""

    def __init__(self) -> None:
        self.warning = 0  # 0 ok, 1 >75%, 2 >95%, 3 full
        self.max_bytes = 0  # maxmemory; 0: no limit
        self.used_bytes = 0  # DJob.mem_bytes() of each job

    def update(
        self,
        now_ms: int,
        queues: int,
        other_bytes: int,
        jobs: dict[str, DJob],
        unregister: Callable[[DJob, int], None],
    ) -> int:
        """Disque's memory warning levels (getMemoryWarningLevel), from this core's estimate
        plus ``other_bytes`` (the beanstalk engine's jobs). Level 1 (>75%): new jobs are
        replicated externally and REPLJOB is refused; level 2 (>95%): acked jobs, which are
        only GC bookkeeping, are evicted; level 3 (full): ADDJOB, NACK and ENQUEUE get -OOM.
        Empty idle queues count too (``QUEUE_OVERHEAD_BYTES`` each for ``queues``) and are
        evicted faster from level 1 on (``queue_idle_gc_ms``, run by the core's cron)."""
        limit = self.max_bytes
        if limit <= 0:
            self.warning = 0
            return 0
        queue_bytes = queues * QUEUE_OVERHEAD_BYTES
        used = self.used_bytes + other_bytes + queue_bytes
        if used > limit * 95 // 100:
            _evict_acked(now_ms, used - limit * 95 // 100, jobs, unregister)
            used = self.used_bytes + other_bytes + queue_bytes
        level = 0
        if used > limit * 75 // 100:
            level = 1
        if used > limit * 95 // 100:
            level = 2
        if used >= limit:
            level = 3
        self.warning = level
        return level

    def queue_idle_gc_ms(self) -> int:
        """How long an empty queue (no blocked client, no pause) stays registered while
        idle: Disque's evictIdleQueues (300 s; 10 s at memory warning 1; 2 s above). The
        cost of evicting early is a queue record made again on the next use, and QSTAT
        answering null meanwhile; the queue's counters (jobs in/out) start over."""
        level = self.warning
        if level > 1:
            return QUEUE_IDLE_GC_PRESSURE_MS
        if level > 0:
            return QUEUE_IDLE_GC_WARN_MS
        return QUEUE_IDLE_GC_MS


def _evict_acked(
    now_ms: int, want_bytes: int, jobs: dict[str, DJob], unregister: Callable[[DJob, int], None]
) -> None:
    """Drop acked jobs (oldest first in dict order) until ``want_bytes`` are freed. The
    worst case is a duplicate delivery by a holder that never heard the ack, which
    at-least-once allows; never an unacked job lost."""
    freed = 0
    for j in [j for j in jobs.values() if j.state == ACKED]:
        if freed >= want_bytes:
            break
        freed += j.mem_bytes()
        unregister(j, now_ms)
