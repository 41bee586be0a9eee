"""The AOF side of the Disque core (Disque's aof.c): the replay of a file at start and the
records of a rewritten one (persistence/cluster_records.py has the record formats).

Disque's model: a job is logged when it becomes active (LOADJOB); an eviction, a delete or the
end of an ack's GC logs its deletion (DELJOB). disq also logs an ack this node answered
(ACKJOB, ack.py), so a power loss does not undo it. The core writes the records as it goes
(``core._log_job``, ``core._log_del``); this component reads them back (``core.aof``).
"""

from __future__ import annotations

import heapq
from typing import Protocol

from disq.core.constants import JOB_OVERHEAD_BYTES
from disq.core.disque.ack import ackjob_record
from disq.core.disque.bridge import BeanstalkBridge
from disq.core.disque.counts import QueueCounts
from disq.core.disque.host import CoreHost
from disq.core.disque.idempotency import KeyTable
from disq.core.disque.job import (
    ACK_LOGGED,
    ACKED,
    ACTIVE,
    AWAITS_DELAY,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    BEANSTALK_ORIGIN,
    BEANSTALK_OWNED,
    NO_NODES,
    WAIT_REPL,
    AwakeEntry,
    DJob,
    deserialize,
    serialize,
)
from disq.core.disque.keyvote import KeyVoting
from disq.core.disque.memory import MemoryLevels
from disq.core.disque.results import Results
from disq.core.job_record import AT_TTL, ID_LEN, RECORD, JobRecordError, u32, u64
from disq.persistence.cluster_records import (
    ACKJOB_SIZE,
    JOB_RECORD_TYPES,
    REC_ACKJOB,
    REC_IDEMKEY,
    REC_JOB,
    REC_KEYVOTE,
    REC_LOADJOB,
    ClusterRecordError,
    IdemKeyEntry,
    KeyVoteEntry,
    decode_idemkeys,
    decode_keyvotes,
    job_stamp,
)
from disq.persistence.framing import frame


class AofHost(CoreHost, Protocol):
    """What the replay and the rewrite need of the core beyond its job table."""

    counts: QueueCounts
    keys: KeyTable
    votes: KeyVoting
    vote_keys: bool
    bridge: BeanstalkBridge
    memory: MemoryLevels
    results: Results
    aof_enqueue_once: bool
    _prev_ctime: int
    _awake: list[AwakeEntry]

    def _jitter(self) -> int: ...
    def _awake_time(self, j: DJob) -> int: ...
    def _only_me(self) -> frozenset[str]: ...


class JobLog:
    """The replay and the rewrite of the core's records (``core.aof``): no state of its own."""

    def __init__(self, host: AofHost) -> None:
        self.host = host

    def job_record(self, j: DJob, now_ms: int) -> bytes:
        """The JOB record of ``j`` as this node's AOF keeps it (its beanstalk alias too)."""
        return self.job_frame(serialize(j, max(1, j.etime_ms - now_ms), j.bid), now_ms)

    def job_frame(self, record: bytes, now_ms: int) -> bytes:
        """A job's record (a peer's REPLJOB as it arrived, or this node's) in the AOF: the
        wall-clock time it is written, from which its relative TTL counts, then the record."""
        return frame(REC_JOB, job_stamp(now_ms + self.host.wall_offset_ms) + record)

    def restore(
        self,
        now_ms: int,
        records: list[tuple[int, bytes]],
        buf: bytes = b"",
        offsets: list[int] | None = None,
    ) -> None:
        """Replay AOF records (LOADJOB/DELJOB, last wins; IDEMKEY: the idempotency keys
        taken; KEYVOTE: this acceptor's votes). Jobs come back active and are requeued by
        their retry as in Disque, unless ``aof_enqueue_once`` asks to queue them at once
        (a controlled restart).

        ``records`` are ``(type, payload)``; other types than the core's are skipped. The
        node's reader leaves the LOADJOB and DELJOB records in the file's buffer ``buf``
        and gives where each starts (``offsets``, file order); without ``offsets`` they are
        taken from ``records``. Restart time is a target (docs/benchmarks.md "A large replay"):
        the jobs are decoded once, in place, straight into their DJob (no JobData), only
        those whose last record is a LOADJOB, and their timers heapified at once.
        """
        host = self.host
        if offsets is None:
            buf, offsets = _frame_jobs(records)
        keys: list[IdemKeyEntry] = []
        votes: list[KeyVoteEntry] = []
        for rtype, payload in records:
            if rtype == REC_IDEMKEY:
                keys.extend(decode_idemkeys(payload))
            elif rtype == REC_KEYVOTE:
                votes.extend(decode_keyvotes(payload))
        persist, host.persist = host.persist, False  # what is replayed is logged already
        requeue = self._restore_jobs(now_ms, buf, offsets)
        host.counts.rebuild(host.jobs.values())  # the job table was filled in bulk (counts.py)
        host.keys.restore_keys(now_ms, keys)
        host.votes.restore(now_ms, votes)
        host.votes.after_restore()
        host.results.restore(now_ms, records)
        for j in requeue:
            if j.idem_key and host.vote_keys:
                hit = host.keys.taken.get((j.queue, j.idem_key))
                if hit is not None and (
                    hit[0] != j.id or (j.queue, j.idem_key) in host.keys.tentative
                ):
                    # Its key undecided (its RETRY asks first) or bound to another job (the
                    # copy lost: its RETRY deletes it), keyvote.py.
                    continue
            # A controlled restart puts back what was there: no delivery is counted.
            host._enqueue(j, now_ms, moved=True)
        host.aof_enqueue_once = False
        host.persist = persist

    def _restore_jobs(self, now_ms: int, buf: bytes, offsets: list[int]) -> list[DJob]:
        """The jobs of the LOADJOB and DELJOB records at ``offsets`` in ``buf``: a DJob for
        each job whose last record is a LOADJOB not expired, as replication.py's
        ``read_copy`` and ``activate`` make one from a peer's copy. Returns those
        ``aof_enqueue_once`` queues.

        Two passes: the records in file order into a dict (a later record of a job replaces
        or drops it, as a replay in file order would), then what a restored job sets beyond
        its fields (its key, its requeue time, its timer) for the survivors only."""
        host = self.host
        me = host.my_id
        # Straight into the job table when it is empty (a start: always): a second dict of
        # a million jobs to merge cost a tenth of the replay in cache misses (perf).
        jobs = host.jobs
        loaded = jobs if not jobs else {}
        _decode_jobs(buf, offsets, me.encode(), now_ms, host.wall_offset_ms, loaded)
        if loaded is not jobs:
            jobs.update(loaded)
        mine = me[:8]
        only_me = host._only_me()
        enqueue_once = host.aof_enqueue_once
        requeue: list[DJob] = []
        awake: list[AwakeEntry] = []
        used = 0
        prev_ctime = host._prev_ctime
        no_nodes = NO_NODES  # read once (see _decode_jobs)
        origin = BEANSTALK_ORIGIN
        off = host.wall_offset_ms
        for j in loaded.values():
            delivered = j.delivered
            if j.state == ACKED:
                # Acked here before the restart (ACKJOB): its GC starts again at once. A bare
                # ACKJOB's holders are unknown (an empty set: every node is asked).
                if delivered is no_nodes:
                    j.delivered = only_me
                j.qtime_ms = now_ms
                j.awake_ms = now_ms
                awake.append(AwakeEntry(now_ms, j.id))
                continue
            if delivered is no_nodes:
                j.delivered = only_me  # shared, as add_job's REPLICATE 1 jobs share it
            else:
                j.delivered = {*delivered, me}
            if j.idem_key:
                # Its key is tentative: this node's own keyed jobs may still be candidates
                # in their key's vote (keyvote.py); an IDEMKEY record says which are done.
                host.keys.remember_key(j, now_ms, tentative=True)
            if j.retry_s:
                j.qtime_ms = now_ms + (j.delay_s + j.retry_s) * 1000 + host._jitter()
            flags = j.flags
            if j.delay_s and now_ms <= j.ctime // 1_000_000 - off + j.delay_s * 1000:
                # Still in its DELAY: its first queueing is to come, and counts nothing.
                flags = (flags & ~BCAST_QUEUED) | AWAITS_DELAY
            if flags & origin and j.bid:
                # This node owned it: the engine's AOF has the live job under that id.
                flags = (flags | BEANSTALK_OWNED) & ~BCAST_WILLQUEUE
                j.qtime_ms = 0
                host.bridge.relinks.append(j)
            j.flags = flags
            if j.ctime > prev_ctime and j.id[2:10] == mine:  # ids.node_prefix
                prev_ctime = j.ctime
            used += j.mem_bytes() - JOB_OVERHEAD_BYTES  # the body, and headers if any
            at = host._awake_time(j)
            if at:  # as _update_awake: 0 is the "no entry" a new DJob has
                j.awake_ms = at
                awake.append(AwakeEntry(at, j.id))
            if enqueue_once and j.retry_s and not flags & origin:
                # Never an at-most-once job: whether it was delivered is not in the AOF.
                requeue.append(j)
        host._prev_ctime = prev_ctime
        host.memory.used_bytes += used + JOB_OVERHEAD_BYTES * len(loaded)
        # One heapify instead of a push per job; the heap was empty, or a few entries.
        host._awake.extend(awake)
        heapq.heapify(host._awake)
        return requeue

    def snapshot_records(self, now_ms: int) -> list[bytes]:
        """What a rewritten AOF holds: every active or queued job (and a beanstalk put still
        waiting for its copies), the acks this node logged whose GC is not over, the results
        kept here, and the idempotency keys in their window (their jobs may be gone)."""
        host = self.host
        records = []
        for j in host.jobs.values():
            if j.state == ACKED:
                if j.flags & ACK_LOGGED:
                    # Its GC not over: the holders with it (a LOADJOB), then the ack.
                    if j.delivered:
                        records.append(self.job_record(j, now_ms))
                    records.append(ackjob_record(j, host.wall_offset_ms))
            elif j.state != WAIT_REPL or j.flags & BEANSTALK_OWNED:
                # A replicated beanstalk put is logged before its copies confirm (bridge.py):
                # the engine's snapshot has its job, this links the copies to it.
                records.append(self.job_record(j, now_ms))
        records += host.results.records(now_ms)
        return records + host.keys.records() + host.votes.records(now_ms)


def _frame_jobs(records: list[tuple[int, bytes]]) -> tuple[bytes, list[int]]:
    """The job records of ``records`` (LOADJOB, DELJOB, ACKJOB) framed into one buffer, and
    where each starts: what the node's reader gives (the simulator and the tests pass
    records)."""
    parts: list[bytes] = []
    offsets: list[int] = []
    pos = 0
    for rtype, payload in records:
        if rtype in JOB_RECORD_TYPES:
            rec = frame(rtype, payload)
            offsets.append(pos)
            parts.append(rec)
            pos += len(rec)
    return b"".join(parts), offsets


def _decode_jobs(
    buf: bytes, offsets: list[int], me: bytes, min_etime_ms: int, off_ms: int, out: dict[str, DJob]
) -> None:
    """Into ``out``, job id -> DJob of every job whose last record at ``offsets`` is a
    LOADJOB whose expiry (node clock: the file's wall-clock one less ``off_ms``) is not
    before ``min_etime_ms``, or an ACKJOB (then acked, without its body). A dict keeps a job
    where its first record put it, and a DELJOB (or a record of an expired job) drops it:
    the order and the state a replay in file order gives.

    Only the record's own fields: the counters, the flags they imply, and the nodes that may
    hold a copy: a set for jobs another node may hold, NO_NODES for "this node only" (``me``,
    or none: the caller shares one set for those).
    """
    fixed = RECORD.size
    # Module-level names read once: compiled, each read of another module's global is a
    # dict lookup, a dozen per job otherwise.
    loadjob = REC_LOADJOB
    job_rec = REC_JOB
    ackjob = REC_ACKJOB
    acked_state = ACKED
    ack_logged = ACK_LOGGED
    id_len = ID_LEN
    at_ttl = AT_TTL
    active = ACTIVE
    bcast_queued = BCAST_QUEUED
    beanstalk_origin = BEANSTALK_ORIGIN
    bcast_willqueue = BCAST_WILLQUEUE
    # Queue names: one str per queue, not one per job (most jobs share a few queues).
    names: dict[bytes, str] = {}
    for rec in offsets:
        ln = u32(buf, rec)
        rec_end = rec + 8 + ln
        rtype = buf[rec + 8]
        p = rec + 9
        if rtype == job_rec:
            p += 8  # the time the record was written, then the record
            if rec_end - p < fixed:
                raise ClusterRecordError(f"short JOB record at offset {rec}")
            etime_ms = u64(buf, rec + 9) + u64(buf, p + at_ttl) - off_ms
        elif rtype == loadjob:
            if rec_end - p < fixed:
                raise ClusterRecordError(f"short LOADJOB record at offset {rec}")
            etime_ms = u64(buf, p + at_ttl) - off_ms  # the wall-clock expiry
        elif rtype == ackjob:
            if ln != 1 + ACKJOB_SIZE:
                raise ClusterRecordError(f"ACKJOB record at offset {rec} has the wrong length")
            job_id = buf[p : p + id_len].decode()
            etime_ms = u64(buf, p + id_len) - off_ms
            acked = out.get(job_id)
            if etime_ms < min_etime_ms:
                if acked is not None:
                    del out[job_id]
                continue
            if acked is None:  # no LOADJOB before it: the holders are unknown
                acked = DJob(job_id, "", b"", 0, 0, 0, 0, etime_ms)
                acked.delivered = set()
                out[job_id] = acked
            acked.body = b""
            acked.state = acked_state
            acked.flags = ack_logged
            continue
        else:
            if ln != 1 + id_len:
                raise ClusterRecordError(f"DELJOB record at offset {rec} has the wrong length")
            out.pop(buf[p : p + id_len].decode(), None)
            continue
        if etime_ms < min_etime_ms:  # passed: expired (a deadline is due once passed)
            out.pop(buf[p : p + id_len].decode(), None)
            continue
        try:
            j = deserialize(buf, p, rec_end, etime_ms, names, me)
        except JobRecordError as exc:
            raise ClusterRecordError(f"job record at offset {rec}: {exc}") from exc
        j.state = active
        # The counters travel with the job. BCAST_QUEUED as Disque's REPLJOB sets it: the
        # job was (or is being) queued somewhere, so this copy's own requeue counts a
        # delivery (core.py _enqueue).
        flags = bcast_queued | (j.flags & beanstalk_origin)
        if j.retry_s:
            flags |= bcast_willqueue
        j.flags = flags
        out[j.id] = j
