"""Memory (Disque's getMemoryWarningLevel and what its levels trigger), from this core's
estimate of its jobs' size (``used_bytes``: bodies plus JOB_OVERHEAD_BYTES each) and the
beanstalk engine's.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr, trait

from disq.core.constants import JOB_OVERHEAD_BYTES
from disq.core.disque.job import ACKED
from disq.core.disque.parts import CoreParts

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


@trait
@mypyc_attr(allow_interpreted_subclasses=True)  # DisqueCore's subclasses
class MemoryMixin(CoreParts):
    """The memory warning levels of DisqueCore."""

    def update_memory(self, now_ms: int, other_bytes: int = 0) -> int:
        """Disque's memory warning levels (getMemoryWarningLevel), from this core's estimate
        plus ``other_bytes`` (the beanstalk engine's jobs). Level 1 (>75%): new jobs are
        replicated externally and REPLJOB is refused; level 2 (>95%): acked jobs, which are
        only GC bookkeeping, are evicted; level 3 (full): ADDJOB, NACK and ENQUEUE get -OOM.
        Empty idle queues count too (``QUEUE_OVERHEAD_BYTES`` each) and are evicted faster
        from level 1 on (``queue_idle_gc_ms``, run by the core's cron)."""
        limit = self.max_memory_bytes
        if limit <= 0:
            self.memory_warning = 0
            return 0
        queues = len(self.queues) * QUEUE_OVERHEAD_BYTES
        used = self.used_bytes + other_bytes + queues
        if used > limit * 95 // 100:
            self._evict_acked(now_ms, used - limit * 95 // 100)
            used = self.used_bytes + other_bytes + queues
        level = 0
        if used > limit * 75 // 100:
            level = 1
        if used > limit * 95 // 100:
            level = 2
        if used >= limit:
            level = 3
        self.memory_warning = level
        return level

    def _evict_acked(self, now_ms: int, want_bytes: int) -> None:
        """Drop acked jobs (oldest first in dict order) until ``want_bytes`` are freed. The
        worst case is a duplicate delivery by a holder that never heard the ack, which
        at-least-once allows; never an unacked job lost."""
        freed = 0
        for j in [j for j in self.jobs.values() if j.state == ACKED]:
            if freed >= want_bytes:
                break
            freed += len(j.body) + JOB_OVERHEAD_BYTES
            self._unregister(j, now_ms)

    def queue_idle_gc_ms(self) -> int:
        """How long an empty queue (no blocked client, no pause) stays registered while
        idle: Disque's evictIdleQueues (300 s; 10 s at memory warning 1; 2 s above). The
        cost of evicting early is a queue record made again on the next use, and QSTAT
        answering null meanwhile; the queue's counters (jobs in/out) start over."""
        level = self.memory_warning
        if level > 1:
            return QUEUE_IDLE_GC_PRESSURE_MS
        if level > 0:
            return QUEUE_IDLE_GC_WARN_MS
        return QUEUE_IDLE_GC_MS
