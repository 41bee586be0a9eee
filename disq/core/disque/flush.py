"""Every job and queue gone at once: Disque's flushServerData, behind DEBUG FLUSHALL and
CLUSTER RESET.

Disque frees every job (a client still waiting for a job's copies is answered -NOREPL by
unregisterJob), answers every blocked GETJOB with its timeout reply, then destroys every
queue. So does this, and it also lets go of what the jobs had the peers doing: idempotency
keys and their announcements, key votes, adds held for a key; and of the results kept here
(results.py: a RESULT SET waiting is answered NOREPL, a RESULT WAIT its timeout's null).
Nothing of it can come back by a timer: the job timers go with their jobs, and the
replication and client timers find no waiter.

The AOF: Disque logs nothing, so a reset node restarted on its AOF loads its jobs again. A
reset (``log_deletes``) logs a DELJOB for every job the file may hold, so a restart finds
none; DEBUG FLUSHALL keeps Disque's way (DEBUG LOADAOF reads the file back after it).
"""

from __future__ import annotations

from typing import Protocol

from disq.core.disque.api import NOREPL_EXPIRED, DisqueError
from disq.core.disque.blocked import BlockedClients
from disq.core.disque.bridge import BeanstalkBridge
from disq.core.disque.counts import QueueCounts
from disq.core.disque.gone import GoneJobs
from disq.core.disque.host import CoreHost
from disq.core.disque.idempotency import KeyTable
from disq.core.disque.job import ACK_LOGGED, ACKED, BEANSTALK_OWNED, WAIT_REPL
from disq.core.disque.keyvote import KeyVoting
from disq.core.disque.memory import MemoryLevels
from disq.core.disque.results import Results


class FlushHost(CoreHost, Protocol):
    """Every part of the core that holds jobs, their clients or what they had peers doing."""

    blocked: BlockedClients
    keys: KeyTable
    votes: KeyVoting
    bridge: BeanstalkBridge
    counts: QueueCounts
    memory: MemoryLevels
    gone: GoneJobs
    results: Results

    def _clear_timers(self) -> None: ...


class Flush:
    """``core.flush``: it keeps no state; flushall empties the core's."""

    def __init__(self, host: FlushHost) -> None:
        self.host = host

    def flushall(self, log_deletes: bool = False) -> None:
        """Forget every job and queue; every blocked client is answered."""
        host = self.host
        gone = DisqueError("NOREPL", NOREPL_EXPIRED)
        replies = host.replies
        blocked = host.blocked
        for token in list(blocked.adds):
            blocked.reply_add(token, gone)  # and its followers
        for token in host.keys.held_retry_of:
            replies.append((token, gone))
        for h in host.keys.reruns:  # held retries released, not re-run yet
            replies.append((h.token, gone))
        for held in host.keys.held_replies.values():
            for token in held.tokens:
                replies.append((token, held.job_id))  # done: its copies existed
        for p in host.votes.prop.values():
            for token in p.tokens:
                replies.append((token, gone))
        for token in blocked.gets:
            replies.append((token, None))  # GETJOB's timeout reply, as Disque's
        log = log_deletes and host.persist
        for j in host.jobs.values():
            if log and (j.state != ACKED or j.flags & ACK_LOGGED):  # else its DELJOB is
                host._log_del(j.id)
            if j.state == WAIT_REPL and j.flags & BEANSTALK_OWNED and j.bid:
                # A replicated beanstalk put whose client is told INTERNAL_ERROR (its add
                # answered NOREPL above): its job goes, as when such an add times out.
                host.bridge.dropped.append(j.bid)
            j.awake_ms = -1
        host.jobs.clear()
        host.counts.clear()
        host.queues.clear()
        host.memory.used_bytes = 0
        host.blocked.reset()
        host._clear_timers()
        host.gone.clear()
        host.keys.reset()
        host.votes.reset()
        host.results.reset(log)
