"""The cluster core: Disque's job, queue, ack and federation state machine, pure.

Every entry point takes ``now_ms``; randomness comes from the injected ``random.Random``;
nothing here does IO (design.md section 1). Work for the IO layer accumulates in outboxes:

- ``outbox``: ``(destination node id, message)`` (disq.core.messages). The IO layer sends one
  frame per peer per loop iteration, after the AOF records of the iteration are written, so a
  GOTJOB never leaves before the copy it confirms is on disk.
- ``replies``: ``(token, DeferredResult)``: answers to commands that returned ``PENDING``.
- ``aof_out``: framed AOF records (bytes), as the beanstalk core writes them: LOADJOB (the
  whole job, absolute expiry) and DELJOB (id). One convention for both cores, so the node
  core hands the IO layer one list to write (aof.py).
- ``bridge.takeovers``, ``bridge.dropped``, ``bridge.relinks``: the beanstalk bridge's.

``next_deadline_ms()`` says when ``tick(now_ms)`` must run next. Jobs sit in one heap ordered by
the next time anything must happen to them (Disque's ``awakeme`` skiplist), with lazy deletion.

This module holds jobs, queueing, the timers and the messages for those; the names follow
Disque's job.c / queue.c so their comments apply; where disq differs the comment says why. The
rest is in components, a module each (replication.py, ack.py, aof.py, ...: ``core.replication``,
``core.acks``, ``core.aof``), each handed the core as its host (host.py says how).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

from mypy_extensions import mypyc_attr

from disq.core import events as ev
from disq.core import ids
from disq.core.constants import TICK_BATCH, WILLQUEUE_ADVANCE_MS
from disq.core.disque.ack import Acks
from disq.core.disque.aof import JobLog
from disq.core.disque.api import (
    DEFAULT_TTL_S,
    LEAVING_MSG,
    NOREPL_EXPIRED,
    NOREPL_NODES,
    NOREPL_NODES_LOCAL,
    PENDING,
    AddOptions,
    ClusterView,
    DeferredResult,
    DisqueError,
    Pending,
)
from disq.core.disque.blocked import BlockedClients
from disq.core.disque.bridge import BeanstalkBridge
from disq.core.disque.counts import QueueCounts
from disq.core.disque.dead_peers import DeadPeers
from disq.core.disque.deadletter import DeadLetters
from disq.core.disque.federation import Federation
from disq.core.disque.flush import Flush
from disq.core.disque.gone import GoneJobs
from disq.core.disque.handoff import Handoffs
from disq.core.disque.idempotency import IDEM_KEY_MAX_BYTES, KeyTable
from disq.core.disque.introspection import Introspection
from disq.core.disque.job import (
    ACK_LOGGED,
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    DELIVERED,
    LOGGED_AT_ADD,
    NACK_WAIT,
    NO_NODES,
    QUEUED,
    WAIT_REPL,
    AwakeEntry,
    DJob,
    serialize,
)
from disq.core.disque.keyvote import KeyVoting
from disq.core.disque.memory import MemoryLevels
from disq.core.disque.queue import DQueue
from disq.core.disque.replication import Replication
from disq.core.disque.requeue import Requeue
from disq.core.disque.results import Results
from disq.core.disque.state import IDEM_TIMER, KV_AT_ONCE
from disq.core.job_record import headers_error
from disq.core.messages import (
    BeanstalkUpdate,
    DelJob,
    Enqueue,
    GotAck,
    GotJob,
    GotResult,
    IdemKeys,
    KeyVote,
    KeyVotes,
    Message,
    NeedJobs,
    Pause,
    Queued,
    ReplJob,
    Result,
    SetAck,
    WillQueue,
    Working,
    YourJobs,
)
from disq.core.timers import compact, rebuild_bound
from disq.persistence.cluster_records import REC_DELJOB, encode_deljob
from disq.persistence.framing import frame

Frame = tuple[int, bytes]  # an AOF record: (type, payload)

MAX_QUEUES = 100_000  # like the beanstalk door's tube limit: every queue costs memory
# Requeue jitter, so copies do not all requeue at once. Disque's -250..+250 ms could requeue
# before RETRY (Celery's visibility timeout here); disq's 0..+250 ms is never early.
REQUEUE_JITTER_MS = 250
DEFAULT_RETRY_MAX_S = 300
CRON_BLOCKED_MS = 100  # Disque's clientsCron period for queues with blocked consumers
CRON_IDLE_MS = 1000


# The simulator (SimDisqueCore) and the tests' mutants subclass it in Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class DisqueCore:
    def __init__(self, view: ClusterView, rng: random.Random, now_ms: int) -> None:
        self.view: ClusterView = view
        self.rng: random.Random = rng
        self.outbox: list[tuple[str, Message]] = []
        self.replies: list[tuple[int, DeferredResult]] = []
        self.aof_out: list[bytes] = []
        self.jobs: dict[str, DJob] = {}
        self.queues: dict[str, DQueue] = {}
        self._awake: list[AwakeEntry] = []  # lazy deletion (job.py AwakeEntry)
        self._awake_rebuild_at = rebuild_bound(0)  # compacted past this size (timers.py)
        # Acked jobs' GC attempts apart (nearly always stale; 13% of a node under GETJOB+ACKJOB
        # in the big heap); _process_jobs pops the two in one (awake_ms, id) order.
        self._awake_acked: list[AwakeEntry] = []
        self._awake_acked_rebuild_at = rebuild_bound(0)
        self.blocked: BlockedClients = BlockedClients(self)  # waiting ADDJOBs and GETJOBs
        self._one_copy: set[str] = set()  # ASYNC adds without a local copy (add_job)
        self._only_me_set: frozenset[str] = frozenset()
        self.gone: GoneJobs = GoneJobs()  # gone.py: tombstones, and how jobs went
        self.keys: KeyTable = KeyTable(self)  # idempotency.py: keys, announcements, held adds
        self.votes: KeyVoting = KeyVoting(self)  # keyvote.py: this node's part in the key votes
        self.vote_keys: bool = True  # keyed adds on a cluster bind their key by a vote
        self.events: ev.EventBuffer = ev.EventBuffer()  # lifecycle events, drained by the node
        self._prev_ctime: int = 0
        # Wall minus node clock (disq/server/clock.py), kept current by the node: ctime and the
        # AOF's absolute expiry are wall-clock (as Disque's); every other deadline node-clock.
        self.wall_offset_ms: int = 0
        self._wall_steps: list[tuple[int, int]] = []  # (node ms of a step, offset before it)
        self._next_cron_ms = now_ms + CRON_IDLE_MS
        self.memory: MemoryLevels = MemoryLevels()  # the warning level, maxmemory, used bytes
        self.counts: QueueCounts = QueueCounts()  # counts.py
        self.aof_enqueue_once: bool = False  # Disque's aof-enqueue-jobs-once, next restore
        self.persist: bool = True  # produce aof_out records (off: a node without an AOF)
        self.max_queues: int = MAX_QUEUES
        self.handoff: Handoffs = Handoffs(self)  # handoff.py: a drain's jobs in flight
        # The beanstalk bridge's outboxes, drained by the node (bridge.py says what for).
        self.bridge: BeanstalkBridge = BeanstalkBridge(self)
        self.requeue: Requeue = Requeue(self)  # requeue.py: ENQUEUE, QUEUED, WILLQUEUE, WORKING
        self.dead_letters: DeadLetters = DeadLetters(self)  # MAXDELIVERIES, QREDRIVE
        self.replication: Replication = Replication(self)  # replication.py: REPLJOB, GOTJOB
        self.federation: Federation = Federation(self)  # federation.py: NEEDJOBS, YOURJOBS
        self.inspect: Introspection = Introspection(self)  # SHOW, QSTAT, ..., PAUSE
        self.aof: JobLog = JobLog(self)  # aof.py: the replay, a rewrite's records
        self.flush: Flush = Flush(self)  # flush.py: FLUSHALL, CLUSTER RESET
        self.acks: Acks = Acks(self)  # ack.py: ACKJOB, FASTACK, QPURGE, the ack GC
        self.results: Results = Results(self)  # results.py: jobs' results, on every node
        # Counters for INFO / stats.
        self.stats: dict[str, int] = {
            "jobs_added": 0,
            "jobs_delivered": 0,
            "jobs_acked": 0,
            "jobs_requeued": 0,
            "jobs_requeue_advanced": 0,  # requeue times brought forward by a death
            "jobs_expired": 0,
            "jobs_imported": 0,
            "jobs_exported": 0,
            "noreply_timeouts": 0,
        }
        self.dead_peers: DeadPeers = DeadPeers(self)  # dead_peers.py: a dead peer's jobs, soon
        self.handlers: dict[type, Callable[[int, str, Any], None]] = self.message_handlers()

    def message_handlers(self) -> dict[type, Callable[[int, str, Any], None]]:
        """What each job message this core reads goes to: the node's one dispatch table
        (NodeCluster.dispatch) is this one and the other cores' together. Built again by
        whoever swaps a component (the tests' mutants)."""
        return {
            ReplJob: self.replication.on_repljob,
            GotJob: self.replication.on_gotjob,
            Enqueue: self.requeue.on_enqueue,
            Queued: self.requeue.on_queued,
            WillQueue: self.requeue.on_willqueue,
            SetAck: self.acks.on_setack,
            GotAck: self.acks.on_gotack,
            DelJob: self.acks.on_deljob,
            IdemKeys: self.keys.on_idem_keys,
            KeyVote: self.votes.on_key_vote,
            KeyVotes: self.votes.on_key_votes,
            NeedJobs: self.federation.on_needjobs,
            YourJobs: self.federation.on_yourjobs,
            Working: self.requeue.on_working,
            Pause: self.inspect.on_pause,
            BeanstalkUpdate: self.bridge.on_update,
            Result: self.results.on_result,
            GotResult: self.results.on_gotresult,
        }

    # ================================================================== helpers
    @property
    def my_id(self) -> str:
        return self.view.my_id

    def _only_me(self) -> frozenset[str]:
        """{this node}, one shared set for every job only this node holds (REPLICATE 1)."""
        me = self.view.my_id
        only = self._only_me_set
        if me not in only:
            only = self._only_me_set = frozenset((me,))
        return only

    def _send(self, node: str, msg: Message) -> None:
        if node != self.view.my_id:
            self.outbox.append((node, msg))

    def _jitter(self) -> int:
        # random() is one C call; randint is several Python frames, on every enqueue.
        return int(self.rng.random() * REQUEUE_JITTER_MS)

    def _check_new_queue(self, name: str) -> None:
        """Queues are created on demand; their number is bounded (``max_queues``). At the
        bound, empty idle queues are reclaimed first, whatever their age; still full: an
        error, and nothing was created."""
        queues = self.queues
        if name in queues or len(queues) < self.max_queues:
            return
        for qname in [n for n, q in queues.items() if q.idle()]:
            del queues[qname]
        if len(queues) >= self.max_queues:
            raise DisqueError("ERR", f"too many queues (the limit is {self.max_queues})")

    def _queue(self, name: str, now_ms: int) -> DQueue:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = DQueue(name, now_ms)
        return q

    def _awake_time(self, j: DJob) -> int:
        """When the timer next looks at ``j``: its expiry (once now > etime, in ms: Disque's
        whole seconds add one; a sync add waiting for copies gets NOREPL at its TTL, not a
        second later), or its requeue (an acked job: its GC) if sooner."""
        at = j.etime_ms
        if j.state == ACKED:
            # For an acked job qtime_ms holds the next GC attempt.
            if j.qtime_ms and j.qtime_ms < at:
                at = j.qtime_ms
        elif j.state in (ACTIVE, QUEUED) and j.qtime_ms:
            qt = j.qtime_ms
            if j.flags & BCAST_WILLQUEUE:
                qt -= WILLQUEUE_ADVANCE_MS
            if qt < at:
                at = qt
        return at

    def _update_awake(self, j: DJob, at: int = 0) -> None:
        if at == 0:
            at = self._awake_time(j)
        if at != j.awake_ms:
            j.awake_ms = at
            entry = AwakeEntry(at, j.id)
            # Which heap holds an entry only matters for speed: the pop merges the two.
            if j.state == ACKED:
                acked = self._awake_acked
                heapq.heappush(acked, entry)
                if len(acked) > self._awake_acked_rebuild_at:
                    # timers.py's rule: few acked jobs are live at a time, so a compaction
                    # drops stale entries in bulk, cheaper than popping each one when due.
                    self._awake_acked_rebuild_at = compact(acked, self._awake_live)
            else:
                heapq.heappush(self._awake, entry)
                if len(self._awake) > self._awake_rebuild_at:
                    self._awake_rebuild_at = self._compact_awake()

    def _compact_awake(self) -> int:
        """The main timer heap passed its bound: compact it if more than half of it is surely
        stale, and return its next bound. A job has at most one live entry, so
        ``len(self.jobs)`` bounds the live ones. Why not timers.py's bound alone (twice the
        live entries at the last rebuild): a heap that only grows with its jobs (adds, nothing
        consumed) would be scanned at every doubling and found all live, which cost 7.7% of
        a node taking ADDJOB REPLICATE 1 (py-spy)."""
        if len(self._awake) > rebuild_bound(len(self.jobs)):
            compact(self._awake, self._awake_live)
        return rebuild_bound(len(self.jobs))

    def _awake_live(self, entry: AwakeEntry) -> bool:
        """The entry is the job's current one: the test ``_process_jobs`` makes."""
        j = self.jobs.get(entry.job_id)
        return j is not None and j.awake_ms == entry.at_ms

    def _new_ctime(self, now_ms: int) -> int:
        """A creation time (wall ms * 1e6) strictly greater than every one this node gave
        (also after the wall clock was stepped back)."""
        ctime = (now_ms + self.wall_offset_ms) * 1_000_000
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        return ctime

    # ================================================================== job lifecycle
    def _register(self, j: DJob, awake: bool = True) -> None:
        self.jobs[j.id] = j
        self.memory.used_bytes += j.mem_bytes()
        self.counts.add(j, 1)
        if awake:
            self._update_awake(j)

    def _forget(self, j: DJob) -> None:
        del self.jobs[j.id]
        self.counts.add(j, -1)
        if self._one_copy:
            self._one_copy.discard(j.id)
        self.memory.used_bytes -= j.mem_bytes()
        j.awake_ms = -1

    def _unregister(self, j: DJob, now_ms: int) -> None:
        """Forget a job (unregisterJob). A client still waiting for its replication gets
        NOREPL and the copies are deleted best effort."""
        if self.jobs.get(j.id) is not j:
            return
        if j.state == QUEUED:
            self._dequeue(j)
        if j.state == WAIT_REPL:
            self.blocked.answer_add_of(j.id, DisqueError("NOREPL", NOREPL_EXPIRED))
            self.keys.forget_key(j)
            j.state = ACTIVE
            self._broadcast_del(j)
            if j.flags & LOGGED_AT_ADD:
                self._log_del(j.id)
        if j.flags & BEANSTALK_OWNED and j.bid:
            self.bridge.dropped.append(j.bid)
            j.bid = 0
        if j.state == ACKED:
            self.gone.mark(j.id, now_ms, True)
            if j.flags & ACK_LOGGED:
                self._log_del(j.id)  # the ack's GC is over: replay must not start it again
        self._forget(j)
        self.gone.tombstone(j.id, now_ms)

    def _broadcast_del(self, j: DJob) -> None:
        for node in j.delivered:
            self._send(node, DelJob([j.id]))

    def _delete_from_cluster(self, j: DJob, now_ms: int) -> None:
        self._broadcast_del(j)
        if j.state != ACKED:
            self._log_del(j.id)
        self._unregister(j, now_ms)

    def _enqueue(self, j: DJob, now_ms: int, nack: bool = False, moved: bool = False) -> bool:
        """enqueueJob: queue the job here; QUEUED goes out on every enqueue but the first.

        The counters (Disque's num_nacks / num_deliv), the rule every copy follows:

        - NACK counts a nack here and in the QUEUED it broadcasts.
        - A requeue that is not the job's first queueing counts an additional delivery,
          whichever node does it. ``BCAST_QUEUED`` says "this job was queued before": the
          creator sets it at its first enqueue, and every copy made by REPLJOB has it from
          the start (Disque's rule), because the creator queued the job when its add was
          done. So a copy that never saw the delivery still counts it when *it* requeues:
          a requeue by RETRY happens only when WILLQUEUE found no queued copy and no ack,
          i.e. the job left a queue (was delivered) since it was last queued. Delivering
          nodes do not announce deliveries (GETJOB stays free of cluster traffic), so
          this is the evidence a copy has; the price is a rare over-count when a message
          was lost (an ENQUEUE after external replication, a QUEUED answer to WILLQUEUE),
          which at-least-once counters (best effort in Disque too) accept.
        - ``moved``: the job is queued here because it moved (ENQUEUE from a draining node
          or after external replication, the AOF's enqueue-once restart): not a delivery,
          so nothing is counted; QUEUED still goes out (no flags) so the others postpone.
        - The QUEUED carries the new counters themselves as well as Disque's flags, and a
          receiver keeps the larger value (requeue.py's ``merge_counters``): two nodes requeueing at
          once count one delivery, not two, and every copy converges on the same numbers.
          Counting changes log the job again (LOADJOB, last wins on replay), so a restart
          keeps them; that write is on the requeue and NACK paths only.
        """
        if j.state == QUEUED or j.state == ACKED or j.state == WAIT_REPL:
            return False
        if j.flags & BEANSTALK_ORIGIN:
            return False  # lives in a beanstalk engine, never in a Disque queue
        if j.retry_s == 0 and j.flags & DELIVERED:
            return False  # at-most-once: never queue again once delivered
        j.flags &= ~NACK_WAIT
        if nack or (j.flags & BCAST_QUEUED and not moved):
            if nack:
                j.nacks += 1
            else:
                j.add_deliveries += 1
            msg = Queued(j.id, nack, not nack, j.nacks, j.add_deliveries)
            for node in j.delivered:
                self._send(node, msg)
            self._log_job(j, now_ms)
        elif j.flags & BCAST_QUEUED:
            msg = Queued(j.id, False, False, j.nacks, j.add_deliveries)
            for node in j.delivered:
                self._send(node, msg)
        else:
            j.flags |= BCAST_QUEUED
        if j.retry_s:
            j.flags |= BCAST_WILLQUEUE
            j.qtime_ms = now_ms + j.retry_s * 1000 + self._jitter()
        else:
            j.qtime_ms = 0
        self.counts.to_queued(j)
        j.queued_at = self.view.my_id
        q = self._queue(j.queue, now_ms)
        q.skiplist.add(j)
        q.jobs_in += 1
        q.atime_ms = now_ms
        self._update_awake(j)
        if q.blocked:
            self.blocked.serve(q, now_ms)
        elif q.wanted_by and not q.paused_out:
            self.federation.push_wanted(q, now_ms)
        return True

    def restore(
        self, now_ms: int, records: list[Frame], buf: bytes = b"", offsets: list[int] | None = None
    ) -> None:
        self.aof.restore(now_ms, records, buf, offsets)

    def _clear_timers(self) -> None:
        """Every job timer gone, with the jobs (flush.py)."""
        self._awake.clear()
        self._awake_acked.clear()
        self._one_copy.clear()

    def _log_job(self, j: DJob, now_ms: int, record: bytes = b"") -> None:
        """Log the job: ``record`` when it is the job's record already (a REPLJOB's)."""
        if self.persist:
            aof = self.aof
            self.aof_out.append(
                aof.job_frame(record, now_ms) if record else aof.job_record(j, now_ms)
            )

    def _copy_record(self, j: DJob, now_ms: int) -> bytes:
        """The record a peer's copy is made from: the TTL left (a second at least, as a
        copy must outlive its trip), no beanstalk alias (it names this node's engine job)."""
        return serialize(j, max(1000, j.etime_ms - now_ms), 0)

    def _log_del(self, job_id: str) -> None:
        if self.persist:
            self.aof_out.append(frame(REC_DELJOB, encode_deljob(job_id)))

    def update_memory(self, now_ms: int, other_bytes: int = 0) -> int:
        """The memory warning level (memory.py), ``other_bytes`` the beanstalk engine's."""
        m = self.memory
        return m.update(now_ms, len(self.queues), other_bytes, self.jobs, self._unregister)

    def _dequeue(self, j: DJob) -> bool:
        if j.state != QUEUED:
            return False
        q = self.queues.get(j.queue)
        if q is not None:
            q.skiplist.discard(j)
        self.counts.to_active(j)
        return True

    def _fetch(self, q: DQueue, now_ms: int) -> DJob | None:
        """queueFetchJob: the oldest job, now active and delivered; qtime keeps running."""
        if not q.skiplist or q.paused_out:
            return None
        j: DJob = q.skiplist.pop(0)
        self.counts.to_active(j)
        j.flags |= DELIVERED
        q.jobs_out += 1
        q.atime_ms = now_ms
        self.stats["jobs_delivered"] += 1
        self.events.add(
            ev.DELIVERED, now_ms, j.queue, j.id, 1 + j.nacks + j.add_deliveries, len(j.body)
        )
        if j.retry_s == 0:
            j.qtime_ms = 0
        self._update_awake(j)
        if not q.skiplist and q.import_rate(now_ms) > 0:
            self.federation.need_jobs(q, now_ms, reached_zero=True)
        return j

    # ================================================================== commands
    def add_job(
        self, now_ms: int, token: int, queue: str, body: bytes, opts: AddOptions
    ) -> str | Pending:
        """ADDJOB after syntax checks. Returns the id, or PENDING for a synchronous add
        (the id or a NOREPL error arrives in ``replies``). Raises DisqueError.

        ``idem_key``: an add that repeats a key seen on this queue within the window adds
        nothing and answers the first job's id; if that add still waits for its copies,
        this one waits with it and gets the same answer. ``delay_ms`` replaces ``delay_s``
        here; the record keeps whole seconds rounded up (copies and AOF never queue early)."""
        timeout_ms, repl, retry_s, ttl_s = opts.timeout_ms, opts.repl, opts.retry_s, opts.ttl_s
        delay_s, delay_ms, idem_key = opts.delay_s, opts.delay_ms, opts.idem_key
        async_, maxlen, headers = opts.async_, opts.maxlen, opts.headers
        if headers is not None and (why := headers_error(headers)):
            raise DisqueError("ERR", why)
        if delay_ms:
            delay_s = -(-delay_ms // 1000)
        if self.handoff.draining:  # handoff.py: no new jobs, go elsewhere
            raise DisqueError("LEAVING", LEAVING_MSG)
        if repl is None:
            repl = min(3, self.view.cluster_size())
        ttl = DEFAULT_TTL_S if ttl_s is None else ttl_s
        if repl > 1 and retry_s == 0:
            raise DisqueError(
                "ERR",
                "With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)",
            )
        if delay_s >= ttl:
            raise DisqueError(
                "ERR",
                "The specified DELAY is greater than TTL. Job refused since would "
                "never be delivered",
            )
        if retry_s is None:
            retry_s = max(1, min(ttl // 10, DEFAULT_RETRY_MAX_S))
        if idem_key:
            if len(idem_key.encode("utf-8", "surrogateescape")) > IDEM_KEY_MAX_BYTES:
                raise DisqueError(
                    "ERR", f"the idempotency key is longer than {IDEM_KEY_MAX_BYTES} bytes"
                )
            # The first job's id, PENDING (wait with the first add, or for the key's add to
            # be decided: idempotency.py), or None: a new job.
            args = AddOptions(
                timeout_ms, repl, delay_s, retry_s, ttl, maxlen, async_, idem_key, delay_ms, headers
            )
            first = self.keys.keyed_add(now_ms, token, queue, idem_key, body, timeout_ms, args)
            if first is not None:
                return first
        if self.memory.warning >= 3:
            raise DisqueError("OOM", "command not allowed when used memory > 'maxmemory'.")
        extrepl = self.memory.warning > 0 or self.view.leaving
        additional = repl if extrepl else repl - 1
        # A REPLICATE 1 add needs no peer: the peers' list (a copy per call) is not built.
        reachable = len(self.view.reachable_peers()) if additional > 0 else 0
        if additional > reachable:
            if extrepl and additional - 1 == reachable:
                why = "I'm leaving the cluster" if self.view.leaving else "I'm out of memory"
                raise DisqueError("NOREPL", NOREPL_NODES_LOCAL + why)
            raise DisqueError("NOREPL", NOREPL_NODES)
        self._check_new_queue(queue)
        q = self.queues.get(queue)
        if maxlen is not None and q is not None and len(q) >= maxlen:
            raise DisqueError("MAXLEN", "Queue is already longer than the specified MAXLEN count")
        if q is not None and q.paused_in:
            raise DisqueError("PAUSED", "Queue paused in input, try later")

        ctime = self._new_ctime(now_ms)
        job_id = ids.make_job_id(self.my_id, self.rng, ttl, retry_s)
        j = DJob(job_id, queue, body, repl, ctime, delay_s, retry_s, now_ms + ttl * 1000)
        j.headers = headers  # before _register: they count in the job's memory
        if idem_key:
            j.idem_key = idem_key
            self.keys.remember_key(j, now_ms)
        if not extrepl:
            j.delivered = self._only_me()
        j.qtime_ms = now_ms + (delay_ms or (delay_s if delay_s else retry_s) * 1000)
        self.stats["jobs_added"] += 1
        self.events.add(ev.ENQUEUED, now_ms, queue, job_id, 0, len(body))

        if extrepl or (repl > 1 and not async_):
            # Sync, and every add this node cannot keep a copy of (memory warning, leaving):
            # the id comes once a copy exists elsewhere. Disque answers ASYNC at once (one lost
            # message loses an acknowledged job); here ASYNC waits for its FIRST copy.
            self._register(j)
            j.confirmed = NO_NODES if extrepl else {self.my_id}
            if async_:
                self._one_copy.add(job_id)
            deadline = now_ms + timeout_ms if timeout_ms > 0 else 0
            self.blocked.wait_for_copies(token, job_id, deadline, now_ms)
            self.replication.start(j, additional, now_ms)
            return PENDING

        j.state = ACTIVE
        if idem_key and self.votes.needed(j):
            # Keyed, answered without waiting for copies (ASYNC, REPLICATE 1): not queued
            # before its key's vote (keyvote.py) says it is the key's job.
            self._register(j)
            self._log_job(j, now_ms)
            if additional > 0:
                self.replication.replicate(j, additional, now_ms)
            deadline = now_ms + timeout_ms if timeout_ms > 0 else 0
            self.votes.propose(j, KV_AT_ONCE, [token], deadline, now_ms)
            return PENDING
        if delay_s == 0:
            self._register(j, awake=False)  # _enqueue sets the timer once
            self._log_job(j, now_ms)
            self._enqueue(j, now_ms)
        else:
            self._register(j)
            self._log_job(j, now_ms)
        if additional > 0:
            self.replication.replicate(j, additional, now_ms)
        self.keys.announce_key(j, now_ms)  # not waiting for copies: the add is done now
        # A keyed add answered at once (ASYNC, REPLICATE 1) still waits for its key to reach
        # every live peer, as a sync keyed add does (idempotency.py): a retry must find it.
        if idem_key and self.keys.hold_reply(
            j, [token], now_ms + timeout_ms if timeout_ms > 0 else 0, now_ms
        ):
            return PENDING
        return job_id

    def _copies_needed(self, j: DJob) -> int:
        """Confirmed copies that complete a waiting add: all of them, or the first one for
        an ASYNC add on a node that keeps none (add_job says why)."""
        return 1 if j.id in self._one_copy else j.repl

    def get_job(
        self,
        now_ms: int,
        token: int,
        queues: list[str],
        *,
        nohang: bool = False,
        timeout_ms: int = 0,
        count: int = 1,
        in_order: bool = False,
    ) -> list[DJob] | Pending | None:
        """getjobCommand: one job per queue per pass, round-robin, as Disque. ``in_order``
        (gRPC's, RESP's INORDER) takes a queue's jobs before the next queue's: priority
        sub-queues, highest first. A blocked GETJOB is woken by a job in any of its queues."""
        out: list[DJob] = []
        if in_order:
            for name in queues:
                q = self.queues.get(name)
                while q is not None and len(out) < count:
                    j = self._fetch(q, now_ms)
                    if j is None:
                        break
                    out.append(j)
            if out:
                return out
        left = 0 if in_order else count
        while left > 0:
            before = left
            for name in queues:
                q = self.queues.get(name)
                if q is None:
                    continue
                j = self._fetch(q, now_ms)
                if j is not None:
                    out.append(j)
                    left -= 1
                    if left == 0:
                        break
            if left == before:
                break
        if out:
            return out
        if nohang:
            return None
        if self.view.leaving:
            raise DisqueError("LEAVING", LEAVING_MSG)
        for name in queues:
            self._check_new_queue(name)
        deadline = now_ms + timeout_ms if timeout_ms > 0 else 0
        self.blocked.block_get(token, list(queues), deadline)
        for name in queues:
            q = self._queue(name, now_ms)
            new_wait = not q.blocked
            q.blocked[token] = None
            self.federation.need_jobs(q, now_ms, reached_zero=False, new_wait=new_wait)
        return PENDING

    def set_wall_offset(self, ms: int, now_ms: int) -> None:
        """The wall clock reads ``ms`` more than the node clock from ``now_ms`` on (the node
        follows it, disq/server/clock.py). A step (over a second) is remembered, so that a
        wall time taken before it (a job's ctime) maps back to the node clock it was taken on
        (``node_ms_of``); the last 16 steps are kept."""
        if abs(ms - self.wall_offset_ms) > 1000:
            self._wall_steps.append((now_ms, self.wall_offset_ms))
            del self._wall_steps[:-16]
        self.wall_offset_ms = ms

    def node_ms_of(self, wall_ms: int, now_ms: int) -> int:
        """The node-clock time at which this node's wall clock read ``wall_ms``, taken no
        later than ``now_ms``: the latest offset that puts it after its step and not in the
        future. (After a step back, a wall time read twice maps to the later reading.)"""
        n = wall_ms - self.wall_offset_ms
        for at_ms, before in reversed(self._wall_steps):
            if at_ms <= n <= now_ms:
                break
            n = wall_ms - before
        return n

    def cancel(self, token: int) -> None:
        """The client of ``token`` went away: its blocked command is dropped."""
        self.results.cancel(token)
        if self.keys.cancel(token):  # a keyed add held (idempotency.py)
            return
        if self.votes.prop and self.votes.cancel(token):  # waiting for its key's vote
            return
        self.blocked.cancel(token)

    def _timer_due(self, token: int, at_ms: int, now_ms: int) -> None:
        """A client timer of the keys (IDEM_TIMER) or of the votes (KV_TIMER) fired
        (blocked.py); a stale one (armed again since) is not."""
        part = self.keys if token == IDEM_TIMER else self.votes
        if at_ms == part.timer_ms:
            part.timer_fire(now_ms)

    def working(self, now_ms: int, job_id: str) -> int:
        j = self.jobs.get(job_id)
        if j is None:
            raise DisqueError("NOJOB", "Job not known in the context of this node.")
        created_ms = self.node_ms_of(j.ctime // 1_000_000, now_ms)
        ttl_ms = j.etime_ms - created_ms
        if ttl_ms > 0 and now_ms - created_ms > ttl_ms // 2:
            raise DisqueError(
                "TOOLATE",
                "Half of job TTL already elapsed, you are no longer allowed to postpone "
                "the next delivery.",
            )
        if j.state == QUEUED:
            self._dequeue(j)
        self._postpone(j, now_ms)
        for node in j.delivered:
            self._send(node, Working(j.id))
        return j.retry_s

    def _postpone(self, j: DJob, now_ms: int) -> None:
        """updateJobRequeueTime: never for at-most-once jobs."""
        if j.retry_s == 0 or j.qtime_ms == 0:
            return
        j.qtime_ms = now_ms + j.retry_s * 1000 + self._jitter()
        self._update_awake(j)

    def nack(self, now_ms: int, job_ids: list[str], delay_ms: int = 0) -> int:
        """NACK: queued again at once, or after ``delay_ms`` on every holder (requeue.py)."""
        return self.requeue.nack(now_ms, job_ids, delay_ms)  # a queue's BACKOFF too

    def enqueue(self, now_ms: int, job_ids: list[str]) -> int:
        if self.memory.warning >= 3:
            raise DisqueError("OOM", "command not allowed when used memory > 'maxmemory'.")
        n = 0
        for job_id in job_ids:
            j = self.jobs.get(job_id)
            if j is not None and j.state == ACTIVE and self._enqueue(j, now_ms):
                n += 1
        return n

    def dequeue(self, now_ms: int, job_ids: list[str]) -> int:
        n = 0
        for job_id in job_ids:
            j = self.jobs.get(job_id)
            if j is not None and self._dequeue(j):
                n += 1
        return n

    def qlen(self, queue: str) -> int:
        q = self.queues.get(queue)
        return len(q) if q is not None else 0

    def del_job(self, now_ms: int, job_ids: list[str]) -> int:
        n = 0
        for job_id in job_ids:
            j = self.jobs.get(job_id)
            if j is not None:
                if j.state != ACKED:
                    self._log_del(j.id)
                self.events.add(ev.DELETED, now_ms, j.queue, j.id, j.nacks, len(j.body))
                self._unregister(j, now_ms)
                n += 1
        return n

    # ================================================================== messages
    def on_message(self, now_ms: int, sender: str, msg: Message) -> None:
        """One message alone (the tests); a node's messages go through NodeCluster.dispatch."""
        handler = self.handlers.get(type(msg))
        if handler is not None:
            handler(now_ms, sender, msg)

    # ================================================================== time
    def next_deadline_ms(self) -> int:
        """When ``tick`` must next run. A job's times and a client's timeout are due a
        millisecond after they (once ``now_ms`` has passed them, disq/core/timers.py); the
        cron and the replication re-sends, internal, at their time."""
        nxt = self._next_cron_ms
        if self._awake and self._awake[0].at_ms < nxt:
            nxt = self._awake[0].at_ms + 1
        if self._awake_acked and self._awake_acked[0].at_ms < nxt:
            nxt = self._awake_acked[0].at_ms + 1
        nxt = self.results.next_deadline_ms(self.blocked.next_deadline_ms(nxt))
        dead = self.dead_peers
        if dead.sweep_ids and dead.sweep_due_ms < nxt:
            nxt = dead.sweep_due_ms  # a death's sweep: at once, a batch per tick
        return nxt

    def tick(self, now_ms: int) -> None:
        if self.dead_peers.sweep_ids:
            self.dead_peers.sweep(now_ms)
        self.keys.expire_keys(now_ms)
        self._process_jobs(now_ms)
        self.blocked.process(now_ms)
        self.results.tick(now_ms)
        if now_ms >= self._next_cron_ms:
            self._cron(now_ms)

    def _process_jobs(self, now_ms: int) -> None:
        heap, acked = self._awake, self._awake_acked
        budget = TICK_BATCH
        while budget:
            if acked and (not heap or acked[0] < heap[0]):
                src = acked
            elif heap:
                src = heap
            else:
                break
            if src[0].at_ms >= now_ms:
                break  # due only once passed (timers.py)
            e = heapq.heappop(src)
            j = self.jobs.get(e.job_id)
            if j is None or j.awake_ms != e.at_ms:
                continue  # stale entry (lazy deletion)
            budget -= 1
            j.awake_ms = 0
            self._process_job(j, now_ms)

    def _process_job(self, j: DJob, now_ms: int) -> None:
        if j.etime_ms < now_ms:
            self.stats["jobs_expired"] += 1
            if j.state != ACKED:
                self.events.add(ev.EXPIRED, now_ms, j.queue, j.id, j.nacks, len(j.body))
            if j.state != ACKED:
                self._log_del(j.id)
            self._unregister(j, now_ms)
            return
        if (
            j.state in (ACTIVE, QUEUED)
            and j.flags & BCAST_WILLQUEUE
            and j.qtime_ms
            and j.qtime_ms - WILLQUEUE_ADVANCE_MS < now_ms
        ):
            if j.state != QUEUED:
                for node in j.delivered:
                    self._send(node, WillQueue(j.id))
            j.flags &= ~BCAST_WILLQUEUE
        if j.state == ACTIVE and j.qtime_ms and j.qtime_ms < now_ms:
            q = self.queues.get(j.queue)
            if j.flags & BEANSTALK_ORIGIN:
                if not j.flags & BEANSTALK_OWNED:
                    self.bridge.take_over(j)
            elif q is not None and q.paused_in and j.retry_s:
                j.qtime_ms = now_ms + j.retry_s * 1000 + self._jitter()
            elif j.idem_key and self.votes.blocks_requeue(j, now_ms):
                # Its key is being voted on: queued (or deleted) by the decision.
                if j.id in self.jobs:
                    j.qtime_ms = now_ms + max(1, j.retry_s) * 1000 + self._jitter()
            elif self.dead_letters.spent(j, now_ms, False):
                pass  # past its queue's MAXDELIVERIES: moved, not queued (deadletter.py)
            elif self.requeue.retry_backoff(j, now_ms):
                pass  # held for its queue's BACKOFF first, counted as a delivery (requeue.py)
            elif self._enqueue(j, now_ms, moved=bool(j.flags & NACK_WAIT)):
                self.stats["jobs_requeued"] += 1
                self.events.add(ev.REQUEUED, now_ms, j.queue, j.id, j.add_deliveries, len(j.body))
        if j.state == QUEUED and j.qtime_ms and j.qtime_ms < now_ms and j.retry_s:
            j.flags |= BCAST_WILLQUEUE
            j.qtime_ms = now_ms + j.retry_s * 1000 + self._jitter()
        if j.state == ACKED:
            self.acks.try_gc(j, now_ms)
            return
        if j.id in self.jobs:
            self._update_awake(j)

    def _cron(self, now_ms: int) -> None:
        """clientsCron's NEEDJOBS for queues with blocked clients, and Disque's
        evictIdleQueues: empty queues without blocked clients and not paused go once idle
        ``queue_idle_gc_ms`` (shorter under memory pressure, memory.py). Disque samples
        random queues until fewer than 10% are evictable; this walks them all, which the
        NEEDJOBS half does anyway, once a second (10 times with blocked clients)."""
        if self.votes.acc:
            self.votes.prune(now_ms)
        any_blocked = False
        idle_ms = self.memory.queue_idle_gc_ms()
        idle: list[str] = []
        for q in self.queues.values():
            if q.blocked:
                any_blocked = True
                self.federation.need_jobs(q, now_ms, reached_zero=False)
            elif q.idle() and now_ms - q.atime_ms > idle_ms:
                idle.append(q.name)
            if q.wanted_by:
                for node in [n for n, t in q.wanted_by.items() if t < now_ms]:
                    del q.wanted_by[node]
        for name in idle:
            del self.queues[name]
        self._next_cron_ms = now_ms + (CRON_BLOCKED_MS if any_blocked else CRON_IDLE_MS)
