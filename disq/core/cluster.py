"""The cluster core: Disque's job, queue, ack and federation state machine, pure.

Every entry point takes ``now_ms``; randomness comes from the injected ``random.Random``;
nothing here does IO (design.md section 1). Work for the IO layer accumulates in outboxes:

- ``outbox``: ``(destination node id, message)`` (disq.core.messages). The IO layer sends one
  frame per peer per loop iteration, after the AOF records of the iteration are written, so a
  GOTJOB never leaves before the copy it confirms is on disk.
- ``replies``: ``(token, DeferredResult)``: answers to commands that returned ``PENDING``.
- ``aof_out``: ``("LOADJOB", JobData with absolute etime in ms)`` and ``("DELJOB", id)``.
  Disque's model: a job is logged when it becomes active; an ack or an eviction logs its
  deletion; acks themselves are not persisted (a restarted node re-learns them by GC).

``next_deadline_ms()`` says when ``tick(now_ms)`` must run next. Jobs sit in one heap ordered by
the next time anything must happen to them (Disque's ``awakeme`` skiplist), with lazy deletion.

The names follow Disque's job.c / queue.c / ack.c so their comments apply; where disq differs
the comment says why.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from disq.core import events as ev
from disq.core import ids
from disq.core.cluster_api import PENDING, ClusterView, DeferredResult, DisqueError, Pending
from disq.core.djob import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    DELIVERED,
    QUEUED,
    STATE_NAMES,
    WAIT_REPL,
    DJob,
)
from disq.core.dqueue import DQueue
from disq.core.messages import (
    PAUSE_IN,
    PAUSE_OUT,
    BeanstalkUpdate,
    DelJob,
    Enqueue,
    GotAck,
    GotJob,
    IdemKeys,
    JobData,
    Message,
    NeedJobs,
    Pause,
    Queued,
    ReplJob,
    SetAck,
    WillQueue,
    Working,
    YourJobs,
)

WILLQUEUE_ADVANCE_MS = 500
MAX_QUEUES = 100_000  # like the beanstalk door's tube limit: every queue costs memory
JOB_OVERHEAD_BYTES = 400  # measured-order estimate of a DJob with its indexes, besides the body
TIME_ERR_MS = 500  # jitter on every requeue time, so copies do not all requeue at once
GC_RETRY_MIN_MS = 1000
GC_RETRY_MAX_MS = 180_000
DEFAULT_TTL_S = 86400
DEFAULT_RETRY_MAX_S = 300
REPL_RETRY_MIN_MS = 50  # first "add one more node" for a slow sync ADDJOB
REPL_RETRY_MAX_MS = 1000
REPL_RESEND_MS = 1000  # silent but reachable replication targets are asked again this often
NEEDJOBS_BCAST_MIN_MS = 2000
NEEDJOBS_BCAST_MAX_MS = 30_000
NEEDJOBS_ADHOC_MIN_MS = 25
NEEDJOBS_ADHOC_MAX_MS = 2000
NEEDJOBS_MIN_REQUEST = 5
NEEDJOBS_MAX_REQUEST = 100
WANTED_VALID_MS = 35_000  # longer than the longest NEEDJOBS broadcast gap
QUEUE_IDLE_GC_MS = 300_000
CRON_BLOCKED_MS = 100  # Disque's clientsCron period for queues with blocked consumers
CRON_IDLE_MS = 1000
TOMBSTONE_MS = 120_000  # refuse late REPLJOBs for jobs acked/deleted this recently
TOMBSTONE_MAX = 200_000
# Idempotent adds: a key is remembered this long after its add (node-wide), for at most
# IDEM_MAX_KEYS keys (the oldest go first): a retry after that adds a second job.
IDEM_WINDOW_MS = 3_600_000
IDEM_MAX_KEYS = 1_000_000
IDEM_KEY_MAX_BYTES = 256
MAX_TICK_JOBS = 10_000  # bounded batches: a mass expiry never stalls the loop
# Beanstalk jobs have no TTL; their cluster records live "forever" (fits the u32 wire field).
BEANSTALK_TTL_S = 100 * 365 * 86400
# Replicas ask the owner of a beanstalk job whether it still holds it (WILLQUEUE) every
# max(TTR, this): a TTR of 1 s would otherwise mean one question per job per second.
BEANSTALK_MIN_RETRY_S = 5

NOREPL_NODES = "Not enough reachable nodes for the requested replication level"
NOREPL_NODES_LOCAL = (
    "Not enough reachable nodes for the requested replication level, since I'm unable to "
    "hold a copy of the message for the following reason: "
)
NOREPL_TIMEOUT = "Timeout reached before replicating to the requested number of nodes"
NOREPL_EXPIRED = "job removed (expired?) before the requested replication level was achieved"
LEAVING_MSG = "This node is leaving the cluster, please connect to a different one"


@dataclass(slots=True)
class _AddWait:
    """A client blocked in a synchronous ADDJOB."""

    job_id: str
    deadline_ms: int  # 0: wait forever
    next_repl_ms: int
    repl_backoff_ms: int
    resend_ms: int = 0  # when silent targets are asked again


@dataclass(slots=True)
class _GetWait:
    """A client blocked in GETJOB."""

    queues: list[str]
    deadline_ms: int  # 0: forever


def compare_ids_by_job(a: str, b: str, job_id: str) -> int:
    """Disque's ``compareNodeIDsByJob``: node ids XORed with the job id, so which copy wins
    a double requeue differs per job and the load spreads."""
    key = job_id.encode()
    ka = bytes(x ^ y for x, y in zip(a.encode(), key, strict=False))
    kb = bytes(x ^ y for x, y in zip(b.encode(), key, strict=False))
    return (ka > kb) - (ka < kb)


class ClusterCore:
    def __init__(self, view: ClusterView, rng: random.Random, now_ms: int) -> None:
        self.view = view
        self.rng = rng
        self.outbox: list[tuple[str, Message]] = []
        self.replies: list[tuple[int, DeferredResult]] = []
        self.aof_out: list[tuple[str, object]] = []
        self.jobs: dict[str, DJob] = {}
        self.queues: dict[str, DQueue] = {}
        self._awake: list[tuple[int, int, str]] = []  # (awake_ms, ctime, id), lazy
        self._adds: dict[int, _AddWait] = {}  # token -> blocked ADDJOB
        self._add_by_job: dict[str, int] = {}
        self._gets: dict[int, _GetWait] = {}  # token -> blocked GETJOB
        self._client_timers: list[tuple[int, int]] = []  # (deadline_ms, token), lazy
        self._repl_timers: list[tuple[int, int]] = []  # (next_repl_ms, token), lazy
        self._tombstones: dict[str, int] = {}  # job id -> until (insertion order = age)
        # (queue, idempotency key) -> (job id, until), insertion order = age; and the
        # ADDJOBs that repeated a key while its first add still waits for its copies.
        self._idem: dict[tuple[str, str], tuple[str, int]] = {}
        self._followers: dict[int, list[int]] = {}  # leader token -> follower tokens
        self._follower_of: dict[int, int] = {}
        self.idem_window_ms = IDEM_WINDOW_MS
        self.events = ev.EventBuffer()  # lifecycle events, drained by the node
        self._prev_ctime = 0
        self._next_cron_ms = now_ms + CRON_IDLE_MS
        self.memory_warning = 0  # 0 ok, 1 >75%, 2 >95%, 3 full (set_memory_limit)
        self.max_memory_bytes = 0  # 0: no limit
        self.used_bytes = 0  # bodies + a fixed per-job estimate
        self.aof_enqueue_once = False  # Disque's aof-enqueue-jobs-once for the next restore
        self.persist = True  # produce aof_out records (the node turns it off without an AOF)
        self.max_queues = MAX_QUEUES
        # Beanstalk bridge outboxes (drained by the node): jobs this node takes over from a
        # lost owner (put them in the engine, then call ``adopted``), engine ids whose
        # cluster record is gone (drop them from the engine), and owned records restored
        # from the AOF (link them to their engine jobs).
        self.takeovers: list[DJob] = []
        self.beanstalk_dropped: list[int] = []
        self.relinks: list[DJob] = []
        # Counters for INFO / stats.
        self.stats: dict[str, int] = {
            "jobs_added": 0,
            "jobs_delivered": 0,
            "jobs_acked": 0,
            "jobs_requeued": 0,
            "jobs_expired": 0,
            "jobs_imported": 0,
            "jobs_exported": 0,
            "noreply_timeouts": 0,
        }

    # ================================================================== helpers
    @property
    def my_id(self) -> str:
        return self.view.my_id

    def _send(self, node: str, msg: Message) -> None:
        if node != self.view.my_id:
            self.outbox.append((node, msg))

    def _jitter(self) -> int:
        # random() is one C call; randint is several Python frames, on every enqueue.
        return int(self.rng.random() * TIME_ERR_MS) - TIME_ERR_MS // 2

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

    def _update_awake(self, j: DJob, at: int = 0) -> None:
        if at == 0:
            # One second after expiry, so that when it runs the job is surely expired.
            at = j.etime_ms + 1000
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
        if at != j.awake_ms:
            j.awake_ms = at
            heapq.heappush(self._awake, (at, j.ctime, j.id))

    def _job_data(self, j: DJob, now_ms: int, absolute: bool = False) -> JobData:
        if absolute:
            ttl = j.etime_ms  # the AOF stores the absolute expiry (ms)
        else:
            ttl = max(1, (j.etime_ms - now_ms + 999) // 1000)
        return JobData(
            id=j.id,
            queue=j.queue,
            body=j.body,
            repl=j.repl,
            ctime=j.ctime,
            delay_s=j.delay_s,
            retry_s=j.retry_s,
            ttl_remaining_s=ttl,
            nacks=j.nacks,
            additional_deliveries=j.add_deliveries,
            nodes_delivered=sorted(j.delivered),
            priority=j.priority,
            beanstalk=bool(j.flags & BEANSTALK_ORIGIN),
            bstate=j.bstate,
            beanstalk_id=j.bid,
            idempotency_key=j.idem_key,
        )

    def _log_job(self, j: DJob, now_ms: int) -> None:
        if self.persist:
            self.aof_out.append(("LOADJOB", self._job_data(j, now_ms, absolute=True)))

    def _log_del(self, job_id: str) -> None:
        if self.persist:
            self.aof_out.append(("DELJOB", job_id))

    def _tombstone(self, job_id: str, now_ms: int) -> None:
        self._tombstones.pop(job_id, None)
        self._tombstones[job_id] = now_ms + TOMBSTONE_MS
        if len(self._tombstones) > TOMBSTONE_MAX:
            del self._tombstones[next(iter(self._tombstones))]

    def _tombstoned(self, job_id: str, now_ms: int) -> bool:
        until = self._tombstones.get(job_id)
        if until is None:
            return False
        if until < now_ms:
            del self._tombstones[job_id]
            return False
        return True

    # ================================================================== idempotency keys
    def _remember_key(self, j: DJob, now_ms: int) -> None:
        if not j.idem_key:
            return
        k = (j.queue, j.idem_key)
        self._idem.pop(k, None)
        self._idem[k] = (j.id, now_ms + self.idem_window_ms)
        if len(self._idem) > IDEM_MAX_KEYS:
            del self._idem[next(iter(self._idem))]

    def _known_key(self, queue: str, key: str, now_ms: int) -> str | None:
        """The id of the job first added with this key, if still in the window."""
        self._expire_keys(now_ms)
        hit = self._idem.get((queue, key))
        return hit[0] if hit is not None else None

    def _expire_keys(self, now_ms: int) -> None:
        idem = self._idem
        while idem:
            k = next(iter(idem))
            if idem[k][1] > now_ms:
                return
            del idem[k]

    def _announce_key(self, j: DJob) -> None:
        """The add is done (its copies exist): every peer learns the key, so a retry that
        reaches a node without a copy answers this id too. Sent only now, never while the
        add may still fail, or a peer could answer the id of a job that never was."""
        if j.idem_key:
            msg = IdemKeys([j.queue], [j.idem_key], [j.id])
            for node in self.view.all_peers():
                self._send(node, msg)

    def _on_idem_keys(self, now_ms: int, sender: str, msg: IdemKeys) -> None:
        until = now_ms + self.idem_window_ms
        idem = self._idem
        for queue, key, job_id in zip(msg.queues, msg.keys, msg.job_ids, strict=False):
            if (queue, key) not in idem:
                idem[(queue, key)] = (job_id, until)
        while len(idem) > IDEM_MAX_KEYS:
            del idem[next(iter(idem))]

    def _forget_key(self, j: DJob) -> None:
        """The add failed (NOREPL, cancelled): a retry with the key must add the job."""
        if j.idem_key:
            hit = self._idem.get((j.queue, j.idem_key))
            if hit is not None and hit[0] == j.id:
                del self._idem[(j.queue, j.idem_key)]

    def _reply_add(self, token: int, result: DeferredResult) -> None:
        """A sync ADDJOB's answer, for it and for every ADDJOB that repeated its key."""
        self.replies.append((token, result))
        for f in self._followers.pop(token, ()):
            self._follower_of.pop(f, None)
            self.replies.append((f, result))

    # ================================================================== job lifecycle
    def _register(self, j: DJob, awake: bool = True) -> None:
        self.jobs[j.id] = j
        self.used_bytes += len(j.body) + JOB_OVERHEAD_BYTES
        if awake:
            self._update_awake(j)

    def _forget(self, j: DJob) -> None:
        del self.jobs[j.id]
        self.used_bytes -= len(j.body) + JOB_OVERHEAD_BYTES
        j.awake_ms = -1

    def _unregister(self, j: DJob, now_ms: int) -> None:
        """Forget a job (unregisterJob). A client still waiting for its replication gets
        NOREPL and the copies are deleted best effort."""
        if self.jobs.get(j.id) is not j:
            return
        if j.state == QUEUED:
            self._dequeue(j)
        if j.state == WAIT_REPL:
            token = self._add_by_job.pop(j.id, None)
            if token is not None:
                self._adds.pop(token, None)
                self._reply_add(token, DisqueError("NOREPL", NOREPL_EXPIRED))
            self._forget_key(j)
            j.state = ACTIVE
            self._broadcast_del(j)
        if j.flags & BEANSTALK_OWNED and j.bid:
            self.beanstalk_dropped.append(j.bid)
            j.bid = 0
        self._forget(j)
        self._tombstone(j.id, now_ms)

    def _broadcast_del(self, j: DJob) -> None:
        for node in j.delivered:
            self._send(node, DelJob([j.id]))

    def _delete_from_cluster(self, j: DJob, now_ms: int) -> None:
        self._broadcast_del(j)
        if j.state != ACKED:
            self._log_del(j.id)
        self._unregister(j, now_ms)

    def _enqueue(self, j: DJob, now_ms: int, nack: bool = False) -> bool:
        """enqueueJob: queue the job here; QUEUED goes out on every enqueue but the first."""
        if j.state == QUEUED or j.state == ACKED or j.state == WAIT_REPL:
            return False
        if j.flags & BEANSTALK_ORIGIN:
            return False  # lives in a beanstalk engine, never in a Disque queue
        if j.retry_s == 0 and j.flags & DELIVERED:
            return False  # at-most-once: never queue again once delivered
        if j.flags & BCAST_QUEUED or nack:
            for node in j.delivered:
                self._send(node, Queued(j.id, incr_nacks=nack, incr_deliveries=not nack))
            if nack:
                j.nacks += 1
            else:
                j.add_deliveries += 1
        else:
            j.flags |= BCAST_QUEUED
        if j.retry_s:
            j.flags |= BCAST_WILLQUEUE
            j.qtime_ms = now_ms + j.retry_s * 1000 + self._jitter()
        else:
            j.qtime_ms = 0
        j.state = QUEUED
        q = self._queue(j.queue, now_ms)
        q.skiplist.add((j.ctime, j.id))
        q.jobs_in += 1
        q.atime_ms = now_ms
        self._update_awake(j)
        if q.blocked:
            self._serve_blocked(q, now_ms)
        elif q.wanted_by and not q.paused_out:
            self._push_wanted(q, now_ms)
        return True

    def _dequeue(self, j: DJob) -> bool:
        if j.state != QUEUED:
            return False
        q = self.queues.get(j.queue)
        if q is not None:
            q.skiplist.discard((j.ctime, j.id))
        j.state = ACTIVE
        return True

    def _fetch(self, q: DQueue, now_ms: int) -> DJob | None:
        """queueFetchJob: the oldest job, now active and delivered; qtime keeps running."""
        if not q.skiplist or q.paused_out:
            return None
        _, job_id = q.skiplist.pop(0)
        j = self.jobs[job_id]
        j.state = ACTIVE
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
            self._need_jobs(q, now_ms, reached_zero=True)
        return j

    def _replicate(self, j: DJob, count: int, now_ms: int, resend: bool = True) -> None:
        """clusterReplicateJob: add up to ``count`` new reachable nodes to the job's
        delivered set and send them REPLJOB; with ``resend``, ask again every delivered
        node that has not confirmed. Disque resends to confirmed nodes too; disq does not:
        under load thousands of adds wait, and re-sent bodies nobody needs saturate links."""
        new: list[str] = []
        if count > 0:
            peers = [n for n in self.view.reachable_peers() if n not in j.delivered]
            self.rng.shuffle(peers)
            new = peers[:count]
            j.delivered.update(new)
        msg: ReplJob | None = None
        targets = j.delivered if resend else new
        for node in targets:
            if node == self.my_id or node in j.confirmed:
                continue
            if msg is None:
                msg = ReplJob(self._job_data(j, now_ms))
            self._send(node, msg)

    def _replication_achieved(self, j: DJob, now_ms: int) -> None:
        j.state = ACTIVE
        j.confirmed = set()
        token = self._add_by_job.pop(j.id, None)
        if token is not None:
            self._adds.pop(token, None)
            self._reply_add(token, j.id)
        self._announce_key(j)
        if j.flags & BEANSTALK_OWNED:
            self._log_job(j, now_ms)  # the engine holds the live job; nothing to queue here
            self._update_awake(j)
            return
        if self.my_id not in j.delivered:
            # External replication: one of the holders queues it, this node forgets it.
            holders = sorted(j.delivered)
            if holders:
                self._send(self.rng.choice(holders), Enqueue(j.id))
            self._forget(j)
            return
        self._log_job(j, now_ms)
        if j.delay_s == 0:
            self._enqueue(j, now_ms)
        else:
            self._update_awake(j)

    # ================================================================== commands
    def add_job(
        self,
        now_ms: int,
        token: int,
        queue: str,
        body: bytes,
        *,
        timeout_ms: int,
        repl: int | None = None,
        delay_s: int = 0,
        retry_s: int | None = None,
        ttl_s: int | None = None,
        maxlen: int | None = None,
        async_: bool = False,
        idem_key: str = "",
    ) -> str | Pending:
        """ADDJOB after syntax checks. Returns the id, or PENDING for a synchronous add
        (the id or a NOREPL error arrives in ``replies``). Raises DisqueError.

        ``idem_key``: an add that repeats a key seen on this queue within the window adds
        nothing and answers the first job's id; if that add still waits for its copies,
        this one waits with it and gets the same answer."""
        size = self.view.cluster_size()
        if repl is None:
            repl = min(3, size)
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
            first = self._known_key(queue, idem_key, now_ms)
            if first is not None:
                leader = self._add_by_job.get(first)
                if leader is None:
                    return first
                self._followers.setdefault(leader, []).append(token)
                self._follower_of[token] = leader
                return PENDING
        if self.memory_warning >= 3:
            raise DisqueError("OOM", "command not allowed when used memory > 'maxmemory'.")
        extrepl = self.memory_warning > 0 or self.view.leaving
        additional = repl if extrepl else repl - 1
        reachable = len(self.view.reachable_peers())
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

        ctime = now_ms * 1_000_000
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        job_id = ids.make_job_id(self.my_id, self.rng, ttl, retry_s)
        j = DJob(job_id, queue, body, repl, ctime, delay_s, retry_s, now_ms + ttl * 1000)
        if idem_key:
            j.idem_key = idem_key
            self._remember_key(j, now_ms)
        if not extrepl:
            j.delivered.add(self.my_id)
        j.qtime_ms = now_ms + (delay_s if delay_s else retry_s) * 1000
        self.stats["jobs_added"] += 1
        self.events.add(ev.ENQUEUED, now_ms, queue, job_id, 0, len(body))

        if (repl > 1 or extrepl) and not async_:
            # Sync, and also REPLICATE 1 without a local copy (memory warning, leaving): the
            # client must learn the id only once the external copy exists.
            self._register(j)
            j.confirmed = set() if extrepl else {self.my_id}
            backoff = REPL_RETRY_MIN_MS
            wait = _AddWait(
                job_id,
                now_ms + timeout_ms if timeout_ms > 0 else 0,
                now_ms + backoff,
                backoff,
                now_ms + REPL_RESEND_MS,
            )
            self._adds[token] = wait
            self._add_by_job[job_id] = token
            heapq.heappush(self._repl_timers, (wait.next_repl_ms, token))
            if wait.deadline_ms:
                heapq.heappush(self._client_timers, (wait.deadline_ms, token))
            self._replicate(j, additional, now_ms)
            return PENDING

        if not (async_ and extrepl):
            j.state = ACTIVE
            if delay_s == 0 and not extrepl:
                self._register(j, awake=False)  # _enqueue sets the timer once
                self._log_job(j, now_ms)
                self._enqueue(j, now_ms)
            else:
                self._register(j)
                self._log_job(j, now_ms)
        if additional > 0:
            self._replicate(j, additional, now_ms)
        self._announce_key(j)  # not waiting for copies: the add is done now
        if async_ and extrepl:
            holders = sorted(j.delivered)
            if holders:
                self._send(self.rng.choice(holders), Enqueue(j.id))
            self.jobs.pop(j.id, None)
        elif extrepl and j.id in self.jobs:
            # Sync with REPLICATE 1 while leaving/low on memory cannot happen (additional
            # would be 1 and async_ False means the sync branch). ASYNC: keep nothing here.
            pass
        return job_id

    def get_job(
        self,
        now_ms: int,
        token: int,
        queues: list[str],
        *,
        nohang: bool = False,
        timeout_ms: int = 0,
        count: int = 1,
    ) -> list[DJob] | Pending | None:
        out: list[DJob] = []
        left = count
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
        self._gets[token] = _GetWait(list(queues), deadline)
        for name in queues:
            q = self._queue(name, now_ms)
            q.blocked[token] = None
            self._need_jobs(q, now_ms, reached_zero=False)
        if deadline:
            heapq.heappush(self._client_timers, (deadline, token))
        return PENDING

    def cancel(self, token: int) -> None:
        leader = self._follower_of.pop(token, None)
        if leader is not None:
            rest = self._followers.get(leader, [])
            if token in rest:
                rest.remove(token)
            return
        followers = self._followers.pop(token, None)
        if followers and token in self._adds:
            # The first add's client is gone but others wait for the same job: the first
            # of them takes its place, and the job lives on.
            heir = followers.pop(0)
            self._follower_of.pop(heir, None)
            wait = self._adds.pop(token)
            self._adds[heir] = wait
            self._add_by_job[wait.job_id] = heir
            heapq.heappush(self._repl_timers, (wait.next_repl_ms, heir))
            if wait.deadline_ms:
                heapq.heappush(self._client_timers, (wait.deadline_ms, heir))
            if followers:
                self._followers[heir] = followers
                for f in followers:
                    self._follower_of[f] = heir
            return
        g = self._gets.pop(token, None)
        if g is not None:
            for name in g.queues:
                q = self.queues.get(name)
                if q is not None:
                    q.blocked.pop(token, None)
        a = self._adds.pop(token, None)
        if a is not None:
            self._add_by_job.pop(a.job_id, None)
            j = self.jobs.get(a.job_id)
            if j is not None and j.state == WAIT_REPL:
                # unblockClientWaitingJobRepl: nobody will learn the id, so delete it.
                self._forget_key(j)
                j.state = ACTIVE
                self._broadcast_del(j)
                self._forget(j)

    def ack_job(self, now_ms: int, job_ids: list[str]) -> int:
        known = 0
        for job_id in job_ids:
            j = self.jobs.get(job_id)
            if j is not None:
                if j.state != ACKED:
                    self.events.add(ev.ACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
                    self._acknowledge(j, now_ms)
                    self._try_gc(j, now_ms)
                    known += 1
            elif (
                self.view.cluster_size() > 1
                and not self.view.leaving
                and ids.may_be_redelivered(job_id)
            ):
                # Dummy ACK: an ack for a job this node never held; SETACK goes to everybody
                # in search of the holders.
                d = DJob(job_id, "", b"", 0, 0, 0, 0, now_ms + ids.ttl_minutes(job_id) * 60_000)
                d.state = ACKED
                self.events.add(ev.ACKED, now_ms, "", job_id, 0, 0)  # the queue is elsewhere
                self._register(d)
                self._try_gc(d, now_ms)
        self.stats["jobs_acked"] += known
        return known

    def _acknowledge(self, j: DJob, now_ms: int) -> None:
        if j.state == WAIT_REPL:
            # Acked while its ADDJOB still waits (Disque #73/#97): somebody consumed it, so
            # the copies exist; answer the producer with its id instead of crashing.
            token = self._add_by_job.pop(j.id, None)
            if token is not None:
                self._adds.pop(token, None)
                self._reply_add(token, j.id)
        if j.state == QUEUED:
            self._dequeue(j)
        j.state = ACKED
        j.gc_retry = 0
        j.confirmed = set()
        # Every acked job gets GC attempts of its own (as in Disque): a node that learned the
        # ack by SETACK and answered GOTACK must not keep it until its TTL if the DELJOB that
        # should follow is lost or its sender crashes (acks are not in the AOF).
        j.qtime_ms = self._gc_retry_time(j, now_ms)
        self._log_del(j.id)

    def _gc_retry_time(self, j: DJob, now_ms: int) -> int:
        base = min(GC_RETRY_MIN_MS << min(j.gc_retry, 20), GC_RETRY_MAX_MS)
        j.gc_retry += 1
        return now_ms + base + int(self.rng.random() * 2 * TIME_ERR_MS) - TIME_ERR_MS

    def _try_gc(self, j: DJob, now_ms: int) -> None:
        """tryJobGC: SETACK to every node that may hold a copy and has not confirmed; delete
        once all did. A dummy ack (no known holders) asks everybody."""
        dummy = not j.delivered
        j.confirmed.add(self.my_id)
        if (not dummy and j.confirmed >= j.delivered) or (dummy and self.view.cluster_size() == 1):
            self._unregister(j, now_ms)
            return
        targets = self.view.all_peers() if dummy else list(j.delivered)
        for node in targets:
            if node != self.my_id and node not in j.confirmed:
                self._send(node, SetAck(j.id, len(j.delivered)))
        j.qtime_ms = self._gc_retry_time(j, now_ms)
        self._update_awake(j)

    def fast_ack(self, now_ms: int, job_ids: list[str]) -> int:
        known = 0
        for job_id in job_ids:
            j = self.jobs.get(job_id)
            if j is None:
                for node in self.view.all_peers():
                    self._send(node, DelJob([job_id]))
                continue
            known += 1
            self.events.add(ev.ACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
            self._delete_from_cluster(j, now_ms)
        self.stats["jobs_acked"] += known
        return known

    def working(self, now_ms: int, job_id: str) -> int:
        j = self.jobs.get(job_id)
        if j is None:
            raise DisqueError("NOJOB", "Job not known in the context of this node.")
        created_ms = j.ctime // 1_000_000
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

    def nack(self, now_ms: int, job_ids: list[str]) -> int:
        return self._enqueue_many(now_ms, job_ids, nack=True)

    def enqueue(self, now_ms: int, job_ids: list[str]) -> int:
        return self._enqueue_many(now_ms, job_ids, nack=False)

    def _enqueue_many(self, now_ms: int, job_ids: list[str], nack: bool) -> int:
        if self.memory_warning >= 3:
            raise DisqueError("OOM", "command not allowed when used memory > 'maxmemory'.")
        n = 0
        for job_id in job_ids:
            j = self.jobs.get(job_id)
            if j is not None and j.state == ACTIVE and self._enqueue(j, now_ms, nack=nack):
                n += 1
                if nack:
                    self.events.add(ev.NACKED, now_ms, j.queue, j.id, j.nacks, len(j.body))
        return n

    def dequeue(self, now_ms: int, job_ids: list[str]) -> int:
        n = 0
        for job_id in job_ids:
            j = self.jobs.get(job_id)
            if j is not None and self._dequeue(j):
                n += 1
        return n

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

    # ------------------------------------------------------------------ introspection
    def show(self, now_ms: int, job_id: str) -> list[tuple[str, object]] | None:
        j = self.jobs.get(job_id)
        if j is None:
            return None
        ttl = max(0, (j.etime_ms - now_ms) // 1000)
        requeue = None if j.qtime_ms == 0 or j.state == ACKED else max(0, j.qtime_ms - now_ms)
        awake = None if j.awake_ms <= 0 else max(0, j.awake_ms - now_ms)
        confirmed = sorted(j.confirmed) if j.state in (WAIT_REPL, ACKED) else []
        pairs: list[tuple[str, object]] = [
            ("id", j.id),
            ("queue", j.queue if j.delivered or j.state != ACKED else None),
            ("state", STATE_NAMES[j.state]),
            ("repl", j.repl),
            ("ttl", ttl),
            ("ctime", j.ctime),
            ("delay", j.delay_s),
            ("retry", j.retry_s),
            ("nacks", j.nacks),
            ("additional-deliveries", j.add_deliveries),
            ("nodes-delivered", sorted(j.delivered)),
            ("nodes-confirmed", confirmed),
            ("next-requeue-within", requeue),
            ("next-awake-within", awake),
            ("body", j.body if j.state != ACKED or j.body else None),
        ]
        if j.flags & BEANSTALK_ORIGIN:
            # disq's addition, only for jobs put through a beanstalk door: the state the
            # owner last reported, which a takeover restores.
            pairs.append(("beanstalk-state", "buried" if j.bstate == 3 else "ready"))
        return pairs

    def qlen(self, queue: str) -> int:
        q = self.queues.get(queue)
        return len(q) if q is not None else 0

    def qstat(self, now_ms: int, queue: str) -> list[tuple[str, object]] | None:
        q = self.queues.get(queue)
        if q is None:
            return None
        return [
            ("name", q.name),
            ("len", len(q)),
            ("age", max(0, (now_ms - q.ctime_ms) // 1000)),
            ("idle", max(0, (now_ms - q.atime_ms) // 1000)),
            ("blocked", len(q.blocked)),
            ("import-from", q.live_responders(now_ms)),
            ("import-rate", q.import_rate(now_ms)),
            ("jobs-in", q.jobs_in),
            ("jobs-out", q.jobs_out),
            ("pause", q.pause_name()),
        ]

    def qpeek(self, queue: str, count: int) -> list[DJob]:
        q = self.queues.get(queue)
        if q is None or count == 0:
            return []
        if count > 0:
            keys = list(q.skiplist.islice(0, count))
        else:
            keys = list(q.skiplist.islice(max(0, len(q.skiplist) + count), len(q.skiplist)))
            keys.reverse()
        return [self.jobs[k[1]] for k in keys]

    def qscan(
        self,
        cursor: int,
        count: int,
        *,
        busyloop: bool = False,
        minlen: int | None = None,
        maxlen: int | None = None,
        importrate: int | None = None,
        now_ms: int = 0,
    ) -> tuple[int, list[str]]:
        """Stateless iteration over sorted queue names: the cursor is a position. Queues
        added or removed meanwhile may be missed or repeated, as with Redis SCAN."""
        names = sorted(self.queues)
        out: list[str] = []
        pos = cursor
        while pos < len(names):
            q = self.queues[names[pos]]
            pos += 1
            if minlen is not None and len(q) < minlen:
                continue
            if maxlen is not None and len(q) > maxlen:
                continue
            if importrate is not None and q.import_rate(now_ms) < importrate:
                continue
            out.append(q.name)
            if not busyloop and len(out) >= count:
                break
        return (0 if pos >= len(names) else pos), out

    def jscan(
        self,
        cursor: int,
        count: int,
        *,
        busyloop: bool = False,
        queue: str | None = None,
        states: set[int] | None = None,
    ) -> tuple[int, list[DJob]]:
        keys = sorted(self.jobs)
        out: list[DJob] = []
        pos = cursor
        while pos < len(keys):
            j = self.jobs[keys[pos]]
            pos += 1
            if queue is not None and j.queue != queue:
                continue
            if states and j.state not in states:
                continue
            if j.state == ACKED and not j.delivered:
                continue  # a dummy ack is bookkeeping, not a job
            out.append(j)
            if not busyloop and len(out) >= count:
                break
        return (0 if pos >= len(keys) else pos), out

    def pause(self, now_ms: int, queue: str, flags: int | None, bcast: bool) -> int:
        q = self.queues.get(queue)
        if q is None:
            if not flags:
                # Reading the state (or pausing nothing) must not create a phantom queue.
                if bcast:
                    for node in self.view.all_peers():
                        self._send(node, Pause(queue, 0))
                return 0
            self._check_new_queue(queue)
            q = self._queue(queue, now_ms)
        if flags is not None:
            q.pause = flags
            if not q.paused_out and q.blocked and q.skiplist:
                self._serve_blocked(q, now_ms)
        if bcast:
            for node in self.view.all_peers():
                self._send(node, Pause(queue, q.pause))
        return q.pause

    def flushall(self) -> None:
        for token in list(self._follower_of):  # first, so no follower inherits an add
            self.cancel(token)
        for token in list(self._adds):
            self.cancel(token)
        self._idem.clear()
        self.jobs.clear()
        self.used_bytes = 0
        self.queues = {name: q for name, q in self.queues.items() if q.blocked}
        for q in self.queues.values():
            q.skiplist.clear()
        self._awake.clear()
        self._tombstones.clear()

    def update_memory(self, now_ms: int, other_bytes: int = 0) -> int:
        """Disque's memory warning levels (getMemoryWarningLevel), from this core's estimate
        plus ``other_bytes`` (the beanstalk engine's jobs). Level 1 (>75%): new jobs are
        replicated externally and REPLJOB is refused; level 2 (>95%): acked jobs, which are
        only GC bookkeeping, are evicted; level 3 (full): ADDJOB, NACK and ENQUEUE get -OOM."""
        limit = self.max_memory_bytes
        if limit <= 0:
            self.memory_warning = 0
            return 0
        used = self.used_bytes + other_bytes
        if used > limit * 95 // 100:
            self._evict_acked(now_ms, used - limit * 95 // 100)
            used = self.used_bytes + other_bytes
        level = 0
        if used > limit * 75 // 100:
            level = 1
        if used > limit * 95 // 100:
            level = 2
        if used >= limit:
            level = 3
        self.memory_warning = level
        return level

    def _evict_acked(self, now_ms: int, want_bytes: int) -> None:
        """Drop acked jobs (oldest first in dict order) until ``want_bytes`` are freed. The
        worst case is a duplicate delivery by a holder that never heard the ack, which
        at-least-once allows; never an unacked job lost."""
        freed = 0
        for j in [j for j in self.jobs.values() if j.state == ACKED]:
            if freed >= want_bytes:
                break
            freed += len(j.body) + JOB_OVERHEAD_BYTES
            self._unregister(j, now_ms)

    def blocked_clients(self) -> int:
        return len(self._gets) + len(self._adds)

    # ================================================================== beanstalk jobs
    def add_beanstalk(
        self,
        now_ms: int,
        token: int,
        tube: str,
        body: bytes,
        *,
        priority: int,
        ttr_s: int,
        delay_s: int,
        repl: int,
        timeout_ms: int,
        bid: int,
    ) -> tuple[str, bool]:
        """A beanstalk put (already in the local engine as ``bid``) replicated to ``repl``
        nodes. Returns (cluster id, pending); when pending, the id or a NOREPL error comes
        in ``replies`` under ``token``. On NOREPL the engine job is dropped (see
        ``beanstalk_dropped``): the client was never told INSERTED."""
        additional = repl - 1
        if additional > len(self.view.reachable_peers()):
            raise DisqueError("NOREPL", NOREPL_NODES)
        ctime = now_ms * 1_000_000
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        retry = max(ttr_s, BEANSTALK_MIN_RETRY_S)
        job_id = ids.make_job_id(self.my_id, self.rng, BEANSTALK_TTL_S, retry)
        j = DJob(job_id, tube, body, repl, ctime, delay_s, retry, now_ms + BEANSTALK_TTL_S * 1000)
        j.flags |= BEANSTALK_ORIGIN | BEANSTALK_OWNED
        j.priority = priority
        j.bid = bid
        j.delivered.add(self.my_id)
        self._register(j)
        if additional <= 0:
            j.state = ACTIVE
            self._log_job(j, now_ms)
            return job_id, False
        j.confirmed = {self.my_id}
        backoff = REPL_RETRY_MIN_MS
        wait = _AddWait(
            job_id, now_ms + timeout_ms, now_ms + backoff, backoff, now_ms + REPL_RESEND_MS
        )
        self._adds[token] = wait
        self._add_by_job[job_id] = token
        heapq.heappush(self._repl_timers, (wait.next_repl_ms, token))
        heapq.heappush(self._client_timers, (wait.deadline_ms, token))
        self._replicate(j, additional, now_ms)
        return job_id, True

    def beanstalk_update(self, now_ms: int, job_id: str, bstate: int, priority: int) -> None:
        """The owner's engine buried, kicked or re-prioritised the job: tell the holders."""
        j = self.jobs.get(job_id)
        if j is None or not j.flags & BEANSTALK_OWNED:
            return
        j.bstate, j.priority = bstate, priority
        for node in j.delivered:
            self._send(node, BeanstalkUpdate(j.id, bstate, priority))

    def beanstalk_deleted(self, now_ms: int, job_id: str) -> None:
        """The owner's engine deleted the job: every copy goes (DELJOB, as FASTACK)."""
        j = self.jobs.get(job_id)
        if j is None or not j.flags & BEANSTALK_OWNED:
            return
        j.bid = 0  # the engine job is gone already
        self._delete_from_cluster(j, now_ms)

    def _take_over(self, j: DJob) -> None:
        """The owner did not answer WILLQUEUE: this holder becomes the owner. QUEUED tells
        the other holders, who postpone (two takeovers at once mean a duplicate, which
        at-least-once allows)."""
        j.flags = (j.flags | BEANSTALK_OWNED) & ~BCAST_WILLQUEUE
        j.qtime_ms = 0
        self.takeovers.append(j)
        for node in j.delivered:
            self._send(node, Queued(j.id))

    def adopted(self, now_ms: int, j: DJob, bid: int) -> None:
        """The engine took over ``j`` as ``bid``."""
        j.bid = bid
        if self.jobs.get(j.id) is j:
            self._log_job(j, now_ms)

    # ================================================================== blocked clients
    def _serve_blocked(self, q: DQueue, now_ms: int) -> None:
        while q.blocked and q.skiplist and not q.paused_out:
            token = next(iter(q.blocked))
            self._unblock_get(token)
            j = self._fetch(q, now_ms)
            if j is not None:
                self.replies.append((token, [j]))

    def _unblock_get(self, token: int) -> None:
        g = self._gets.pop(token, None)
        if g is None:
            return
        for name in g.queues:
            q = self.queues.get(name)
            if q is not None:
                q.blocked.pop(token, None)

    # ================================================================== federation
    def _need_jobs(self, q: DQueue, now_ms: int, reached_zero: bool) -> None:
        """needJobsForQueue: a rare NEEDJOBS(1) broadcast to discover who has jobs, and
        frequent ad hoc requests to the nodes that recently answered."""
        if self.view.leaving:
            return
        responders = q.live_responders(now_ms)
        rate = q.import_rate(now_ms)
        to_fetch = NEEDJOBS_MIN_REQUEST
        if responders:
            to_fetch = rate // len(responders)
        to_fetch = max(NEEDJOBS_MIN_REQUEST, min(NEEDJOBS_MAX_REQUEST, to_fetch))
        bcast_delay = min(
            NEEDJOBS_BCAST_MIN_MS << min(q.needjobs_bcast_attempt, 10), NEEDJOBS_BCAST_MAX_MS
        )
        adhoc_delay = min(
            NEEDJOBS_ADHOC_MIN_MS << min(q.needjobs_adhoc_attempt, 10), NEEDJOBS_ADHOC_MAX_MS
        )
        if q.needjobs_bcast_ms == 0 or now_ms - q.needjobs_bcast_ms > bcast_delay:
            q.needjobs_bcast_ms = now_ms
            q.needjobs_bcast_attempt += 1
            for node in self.view.reachable_peers():
                self._send(node, NeedJobs(q.name, 1))
        if responders and (reached_zero or now_ms - q.needjobs_adhoc_ms > adhoc_delay):
            q.needjobs_adhoc_ms = now_ms
            q.needjobs_adhoc_attempt += 1
            for node in responders:
                self._send(node, NeedJobs(q.name, to_fetch))

    def _give_jobs(self, q: DQueue, node: str, count: int, now_ms: int) -> None:
        n = count if len(q) >= 2 * count else max(1, len(q) // 2)
        jobs: list[JobData] = []
        for _ in range(min(n, len(q))):
            _, job_id = q.skiplist.pop(0)
            j = self.jobs[job_id]
            j.state = ACTIVE
            q.jobs_out += 1
            j.delivered.add(node)
            jobs.append(self._job_data(j, now_ms))
            if j.retry_s == 0:
                # An at-most-once job must exist in one place only: it moves.
                self._log_del(j.id)
                self._unregister(j, now_ms)
            else:
                # Our copy stays active; the importer's QUEUED/WILLQUEUE answers keep it
                # from being requeued here while the importer has it.
                self._postpone(j, now_ms)
        if jobs:
            self.stats["jobs_exported"] += len(jobs)
            self._send(node, YourJobs(jobs))

    def _push_wanted(self, q: DQueue, now_ms: int) -> None:
        for node, until in list(q.wanted_by.items()):
            if until < now_ms or not self._peer_ok(node):
                del q.wanted_by[node]
                continue
            del q.wanted_by[node]
            self._give_jobs(q, node, 1, now_ms)
            return

    def _peer_ok(self, node: str) -> bool:
        return node in self.view.reachable_peers()

    # ================================================================== messages
    def on_message(self, now_ms: int, sender: str, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, now_ms, sender, msg)

    def _on_repljob(self, now_ms: int, sender: str, msg: ReplJob) -> None:
        d = msg.job
        if self.memory_warning > 0 or self.view.leaving:
            return  # no copy: the sender will pick another node
        q = self.queues.get(d.queue)
        if q is not None and q.paused_in:
            return
        j = self.jobs.get(d.id)
        if j is not None:
            j.delivered.update(d.nodes_delivered)
        else:
            if self._tombstoned(d.id, now_ms):
                return  # acked or deleted here moments ago: a late resend must not revive it
            j = self._job_from_data(d, now_ms)
            self._register(j)
            self._log_job(j, now_ms)
            self.events.add(ev.REPLICATED, now_ms, j.queue, j.id, 0, len(j.body))
        self._send(sender, GotJob(d.id))

    def _job_from_data(self, d: JobData, now_ms: int) -> DJob:
        """deserializeJob: active, requeue after delay + retry (+ jitter)."""
        j = DJob(
            d.id,
            d.queue,
            d.body,
            d.repl,
            d.ctime,
            d.delay_s,
            d.retry_s,
            now_ms + d.ttl_remaining_s * 1000,
        )
        j.state = ACTIVE
        j.nacks = d.nacks
        j.add_deliveries = d.additional_deliveries
        j.delivered = set(d.nodes_delivered)
        j.delivered.add(self.my_id)
        j.priority = d.priority
        if d.idempotency_key:
            j.idem_key = d.idempotency_key
            self._remember_key(j, now_ms)
        if d.beanstalk:
            j.flags |= BEANSTALK_ORIGIN
            j.bstate = d.bstate
        if d.retry_s:
            j.flags |= BCAST_WILLQUEUE
            j.qtime_ms = now_ms + (d.delay_s + d.retry_s) * 1000 + self._jitter()
        return j

    def _on_gotjob(self, now_ms: int, sender: str, msg: GotJob) -> None:
        j = self.jobs.get(msg.job_id)
        if j is None or j.state != WAIT_REPL:
            return
        j.confirmed.add(sender)
        j.delivered.add(sender)
        if len(j.confirmed) >= j.repl:
            self._replication_achieved(j, now_ms)

    def _on_enqueue(self, now_ms: int, sender: str, msg: Enqueue) -> None:
        j = self.jobs.get(msg.job_id)
        if j is None or j.state != ACTIVE:
            return
        q = self.queues.get(j.queue)
        if q is not None and q.paused_in:
            return
        if j.delay_s:
            j.qtime_ms = now_ms + j.delay_s * 1000
            j.flags &= ~BCAST_WILLQUEUE
            self._update_awake(j)
        else:
            self._enqueue(j, now_ms)

    def _on_queued(self, now_ms: int, sender: str, msg: Queued) -> None:
        j = self.jobs.get(msg.job_id)
        if j is None:
            return
        if msg.incr_nacks:
            j.nacks += 1
        if msg.incr_deliveries:
            j.add_deliveries += 1
        if j.state == QUEUED and compare_ids_by_job(sender, self.my_id, j.id) > 0:
            self._dequeue(j)  # two copies queued: the one whose node wins keeps it
        j.flags |= BCAST_QUEUED
        if j.state in (ACTIVE, QUEUED) and j.retry_s:
            j.flags |= BCAST_WILLQUEUE
            self._postpone(j, now_ms)

    def _on_willqueue(self, now_ms: int, sender: str, msg: WillQueue) -> None:
        j = self.jobs.get(msg.job_id)
        if j is None:
            return
        if j.state == ACKED:
            self._send(sender, SetAck(j.id, len(j.delivered)))
        elif j.state == QUEUED or j.flags & BEANSTALK_OWNED:
            self._send(sender, Queued(j.id))

    def _on_setack(self, now_ms: int, sender: str, msg: SetAck) -> None:
        j = self.jobs.get(msg.job_id)
        if j is not None and j.state != ACKED:
            self._acknowledge(j, now_ms)
            self._update_awake(j)
        if j is None:
            self._send(sender, GotAck(msg.job_id, False))
        elif len(j.delivered) <= msg.may_have:
            self._send(sender, GotAck(msg.job_id, True))
        else:
            self._try_gc(j, now_ms)

    def _on_gotack(self, now_ms: int, sender: str, msg: GotAck) -> None:
        j = self.jobs.get(msg.job_id)
        if j is None or j.state != ACKED:
            return
        dummy = not j.delivered
        if dummy and msg.known:
            # A holder took over the GC: the dummy ack is no longer needed.
            self._unregister(j, now_ms)
            return
        if msg.known or sender in j.delivered:
            if not dummy:
                j.delivered.add(sender)
            j.confirmed.add(sender)
        if dummy and not msg.known:
            j.confirmed.add(sender)
            if len(j.confirmed) >= self.view.cluster_size():
                self._unregister(j, now_ms)
            return
        if not dummy and j.confirmed >= j.delivered:
            self._broadcast_del(j)
            self._unregister(j, now_ms)

    def _on_deljob(self, now_ms: int, sender: str, msg: DelJob) -> None:
        for job_id in msg.job_ids:
            j = self.jobs.get(job_id)
            if j is not None:
                if j.state != ACKED:
                    self._log_del(j.id)
                self._unregister(j, now_ms)
            else:
                self._tombstone(job_id, now_ms)

    def _on_needjobs(self, now_ms: int, sender: str, msg: NeedJobs) -> None:
        q = self.queues.get(msg.queue)
        if q is None:
            if len(self.queues) >= self.max_queues:
                return  # at the bound: a peer's interest is not worth a queue record
            # Remember the interest (the queue record is reclaimed by the idle GC).
            q = self._queue(msg.queue, now_ms)
        if q.paused_out or q.import_rate(now_ms) > 0:
            return
        if not q.skiplist:
            if not q.blocked:
                q.wanted_by[sender] = now_ms + WANTED_VALID_MS
            return
        self._give_jobs(q, sender, max(1, msg.count), now_ms)

    def _on_yourjobs(self, now_ms: int, sender: str, msg: YourJobs) -> None:
        imported = 0
        for d in msg.jobs:
            j = self.jobs.get(d.id)
            if j is None:
                if self._tombstoned(d.id, now_ms):
                    continue
                j = self._job_from_data(d, now_ms)
                j.delivered.add(sender)
                self._register(j)
                self._log_job(j, now_ms)
            else:
                j.delivered.update(d.nodes_delivered)
            if j.state == ACTIVE:
                # Imported jobs are queued without a QUEUED broadcast: the sender already
                # knows where they went.
                j.flags &= ~BCAST_QUEUED
                if self._enqueue(j, now_ms):
                    imported += 1
        if msg.jobs:
            q = self._queue(msg.jobs[0].queue, now_ms)
            q.responders[sender] = now_ms
            if imported:
                q.record_import(now_ms, imported)
            q.needjobs_adhoc_attempt = 0
            if len(q.responders) == 1:
                q.needjobs_bcast_attempt = 0
            self.stats["jobs_imported"] += imported

    def _on_working(self, now_ms: int, sender: str, msg: Working) -> None:
        j = self.jobs.get(msg.job_id)
        if j is None:
            return
        if j.state == QUEUED:
            self._dequeue(j)
        self._postpone(j, now_ms)

    def _on_beanstalk_update(self, now_ms: int, sender: str, msg: BeanstalkUpdate) -> None:
        j = self.jobs.get(msg.job_id)
        if j is None or j.flags & BEANSTALK_OWNED:
            return
        j.bstate = msg.bstate
        j.priority = msg.priority
        self._log_job(j, now_ms)  # a restarted holder must restore it as the owner left it
        self._postpone(j, now_ms)

    def _on_pause(self, now_ms: int, sender: str, msg: Pause) -> None:
        q = self._queue(msg.queue, now_ms)
        q.pause = msg.flags & (PAUSE_IN | PAUSE_OUT)
        if not q.paused_out and q.blocked and q.skiplist:
            self._serve_blocked(q, now_ms)

    _handlers: ClassVar[dict[type, Callable[[ClusterCore, int, str, Any], None]]] = {}

    # ================================================================== time
    def next_deadline_ms(self) -> int:
        nxt = self._next_cron_ms
        if self._awake and self._awake[0][0] < nxt:
            nxt = self._awake[0][0]
        if self._client_timers and self._client_timers[0][0] < nxt:
            nxt = self._client_timers[0][0]
        if self._repl_timers and self._repl_timers[0][0] < nxt:
            nxt = self._repl_timers[0][0]
        return nxt

    def tick(self, now_ms: int) -> None:
        self._expire_keys(now_ms)
        self._process_jobs(now_ms)
        self._process_clients(now_ms)
        if now_ms >= self._next_cron_ms:
            self._cron(now_ms)

    def _process_jobs(self, now_ms: int) -> None:
        heap = self._awake
        budget = MAX_TICK_JOBS
        while heap and heap[0][0] <= now_ms and budget:
            at, _, job_id = heapq.heappop(heap)
            j = self.jobs.get(job_id)
            if j is None or j.awake_ms != at:
                continue  # stale entry (lazy deletion)
            budget -= 1
            j.awake_ms = 0
            self._process_job(j, now_ms)

    def _process_job(self, j: DJob, now_ms: int) -> None:
        if j.etime_ms <= now_ms:
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
            and j.qtime_ms - WILLQUEUE_ADVANCE_MS <= now_ms
        ):
            if j.state != QUEUED:
                for node in j.delivered:
                    self._send(node, WillQueue(j.id))
            j.flags &= ~BCAST_WILLQUEUE
        if j.state == ACTIVE and j.qtime_ms and j.qtime_ms <= now_ms:
            q = self.queues.get(j.queue)
            if j.flags & BEANSTALK_ORIGIN:
                if not j.flags & BEANSTALK_OWNED:
                    self._take_over(j)
            elif q is not None and q.paused_in and j.retry_s:
                j.qtime_ms = now_ms + j.retry_s * 1000 + self._jitter()
            elif self._enqueue(j, now_ms):
                self.stats["jobs_requeued"] += 1
                self.events.add(ev.REQUEUED, now_ms, j.queue, j.id, j.add_deliveries, len(j.body))
        if j.state == QUEUED and j.qtime_ms and j.qtime_ms <= now_ms and j.retry_s:
            j.flags |= BCAST_WILLQUEUE
            j.qtime_ms = now_ms + j.retry_s * 1000 + self._jitter()
        if j.state == ACKED:
            self._try_gc(j, now_ms)
            return
        if j.id in self.jobs:
            self._update_awake(j)

    def _process_clients(self, now_ms: int) -> None:
        timers = self._client_timers
        while timers and timers[0][0] <= now_ms:
            at, token = heapq.heappop(timers)
            g = self._gets.get(token)
            if g is not None and g.deadline_ms == at:
                self._unblock_get(token)
                self.replies.append((token, None))
                continue
            a = self._adds.get(token)
            if a is not None and a.deadline_ms == at:
                self._adds.pop(token)
                self._add_by_job.pop(a.job_id, None)
                self.stats["noreply_timeouts"] += 1
                self._reply_add(token, DisqueError("NOREPL", NOREPL_TIMEOUT))
                j = self.jobs.get(a.job_id)
                if j is not None:
                    self._forget_key(j)
                if j is not None and j.state == WAIT_REPL:
                    j.state = ACTIVE
                    self._delete_from_cluster(j, now_ms)
        rt = self._repl_timers
        while rt and rt[0][0] <= now_ms:
            at, token = heapq.heappop(rt)
            a = self._adds.get(token)
            if a is None or a.next_repl_ms != at:
                continue
            j = self.jobs.get(a.job_id)
            if j is None or j.state != WAIT_REPL:
                continue
            # clientsCronHandleDelayedJobReplication, adapted to reliable streams: a target
            # that is no longer reachable is replaced by a new node at once (Disque adds one
            # node per 50 ms whatever the reason). Silent but reachable targets are only
            # slow (a busy loop, a queue of frames): they are asked again every second or so,
            # which covers frames dropped while a link was down, and the job grows one more
            # copy then, as Disque's would, in case the target is stuck.
            reach = self.view.reachable_peers()
            lost = sum(
                1
                for n in j.delivered
                if n != self.my_id and n not in j.confirmed and n not in reach
            )
            resend = now_ms >= a.resend_ms
            if resend:
                a.resend_ms = now_ms + REPL_RESEND_MS
                lost += 1
            if lost or resend:
                self._replicate(j, lost, now_ms, resend=resend)
            a.repl_backoff_ms = min(a.repl_backoff_ms * 2, REPL_RETRY_MAX_MS)
            a.next_repl_ms = now_ms + a.repl_backoff_ms
            heapq.heappush(rt, (a.next_repl_ms, token))

    def _cron(self, now_ms: int) -> None:
        any_blocked = False
        idle: list[str] = []
        for q in self.queues.values():
            if q.blocked:
                any_blocked = True
                self._need_jobs(q, now_ms, reached_zero=False)
            elif q.idle() and now_ms - q.atime_ms > QUEUE_IDLE_GC_MS:
                idle.append(q.name)
            if q.wanted_by:
                for node in [n for n, t in q.wanted_by.items() if t < now_ms]:
                    del q.wanted_by[node]
        for name in idle:
            del self.queues[name]
        self._next_cron_ms = now_ms + (CRON_BLOCKED_MS if any_blocked else CRON_IDLE_MS)

    # ================================================================== persistence
    def restore(self, now_ms: int, records: list[tuple[str, object]]) -> None:
        """Replay AOF records (LOADJOB/DELJOB, last wins). Jobs come back active and are
        requeued by their retry as in Disque, unless ``aof_enqueue_once`` asks to queue
        them at once (a controlled restart)."""
        loaded: dict[str, JobData] = {}
        for kind, payload in records:
            if kind == "LOADJOB":
                assert isinstance(payload, JobData)
                loaded[payload.id] = payload
            elif kind == "DELJOB":
                assert isinstance(payload, str)
                loaded.pop(payload, None)
        for d in loaded.values():
            if d.ttl_remaining_s <= now_ms:  # absolute etime in ms in the AOF
                continue
            rel = dataclasses.replace(d)
            rel.ttl_remaining_s = max(1, (d.ttl_remaining_s - now_ms) // 1000)
            j = self._job_from_data(rel, now_ms)
            j.etime_ms = d.ttl_remaining_s
            if d.beanstalk and d.beanstalk_id:
                # This node owned it: the engine's AOF has the live job under that id.
                j.flags = (j.flags | BEANSTALK_OWNED) & ~BCAST_WILLQUEUE
                j.bid = d.beanstalk_id
                j.qtime_ms = 0
                self.relinks.append(j)
            if j.ctime > self._prev_ctime and ids.node_prefix(j.id) == self.my_id[:8]:
                self._prev_ctime = j.ctime
            self._register(j)
            if self.aof_enqueue_once and j.retry_s and not j.flags & BEANSTALK_ORIGIN:
                # Never an at-most-once job: whether it was delivered is not in the AOF.
                self._enqueue(j, now_ms)
        self.aof_enqueue_once = False

    def snapshot_records(self, now_ms: int) -> list[tuple[str, object]]:
        """What a rewritten AOF holds: every active or queued job (acked ones are gone)."""
        return [
            ("LOADJOB", self._job_data(j, now_ms, absolute=True))
            for j in self.jobs.values()
            if j.state in (ACTIVE, QUEUED)
        ]


ClusterCore._handlers = {
    ReplJob: ClusterCore._on_repljob,
    GotJob: ClusterCore._on_gotjob,
    Enqueue: ClusterCore._on_enqueue,
    Queued: ClusterCore._on_queued,
    WillQueue: ClusterCore._on_willqueue,
    SetAck: ClusterCore._on_setack,
    GotAck: ClusterCore._on_gotack,
    DelJob: ClusterCore._on_deljob,
    IdemKeys: ClusterCore._on_idem_keys,
    NeedJobs: ClusterCore._on_needjobs,
    YourJobs: ClusterCore._on_yourjobs,
    Working: ClusterCore._on_working,
    Pause: ClusterCore._on_pause,
    BeanstalkUpdate: ClusterCore._on_beanstalk_update,
}
