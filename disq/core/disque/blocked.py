"""Blocked clients (Disque's blocked.c, with the client side of job.c and queue.c): GETJOB
waiting for a job, ADDJOB waiting for its copies, their time-outs, their disconnects, and the
delayed replication of a slow synchronous ADDJOB (clientsCronHandleDelayedJobReplication).

A blocked command returned PENDING under a token; its answer goes to ``replies`` as
``(token, DeferredResult)``. The ADDJOBs that repeat an idempotency key while the first add
still waits (the "followers" of that "leader") get the leader's answer.

A component of the core (``core.blocked``): it owns the blocked commands, their timers and the
followers; the timers of idempotency and of the key votes share its client-timer heap (one
deadline for the core to report). What it does to jobs and messages goes through the core,
the :class:`BlockedHost` it is given.
"""

from __future__ import annotations

import heapq
from typing import Protocol

from disq.core.disque.api import NOREPL_TIMEOUT, DeferredResult, DisqueError
from disq.core.disque.host import CoreHost
from disq.core.disque.job import ACTIVE, WAIT_REPL, DJob
from disq.core.disque.queue import DQueue
from disq.core.disque.state import IDEM_TIMER, KV_TIMER, REPL_RESEND_MIN_MS, AddWait, GetWait
from disq.core.messages import ReplJob
from disq.core.timers import pop_due

REPL_RETRY_MIN_MS = 50  # first check for lost targets of a slow sync ADDJOB
REPL_RETRY_MAX_MS = 1000
# Silent targets are asked again (REPLJOB) at 250 ms, 500 ms and 1 s, then every second:
# soon enough that an add made while links come up (a node just restarted: its peers count as
# reachable at once, but frames to a link not yet up are dropped) completes within about a
# second; rare enough that under load re-sent bodies do not saturate the links. The first gap,
# REPL_RESEND_MIN_MS, is in state.py beside AddWait, whose default it is.
REPL_RESEND_MS = 1000


class KeyForgetter(Protocol):
    """What the blocked adds need of the idempotency keys (idempotency.py's KeyTable)."""

    def forget_key(self, j: DJob, now_ms: int | None = None) -> None: ...


class Replicator(Protocol):
    """What the blocked adds need of replication (replication.py's Replication, which
    imports this module)."""

    def replicate(self, j: DJob, count: int, now_ms: int, resend: bool = True) -> bytes: ...


class BlockedHost(CoreHost, Protocol):
    """What the blocked clients need of the core."""

    @property
    def keys(self) -> KeyForgetter: ...
    @property
    def replication(self) -> Replicator: ...
    def _fetch(self, q: DQueue, now_ms: int) -> DJob | None: ...
    def _copies_needed(self, j: DJob) -> int: ...
    def _timer_due(self, token: int, at_ms: int, now_ms: int) -> None: ...


class BlockedClients:
    """The blocked commands of the core: ADDJOBs waiting for copies, GETJOBs for jobs."""

    def __init__(self, host: BlockedHost) -> None:
        self.host = host
        self.adds: dict[int, AddWait] = {}  # token -> blocked ADDJOB
        self.add_by_job: dict[str, int] = {}
        self.gets: dict[int, GetWait] = {}  # token -> blocked GETJOB
        self.client_timers: list[tuple[int, int]] = []  # (deadline_ms, token), lazy
        self.repl_timers: list[tuple[int, int]] = []  # (next_repl_ms, token), lazy
        # ADDJOBs that repeated a waiting add's idempotency key get its answer.
        self.followers: dict[int, list[int]] = {}  # leader token -> follower tokens
        self.follower_of: dict[int, int] = {}

    def count(self) -> int:
        return len(self.gets) + len(self.adds)

    def next_deadline_ms(self, nxt: int) -> int:
        """The earlier of ``nxt`` and when :meth:`process` must run."""
        timers = self.client_timers
        if timers and timers[0][0] < nxt:
            nxt = timers[0][0] + 1  # due once passed (disq/core/timers.py)
        if self.repl_timers and self.repl_timers[0][0] < nxt:
            nxt = self.repl_timers[0][0]
        return nxt

    def arm(self, at_ms: int, token: int) -> None:
        """A client timer at ``at_ms`` (``IDEM_TIMER``, ``KV_TIMER``: their parts' timers)."""
        heapq.heappush(self.client_timers, (at_ms, token))

    # ------------------------------------------------------------------ ADDJOB
    def wait_for_copies(self, token: int, job_id: str, deadline_ms: int, now_ms: int) -> None:
        """Block the ADDJOB ``token`` until ``job_id`` has its copies, or until ``deadline_ms``
        (0: forever); more copies are asked for meanwhile (:meth:`process`)."""
        backoff = REPL_RETRY_MIN_MS
        wait = AddWait(job_id, deadline_ms, now_ms + backoff, backoff, now_ms + REPL_RESEND_MIN_MS)
        self._track_add(token, wait)

    def _track_add(self, token: int, wait: AddWait) -> None:
        self.adds[token] = wait
        self.add_by_job[wait.job_id] = token
        heapq.heappush(self.repl_timers, (wait.next_repl_ms, token))
        if wait.deadline_ms:
            heapq.heappush(self.client_timers, (wait.deadline_ms, token))

    def reply_add(self, token: int, result: DeferredResult) -> None:
        """A sync ADDJOB's answer, for it and for every ADDJOB that repeated its key."""
        replies = self.host.replies
        replies.append((token, result))
        for f in self.followers.pop(token, ()):
            self.follower_of.pop(f, None)
            replies.append((f, result))

    def take_add(self, job_id: str) -> tuple[list[int], int]:
        """The ADDJOB waiting for ``job_id`` stops waiting: its token and its followers'
        (the leader first; none when no add waits) and its deadline (0: none), for the
        caller to answer."""
        token = self.add_by_job.pop(job_id, None)
        if token is None:
            return [], 0
        a = self.adds.pop(token, None)
        tokens = [token, *self.followers.pop(token, ())]
        for f in tokens[1:]:
            self.follower_of.pop(f, None)
        return tokens, a.deadline_ms if a is not None else 0

    def answer_add_of(self, job_id: str, result: DeferredResult) -> None:
        """The ADDJOB waiting for ``job_id``, if any, is answered ``result`` (its followers
        too) and stops waiting."""
        tokens, _ = self.take_add(job_id)
        self.host.replies.extend((t, result) for t in tokens)

    def follow(self, leader: int, token: int) -> None:
        """The ADDJOB ``token`` repeated the key of the waiting ``leader``: same answer."""
        self.followers.setdefault(leader, []).append(token)
        self.follower_of[token] = leader

    def cancel(self, token: int) -> None:
        """The client of ``token`` went away (the core's ``cancel`` asks the keyed adds
        first)."""
        leader = self.follower_of.pop(token, None)
        if leader is not None:
            rest = self.followers.get(leader, [])
            if token in rest:
                rest.remove(token)
            return
        followers = self.followers.pop(token, None)
        if followers and token in self.adds:
            # The first add's client is gone but others wait for the same job: the first
            # of them takes its place, and the job lives on.
            heir = followers.pop(0)
            self.follower_of.pop(heir, None)
            self._track_add(heir, self.adds.pop(token))
            if followers:
                self.followers[heir] = followers
                for f in followers:
                    self.follower_of[f] = heir
            return
        self.unblock_get(token)
        a = self.adds.pop(token, None)
        if a is not None:
            self.add_by_job.pop(a.job_id, None)
            host = self.host
            j = host.jobs.get(a.job_id)
            if j is not None and j.state == WAIT_REPL:
                # unblockClientWaitingJobRepl: nobody will learn the id, so delete it.
                host.keys.forget_key(j)
                j.state = ACTIVE
                host._broadcast_del(j)
                host._forget(j)

    def reset(self) -> None:
        """FLUSHALL: nothing waits any more (flush.py answered them)."""
        self.adds.clear()
        self.add_by_job.clear()
        self.followers.clear()
        self.follower_of.clear()
        self.gets.clear()
        self.client_timers.clear()
        self.repl_timers.clear()

    # ------------------------------------------------------------------ GETJOB
    def block_get(self, token: int, queues: list[str], deadline_ms: int) -> None:
        """The GETJOB ``token`` waits on ``queues`` (the core adds it to their ``blocked``)."""
        self.gets[token] = GetWait(queues, deadline_ms)
        if deadline_ms:
            heapq.heappush(self.client_timers, (deadline_ms, token))

    def serve(self, q: DQueue, now_ms: int) -> None:
        """Jobs queued in ``q`` go to the GETJOBs blocked on it, in their order."""
        host = self.host
        while q.blocked and q.skiplist and not q.paused_out:
            token = next(iter(q.blocked))
            self.unblock_get(token)
            j = host._fetch(q, now_ms)
            if j is not None:
                host.replies.append((token, [j]))

    def unblock_get(self, token: int) -> None:
        g = self.gets.pop(token, None)
        if g is None:
            return
        queues = self.host.queues
        for name in g.queues:
            q = queues.get(name)
            if q is not None:
                q.blocked.pop(token, None)

    # ------------------------------------------------------------------ time
    def peer_link_up(self, now_ms: int, node_id: str) -> None:
        """Our link to ``node_id`` came up (it restarted, or we did, or a partition healed).
        Frames sent while it was down were dropped, so the waiting adds that count on a copy
        there ask for it now: the add completes within a round trip of the node's return
        rather than at the next resend, up to a second later (Disque's bus reconnects every
        100 ms and its next REPLJOB goes out on the new link)."""
        host = self.host
        for a in self.adds.values():
            j = host.jobs.get(a.job_id)
            if (
                j is None
                or j.state != WAIT_REPL
                or node_id not in j.delivered
                or node_id in j.confirmed
            ):
                continue
            host._send(node_id, ReplJob(host._copy_record(j, now_ms)))

    def process(self, now_ms: int) -> None:
        host = self.host
        timers = self.client_timers
        while timers and timers[0][0] < now_ms:  # due once passed (disq/core/timers.py)
            at, token = heapq.heappop(timers)
            if token == IDEM_TIMER or token == KV_TIMER:  # the keys' and the votes' timers
                host._timer_due(token, at, now_ms)
                continue
            g = self.gets.get(token)
            if g is not None and g.deadline_ms == at:
                self.unblock_get(token)
                host.replies.append((token, None))
                continue
            a = self.adds.get(token)
            if a is not None and a.deadline_ms == at:
                self.adds.pop(token)
                self.add_by_job.pop(a.job_id, None)
                host.stats["noreply_timeouts"] += 1
                self.reply_add(token, DisqueError("NOREPL", NOREPL_TIMEOUT))
                j = host.jobs.get(a.job_id)
                if j is not None:
                    host.keys.forget_key(j, now_ms)
                if j is not None and j.state == WAIT_REPL:
                    j.state = ACTIVE
                    host._delete_from_cluster(j, now_ms)
        rt = self.repl_timers
        for at, token in pop_due(rt, now_ms):
            a = self.adds.get(token)
            if a is None or a.next_repl_ms != at:
                continue
            j = host.jobs.get(a.job_id)
            if j is None or j.state != WAIT_REPL:
                continue
            # clientsCronHandleDelayedJobReplication, adapted to reliable streams. Reachable
            # means what Disque means (not PFAIL/FAIL: not DEAD here), whatever the links.
            # - Targets that are no longer reachable are replaced by new nodes at once, as
            #   many as the copies that have no reachable candidate left (Disque adds one node
            #   per 50 ms whatever the reason).
            # - Every target that has not confirmed is asked again (REPLJOB) at 250 ms,
            #   500 ms and 1 s, then every second until the ms-timeout, unreachable ones and
            #   ones that came back included: frames to a link that is down are dropped, so
            #   this is what reaches a target once its link is up again. The job grows one
            #   more copy then too, as Disque's would, in case a target is stuck; a node that
            #   came back (reachable again) is a candidate for it.
            reach = set(host.view.reachable_peers())
            me = host.view.my_id
            live = sum(1 for n in j.delivered if n != me and n not in j.confirmed and n in reach)
            missing = max(0, host._copies_needed(j) - len(j.confirmed) - live)
            resend = now_ms >= a.resend_ms
            if resend:
                a.resend_ms = now_ms + a.resend_every_ms
                a.resend_every_ms = min(a.resend_every_ms * 2, REPL_RESEND_MS)
                missing += 1
            if missing or resend:
                host.replication.replicate(j, missing, now_ms, resend=resend)
            a.repl_backoff_ms = min(a.repl_backoff_ms * 2, REPL_RETRY_MAX_MS)
            # The next check is never later than the next resend (the doubling checks alone
            # would come at 50, 150, 350, 750, 1550 ms and miss the resend times).
            a.next_repl_ms = min(now_ms + a.repl_backoff_ms, a.resend_ms)
            heapq.heappush(rt, (a.next_repl_ms, token))
