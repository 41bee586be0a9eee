"""Constants both cores share, defined once."""

from __future__ import annotations

# The priority of every Disque job (a beanstalk put gives its own): Disque jobs are all equal,
# so a beanstalk engine that adopts one orders it by arrival. beanstalkd's own default too.
DEFAULT_PRIORITY = 1024

# What a job costs besides its body, for memory accounting (--max-memory, Disque's memory
# warning levels): the job object, its dict entry, its index entries and the int keys.
# Measured for the beanstalk core's Job on CPython 3.11 (see benchmarks.md); a Disque DJob
# with its heap and skiplist entries is of the same order, so both cores count with it.
JOB_OVERHEAD_BYTES = 420

# Due timers handled per tick, so a mass expiry never stalls the loop.
TICK_BATCH = 10_000

# A Disque copy that requeues by RETRY broadcasts WILLQUEUE this long before it queues, so a
# holder that has the job queued answers QUEUED in time and the requeue is skipped.
WILLQUEUE_ADVANCE_MS = 500
