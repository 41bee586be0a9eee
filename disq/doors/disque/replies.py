"""Shared reply encoders, names and encodings of Disque's RESP commands.

Names of queues are bytes on the wire and ``str`` in the core: they are decoded as UTF-8 with
``surrogateescape``, so any byte string round-trips. Job ids are decoded as Latin-1 (one char
per byte), so an id's length and positions are those Disque checks.
"""

from __future__ import annotations

from disq.core.disque.api import DisqueError
from disq.core.disque.job import DJob
from disq.protocol import resp

# ------------------------------------------------------------------ shared replies
OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NULL_BULK = b"$-1\r\n"
NULL_ARRAY = b"*-1\r\n"
# RESP3's null, for a connection that switched with HELLO 3: Redis sends it wherever RESP2 has
# the null bulk or the null array.
NULL3 = resp.NULL
EMPTY_ARRAY = b"*0\r\n"
SYNTAX_ERR = b"-ERR syntax error\r\n"
NOAUTH_ERR = b"-NOAUTH Authentication required.\r\n"
BADID_ERR = b"-BADID Invalid Job ID format.\r\n"
NOT_AN_INT_ERR = b"-ERR value is not an integer or out of range\r\n"
TIMEOUT_NOT_INT_ERR = b"-ERR timeout is not an integer or out of range\r\n"
TIMEOUT_NEGATIVE_ERR = b"-ERR timeout is negative\r\n"
CURSOR_ERR = b"-ERR invalid cursor or option name\r\n"  # Disque's parseScanCursorOrReply

_JOB_ID_LEN = 40
_CRLF = b"\r\n"


# ------------------------------------------------------------------ names and encodings
def queue_name(b: bytes) -> str:
    """A queue name from the wire (any bytes) as the core's ``str``; see module docstring."""
    return b.decode("utf-8", "surrogateescape")


def queue_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _id_bytes(s: str) -> bytes:
    return s.encode("latin-1")


def _bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def _err(text: str) -> bytes:
    # resp.error replaces CR/LF by spaces, as addReplyErrorFormat does.
    return resp.error(text)


def _err_arg(prefix: bytes, arg: bytes, suffix: bytes = b"") -> bytes:
    """An error quoting a client's argument as ``%s`` does: cut at a NUL, CR/LF blanked."""
    nul = arg.find(b"\0")
    if nul >= 0:
        arg = arg[:nul]
    arg = arg.replace(b"\r", b" ").replace(b"\n", b" ")
    return b"-" + prefix + arg + suffix + _CRLF


def _disque_error(exc: DisqueError) -> bytes:
    return _err(f"{exc.code} {exc.message}")


def _valid_id(b: bytes) -> bool:
    """validateJobId: length 40, ``D`` at 0, ``-`` at 1, 10 and 35; nothing more."""
    return (
        len(b) == _JOB_ID_LEN and b[0] == 0x44 and b[1] == 0x2D and b[10] == 0x2D and b[35] == 0x2D
    )


def _job_ids(args: list[bytes]) -> list[str] | None:
    """validateJobIDs: all ids are checked before any is acted on (None: one is bad)."""
    for a in args:
        if not _valid_id(a):
            return None
    return [a.decode("latin-1") for a in args]


# ------------------------------------------------------------------ jobs and key/value pairs
_COUNTERS = b"$5\r\nnacks\r\n:%d\r\n$21\r\nadditional-deliveries\r\n:%d\r\n"


def _job_entry(j: DJob, withcounters: bool, out: list[bytes], withheaders: bool = False) -> None:
    """addReplyJob: ``[queue, id, body]``, plus the counters as key/value pairs, plus (disq's
    WITHHEADERS) the job's headers as one flat array ``[k1, v1, ...]``, last, empty if none."""
    q = queue_bytes(j.queue)
    jid = _id_bytes(j.id)
    body = j.body
    n = (7 if withcounters else 3) + (1 if withheaders else 0)
    out.append(
        b"*%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n" % (n, len(q), q, len(jid), jid, len(body))
    )
    out.append(body)
    out.append(_CRLF)
    if withcounters:
        out.append(_COUNTERS % (j.nacks, j.add_deliveries))
    if withheaders:
        headers = j.headers or ()
        out.append(b"*%d\r\n" % (2 * len(headers)))
        for k, v in headers:
            out.append(_bulk(k.encode("utf-8", "surrogateescape")))
            out.append(_bulk(v))


def _jobs_reply(jobs: list[DJob], withcounters: bool, withheaders: bool = False) -> bytes:
    out = [b"*%d\r\n" % len(jobs)]
    for j in jobs:
        _job_entry(j, withcounters, out, withheaders)
    return b"".join(out)


def _value(key: str, v: object, out: list[bytes], resp3: bool) -> None:
    """One value of a SHOW / QSTAT pair, typed as Disque sends it."""
    if v is None:
        out.append(NULL3 if resp3 else NULL_BULK)
    elif isinstance(v, int):
        out.append(b":%d\r\n" % v)
    elif isinstance(v, bytes):
        out.append(_bulk(v))
    elif isinstance(v, str):
        out.append(_bulk(_id_bytes(v) if key == "id" else queue_bytes(v)))
    elif isinstance(v, list | tuple | set | frozenset):
        items = sorted(v) if isinstance(v, set | frozenset) else v
        out.append(b"*%d\r\n" % len(items))
        for item in items:  # bytes as they are: a job's header values
            out.append(_bulk(item if isinstance(item, bytes) else str(item).encode()))
    else:
        raise TypeError(f"cannot send {type(v).__name__} in a key/value reply")


def _pairs_reply(
    pairs: list[tuple[str, object]] | None, resp3: bool, null: bytes = NULL_BULK
) -> bytes:
    """A whole key/value reply (SHOW, QSTAT, SCHEDULE SHOW); ``pairs`` None: the null that
    command sends in RESP2 (``null``), RESP3's null in RESP3."""
    if pairs is None:
        return NULL3 if resp3 else null
    out: list[bytes] = []
    _pairs(pairs, out, resp3)
    return b"".join(out)


def _pairs(pairs: list[tuple[str, object]], out: list[bytes], resp3: bool = False) -> None:
    """Key/value pairs (SHOW, QSTAT): Disque's flat array, or in RESP3 the map Redis would
    send for such a reply (as HGETALL's and CONFIG GET's), with null values as ``_``."""
    out.append(resp.map_header(len(pairs)) if resp3 else b"*%d\r\n" % (2 * len(pairs)))
    for k, v in pairs:
        out.append(_bulk(k.encode()))
        _value(k, v, out, resp3)
