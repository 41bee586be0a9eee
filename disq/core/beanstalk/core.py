"""The engine: a pure, deterministic state machine of jobs, tubes and sessions.

Every entry point takes ``now_ms`` (the node clock's milliseconds: monotonic, so no wall
clock step moves a deadline; disq/server/clock.py) and never does IO. Work for the IO layer
goes to outboxes:

* ``aof_out``: framed AOF records, written by the server with one write per loop iteration;
* ``wakeups``: ``(session, result)`` for blocked reservations answered later, where result is
  a :class:`Job` or an error code string (``DEADLINE_SOON``, ``TIMED_OUT``).

``next_deadline_ms()`` says when ``tick(now_ms)`` is next needed: the server keeps one timer
for it, never one per job (beanstalkd's "process what is due, sleep until the next deadline").

**Queue policies.** A tube's MAXDELIVERIES (QPOLICY, read through ``max_reserves``) buries a
job reserved that many times when it comes back (a release, its TTR running out, its
session closing) instead of queueing it again: beanstalk's own dead letter (a ``buried``
event, ``policy_buried``; DEADLETTER does not apply to tubes). The release is still
answered RELEASED: the client released, the policy then buried (beanstalkd answers BURIED
to a release only when out of memory). A kick out of buried is "try again": the job gets
MAXDELIVERIES more reserves (``kick_reserves``, in memory only). A reserve is not logged,
so a restart counts from what the AOF kept (the last bury, kick or delayed release): it errs
towards more tries, never fewer; a kicked job's count starts again from there.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

from disq.core import events as ev
from disq.core.beanstalk import errors
from disq.core.beanstalk.model import (
    BURIED,
    DELAYED,
    ID_MASK,
    KEY_SHIFT,
    READY,
    RESERVED,
    URGENT_THRESHOLD,
    Job,
    Session,
    Tube,
)
from disq.core.constants import JOB_OVERHEAD_BYTES, TICK_BATCH
from disq.core.timers import rebuild_bound
from disq.persistence import records
from disq.persistence.framing import frame as _frame

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

DEFAULT_TUBE = "default"
SAFETY_MARGIN_MS = 1000  # beanstalkd's DEADLINE_SOON margin
MIN_TTR_MS = 1000  # beanstalkd turns ttr 0 into 1 s
# cluster_events kinds: a replicated job changed (bury, kick, release with a new priority or
# delay) or was deleted.
EV_UPDATE = 1
EV_DELETE = 2


class Limits:
    """A plain class, not a dataclass: ``dataclasses`` (with ``inspect``) is about 0.8 ms of a
    node's start before its first answer (issue 31)."""

    def __init__(
        self,
        max_job_size: int = 65535,
        max_memory_bytes: int = 0,  # 0: unbounded
        max_tubes: int = 100_000,
        max_sessions: int = 100_000,
    ) -> None:
        self.max_job_size = max_job_size
        self.max_memory_bytes = max_memory_bytes
        self.max_tubes = max_tubes
        self.max_sessions = max_sessions

    def __repr__(self) -> str:
        return (
            f"Limits(max_job_size={self.max_job_size}, max_memory_bytes="
            f"{self.max_memory_bytes}, max_tubes={self.max_tubes}, "
            f"max_sessions={self.max_sessions})"
        )


class BeanstalkCore:
    def __init__(self, limits: Limits | None = None, *, persist: bool = False):
        self.limits = limits or Limits()
        self.persist = persist
        self.jobs: dict[int, Job] = {}
        self.tubes: dict[str, Tube] = {}
        # beanstalkd's tube array: list-tubes order, with its swap-on-remove quirk.
        self.tube_order: list[Tube] = []
        self.next_id = 1
        self.next_session_id = 1
        self.sessions: dict[Session, None] = {}
        self.draining = False
        # Set by the IO layer while the AOF cannot be written: new jobs are refused with
        # OUT_OF_MEMORY (beanstalkd's answer when its binlog cannot grow).
        self.refuse_puts = False
        self.used_bytes = 0
        # One ordered structure for per-job time work (delayed ends, TTR ends): a heap of
        # ``deadline << 64 | id`` with lazy deletion. A delete or touch leaves the old entry
        # behind and ``tick`` skips entries that no longer match their job; the heap is rebuilt
        # when stale entries outnumber live ones, so its size stays bounded (disq.core.timers).
        # heapq is C, a sorted insert is not: this is two O(log n) Python calls saved per
        # reserve+delete.
        self.timers: list[int] = []
        self._timers_rebuild_at = rebuild_bound(0)
        # Wall clock minus ``now_ms``'s clock (the node's monotonic one): the AOF keeps
        # ctime and a delay's end in wall time (records.py), memory in node time. The node
        # keeps it current (disq/server/clock.py); 0 where both clocks are one (tests, sim).
        self.wall_offset_ms = 0
        # The earliest time scheduled since the IO layer last looked (-1: nothing new), so
        # it can keep its one timer right without asking for the next deadline every read.
        self.timer_hint_ms = -1
        # Few entries, lazily invalidated: waiting-session wake-ups and tube unpauses.
        self.session_timers: list[tuple[int, int, Session]] = []
        self.pause_timers: list[tuple[int, str]] = []
        self._timer_seq = 0
        self.tubes_with_waiters: dict[Tube, None] = {}
        self.aof_out: list[bytes] = []
        # Replicated jobs (job.replica set) whose state the holders must learn: (event, job).
        self.cluster_events: list[tuple[int, Job]] = []
        # Lifecycle events (ids are the numeric job ids); off until a node with an event log
        # turns them on, since nobody would drain them.
        self.events = ev.EventBuffer(enabled=False)
        # A tube's MAXDELIVERIES (0: none), set by the node core over the queue policies;
        # None: no policies (module docstring).
        self.max_reserves: Callable[[str], int] | None = None
        # int results: a replicated put confirmed (INSERTED <id>), delivered by the cluster.
        self.wakeups: list[tuple[Session, Job | str | int]] = []
        # Global counters (beanstalkd `stats`); per-command counters live with the door.
        self.ready_count = 0
        self.urgent_count = 0
        self.reserved_count = 0
        self.delayed_count = 0
        self.buried_count = 0
        self.total_jobs = 0
        self.job_timeouts = 0
        self.policy_buried = 0  # jobs buried by their tube's MAXDELIVERIES
        self.total_sessions = 0
        self.producer_count = 0
        self.worker_count = 0
        self.waiting_count = 0
        self.default_tube = self._tube(DEFAULT_TUBE)

    # ------------------------------------------------------------------ tubes
    def _tube(self, name: str) -> Tube:
        tube = self.tubes.get(name)
        if tube is None:
            if len(self.tubes) >= self.limits.max_tubes:
                raise errors.LimitExceeded("too many tubes")
            tube = Tube(name)
            self.tubes[name] = tube
            self.tube_order.append(tube)
        return tube

    def _maybe_drop_tube(self, tube: Tube) -> None:
        if tube is self.default_tube or not tube.is_unused():
            return
        if self.tubes.get(tube.name) is tube:
            del self.tubes[tube.name]
            order = self.tube_order
            i = order.index(tube)
            last = order.pop()
            if i < len(order):
                order[i] = last

    def find_tube(self, name: str) -> Tube | None:
        return self.tubes.get(name)

    # --------------------------------------------------------------- sessions
    def open_session(self) -> Session:
        if len(self.sessions) >= self.limits.max_sessions:
            raise errors.LimitExceeded("too many connections")
        s = Session(self.next_session_id, self.default_tube)
        self.next_session_id += 1
        self.sessions[s] = None
        self.default_tube.using_count += 1
        self.default_tube.watching_count += 1
        self.total_sessions += 1
        return s

    def close_session(self, s: Session, now_ms: int) -> None:
        """Closing releases every reserved job at once, as beanstalkd does."""
        if s.closed:
            return
        s.closed = True
        self.sessions.pop(s, None)
        self._stop_waiting(s)
        for job in list(s.reserved.values()):
            self._unreserve(s, job)
            if not self._spent(job, now_ms):
                self._make_ready(job)
        s.use.using_count -= 1
        touched = [s.use]
        for tube in s.watch:
            tube.watching_count -= 1
            touched.append(tube)
        s.watch = []
        if s.is_producer:
            self.producer_count -= 1
        if s.is_worker:
            self.worker_count -= 1
        for tube in touched:
            self._maybe_drop_tube(tube)
        self._process_queue(now_ms)

    def use(self, s: Session, name: str) -> Tube:
        tube = self._tube(name)
        old = s.use
        if old is not tube:
            old.using_count -= 1
            tube.using_count += 1
            s.use = tube
            self._maybe_drop_tube(old)
        return tube

    def watch(self, s: Session, name: str) -> int:
        tube = self._tube(name)
        if tube not in s.watch:
            s.watch.append(tube)
            tube.watching_count += 1
        return len(s.watch)

    def ignore(self, s: Session, name: str) -> int:
        watch = s.watch
        for i, tube in enumerate(watch):
            if tube.name == name:
                if len(watch) < 2:
                    raise errors.NotIgnored()
                last = watch.pop()
                if i < len(watch):
                    watch[i] = last
                tube.watching_count -= 1
                self._maybe_drop_tube(tube)
                break
        return len(watch)

    # ------------------------------------------------------------------- jobs
    def put(
        self, s: Session, pri: int, delay_ms: int, ttr_ms: int, body: bytes, now_ms: int
    ) -> int:
        if not s.is_producer:
            s.is_producer = True
            self.producer_count += 1
        size = len(body) + JOB_OVERHEAD_BYTES
        limit = self.limits.max_memory_bytes
        if (limit and self.used_bytes + size > limit) or self.refuse_puts:
            raise errors.OutOfMemory()
        # beanstalkd makes the job (and spends its id) before it checks drain mode.
        job_id = self.next_id
        self.next_id = job_id + 1
        if self.draining:
            raise errors.Draining()
        if ttr_ms < MIN_TTR_MS:
            ttr_ms = MIN_TTR_MS
        tube = s.use
        job = Job(job_id, tube, body, pri, delay_ms, ttr_ms, now_ms)
        self.jobs[job_id] = job
        self.used_bytes += size
        tube.total_jobs += 1
        self.total_jobs += 1
        if delay_ms:
            self._make_delayed(job, now_ms + delay_ms)
        else:
            job.state = READY
            tube.ready.add((pri << KEY_SHIFT) | job_id)
            self.ready_count += 1
            if pri < URGENT_THRESHOLD:
                tube.urgent_count += 1
                self.urgent_count += 1
            if tube.waiting:
                self._process_queue(now_ms)
        if self.persist:
            self.aof_out.append(
                _frame(records.REC_PUT, records.encode_put(job, self.wall_offset_ms))
            )
        self.events.add(ev.ENQUEUED, now_ms, tube.name, job_id, 0, len(body))
        return job_id

    def adopt(
        self, tube_name: str, body: bytes, pri: int, ttr_ms: int, buried: bool, now_ms: int
    ) -> Job:
        """A replicated job whose owner was lost becomes this node's (cluster takeover): a new
        local id, ready (or buried, as the owner last reported), logged like a put."""
        tube = self._tube(tube_name)
        job_id = self.next_id
        self.next_id = job_id + 1
        job = Job(job_id, tube, body, pri, 0, max(ttr_ms, MIN_TTR_MS), now_ms)
        self.jobs[job_id] = job
        self.used_bytes += len(body) + JOB_OVERHEAD_BYTES
        tube.total_jobs += 1
        self.total_jobs += 1
        if buried:
            self._make_buried(job)
        else:
            self._make_ready(job)
        if self.persist:
            self.aof_out.append(
                _frame(records.REC_PUT, records.encode_put(job, self.wall_offset_ms))
            )
        if not buried and tube.waiting:
            self._process_queue(now_ms)
        return job

    def drop(self, job_id: int) -> bool:
        """Remove a job whatever its state (the cluster deleted it: acked or expired through
        another node, or its replication failed). A reserving client later gets NOT_FOUND."""
        job = self.jobs.get(job_id)
        if job is None:
            return False
        if job.state == RESERVED and job.reserver is not None:
            self._unreserve(job.reserver, job)
        else:
            self._take_out(job)
        self._forget(job)
        job.replica = None
        if self.persist:
            self.aof_out.append(_frame(records.REC_DELETE, records.encode_delete(job_id)))
        return True

    def spend_id(self, s: Session) -> None:
        """A put whose body lacked its CRLF: beanstalkd had already made the job."""
        if not s.is_producer:
            s.is_producer = True
            self.producer_count += 1
        self.next_id += 1

    def _make_ready(self, job: Job) -> None:
        tube = job.tube
        job.state = READY
        job.deadline_ms = 0
        tube.ready.add((job.pri << KEY_SHIFT) | job.id)
        self.ready_count += 1
        if job.pri < URGENT_THRESHOLD:
            tube.urgent_count += 1
            self.urgent_count += 1

    def _make_delayed(self, job: Job, deadline_ms: int) -> None:
        job.state = DELAYED
        job.deadline_ms = deadline_ms
        key = (deadline_ms << KEY_SHIFT) | job.id
        job.tube.delayed.add(key)
        self._push_timer(key)
        self.delayed_count += 1

    def _make_buried(self, job: Job) -> None:
        job.state = BURIED
        job.deadline_ms = 0
        job.tube.buried[job.id] = job
        self.buried_count += 1

    def _take_out(self, job: Job) -> None:
        """Remove a ready, delayed or buried job from its tube's index."""
        tube = job.tube
        state = job.state
        if state == READY:
            tube.ready.remove((job.pri << KEY_SHIFT) | job.id)
            self.ready_count -= 1
            if job.pri < URGENT_THRESHOLD:
                tube.urgent_count -= 1
                self.urgent_count -= 1
        elif state == DELAYED:
            tube.delayed.remove((job.deadline_ms << KEY_SHIFT) | job.id)
            self.delayed_count -= 1
        elif state == BURIED:
            del tube.buried[job.id]
            self.buried_count -= 1

    def _reserve_to(self, s: Session, job: Job, now_ms: int) -> None:
        job.state = RESERVED
        job.reserver = s
        job.reserves += 1
        self.events.add(ev.DELIVERED, now_ms, job.tube.name, job.id, job.reserves, len(job.body))
        job.deadline_ms = deadline = now_ms + job.ttr_ms
        self._push_timer((deadline << KEY_SHIFT) | job.id)
        s.reserved[job.id] = job
        if s.soonest_ms < 0 or deadline < s.soonest_ms:
            if s.soonest_ms != -2:
                s.soonest_ms = deadline
        job.tube.reserved_count += 1
        self.reserved_count += 1

    def _unreserve(self, s: Session, job: Job) -> None:
        del s.reserved[job.id]
        if job.deadline_ms == s.soonest_ms:
            s.soonest_ms = -2  # recompute on demand
        job.reserver = None
        job.tube.reserved_count -= 1
        self.reserved_count -= 1

    def _push_timer(self, key: int) -> None:
        timers = self.timers
        heapq.heappush(timers, key)
        due = (key >> KEY_SHIFT) + 1  # a deadline is due once passed (disq/core/timers.py)
        if due < self.timer_hint_ms or self.timer_hint_ms < 0:
            self.timer_hint_ms = due
        if len(timers) > self._timers_rebuild_at:
            self._rebuild_timers()

    def _rebuild_timers(self) -> None:
        """Drop stale entries: keep one key per delayed or reserved job."""
        live = [key for tube in self.tube_order for key in tube.delayed]
        live.extend(
            (job.deadline_ms << KEY_SHIFT) | job.id
            for s in self.sessions
            for job in s.reserved.values()
        )
        heapq.heapify(live)
        self.timers = live
        self._timers_rebuild_at = rebuild_bound(len(live))

    def _reserved_by(self, s: Session, job_id: int) -> Job:
        job = s.reserved.get(job_id)
        if job is None:
            raise errors.NotFound()
        return job

    def _log_update(self, job: Job) -> None:
        if job.replica is not None:
            self.cluster_events.append((EV_UPDATE, job))
        if self.persist:
            self.aof_out.append(
                _frame(records.REC_UPDATE, records.encode_update(job, self.wall_offset_ms))
            )

    def delete(self, s: Session, job_id: int, now_ms: int) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            raise errors.NotFound()
        tube = job.tube
        if job.state == RESERVED:
            if job.reserver is not s:
                raise errors.NotFound()
            # _unreserve, inlined: reserve+delete is the consumer's hot path.
            del s.reserved[job_id]
            if job.deadline_ms == s.soonest_ms:
                s.soonest_ms = -2
            job.reserver = None
            tube.reserved_count -= 1
            self.reserved_count -= 1
        else:
            self._take_out(job)
        del self.jobs[job_id]
        self.used_bytes -= len(job.body) + JOB_OVERHEAD_BYTES
        tube.cmd_delete += 1
        self.events.add(ev.DELETED, now_ms, tube.name, job_id, job.reserves, len(job.body))
        if job.replica is not None:
            self.cluster_events.append((EV_DELETE, job))
        if self.persist:
            self.aof_out.append(_frame(records.REC_DELETE, records.encode_delete(job_id)))
        if tube is not self.default_tube:
            self._maybe_drop_tube(tube)

    def _forget(self, job: Job) -> None:
        del self.jobs[job.id]
        self.used_bytes -= len(job.body) + JOB_OVERHEAD_BYTES

    def release(self, s: Session, job_id: int, pri: int, delay_ms: int, now_ms: int) -> None:
        job = self._reserved_by(s, job_id)
        self._unreserve(s, job)
        old_pri = job.pri
        job.pri = pri
        job.delay_ms = delay_ms
        job.releases += 1
        self.events.add(ev.NACKED, now_ms, job.tube.name, job.id, job.releases, len(job.body))
        if self._spent(job, now_ms):
            return
        if delay_ms:
            self._make_delayed(job, now_ms + delay_ms)
        else:
            self._make_ready(job)
        # Like beanstalkd, a plain release is not logged (a restart makes reserved jobs
        # ready anyway); a delay or a new priority must survive it.
        if delay_ms or pri != old_pri:
            self._log_update(job)
        if not delay_ms and job.tube.waiting:
            self._process_queue(now_ms)

    def bury(self, s: Session, job_id: int, pri: int, now_ms: int) -> None:
        job = self._reserved_by(s, job_id)
        self._unreserve(s, job)
        job.pri = pri
        job.buries += 1
        self.events.add(ev.BURIED, now_ms, job.tube.name, job.id, job.reserves, len(job.body))
        self._make_buried(job)
        self._log_update(job)

    def _spent(self, job: Job, now_ms: int) -> bool:
        """Bury a job come back (unreserved) that its tube's MAXDELIVERIES allows no more
        reserves since its last kick; False leaves it to the caller (module docstring)."""
        limit = self.max_reserves
        if limit is None:
            return False
        n = limit(job.tube.name)
        if n <= 0 or job.reserves - job.kick_reserves < n:
            return False
        job.buries += 1
        self.policy_buried += 1
        self.events.add(ev.BURIED, now_ms, job.tube.name, job.id, job.reserves, len(job.body))
        self._make_buried(job)
        self._log_update(job)
        return True

    def touch(self, s: Session, job_id: int, now_ms: int) -> None:
        job = self._reserved_by(s, job_id)
        if job.deadline_ms == s.soonest_ms:
            s.soonest_ms = -2
        job.deadline_ms = deadline = now_ms + job.ttr_ms
        self._push_timer((deadline << KEY_SHIFT) | job.id)

    def kick(self, s: Session, bound: int, now_ms: int) -> int:
        """Kick buried jobs (FIFO) if the used tube has any, else delayed ones (soonest)."""
        tube = s.use
        kicked = 0
        if tube.buried:
            # The oldest ``bound`` in one pass: next(iter()) after each removal would walk
            # every removed slot again (a quadratic `kick 100000`).
            for job in list(itertools.islice(tube.buried.values(), bound)):
                self._kick_one(job, now_ms)
                kicked += 1
        else:
            while kicked < bound and tube.delayed:
                job = self.jobs[tube.delayed[0] & ID_MASK]
                self._kick_one(job, now_ms)
                kicked += 1
        if kicked and tube.waiting:
            self._process_queue(now_ms)
        return kicked

    def kick_job(self, job_id: int, now_ms: int) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.state not in (BURIED, DELAYED):
            raise errors.NotFound()
        self._kick_one(job, now_ms)
        if job.tube.waiting:
            self._process_queue(now_ms)

    def _kick_one(self, job: Job, now_ms: int) -> None:
        if job.state == BURIED:
            job.kick_reserves = job.reserves  # "try again": MAXDELIVERIES more reserves
        self._take_out(job)
        job.kicks += 1
        self.events.add(ev.KICKED, now_ms, job.tube.name, job.id, job.reserves, len(job.body))
        self._make_ready(job)
        self._log_update(job)

    # ---------------------------------------------------------------- reserve
    def reserve(self, s: Session, timeout_ms: int, now_ms: int) -> Job | None:
        """Reserve now, or register ``s`` as waiting and return None.

        ``timeout_ms`` < 0 waits without limit. A waiting session is answered through
        ``wakeups``. DEADLINE_SOON is answered only when no watched tube has a ready job
        (beanstalkd's ``conndeadlinesoon(c) && !conn_ready(c)``).
        """
        if not s.is_worker:
            s.is_worker = True
            self.worker_count += 1
        soonest = s.soonest_ms
        if soonest == -2:
            soonest = s.soonest_deadline_ms()
        # beanstalkd's conndeadlinesoon: a deadline within the margin, inclusive (a job
        # reserved with TTR 1 is "soon" at once). A condition, not a timer: not strict.
        if soonest >= 0 and now_ms >= soonest - SAFETY_MARGIN_MS:
            if not any(t.ready for t in s.watch):
                raise errors.DeadlineSoon()
        watch = s.watch
        if len(watch) == 1:
            # One watched tube (the common worker): its head is the answer.
            tube = watch[0]
            ready = tube.ready
            job = (
                self.jobs[ready[0] & ID_MASK]
                if ready and (tube.pause_until_ms == 0 or tube.pause_until_ms < now_ms)
                else None
            )
        else:
            job = self._pick(watch, now_ms)
        if job is not None:
            self._take_ready(job)
            self._reserve_to(s, job, now_ms)
            return job
        if timeout_ms == 0:
            raise errors.TimedOut()
        s.waiting = True
        s.wait_deadline_ms = now_ms + timeout_ms if timeout_ms > 0 else -1
        wake = s.wait_deadline_ms
        if soonest >= 0:
            margin = soonest - SAFETY_MARGIN_MS
            wake = margin if wake < 0 else min(wake, margin)
        s.wait_wake_ms = wake
        if wake >= 0:
            self._timer_seq += 1
            heapq.heappush(self.session_timers, (wake, self._timer_seq, s))
            if wake + 1 < self.timer_hint_ms or self.timer_hint_ms < 0:
                self.timer_hint_ms = wake + 1
        self.waiting_count += 1
        for tube in s.watch:
            tube.waiting[s] = None
            self.tubes_with_waiters[tube] = None
        return None

    def reserve_job(self, s: Session, job_id: int, now_ms: int) -> Job:
        """beanstalkd 1.12 ``reserve-job``: take a ready, delayed or buried job by id."""
        job = self.jobs.get(job_id)
        if job is None or job.state == RESERVED:
            raise errors.NotFound()
        if not s.is_worker:
            s.is_worker = True
            self.worker_count += 1
        was = job.state
        self._take_out(job)
        self._reserve_to(s, job, now_ms)
        if was != READY:
            # The AOF says buried or delayed; a restart must not bring that back once the
            # job was taken (a reserved job comes back ready, as after any restart).
            self._log_update(job)
        return job

    def _pick(self, watched: Iterable[Tube], now_ms: int) -> Job | None:
        best_key = -1
        best_tube: Tube | None = None
        for tube in watched:
            ready = tube.ready
            # A pause ends once its end is passed (disq/core/timers.py); 0: not paused.
            if ready and (tube.pause_until_ms == 0 or tube.pause_until_ms < now_ms):
                key = ready[0]
                if best_tube is None or key < best_key:
                    best_key = key
                    best_tube = tube
        if best_tube is None:
            return None
        return self.jobs[best_key & ID_MASK]

    def _take_ready(self, job: Job) -> None:
        """Remove the job ``_pick`` chose: it is the head of its tube's ready list."""
        tube = job.tube
        del tube.ready[0]
        self.ready_count -= 1
        if job.pri < URGENT_THRESHOLD:
            tube.urgent_count -= 1
            self.urgent_count -= 1

    def _stop_waiting(self, s: Session) -> None:
        if not s.waiting:
            return
        s.waiting = False
        s.wait_wake_ms = -1
        self.waiting_count -= 1
        for tube in s.watch:
            tube.waiting.pop(s, None)
            if not tube.waiting:
                self.tubes_with_waiters.pop(tube, None)

    def _process_queue(self, now_ms: int) -> None:
        """Hand ready jobs to waiting sessions, lowest (pri, id) first, waiters in order."""
        while self.tubes_with_waiters:
            job = self._pick(self.tubes_with_waiters, now_ms)
            if job is None:
                return
            s = next(iter(job.tube.waiting))
            self._stop_waiting(s)
            self._take_ready(job)
            self._reserve_to(s, job, now_ms)
            self.wakeups.append((s, job))

    # ----------------------------------------------------------------- pause
    def pause_tube(self, name: str, delay_ms: int, now_ms: int) -> None:
        tube = self.tubes.get(name)
        if tube is None:
            raise errors.NotFound()
        tube.cmd_pause += 1
        tube.pause_ms = delay_ms
        # beanstalkd stores delay 0 as 1 ns: the tube unpauses at once.
        tube.pause_until_ms = now_ms + delay_ms if delay_ms else 0
        if delay_ms:
            heapq.heappush(self.pause_timers, (tube.pause_until_ms, name))
            if tube.pause_until_ms + 1 < self.timer_hint_ms or self.timer_hint_ms < 0:
                self.timer_hint_ms = tube.pause_until_ms + 1
        elif tube.waiting:
            self._process_queue(now_ms)

    # ------------------------------------------------------------------ peek
    def peek(self, job_id: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise errors.NotFound()
        return job

    def peek_ready(self, s: Session) -> Job:
        ready = s.use.ready
        if not ready:
            raise errors.NotFound()
        return self.jobs[ready[0] & ID_MASK]

    def peek_delayed(self, s: Session) -> Job:
        delayed = s.use.delayed
        if not delayed:
            raise errors.NotFound()
        return self.jobs[delayed[0] & ID_MASK]

    def peek_buried(self, s: Session) -> Job:
        buried = s.use.buried
        if not buried:
            raise errors.NotFound()
        return next(iter(buried.values()))

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> int:
        """When ``tick`` must next run, or -1 when nothing is scheduled: a millisecond after
        the earliest deadline, since a deadline is due only once ``now_ms`` has passed it
        (disq/core/timers.py)."""
        best = -1
        if self.timers:
            best = self.timers[0] >> KEY_SHIFT
        for heap in (self.session_timers, self.pause_timers):
            if heap:
                when = heap[0][0]
                if best < 0 or when < best:
                    best = when
        return best + 1 if best >= 0 else -1

    def tick(self, now_ms: int) -> None:
        """Process what is due: delayed ends, TTR ends, unpauses, waiter time-outs."""
        timers = self.timers
        jobs = self.jobs
        budget = TICK_BATCH
        woke = False
        heappop = heapq.heappop
        while timers and budget:
            key = timers[0]
            when = key >> KEY_SHIFT
            if when >= now_ms:
                break  # due only once passed (timers.py): ``now_ms`` is truncated
            budget -= 1
            heappop(timers)
            job = jobs.get(key & ID_MASK)
            if job is None or job.deadline_ms != when:
                continue  # stale: deleted, touched, released or kicked since
            if job.state == DELAYED:
                job.tube.delayed.remove(key)
                self.delayed_count -= 1
                self._make_ready(job)
                woke = True
            elif job.state == RESERVED and job.reserver is not None:
                s = job.reserver
                self._unreserve(s, job)
                job.timeouts += 1
                self.job_timeouts += 1
                if self._spent(job, now_ms):
                    continue
                self.events.add(
                    ev.REQUEUED, now_ms, job.tube.name, job.id, job.reserves, len(job.body)
                )
                self._make_ready(job)
                woke = True
        pauses = self.pause_timers
        while pauses and pauses[0][0] < now_ms:
            when, name = heapq.heappop(pauses)
            tube = self.tubes.get(name)
            if tube is not None and tube.pause_until_ms == when:
                tube.pause_until_ms = 0
                tube.pause_ms = 0
                woke = True
        if woke:
            self._process_queue(now_ms)
        waits = self.session_timers
        while waits and waits[0][0] < now_ms:
            when, _, s = heapq.heappop(waits)
            if not s.waiting or s.wait_wake_ms != when:
                continue
            soonest = s.soonest_deadline_ms()
            if soonest >= 0 and now_ms >= soonest - SAFETY_MARGIN_MS:
                self._stop_waiting(s)
                self.wakeups.append((s, errors.DeadlineSoon.code))
            elif 0 <= s.wait_deadline_ms < now_ms:
                self._stop_waiting(s)
                self.wakeups.append((s, errors.TimedOut.code))

    # ---------------------------------------------------------------- replay
    def restore(self, recs: Iterable[tuple[int, bytes]]) -> int:
        """Replay AOF records into an empty engine; returns the number of live jobs.

        Two passes, because replay time is restart time: first the final state of every job
        (plain dict work, records applied in file order), then every index built at once (one
        sort per tube instead of a million sorted inserts). Reserved jobs come back ready,
        as in beanstalkd. The file's times are wall-clock: ``wall_offset_ms`` takes them
        back to the node clock (set it first).
        """
        off = self.wall_offset_ms
        unpack_put, put_size = records.PUT_STRUCT.unpack_from, records.PUT_STRUCT.size
        decode_update = records.decode_update_fields
        decode_delete, decode_meta = records.decode_delete, records.decode_meta
        rec_put, rec_update = records.REC_PUT, records.REC_UPDATE
        rec_delete, rec_meta = records.REC_DELETE, records.REC_META
        # id -> (job, state, deadline_ms); re-assigning a key keeps its first position
        final: dict[int, tuple[Job, int, int]] = {}
        next_id = self.next_id
        tube_by_raw: dict[bytes, Tube] = {}
        for rtype, payload in recs:
            if rtype == rec_put:
                f = unpack_put(payload, 0)
                name_end = put_size + f[12]
                raw_name = payload[put_size:name_end]
                tube = tube_by_raw.get(raw_name)
                if tube is None:
                    tube = tube_by_raw[raw_name] = self._tube(raw_name.decode())
                job_id = f[0]
                job = Job(job_id, tube, payload[name_end:], f[1], f[2], f[3], f[4] - off)
                if f[7] or f[8] or f[9] or f[10] or f[11]:
                    job.reserves, job.timeouts, job.releases, job.buries, job.kicks = f[7:12]
                final[job_id] = (job, f[5], f[6])
                if job_id >= next_id:
                    next_id = job_id + 1
            elif rtype == rec_update:
                u = decode_update(payload)
                entry = final.get(u[0])
                if entry is None:
                    continue  # its PUT was in a part of the file a rewrite dropped
                job = entry[0]
                job.pri, job.delay_ms = u[1], u[2]
                job.reserves, job.timeouts, job.releases, job.buries, job.kicks = u[5:10]
                final[u[0]] = (job, u[3], u[4])
            elif rtype == rec_delete:
                job_id = decode_delete(payload)
                final.pop(job_id, None)
                if job_id >= next_id:
                    next_id = job_id + 1
            elif rtype == rec_meta:
                next_id = max(next_id, decode_meta(payload))
        self.next_id = next_id
        ready: dict[Tube, list[int]] = {}
        delayed: dict[Tube, list[int]] = {}
        jobs = self.jobs
        used = 0
        for job_id, (job, state, deadline_ms) in final.items():
            jobs[job_id] = job
            used += len(job.body) + JOB_OVERHEAD_BYTES
            if job.kicks and state != BURIED:
                job.kick_reserves = job.reserves  # kicked: counted afresh (the docstring says)
            tube = job.tube
            if state == DELAYED:
                job.state = DELAYED
                job.deadline_ms = deadline_ms = deadline_ms - off
                delayed.setdefault(tube, []).append((deadline_ms << KEY_SHIFT) | job_id)
                self.delayed_count += 1
            elif state == BURIED:
                self._make_buried(job)
            else:
                job.state = READY
                ready.setdefault(tube, []).append((job.pri << KEY_SHIFT) | job_id)
                self.ready_count += 1
                if job.pri < URGENT_THRESHOLD:
                    tube.urgent_count += 1
                    self.urgent_count += 1
        self.used_bytes += used
        for tube, keys in ready.items():
            tube.ready.update(keys)
        all_delayed: list[int] = []
        for tube, keys in delayed.items():
            tube.delayed.update(keys)
            all_delayed.extend(keys)
        self.timers.extend(all_delayed)
        heapq.heapify(self.timers)
        for tube in list(self.tube_order):
            self._maybe_drop_tube(tube)
        return len(jobs)

    def snapshot_records(self, job_ids: Iterable[int]) -> list[bytes]:
        """Full records of the given live jobs, for an incremental AOF rewrite."""
        out = []
        jobs = self.jobs
        for job_id in job_ids:
            job = jobs.get(job_id)
            if job is not None:
                out.append(_frame(records.REC_PUT, records.encode_put(job, self.wall_offset_ms)))
        return out

    def meta_record(self) -> bytes:
        return _frame(records.REC_META, records.encode_meta(self.next_id))

    @property
    def live_bytes(self) -> int:
        """Approximate size of a compacted AOF: bodies plus fixed record cost."""
        return self.used_bytes - len(self.jobs) * (JOB_OVERHEAD_BYTES - 80)
