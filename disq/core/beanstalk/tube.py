"""A tube (beanstalk) is a queue (Disque): ready, delayed and buried jobs plus its waiters."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

if TYPE_CHECKING:
    from disq.core.beanstalk.job import Job
    from disq.core.beanstalk.session import Session


class Tube:
    """Ready jobs are a skiplist-like SortedList of ``pri << 64 | id`` ints.

    beanstalkd uses a binary heap per tube; a sorted list gives the same O(log n) take plus
    ordered iteration, which peek, kick and Disque's QPEEK/QSCAN need. Buried jobs are a
    FIFO (an insertion-ordered dict, so ``kick-job`` and ``delete`` remove from the middle
    in O(1)).
    """

    __slots__ = (
        "buried",
        "cmd_delete",
        "cmd_pause",
        "delayed",
        "name",
        "pause_ms",
        "pause_until_ms",
        "ready",
        "reserved_count",
        "total_jobs",
        "urgent_count",
        "using_count",
        "waiting",
        "watching_count",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready: SortedList = SortedList()
        self.delayed: SortedList = SortedList()  # (deadline_ms << 64 | id)
        self.buried: dict[int, Job] = {}
        # Sessions waiting in reserve, served from the front: an OrderedDict, as a dict's
        # next(iter()) walks every slot deleted before the first live one.
        self.waiting: OrderedDict[Session, None] = OrderedDict()
        self.reserved_count = 0
        self.urgent_count = 0
        self.using_count = 0
        self.watching_count = 0
        self.total_jobs = 0
        self.cmd_delete = 0
        self.cmd_pause = 0
        self.pause_ms = 0
        self.pause_until_ms = 0

    def is_unused(self) -> bool:
        return not (
            self.ready
            or self.delayed
            or self.buried
            or self.reserved_count
            or self.using_count
            or self.watching_count
            or self.waiting
        )

    def __repr__(self) -> str:
        return f"Tube({self.name!r})"
