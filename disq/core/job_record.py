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
        [H | n u16 | n * (key_len u16 | key | value_len u16 | value)]

``ttl_ms`` is what is left of the TTL when the record was made (on the wire: when it
arrives). The AOF's LOADJOB (persistence/cluster_records.py) has the same layout with the
absolute expiry (wall clock) in that field; its JOB record is the arrival time and this
record. The optional sections trail the body, in this order, each only when the job has it:
the idempotency key (``K``), then the headers (``H``, in the order the add gave them). A
record without them ends after the body, so records written before a section existed read
as they always did; an older build refuses a section it does not know (the record whole), so
a peer's link strips the headers for a build that does not announce them (peer_wire.py).

Headers: at most HEADERS_MAX pairs, a key of 1..HEADER_KEY_MAX_BYTES bytes of UTF-8 (the gRPC
API's map has string keys), values any bytes, keys and values at most HEADERS_MAX_BYTES in
all (so every length fits its u16), no key twice. The doors refuse more (``headers_error``);
a record is only checked to add up, so a later build may raise the bounds.
"""

from __future__ import annotations

import struct
from typing import Final

RECORD: Final = struct.Struct("<40sHQIIQIIIBBQHII")
ID_LEN: Final = 40  # a job id, and a node id in the nodes list
_KEYLEN: Final = struct.Struct("<H")

HEADERS_MAX: Final = 64  # pairs per job
HEADER_KEY_MAX_BYTES: Final = 256
HEADERS_MAX_BYTES: Final = 16384  # keys and values, all of a job's together

# A job's headers: (key, value) pairs in the add's order; None for a job without any.
Headers = tuple[tuple[str, bytes], ...]

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
    headers: Headers | None = None,
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
        if headers:
            trailer += headers_trailer(headers)
    except struct.error as exc:
        raise JobRecordError(f"job field out of range: {exc}") from exc
    return b"".join((head, raw_nodes, raw_queue, body, trailer))


def key_trailer(key: str) -> bytes:
    """The idempotency key, if any, after the body: ``K``, u16 length, the key."""
    if not key:
        return b""
    raw = key.encode("utf-8", "surrogateescape")
    return b"K" + _KEYLEN.pack(len(raw)) + raw


def headers_trailer(headers: Headers) -> bytes:
    """The headers section: ``H``, u16 count, then each key and value after its u16 length
    (struct.error for a length over 65,535: the doors' bounds keep them far under)."""
    parts = [b"H", _KEYLEN.pack(len(headers))]
    for k, v in headers:
        raw = k.encode("utf-8", "surrogateescape")
        parts += (_KEYLEN.pack(len(raw)), raw, _KEYLEN.pack(len(v)), v)
    return b"".join(parts)


def decode_trailer(trailer: bytes) -> tuple[str, Headers | None]:
    """The idempotency key ("" if none) and the headers (None if none) of a record, from
    what follows its body (not empty); JobRecordError for anything else there."""
    key = ""
    at = 0
    n = len(trailer)
    if trailer[:1] == b"K":
        if n < 1 + _KEYLEN.size:
            raise JobRecordError("job record's idempotency key length does not match")
        at = 1 + _KEYLEN.size + u16(trailer, 1)
        if at > n:
            raise JobRecordError("job record's idempotency key length does not match")
        key = trailer[1 + _KEYLEN.size : at].decode("utf-8", "surrogateescape")
        if at == n:
            return key, None
    if trailer[at : at + 1] != b"H" or n - at < 1 + _KEYLEN.size:
        raise JobRecordError("job record has junk after the body")
    count = u16(trailer, at + 1)
    at += 1 + _KEYLEN.size
    pairs: list[tuple[str, bytes]] = []
    for _ in range(count):
        if n - at < _KEYLEN.size:
            break
        kend = at + _KEYLEN.size + u16(trailer, at)
        if n - kend < _KEYLEN.size:
            break
        vend = kend + _KEYLEN.size + u16(trailer, kend)
        if vend > n:
            break
        k = trailer[at + _KEYLEN.size : kend].decode("utf-8", "surrogateescape")
        pairs.append((k, trailer[kend + _KEYLEN.size : vend]))
        at = vend
    if len(pairs) != count or at != n:
        raise JobRecordError("job record's headers do not add up")
    return key, tuple(pairs) if pairs else None


def without_headers(record: bytes) -> bytes:
    """The record as a build without the headers section reads it: that section cut (the
    sections' order puts it last). A record without headers is returned as it is."""
    end = len(record)
    at = body_end(record, 0, end)
    if at < end and record[at : at + 1] == b"K" and end - at >= 1 + _KEYLEN.size:
        at += 1 + _KEYLEN.size + u16(record, at + 1)
    if at < end and record[at : at + 1] == b"H":
        return record[:at]
    return record


def headers_error(headers: Headers) -> str:
    """Why the doors refuse an add's headers ("" if they are fine), with the bounds named."""
    if len(headers) > HEADERS_MAX:
        return f"HEADERS count must be between 0 and {HEADERS_MAX}"
    total = 0
    seen: set[str] = set()
    for k, v in headers:
        try:
            raw = k.encode("utf-8")
        except UnicodeEncodeError:
            return "HEADERS key is not valid UTF-8"
        if not 0 < len(raw) <= HEADER_KEY_MAX_BYTES:
            return f"HEADERS key must have 1 to {HEADER_KEY_MAX_BYTES} bytes"
        if k in seen:
            return "HEADERS key given twice"
        seen.add(k)
        total += len(raw) + len(v)
    if total > HEADERS_MAX_BYTES:
        return f"HEADERS keys and values exceed {HEADERS_MAX_BYTES} bytes"
    return ""


def headers_bytes(headers: Headers | None) -> int:
    """What a job's headers add to its memory estimate (maxmemory): their bytes, about 160
    bytes of objects per pair (a tuple, a str, a bytes) and 200 for the job's larger rare part
    and the outer tuple (CPython 3.11)."""
    if not headers:
        return 0
    return 200 + sum(len(k) + len(v) + 160 for k, v in headers)


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
