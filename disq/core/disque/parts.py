"""The one base of DisqueCore's parts: the state they share and the methods each calls on
the others.

DisqueCore is one class cut into parts, a module each (aof.py, flush.py). mypyc
compiles a class with several bases only when the bases are traits, so every part is a
``@trait`` subclass of :class:`CoreParts`, and this trait declares what a part may use
without defining it: the attributes (DisqueCore.__init__ sets them all) and the methods
that DisqueCore or another part defines. A declaration here raises if nothing overrides it;
DisqueCore overrides every one.

A part imports this module and state.py (the types of the shared state, the timer ids), never
another part, not even for a type: the parts are independent (import-linter's contract
"disque-parts-apart"), so one can be read, changed or tested knowing only these two.
``DEFINED_IN`` tags every declared method with the module that defines it;
tests/unit/test_disque_parts.py checks the tags against DisqueCore's MRO, and that every
method a part calls on another is declared here.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Final

from mypy_extensions import mypyc_attr, trait

if TYPE_CHECKING:
    from disq.core.disque.api import ClusterView, DeferredResult
    from disq.core.disque.blocked import BlockedClients
    from disq.core.disque.bridge import BeanstalkBridge
    from disq.core.disque.counts import QueueCounts
    from disq.core.disque.federation import Federation
    from disq.core.disque.gone import GoneJobs
    from disq.core.disque.idempotency import KeyTable
    from disq.core.disque.job import AwakeEntry, DJob
    from disq.core.disque.keyvote import KeyVoting
    from disq.core.disque.memory import MemoryLevels
    from disq.core.disque.queue import DQueue
    from disq.core.events import EventBuffer
    from disq.core.messages import JobData


@trait
@mypyc_attr(allow_interpreted_subclasses=True)  # DisqueCore's subclasses
class CoreParts:
    """What DisqueCore's parts share (see the module's docstring)."""

    # ------------------------------------------------------------------ state
    view: ClusterView
    rng: random.Random
    jobs: dict[str, DJob]
    queues: dict[str, DQueue]
    events: EventBuffer
    replies: list[tuple[int, DeferredResult]]
    aof_out: list[bytes]
    persist: bool
    aof_enqueue_once: bool
    max_queues: int
    federation: Federation  # federation.py
    bridge: BeanstalkBridge  # bridge.py: the beanstalk bridge and its outboxes
    _prev_ctime: int
    # Wall clock minus now_ms's (node, monotonic) clock: ctime, and what the AOF keeps as an
    # absolute time, are wall-clock; every deadline in memory is on the node clock.
    wall_offset_ms: int
    gone: GoneJobs  # gone.py: tombstones, how jobs went
    # core.py's job timers: heaps of AwakeEntry, lazy; ASYNC adds without a copy here
    _awake: list[AwakeEntry]
    _awake_acked: list[AwakeEntry]
    _one_copy: set[str]
    blocked: BlockedClients  # blocked.py: waiting ADDJOBs and GETJOBs, their timers
    keys: KeyTable  # idempotency.py: the keys, their announcements, the held adds
    # keyvote.py
    vote_keys: bool  # False: the announcement-only scheme (tests of idempotency.py)
    votes: KeyVoting
    memory: MemoryLevels  # memory.py
    # counts.py: per queue, the held live jobs not queued here, of them delayed
    counts: QueueCounts

    # ------------------------------------------------------------------ core.py's
    @property
    def my_id(self) -> str:
        raise NotImplementedError

    def _jitter(self) -> int:
        raise NotImplementedError

    def _enqueue(self, j: DJob, now_ms: int, nack: bool = False, moved: bool = False) -> bool:
        raise NotImplementedError

    def _awake_time(self, j: DJob) -> int:
        raise NotImplementedError

    def _only_me(self) -> frozenset[str]:
        raise NotImplementedError

    def _job_data(self, j: DJob, now_ms: int, absolute: bool = False) -> JobData:
        raise NotImplementedError

    # ------------------------------------------------------------------ aof.py's
    def _log_del(self, job_id: str) -> None:
        raise NotImplementedError


# The module (of disq.core.disque) that defines each method declared in CoreParts: "core" is
# DisqueCore itself, the others a part. A new declaration gets its tag here, in the same commit
# (tests/unit/test_disque_parts.py fails on a declaration without one, or a wrong one).
DEFINED_IN: Final[dict[str, tuple[str, ...]]] = {
    "core": (
        "my_id",
        "_jitter",
        "_enqueue",
        "_awake_time",
        "_only_me",
        "_job_data",
    ),
    "aof": ("_log_del",),
}
