"""What the core's components may ask of the core: its job table (jobs, queues, the timers
that bring a job back) and its outboxes (messages, replies, AOF records).

A component (blocked.py, handoff.py, idempotency.py, keyvote.py, ...) owns its own state and
is handed the core as a host typed by a protocol: this one, plus the few things only that
component needs. A protocol, not the class: a component never imports the core (no import
circle), and what it may touch is written down here.
"""

from __future__ import annotations

import random
from typing import Protocol

from disq.core.disque.api import ClusterView, DeferredResult
from disq.core.disque.job import DJob
from disq.core.disque.queue import DQueue
from disq.core.messages import Message


class CoreHost(Protocol):
    """The job table and the outboxes of DisqueCore, as its components see them."""

    jobs: dict[str, DJob]
    queues: dict[str, DQueue]
    view: ClusterView
    rng: random.Random
    stats: dict[str, int]
    replies: list[tuple[int, DeferredResult]]
    aof_out: list[bytes]
    persist: bool
    wall_offset_ms: int  # wall clock minus the node clock (core.py)

    @property
    def my_id(self) -> str: ...
    def _send(self, node: str, msg: Message) -> None: ...
    def _copy_record(self, j: DJob, now_ms: int) -> bytes: ...
    def _enqueue(self, j: DJob, now_ms: int, nack: bool = False, moved: bool = False) -> bool: ...
    def _dequeue(self, j: DJob) -> bool: ...
    def _update_awake(self, j: DJob, at: int = 0) -> None: ...
    def _forget(self, j: DJob) -> None: ...
    def _unregister(self, j: DJob, now_ms: int) -> None: ...
    def _log_del(self, job_id: str) -> None: ...
    def _broadcast_del(self, j: DJob) -> None: ...
    def _delete_from_cluster(self, j: DJob, now_ms: int) -> None: ...
