"""A job's one record: the bytes a REPLJOB carries and the AOF keeps (Disque's serializeJob).

Why one record: a copy is written to the AOF of the node that receives it as it arrived (with
the time it arrived, as the TTL in it is relative: clocks differ between nodes), not decoded
into one form and encoded into another, and the creator of a job encodes it once for its
peers and its own AOF. A job's fields that travel and persist are declared here, once: the
layout below. The in-memory job (disq/core/disque/job.py, ``serialize`` and
``deserialize``) keeps what a node uses; ``JobData`` (messages.py) is the decoded view that
the wire's older forms (pb ``Job``, ``ReplJobs``' columns, for a peer of an older build),
federation's YOURJOBS and the AOF's older LOADJOB records use.

RECORD  id 40s | repl u16 | ctime u64 | delay_s u32 | retry_s u32 | ttl_ms u64 |
        nacks u32 | additional_deliveries u32 | priority u32 | beanstalk u8 | bstate u8 |
        beanstalk_id u64 | n_nodes u16 | queue_len u32 | body_len u32 |
        n_nodes * 40s | queue | body | [K | key_len u16 | key]

``ttl_ms`` is what is left of the TTL when the record was made (on the wire: when it
arrives). The AOF's LOADJOB (persistence/cluster_records.py) has the same layout with the
absolute expiry (wall clock) in that field; its JOB record is the arrival time and this
record. The idempotency key trails the body: records without one end after the body.
"""

from __future__ import annotations

import struct
from typing import Final

RECORD: Final = struct.Struct("<40sHQIIQIIIBBQHII")
ID_LEN: Final = 40  # a job id, and a node id in the nodes list
_KEYLEN: Final = struct.Struct("<H")

# Where the fields sit (after the 40-byte id), read byte by byte: compiled, that costs less
# than the tuple and the fifteen ints of an unpack, which were a tenth of a replay (perf).
AT_REPL: Final = 40  # u16
AT_CTIME: Final = 42  # u64
AT_DELAY: Final = 50  # u32
AT_RETRY: Final = 54  # u32
AT_TTL: Final = 58  # u64: ms left (a record), or the wall-clock expiry (the AOF's LOADJOB)
AT_NACKS: Final = 66  # u32
AT_ADD_DELIVERIES: Final = 70  # u32
AT_PRIORITY: Final = 74  # u32
AT_BEANSTALK: Final = 78  # u8
AT_BSTATE: Final = 79  # u8
AT_BEANSTALK_ID: Final = 80  # u64
AT_NODES: Final = 88  # u16
AT_QUEUE_LEN: Final = 90  # u32
AT_BODY_LEN: Final = 94  # u32


class JobRecordError(ValueError):
    """A record whose lengths do not add up: refused whole (a peer's message, an AOF record)."""

    code = "BAD_JOB_RECORD"


def pack_record(
    job_id: str,
    queue: str,
    body: bytes,
    repl: int,
    ctime: int,
    delay_s: int,
    retry_s: int,
    ttl_ms: int,
    nacks: int,
    add_deliveries: int,
    priority: int,
    beanstalk: bool,
    bstate: int,
    beanstalk_id: int,
    nodes: list[str],
    key: str,
) -> bytes:
    """The record; JobRecordError for what it cannot hold (an id over 40 bytes, a node id
    not of 40, a number out of its field's range), rather than a record that lies."""
    raw_queue = queue.encode("utf-8", "surrogateescape")  # queue names are any bytes
    raw_id = job_id.encode()
    raw_nodes = "".join(nodes).encode()
    if len(raw_id) > ID_LEN or len(raw_nodes) != ID_LEN * len(nodes):
        raise JobRecordError("a job id has at most 40 bytes, a node id 40")
    try:
        head = RECORD.pack(
            raw_id,
            repl,
            ctime,
            delay_s,
            retry_s,
            ttl_ms,
            nacks,
            add_deliveries,
            priority,
            1 if beanstalk else 0,
            bstate,
            beanstalk_id,
            len(nodes),
            len(raw_queue),
            len(body),
        )
        trailer = key_trailer(key)
    except struct.error as exc:
        raise JobRecordError(f"job field out of range: {exc}") from exc
    return b"".join((head, raw_nodes, raw_queue, body, trailer))


def key_trailer(key: str) -> bytes:
    """The idempotency key, if any, after the body: ``K``, u16 length, the key."""
    if not key:
        return b""
    raw = key.encode("utf-8", "surrogateescape")
    return b"K" + _KEYLEN.pack(len(raw)) + raw


def decode_key_trailer(trailer: bytes) -> str:
    """The idempotency key of a record from what follows its body (not empty)."""
    if trailer[:1] != b"K" or len(trailer) < 1 + _KEYLEN.size:
        raise JobRecordError("job record has junk after the body")
    (klen,) = _KEYLEN.unpack_from(trailer, 1)
    if 1 + _KEYLEN.size + klen != len(trailer):
        raise JobRecordError("job record's idempotency key length does not match")
    return trailer[1 + _KEYLEN.size :].decode("utf-8", "surrogateescape")


def body_end(buf: bytes, p: int, end: int) -> int:
    """Where the body of the record at ``buf[p:end]`` ends (its key trailer, if any, follows):
    refuses a record too short for its fixed part or for the lengths it names."""
    if end - p < RECORD.size:
        raise JobRecordError("short job record")
    at = p + RECORD.size + ID_LEN * u16(buf, p + AT_NODES)
    at += u32(buf, p + AT_QUEUE_LEN) + u32(buf, p + AT_BODY_LEN)
    if at > end:
        raise JobRecordError("job record length does not match its fields")
    return at


def u16(buf: bytes, at: int) -> int:
    return buf[at] | buf[at + 1] << 8


def u32(buf: bytes, at: int) -> int:
    return buf[at] | buf[at + 1] << 8 | buf[at + 2] << 16 | buf[at + 3] << 24


def u64(buf: bytes, at: int) -> int:
    return u32(buf, at) | u32(buf, at + 4) << 32


def ttl_left_ms(record: bytes) -> int:
    """What is left of a record's TTL (a short record is refused by ``body_end``)."""
    if len(record) < RECORD.size:
        raise JobRecordError("short job record")
    return u64(record, AT_TTL)
