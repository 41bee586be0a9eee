"""AOF payloads of cluster (Disque) jobs, beside the beanstalk records of ``records``.

Disque's model (reference 2.6): a job is logged once it is active here (LOADJOB: the whole
job, expiry absolute) and its end is logged as DELJOB (expiry, delete, the end of its ack's
GC). An ack this node answered, or a beanstalk delete of a replicated job, is logged as
ACKJOB (as Disque's AOF keeps an acked job): after a power loss the node still knows the job
is acked, answers the holders' WILLQUEUE with SETACK and finishes the GC, so the copies that
missed the SETACK are not queued again. Acks learned from a SETACK are logged as DELJOB: the
acker keeps the ack. Replaying a LOADJOB twice or a DELJOB for an unknown id is harmless, so
the incremental rewrite can interleave snapshot and live records.

JOB      written_ms u64 (wall clock) | the job's record (disq/core/job_record.py): what a
         REPLJOB carries, kept as it arrived; its TTL left counts from ``written_ms``
LOADJOB  (files of older builds, read only) the record's layout with the wall-clock expiry
         in place of the TTL left
DELJOB   id 40s
ACKJOB   id 40s | etime_ms u64 (wall clock): acked here; the holders are the LOADJOB's before
         it, or unknown (every node is asked, as for a dummy ack)
IDEMKEY  n u32 | n * (until_ms u64 | id_len u8 | queue_len u32 | key_len u16 | id | queue |
         key): idempotency keys taken (the node's own once their add is done, and the keys
         it learned from its peers), kept for their window even after their job is gone
KEYVOTE  n u32 | n * (until_ms u64 | promised u64 | accepted u64 | pnode_len u8 |
         anode_len u8 | id_len u8 | queue_len u32 | key_len u16 | pnode | anode | id |
         queue | key): an acceptor's state in the vote on a key (keyvote.py), written before
         its PROMISE or ACCEPTED leaves; a later record of the same key wins, an IDEMKEY
         (the key decided) ends it
RESULT   expire_ms u64 (wall clock) | id_len u8 | id | value: a job's result kept here
         (disq/core/disque/results.py); a later one of the same id replaces it
RESULTDEL id: the result deleted (RESULT DEL); expiry needs none, the replay skips it
"""

from __future__ import annotations

import struct

from disq.core.job_record import AT_TTL, ID_LEN, JobRecordError
from disq.core.messages import JobData, data_of, record_of

REC_LOADJOB = 16
REC_DELJOB = 17
REC_IDEMKEY = 18
REC_KEYVOTE = 19
REC_ACKJOB = 23
REC_JOB = 24
REC_RESULT = 25
REC_RESULTDEL = 26
CLUSTER_RECORD_TYPES = (
    REC_LOADJOB,
    REC_DELJOB,
    REC_IDEMKEY,
    REC_KEYVOTE,
    REC_ACKJOB,
    REC_JOB,
    REC_RESULT,
    REC_RESULTDEL,
)
# The records of jobs: many, so a restart leaves them in the file's buffer and the core
# decodes them in place (aof_reader's ``by_offset``, disq/core/disque/aof.py).
JOB_RECORD_TYPES = (REC_LOADJOB, REC_DELJOB, REC_ACKJOB, REC_JOB)

# An IDEMKEY entry: (queue, key, job id, until_ms).
IdemKeyEntry = tuple[str, str, str, int]
# A KEYVOTE entry: (queue, key, promised ballot, its node, accepted ballot, its node,
# accepted job id ("" none), until_ms).
KeyVoteEntry = tuple[str, str, int, str, int, str, str, int]

_U64 = struct.Struct("<Q")
_AT_TTL = AT_TTL
JOB_ID_LEN = ID_LEN  # LOADJOB, JOB (after its time), DELJOB and ACKJOB start with the job id
_DEL = struct.Struct("<40s")
_ACK = struct.Struct("<40sQ")
ACKJOB_SIZE = _ACK.size
_IDEM_N = struct.Struct("<I")
_IDEM = struct.Struct("<QBIH")
_VOTE = struct.Struct("<QQQBBBIH")
_RESULT = struct.Struct("<QB")


class ClusterRecordError(ValueError):
    code = "AOF_BAD_RECORD"


def encode_loadjob(d: JobData) -> bytes:
    """An older build's LOADJOB (the tests' files of older builds): ``d.expire_ms`` is its
    absolute expiry, where a record has its TTL left."""
    record = record_of(d)
    return record[:_AT_TTL] + _U64.pack(d.expire_ms) + record[_AT_TTL + 8 :]


def decode_loadjob(payload: bytes) -> JobData:
    """An older build's LOADJOB: the record's layout, the wall-clock expiry in its TTL."""
    try:
        return data_of(payload, 0, _U64.unpack_from(payload, _AT_TTL)[0])
    except (JobRecordError, struct.error, IndexError) as exc:
        raise ClusterRecordError(f"bad LOADJOB record: {exc}") from exc


def job_stamp(written_ms: int) -> bytes:
    """A JOB record's head: when it was written (wall clock)."""
    return _U64.pack(written_ms)


def decode_job(payload: bytes) -> JobData:
    """A JOB record as JobData, its expiry absolute (wall clock) as a LOADJOB's."""
    try:
        written_ms = _U64.unpack_from(payload, 0)[0]
        ttl_ms = _U64.unpack_from(payload, 8 + _AT_TTL)[0]
        return data_of(payload, 8, written_ms + ttl_ms)
    except (JobRecordError, struct.error, IndexError) as exc:
        raise ClusterRecordError(f"bad JOB record: {exc}") from exc


def encode_deljob(job_id: str) -> bytes:
    return _DEL.pack(job_id.encode())


def encode_ackjob(job_id: str, etime_wall_ms: int) -> bytes:
    return _ACK.pack(job_id.encode(), etime_wall_ms)


def decode_ackjob(payload: bytes | memoryview) -> tuple[str, int]:
    """(job id, expiry in wall-clock ms)."""
    if len(payload) != _ACK.size:
        raise ClusterRecordError("ACKJOB record has the wrong length")
    raw, etime_ms = _ACK.unpack_from(payload, 0)
    return bytes(raw).decode(), etime_ms


def decode_deljob(payload: bytes | memoryview) -> str:
    if len(payload) != _DEL.size:
        raise ClusterRecordError("DELJOB record has the wrong length")
    return bytes(_DEL.unpack_from(payload, 0)[0]).decode()


def encode_result(job_id: str, expire_wall_ms: int, value: bytes) -> bytes:
    i = job_id.encode()
    return _RESULT.pack(expire_wall_ms, len(i)) + i + value


def decode_result(payload: bytes | memoryview) -> tuple[str, int, bytes]:
    """(job id, expiry in wall-clock ms, value)."""
    raw = bytes(payload)
    try:
        expire_ms, ilen = _RESULT.unpack_from(raw, 0)
        start = _RESULT.size
        if start + ilen > len(raw):
            raise ClusterRecordError("RESULT record shorter than its id")
        return raw[start : start + ilen].decode(), expire_ms, raw[start + ilen :]
    except (struct.error, UnicodeDecodeError) as exc:
        raise ClusterRecordError(f"bad RESULT record: {exc}") from exc


def encode_resultdel(job_id: str) -> bytes:
    return job_id.encode()


def decode_resultdel(payload: bytes | memoryview) -> str:
    try:
        return bytes(payload).decode()
    except UnicodeDecodeError as exc:
        raise ClusterRecordError(f"bad RESULTDEL record: {exc}") from exc


def encode_idemkeys(entries: list[IdemKeyEntry]) -> bytes:
    parts = [_IDEM_N.pack(len(entries))]
    for queue, key, job_id, until in entries:
        q = queue.encode("utf-8", "surrogateescape")
        k = key.encode("utf-8", "surrogateescape")
        i = job_id.encode()
        parts.append(_IDEM.pack(until, len(i), len(q), len(k)) + i + q + k)
    return b"".join(parts)


def decode_idemkeys(payload: bytes | memoryview) -> list[IdemKeyEntry]:
    raw = bytes(payload)
    try:
        (n,) = _IDEM_N.unpack_from(raw, 0)
        pos = _IDEM_N.size
        out: list[IdemKeyEntry] = []
        for _ in range(n):
            until, ilen, qlen, klen = _IDEM.unpack_from(raw, pos)
            pos += _IDEM.size
            end = pos + ilen + qlen + klen
            if end > len(raw):
                raise ClusterRecordError("IDEMKEY record length does not match its fields")
            job_id = raw[pos : pos + ilen].decode()
            queue = raw[pos + ilen : pos + ilen + qlen].decode("utf-8", "surrogateescape")
            key = raw[pos + ilen + qlen : end].decode("utf-8", "surrogateescape")
            out.append((queue, key, job_id, until))
            pos = end
    except (struct.error, UnicodeDecodeError) as exc:
        raise ClusterRecordError(f"bad IDEMKEY record: {exc}") from exc
    if pos != len(raw):
        raise ClusterRecordError("IDEMKEY record has junk after its entries")
    return out


def encode_keyvotes(entries: list[KeyVoteEntry]) -> bytes:
    parts = [_IDEM_N.pack(len(entries))]
    for queue, key, promised, pnode, accepted, anode, job_id, until in entries:
        q = queue.encode("utf-8", "surrogateescape")
        k = key.encode("utf-8", "surrogateescape")
        pn, an, i = pnode.encode(), anode.encode(), job_id.encode()
        parts.append(
            _VOTE.pack(until, promised, accepted, len(pn), len(an), len(i), len(q), len(k))
            + pn
            + an
            + i
            + q
            + k
        )
    return b"".join(parts)


def decode_keyvotes(payload: bytes | memoryview) -> list[KeyVoteEntry]:
    raw = bytes(payload)
    try:
        (n,) = _IDEM_N.unpack_from(raw, 0)
        pos = _IDEM_N.size
        out: list[KeyVoteEntry] = []
        for _ in range(n):
            until, promised, accepted, pl, al, il, ql, kl = _VOTE.unpack_from(raw, pos)
            pos += _VOTE.size
            cuts = [pos]
            for size in (pl, al, il, ql, kl):
                cuts.append(cuts[-1] + size)
            if cuts[-1] > len(raw):
                raise ClusterRecordError("KEYVOTE record length does not match its fields")
            pnode, anode, job_id = (raw[cuts[i] : cuts[i + 1]].decode() for i in range(3))
            queue = raw[cuts[3] : cuts[4]].decode("utf-8", "surrogateescape")
            key = raw[cuts[4] : cuts[5]].decode("utf-8", "surrogateescape")
            out.append((queue, key, promised, pnode, accepted, anode, job_id, until))
            pos = cuts[-1]
    except (struct.error, UnicodeDecodeError) as exc:
        raise ClusterRecordError(f"bad KEYVOTE record: {exc}") from exc
    if pos != len(raw):
        raise ClusterRecordError("KEYVOTE record has junk after its entries")
    return out


def to_core_records(recs: list[tuple[int, bytes]]) -> list[tuple[str, object]]:
    """The cluster records of a replayed AOF, in file order (LOADJOB: a JobData; DELJOB and
    ACKJOB: the job id; IDEMKEY, KEYVOTE: their entries)."""
    out: list[tuple[str, object]] = []
    for rtype, payload in recs:
        if rtype == REC_JOB:
            out.append(("LOADJOB", decode_job(payload)))
        elif rtype == REC_LOADJOB:
            out.append(("LOADJOB", decode_loadjob(payload)))
        elif rtype == REC_DELJOB:
            out.append(("DELJOB", decode_deljob(payload)))
        elif rtype == REC_ACKJOB:
            out.append(("ACKJOB", decode_ackjob(payload)[0]))  # an acked copy: not deliverable
        elif rtype == REC_IDEMKEY:
            out.append(("IDEMKEY", decode_idemkeys(payload)))
        elif rtype == REC_KEYVOTE:
            out.append(("KEYVOTE", decode_keyvotes(payload)))
    return out
