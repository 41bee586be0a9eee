"""Blocked clients (Disque's blocked.c, with the client side of job.c and queue.c): GETJOB
waiting for a job, ADDJOB waiting for its copies, their time-outs, their disconnects, and the
delayed replication of a slow synchronous ADDJOB (clientsCronHandleDelayedJobReplication).

A blocked command returned PENDING under a token; its answer goes to ``replies`` as
``(token, DeferredResult)``. The ADDJOBs that repeat an idempotency key while the first add
still waits (the "followers" of that "leader") get the leader's answer.
"""

from __future__ import annotations

import heapq

from mypy_extensions import mypyc_attr, trait

from disq.core.disque.api import NOREPL_TIMEOUT, DeferredResult, DisqueError
from disq.core.disque.job import ACTIVE, WAIT_REPL
from disq.core.disque.parts import CoreParts
from disq.core.disque.queue import DQueue
from disq.core.disque.state import IDEM_TIMER, KV_TIMER, REPL_RESEND_MIN_MS, AddWait
from disq.core.messages import ReplJob

REPL_RETRY_MIN_MS = 50  # first check for lost targets of a slow sync ADDJOB
REPL_RETRY_MAX_MS = 1000
# Silent targets are asked again (REPLJOB) at 250 ms, 500 ms and 1 s, then every second:
# soon enough that an add made while links come up (a node just restarted: its peers count as
# reachable at once, but frames to a link not yet up are dropped) completes within about a
# second; rare enough that under load re-sent bodies do not saturate the links. The first gap,
# REPL_RESEND_MIN_MS, is in state.py beside AddWait, whose default it is.
REPL_RESEND_MS = 1000


@trait
@mypyc_attr(allow_interpreted_subclasses=True)  # DisqueCore's subclasses
class BlockedClientsMixin(CoreParts):
    """The blocked clients of DisqueCore."""

    def _wait_for_copies(self, token: int, job_id: str, deadline_ms: int, now_ms: int) -> None:
        """Block the ADDJOB ``token`` until ``job_id`` has its copies, or until ``deadline_ms``
        (0: forever); more copies are asked for meanwhile (``_process_clients``)."""
        backoff = REPL_RETRY_MIN_MS
        wait = AddWait(job_id, deadline_ms, now_ms + backoff, backoff, now_ms + REPL_RESEND_MIN_MS)
        self._track_add(token, wait)

    def _track_add(self, token: int, wait: AddWait) -> None:
        self._adds[token] = wait
        self._add_by_job[wait.job_id] = token
        heapq.heappush(self._repl_timers, (wait.next_repl_ms, token))
        if wait.deadline_ms:
            heapq.heappush(self._client_timers, (wait.deadline_ms, token))

    def _reply_add(self, token: int, result: DeferredResult) -> None:
        """A sync ADDJOB's answer, for it and for every ADDJOB that repeated its key."""
        self.replies.append((token, result))
        for f in self._followers.pop(token, ()):
            self._follower_of.pop(f, None)
            self.replies.append((f, result))

    def cancel(self, token: int) -> None:
        if self._idem_cancel(token):  # a keyed add held (idempotency.py)
            return
        if self._kv_prop and self._kv_cancel(token):  # waiting for its key's vote
            return
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
            self._track_add(heir, self._adds.pop(token))
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

    def blocked_clients(self) -> int:
        return len(self._gets) + len(self._adds)

    # ------------------------------------------------------------------ time
    def peer_link_up(self, now_ms: int, node_id: str) -> None:
        """Our link to ``node_id`` came up (it restarted, or we did, or a partition healed).
        Frames sent while it was down were dropped, so the waiting adds that count on a copy
        there ask for it now: the add completes within a round trip of the node's return
        rather than at the next resend, up to a second later (Disque's bus reconnects every
        100 ms and its next REPLJOB goes out on the new link)."""
        for a in self._adds.values():
            j = self.jobs.get(a.job_id)
            if (
                j is None
                or j.state != WAIT_REPL
                or node_id not in j.delivered
                or node_id in j.confirmed
            ):
                continue
            self._send(node_id, ReplJob(self._job_data(j, now_ms)))

    def _process_clients(self, now_ms: int) -> None:
        timers = self._client_timers
        while timers and timers[0][0] < now_ms:  # due once passed (disq/core/timers.py)
            at, token = heapq.heappop(timers)
            if token == IDEM_TIMER:
                if at == self._idem_timer_ms:
                    self._idem_timer_fire(now_ms)
                continue
            if token == KV_TIMER:
                if at == self._kv_timer_ms:
                    self._kv_timer_fire(now_ms)
                continue
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
                    self._forget_key(j, now_ms)
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
            reach = set(self.view.reachable_peers())
            live = sum(
                1 for n in j.delivered if n != self.my_id and n not in j.confirmed and n in reach
            )
            missing = max(0, self._copies_needed(j) - len(j.confirmed) - live)
            resend = now_ms >= a.resend_ms
            if resend:
                a.resend_ms = now_ms + a.resend_every_ms
                a.resend_every_ms = min(a.resend_every_ms * 2, REPL_RESEND_MS)
                missing += 1
            if missing or resend:
                self._replicate(j, missing, now_ms, resend=resend)
            a.repl_backoff_ms = min(a.repl_backoff_ms * 2, REPL_RETRY_MAX_MS)
            # The next check is never later than the next resend (the doubling checks alone
            # would come at 50, 150, 350, 750, 1550 ms and miss the resend times).
            a.next_repl_ms = min(now_ms + a.repl_backoff_ms, a.resend_ms)
            heapq.heappush(rt, (a.next_repl_ms, token))
