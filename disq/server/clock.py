"""The node's two clocks: a monotonic node clock for every deadline, the wall clock for what
is absolute on disk or on the wire.

The cores take ``now_ms`` at every entry point and keep their deadlines in it. That clock is
the node clock: ``time.monotonic_ns`` in whole milliseconds, anchored at start so that it
reads the wall clock's milliseconds then (logs and tests stay readable). A wall clock step
(NTP, an operator's ``date -s``) moves no deadline: a TTR, a delay, a RETRY runs its length
whatever the wall clock does meanwhile.

What must stay wall-clock is what outlives the process or leaves the node: a Disque job's
ctime and the absolute expiry in its AOF record, the beanstalk AOF's ctime and delay end, the
idempotency keys' windows on disk, the lifecycle events' times. The cores convert at those
boundaries with ``wall_offset_ms`` (wall minus node), which the runtime keeps current
(:meth:`NodeClock.wall_offset_ms`, read once per flush) and the tests set by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable

NS_PER_MS = 1_000_000


class NodeClock:
    """``now_ms()``: the node clock; ``wall_offset_ms()``: how far the wall clock is from it.

    Both sources are injectable, so a test can step the wall clock under a running node."""

    __slots__ = ("_mono_ns", "_wall_ns", "base_ns")

    def __init__(
        self,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._mono_ns = monotonic_ns
        self._wall_ns = wall_ns
        # The anchor, in ns so that the node clock's millisecond boundaries are the wall
        # clock's at start (an offset in whole ms would leave the two a fraction apart, and
        # the offset read later would flicker between two values).
        self.base_ns = wall_ns() - monotonic_ns()

    def now_ms(self) -> int:
        """Milliseconds on the node clock, truncated: the instant read may really be up to
        0.999 ms later, which is why a deadline is due only once this passes it
        (disq/core/timers.py)."""
        return (self._mono_ns() + self.base_ns) // NS_PER_MS

    def wall_ms(self) -> int:
        """Milliseconds on the wall clock (Unix time), for what is shown as a date."""
        return self._wall_ns() // NS_PER_MS

    def wall_offset_ms(self) -> int:
        """Wall minus node clock, rounded to the millisecond: 0 until the wall clock is
        stepped (or slewed by half a millisecond, NTP's slow correction)."""
        drift = self._wall_ns() - self._mono_ns() - self.base_ns
        return (drift + NS_PER_MS // 2) // NS_PER_MS
