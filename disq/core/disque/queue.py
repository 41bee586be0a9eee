"""A Disque queue: jobs ordered by ctime, plus the bookkeeping federation needs (reference 2.6).

The skiplist is a ``SortedList`` of the queued ``DJob``s themselves, ordered by ``DJob.__lt__``:
ctime, unique per creating node, then the id between nodes, so requeued jobs land near the
head (their ctime is old), which is Disque's best-effort FIFO. Why the jobs and not
``(ctime, id)`` tuples: a tuple and its boxed ctime cost a queued job 112 bytes (a third of
what it holds besides its body), and the pop hands back the job without a table look-up.
Entries compare equal only to themselves (identity), which is what discard needs: the job
table holds one DJob per id.
"""

from __future__ import annotations

from collections import OrderedDict

from sortedcontainers import SortedList

from disq.core.messages import PAUSE_IN, PAUSE_OUT

IMPORT_WINDOW_MS = 5000  # import rate: jobs/s over at most the last 5 s
RESPONDER_VALID_MS = 5000  # a node that sent YOURJOBS is a "recent responder" for 5 s


class DQueue:
    __slots__ = (
        "atime_ms",
        "blocked",
        "ctime_ms",
        "import_hist",
        "jobs_in",
        "jobs_out",
        "name",
        "needjobs_adhoc_attempt",
        "needjobs_adhoc_ms",
        "needjobs_bcast_attempt",
        "needjobs_bcast_ms",
        "pause",
        "responders",
        "skiplist",
        "wanted_by",
    )

    def __init__(self, name: str, now_ms: int) -> None:
        self.name = name
        self.skiplist: SortedList = SortedList()  # DJob, in DJob.__lt__ order
        self.ctime_ms = now_ms
        self.atime_ms = now_ms  # last activity, for the idle GC and QSTAT idle
        self.jobs_in = 0
        self.jobs_out = 0
        self.pause = 0  # PAUSE_IN | PAUSE_OUT
        # Tokens of GETJOB clients blocked here, in order. An OrderedDict: they are served
        # from the front, and a dict's next(iter()) walks every slot deleted before it.
        self.blocked: OrderedDict[int, None] = OrderedDict()
        # Federation (queue.c needJobsForQueue).
        self.needjobs_bcast_ms = 0
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_ms = 0
        self.needjobs_adhoc_attempt = 0
        self.responders: dict[str, int] = {}  # node id -> last YOURJOBS time
        self.import_hist: list[tuple[int, int]] = []  # (second, jobs imported in it)
        # disq extension: peers that asked NEEDJOBS while this queue was empty, with the time
        # the interest lapses. A job added here while nobody local waits goes straight to
        # them, so a consumer blocked elsewhere gets it without waiting for its next
        # (exponentially backed off) broadcast.
        self.wanted_by: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.skiplist)

    @property
    def paused_in(self) -> bool:
        return bool(self.pause & PAUSE_IN)

    @property
    def paused_out(self) -> bool:
        return bool(self.pause & PAUSE_OUT)

    def record_import(self, now_ms: int, n: int) -> None:
        sec = now_ms // 1000
        if self.import_hist and self.import_hist[-1][0] == sec:
            self.import_hist[-1] = (sec, self.import_hist[-1][1] + n)
        else:
            self.import_hist.append((sec, n))
            if len(self.import_hist) > 6:
                del self.import_hist[0]

    def import_rate(self, now_ms: int) -> int:
        """Jobs imported per second over the last (at most) 5 seconds."""
        horizon = (now_ms - IMPORT_WINDOW_MS) // 1000
        total = sum(n for sec, n in self.import_hist if sec > horizon)
        if total == 0:
            return 0
        first = min(sec for sec, n in self.import_hist if sec > horizon)
        span = max(1, now_ms // 1000 - first + 1)
        return max(1, total // span)

    def live_responders(self, now_ms: int) -> list[str]:
        stale = [n for n, t in self.responders.items() if now_ms - t > RESPONDER_VALID_MS]
        for n in stale:
            del self.responders[n]
        return list(self.responders)

    def idle(self) -> bool:
        return not self.skiplist and not self.blocked and not self.pause

    def pause_name(self) -> str:
        return ("none", "in", "out", "all")[self.pause & (PAUSE_IN | PAUSE_OUT)]
