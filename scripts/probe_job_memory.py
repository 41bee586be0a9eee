"""Where a queued Disque job's bytes go, on a live core in this process (issue 33, memory).

Builds a bare ``DisqueCore`` (a standalone node, events off, no AOF), adds ``--jobs`` jobs as
``ADDJOB q <100 bytes> 0`` does (REPLICATE 1, queued, default TTL and RETRY; 100 adds per
millisecond, about a node's pace), and prints:

- the heap the adds took per job (tracemalloc: every pymalloc/malloc allocation, from
  compiled code too), and
- the objects one queued job holds, each at its allocated size (``sys.getsizeof`` rounded
  up to pymalloc's 16-byte classes), and the containers' per-job share.

Which code runs is whatever ``disq`` imports (PYTHONPATH=checkout: compiled if built, pure
with DISQ_PURE=1). ``scripts/bench_job_memory.py`` measures a whole node's RSS instead.

Usage: ``python scripts/probe_job_memory.py [--jobs 200000]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tracemalloc

from disq import _native
from disq.core.disque.core import DisqueCore
from disq.core.events import EventBuffer

MY_ID = "a1b2c3d4" + "0" * 32
T0 = 1_700_000_000_123
BODY = b"x" * 100
ADDS_PER_MS = 100


class View:
    my_id = MY_ID
    leaving = False

    def cluster_size(self) -> int:
        return 1

    def reachable_peers(self) -> list[str]:
        return []

    def all_peers(self) -> list[str]:
        return []


def alloc(obj: object) -> int:
    """Bytes ``obj`` takes from the allocator: pymalloc rounds requests up to 16 bytes."""
    return (sys.getsizeof(obj) + 15) // 16 * 16


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200_000)
    args = parser.parse_args()
    n = args.jobs
    core = DisqueCore(View(), random.Random(1), T0)
    core.events = EventBuffer(False)
    core.persist = False
    core.add_job(T0, 0, "q", BODY, timeout_ms=0)  # the queue and its first job exist
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    now = T0
    for i in range(n):
        if i % ADDS_PER_MS == 0:
            now += 1
        core.add_job(now, 0, "q", bytes(bytearray(BODY)), timeout_ms=0)  # a body each
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"{_native.describe()}; python {sys.version.split()[0]}")
    print(f"{n:,} queued jobs: {(after - before) / n:.0f} B per job (tracemalloc)")

    job_id = next(reversed(core.jobs))
    j = core.jobs[job_id]
    q = core.queues["q"]
    heap = core._awake
    items: list[tuple[str, int]] = [
        ("DJob", alloc(j)),
        ("id str", alloc(j.id)),
        ("body bytes", alloc(j.body)),
    ]
    timer = next(e for e in heap if (e[-1] if isinstance(e, tuple) else e.job_id) is j.id)
    items.append((f"timer entry {type(timer).__name__}", alloc(timer)))
    for k, x in enumerate(timer if isinstance(timer, tuple) else ()):
        if isinstance(x, int):
            items.append((f"  timer[{k}] int", alloc(x)))
    entry = q.skiplist[-1]
    if entry is not j:
        items.append((f"skiplist entry {type(entry).__name__}", alloc(entry)))
        for k, x in enumerate(entry if isinstance(entry, tuple) else ()):
            if isinstance(x, int):
                items.append((f"  skiplist[{k}] int", alloc(x)))
    else:
        items.append(("skiplist entry: the DJob itself", 0))
    items.append(("jobs dict share", sys.getsizeof(core.jobs) // len(core.jobs)))
    items.append(("timer heap list share", sys.getsizeof(heap) // max(1, len(heap))))
    sl = q.skiplist
    sl_bytes = sys.getsizeof(sl._lists) + sum(sys.getsizeof(x) for x in sl._lists)
    sl_bytes += sys.getsizeof(sl._maxes) + sys.getsizeof(sl._index)
    items.append(("skiplist lists share", sl_bytes // len(sl)))
    for name, size in items:
        print(f"  {name:34s} {size:5d} B")
    print(f"  {'sum':34s} {sum(s for _, s in items):5d} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
