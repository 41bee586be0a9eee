"""Every job and queue gone at once: Disque's flushServerData, behind DEBUG FLUSHALL and
CLUSTER RESET.

Disque frees every job (a client still waiting for a job's copies is answered -NOREPL by
unregisterJob), answers every blocked GETJOB with its timeout reply, then destroys every
queue. So does this, and it also lets go of what the jobs had the peers doing: idempotency
keys and their announcements, key votes, adds held for a key. Nothing of it can come back
by a timer: the job timers go with their jobs, and the replication and client timers find
no waiter.

The AOF: Disque logs nothing, so a reset node restarted on its AOF loads its jobs again. A
reset (``log_deletes``) logs a DELJOB for every job the file may hold, so a restart finds
none; DEBUG FLUSHALL keeps Disque's way (DEBUG LOADAOF reads the file back after it).
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr, trait

from disq.core.disque.api import NOREPL_EXPIRED, DisqueError
from disq.core.disque.job import ACK_LOGGED, ACKED, BEANSTALK_OWNED, WAIT_REPL
from disq.core.disque.parts import CoreParts


@trait
@mypyc_attr(allow_interpreted_subclasses=True)  # DisqueCore's subclasses
class FlushMixin(CoreParts):
    """DisqueCore's flushall."""

    def flushall(self, log_deletes: bool = False) -> None:
        """Forget every job and queue; every blocked client is answered."""
        gone = DisqueError("NOREPL", NOREPL_EXPIRED)
        replies = self.replies
        blocked = self.blocked
        for token in list(blocked.adds):
            blocked.reply_add(token, gone)  # and its followers
        for token in self.keys.held_retry_of:
            replies.append((token, gone))
        for h in self.keys.reruns:  # held retries released, not re-run yet
            replies.append((h.token, gone))
        for held in self.keys.held_replies.values():
            for token in held.tokens:
                replies.append((token, held.job_id))  # done: its copies existed
        for p in self.votes.prop.values():
            for token in p.tokens:
                replies.append((token, gone))
        for token in blocked.gets:
            replies.append((token, None))  # GETJOB's timeout reply, as Disque's
        log = log_deletes and self.persist
        for j in self.jobs.values():
            if log and (j.state != ACKED or j.flags & ACK_LOGGED):  # else its DELJOB is
                self._log_del(j.id)
            if j.state == WAIT_REPL and j.flags & BEANSTALK_OWNED and j.bid:
                # A replicated beanstalk put whose client is told INTERNAL_ERROR (its add
                # answered NOREPL above): its job goes, as when such an add times out.
                self.bridge.dropped.append(j.bid)
            j.awake_ms = -1
        self.jobs.clear()
        self.counts.clear()
        self.queues.clear()
        self.memory.used_bytes = 0
        self.blocked.reset()
        self._awake.clear()
        self._awake_acked.clear()
        self._one_copy.clear()
        self.gone.clear()
        self.keys.reset()
        self.votes.reset()
