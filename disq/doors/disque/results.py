"""RESULT: jobs' results the cluster keeps (disq's addition; disq/core/disque/results.py).

    RESULT SET <key> <value> [TTL <s>] [REPLICATE <n>] [TIMEOUT <ms>] [ACK]
                            +OK once n nodes hold it (default min(3, nodes known), TTL one
                            day, TIMEOUT 5000 ms, 0: forever), else -NOREPL; ACK: the key
                            is a job's id, and the job is acked once the result is held
    RESULT GET <key>        the value, or a null
    RESULT WAIT <key> <timeout-ms>
                            the value once it is here, or a null at the timeout (0: forever)
    RESULT DEL <key>        :1 (deleted here; every peer deletes it too) or :0

A key is a job's id or any 1 to 255 printable ASCII bytes (a Celery task's id). Errors are
Disque's for its own commands: a bad key ``-ERR``, ACK with a key that is no job id BADID,
options as ADDJOB's, over maxmemory OOM; the value is bounded as a job's body is (the RESP
parser's bulk limit).
"""

from __future__ import annotations

from disq.core.disque.api import DeferredResult, DisqueError, Pending
from disq.core.disque.results import (
    DEFAULT_RESULT_TIMEOUT_MS,
    valid_result_key,
)
from disq.doors.disque.client import Client, Deferred
from disq.doors.disque.jobs import _ADDJOB_NUMBERS, _timeout
from disq.doors.disque.numbers import parse_ll
from disq.doors.disque.replies import (
    BADID_ERR,
    NULL3,
    NULL_BULK,
    OK,
    SYNTAX_ERR,
    _bulk,
    _disque_error,
    _err,
    _err_arg,
    _valid_id,
)

_SUBCOMMANDS = b"SET, GET, WAIT, DEL"
# A TTL in seconds, bounded so its expiry in ms fits the record's 64 bits with room.
_TTL_MAX_S = 2**32 - 1
_TTL_ERR = b"-ERR TTL must be between 1 and %d\r\n" % _TTL_MAX_S
_ARITY = {b"set": 4, b"get": 3, b"wait": 4, b"del": 3}  # the fewest arguments, name included
_KEY_ERR = b"-ERR a result key is 1 to 255 printable ASCII bytes, no space\r\n"


def _result(c: Client, argv: list[bytes], now_ms: int) -> bytes | Pending:
    sub = argv[1].lower()
    least = _ARITY.get(sub)
    if least is None:
        return _err_arg(b"ERR unknown RESULT subcommand '", argv[1], b"'. Try " + _SUBCOMMANDS)
    n = len(argv)
    if n < least or (sub != b"set" and n != least):
        return b"-ERR wrong number of arguments for 'result %s' command\r\n" % sub
    if not valid_result_key(argv[2]):
        return _KEY_ERR
    job_id = argv[2].decode("latin-1")
    core = c.node.core
    if sub == b"get":
        value = core.result_get(now_ms, job_id)
        return _null(c) if value is None else _bulk(value)
    if sub == b"del":
        return b":%d\r\n" % core.result_del(now_ms, job_id)
    if sub == b"wait":
        timeout = _timeout(argv[3])
        if isinstance(timeout, bytes):
            return timeout
        token = c.new_token()
        got = core.result_wait(now_ms, token, job_id, timeout)
        if isinstance(got, Pending):
            return c.block(token, _WAIT3 if c.protocol == 3 else _WAIT)
        return _bulk(got)
    return _set(c, argv, now_ms, job_id)


def _set(c: Client, argv: list[bytes], now_ms: int, job_id: str) -> bytes | Pending:
    ttl_s: int | None = None  # a job's: its job's TTL; any other key's: one day
    repl: int | None = None
    timeout_ms = DEFAULT_RESULT_TIMEOUT_MS
    ack = False
    n = len(argv)
    j = 4
    while j < n:
        opt = argv[j].lower()
        if opt == b"ack":
            if not _valid_id(argv[2]):
                return BADID_ERR
            ack = True
            j += 1
            continue
        if j == n - 1:
            return SYNTAX_ERR
        arg = argv[j + 1]
        if opt == b"ttl":
            v = parse_ll(arg)
            if v is None or v < 1 or v > _TTL_MAX_S:
                return _TTL_ERR
            ttl_s = v
        elif opt == b"replicate":
            low, high, error = _ADDJOB_NUMBERS[b"replicate"]
            v = parse_ll(arg)
            if v is None or v < low or v > high:
                return error
            repl = v
        elif opt == b"timeout":
            t = _timeout(arg)
            if isinstance(t, bytes):
                return t
            timeout_ms = t
        else:
            return SYNTAX_ERR
        j += 2
    full = c.node.disk_full
    if full is not None:
        return _err("OOM " + full)  # as ADDJOB: nothing stored, no room to log it
    token = c.new_token()
    r = c.node.core.result_set(now_ms, token, job_id, argv[3], ttl_s, repl, timeout_ms, ack)
    if isinstance(r, Pending):
        return c.block(token, _set_deferred)
    return OK


def _null(c: Client) -> bytes:
    return NULL3 if c.protocol == 3 else NULL_BULK


def _set_deferred(result: DeferredResult) -> bytes:
    if isinstance(result, str):
        return OK
    if isinstance(result, DisqueError):
        return _disque_error(result)
    return _err(f"ERR internal error: unexpected RESULT SET result {type(result).__name__}")


def _wait_deferred(null: bytes) -> Deferred:
    def deferred(result: DeferredResult) -> bytes:
        if isinstance(result, bytes):
            return _bulk(result)
        if isinstance(result, DisqueError):
            return _disque_error(result)
        return null  # timed out (or every result flushed)

    return deferred


_WAIT = _wait_deferred(NULL_BULK)
_WAIT3 = _wait_deferred(NULL3)
