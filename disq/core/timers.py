"""The rule that keeps a lazy-deletion timer heap bounded, shared by both cores.

Both cores keep per-job time work in a binary heap (heapq is C; a sorted insert is not) and
never delete from it: a job that is deleted or rescheduled leaves its old entry behind, and
the code that pops the heap skips the entries that no longer match their job. Stale entries
would otherwise stay until their time comes (up to a job's TTL), so a heap is rebuilt from its
live entries once stale ones outnumber live ones: when it grows past ``rebuild_bound`` of the
live count at the last rebuild. The slack keeps small heaps from ever being rebuilt.

Pushes stay inline (``heapq.heappush`` and a length check) in each core: the beanstalk core
pushes on every put, reserve and release, where a helper call would cost.

When a deadline is due. ``now_ms`` is whole milliseconds, truncated: an input read as ``t``
happened anywhere in ``[t, t + 1)``. A duration ``d`` counted from it has surely run out only
once the clock reads more than ``t + d``; at ``t + d`` itself up to a millisecond may be left,
and a client measuring a TTR of 1 s saw its job back after 999.8 ms (issue 23). So every
client-visible deadline (beanstalk TTR, delay, reserve-with-timeout, pause-tube, the wake-up
of a blocked reserve at DEADLINE_SOON's margin; Disque RETRY, TTL, DELAY, GC, GETJOB and
ADDJOB TIMEOUT) is due once ``now_ms > deadline``, and ``next_deadline_ms`` answers
``deadline + 1``, the first time ``tick`` has work. Deadlines are stored as they are
(``t + d``), so what is shown (time-left, TTL) is unchanged. Internal timers (the Disque
cron, replication re-sends, membership) keep ``now_ms >= deadline``, and so does
DEADLINE_SOON's test itself (beanstalkd's: a deadline within the margin, inclusive).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

T = TypeVar("T", bound="SupportsRichComparison")
K = TypeVar("K", bound="SupportsRichComparison")

REBUILD_SLACK = 4096


def rebuild_bound(live: int) -> int:
    """The heap size past which a heap holding ``live`` live entries is rebuilt."""
    return 2 * live + REBUILD_SLACK


def compact(heap: list[T], live: Callable[[T], bool]) -> int:
    """Drop the stale entries of ``heap`` in place (its users may hold the list, as a tick
    that pops it does) and return the size past which to compact it next."""
    heap[:] = [e for e in heap if live(e)]
    heapq.heapify(heap)
    return rebuild_bound(len(heap))


def pop_due(heap: list[tuple[int, K]], now_ms: int) -> Iterator[tuple[int, K]]:
    """Pop an internal timer heap's entries due at ``now_ms`` (``at <= now_ms``), earliest
    first, for the caller to skip the stale ones; one pushed meanwhile comes too once due."""
    while heap and heap[0][0] <= now_ms:
        yield heapq.heappop(heap)
