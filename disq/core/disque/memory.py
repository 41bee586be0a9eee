"""Memory (Disque's getMemoryWarningLevel and what its levels trigger), from this core's
estimate of its jobs' size (``used_bytes``: bodies plus JOB_OVERHEAD_BYTES each) and the
beanstalk engine's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq.core.constants import JOB_OVERHEAD_BYTES
from disq.core.disque.job import ACKED, DJob


class MemoryMixin:
    """The memory warning levels of DisqueCore."""

    jobs: dict[str, DJob]
    memory_warning: int  # 0 ok, 1 >75%, 2 >95%, 3 full
    max_memory_bytes: int  # 0: no limit
    used_bytes: int

    if TYPE_CHECKING:  # provided by DisqueCore

        def _unregister(self, j: DJob, now_ms: int) -> None: ...

    def update_memory(self, now_ms: int, other_bytes: int = 0) -> int:
        """Disque's memory warning levels (getMemoryWarningLevel), from this core's estimate
        plus ``other_bytes`` (the beanstalk engine's jobs). Level 1 (>75%): new jobs are
        replicated externally and REPLJOB is refused; level 2 (>95%): acked jobs, which are
        only GC bookkeeping, are evicted; level 3 (full): ADDJOB, NACK and ENQUEUE get -OOM."""
        limit = self.max_memory_bytes
        if limit <= 0:
            self.memory_warning = 0
            return 0
        used = self.used_bytes + other_bytes
        if used > limit * 95 // 100:
            self._evict_acked(now_ms, used - limit * 95 // 100)
            used = self.used_bytes + other_bytes
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
