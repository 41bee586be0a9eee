"""The AOF side of the Disque core (Disque's aof.c): LOADJOB and DELJOB records, the replay of
a file at start and the records of a rewritten one.

Disque's model: a job is logged when it becomes active; an ack or an eviction logs its
deletion; acks themselves are not persisted (a restarted node re-learns them by GC).
"""

from __future__ import annotations

import dataclasses

from mypy_extensions import mypyc_attr, trait

from disq.core import ids
from disq.core.disque.job import (
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    QUEUED,
    DJob,
)
from disq.core.disque.parts import CoreParts
from disq.core.messages import JobData
from disq.persistence.cluster_records import (
    REC_DELJOB,
    REC_LOADJOB,
    IdemKeyEntry,
    KeyVoteEntry,
    encode_deljob,
    encode_loadjob,
)
from disq.persistence.framing import frame


@trait
@mypyc_attr(allow_interpreted_subclasses=True)  # DisqueCore's subclasses
class AofMixin(CoreParts):
    """The AOF records of DisqueCore."""

    def _log_job(self, j: DJob, now_ms: int) -> None:
        if self.persist:
            self.aof_out.append(self._loadjob_record(j, now_ms))

    def _log_del(self, job_id: str) -> None:
        if self.persist:
            self.aof_out.append(frame(REC_DELJOB, encode_deljob(job_id)))

    def _loadjob_record(self, j: DJob, now_ms: int) -> bytes:
        return frame(REC_LOADJOB, encode_loadjob(self._job_data(j, now_ms, absolute=True)))

    def restore(self, now_ms: int, records: list[tuple[str, object]]) -> None:
        """Replay AOF records (LOADJOB/DELJOB, last wins; IDEMKEY: the idempotency keys
        taken). Jobs come back active and are requeued by their retry as in Disque, unless
        ``aof_enqueue_once`` asks to queue them at once (a controlled restart)."""
        loaded: dict[str, JobData] = {}
        keys: list[IdemKeyEntry] = []
        votes: list[KeyVoteEntry] = []
        requeue: list[DJob] = []
        mine = self.my_id[:8]
        for kind, payload in records:
            if kind == "LOADJOB":
                assert isinstance(payload, JobData)
                loaded[payload.id] = payload
            elif kind == "DELJOB":
                assert isinstance(payload, str)
                loaded.pop(payload, None)
            elif kind == "IDEMKEY":
                assert isinstance(payload, list)
                keys.extend(payload)
            elif kind == "KEYVOTE":
                assert isinstance(payload, list)
                votes.extend(payload)
        persist, self.persist = self.persist, False  # what is replayed is logged already
        # The file's times (expiry, ctime) are wall-clock; in memory, node-clock.
        off = self.wall_offset_ms
        for d in loaded.values():
            etime_ms = d.expire_ms - off
            if etime_ms < now_ms:  # passed: expired (a deadline is due once passed)
                continue
            rel = dataclasses.replace(d)
            rel.ttl_remaining_s = max(1, (etime_ms - now_ms) // 1000)
            # This node's own jobs were logged once their add was done; a keyed one may
            # still be a candidate in its key's vote (keyvote.py): its key is done only if
            # an IDEMKEY record says so (restored below).
            own = ids.node_prefix(d.id) == mine
            j = self._job_from_data(rel, now_ms, key_done=own and not d.idempotency_key)
            j.etime_ms = etime_ms
            if j.delay_s and now_ms <= j.ctime // 1_000_000 - off + j.delay_s * 1000:
                # Still in its DELAY: its first queueing is to come, and counts nothing.
                j.flags &= ~BCAST_QUEUED
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
                requeue.append(j)
        self._restore_keys(now_ms, keys)
        self._kv_restore(now_ms, votes)
        self._kv_after_restore()
        for j in requeue:
            if j.idem_key and self.vote_keys:
                hit = self._idem.get((j.queue, j.idem_key))
                if hit is not None and (
                    hit[0] != j.id or (j.queue, j.idem_key) in self._idem_tentative
                ):
                    # Its key undecided (its RETRY asks first) or bound to another job (the
                    # copy lost: its RETRY deletes it), keyvote.py.
                    continue
            # A controlled restart puts back what was there: no delivery is counted.
            self._enqueue(j, now_ms, moved=True)
        self.aof_enqueue_once = False
        self.persist = persist

    def snapshot_records(self, now_ms: int) -> list[bytes]:
        """What a rewritten AOF holds: every active or queued job (acked ones are gone),
        and the idempotency keys in their window (their jobs may be gone)."""
        return (
            [
                self._loadjob_record(j, now_ms)
                for j in self.jobs.values()
                if j.state in (ACTIVE, QUEUED)
            ]
            + self.key_records()
            + self.vote_records(now_ms)
        )
