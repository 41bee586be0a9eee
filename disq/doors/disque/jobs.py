"""Job commands: ADDJOB, GETJOB, ACKJOB, FASTACK, DELJOB, ENQUEUE, NACK, DEQUEUE, WORKING,
SHOW."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from disq.core.disque.api import AddOptions, DeferredResult, DisqueError, Pending
from disq.core.job_record import HEADERS_MAX, Headers, headers_error
from disq.doors.disque.client import Client, Deferred, Handler
from disq.doors.disque.numbers import _LLONG_MAX, parse_ll
from disq.doors.disque.replies import (
    _CRLF,
    BADID_ERR,
    NULL3,
    NULL_ARRAY,
    SYNTAX_ERR,
    TIMEOUT_NEGATIVE_ERR,
    TIMEOUT_NOT_INT_ERR,
    _disque_error,
    _err,
    _id_bytes,
    _job_ids,
    _jobs_reply,
    _pairs_reply,
    _valid_id,
    queue_name,
)

if TYPE_CHECKING:
    from disq.core.node_core import NodeCore


def _timeout(arg: bytes) -> int | bytes:
    """getTimeoutFromObjectOrReply in ms: the value, or the error reply."""
    v = parse_ll(arg)
    if v is None:
        return TIMEOUT_NOT_INT_ERR
    if v < 0:
        return TIMEOUT_NEGATIVE_ERR
    return v


# ADDJOB's numeric options: (lowest, highest, Disque's error for anything else).
_ADDJOB_NUMBERS: dict[bytes, tuple[int, int, bytes]] = {
    b"replicate": (1, 65535, b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    b"ttl": (1, _LLONG_MAX, b"-ERR TTL must be a number > 0\r\n"),
    b"retry": (0, _LLONG_MAX, b"-ERR RETRY time must be a non negative number\r\n"),
    b"delay": (0, _LLONG_MAX, b"-ERR DELAY time must be a non negative number\r\n"),
    # disq's: the delay in milliseconds (the API's delay_ms), instead of DELAY's seconds.
    b"delayms": (0, _LLONG_MAX, b"-ERR DELAYMS time must be a non negative number\r\n"),
    b"maxlen": (1, _LLONG_MAX, b"-ERR MAXLEN must be a positive number\r\n"),
}


_DELAY_EXCLUSIVE = b"-ERR DELAY and DELAYMS exclude each other\r\n"
# A producer sends the same options with every add: their parse is kept, by the exact
# arguments after the body, for unkeyed adds (a key makes every add's arguments unique).
# Bounded: cleared when full.
_ADD_OPTIONS: dict[tuple[bytes, ...], AddOptions | bytes] = {}
_ADD_OPTIONS_MAX = 256


def _add_options(argv: list[bytes]) -> tuple[AddOptions | bytes, bool]:
    """ADDJOB's options and ms-timeout, or the error reply; and whether the answer may be
    kept (no idempotency key). Options are checked before the timeout, as in addjobCommand;
    the checks that combine options (RETRY 0 with REPLICATE > 1, DELAY >= TTL) and the
    defaults are the core's, since they depend on the cluster size. Nor is an add with
    HEADERS kept: a trace id makes every add's arguments unique, as a key does."""
    numbers: dict[bytes, int] = {}  # REPLICATE, TTL, RETRY, DELAY, MAXLEN
    async_ = False
    idem_key = ""
    headers: Headers | None = None
    n = len(argv)
    j = 4
    while j < n:
        opt = argv[j].lower()
        more = j < n - 1
        rule = _ADDJOB_NUMBERS.get(opt)
        if rule is not None and more:
            low, high, error = rule
            v = parse_ll(argv[j + 1])
            if v is None or v < low or v > high:
                return error, True
            numbers[opt] = v
            j += 1
        elif opt == b"async":
            async_ = True
        elif opt == b"headers" and more:
            # disq's addition: HEADERS n k1 v1 ... kn vn, pairs the job carries (GETJOB
            # WITHHEADERS, SHOW), bounded as job_record.py says.
            parsed = _headers(argv, j + 1)
            if isinstance(parsed, bytes):
                return parsed, False
            headers = parsed or None
            j += 1 + 2 * len(parsed)
        elif opt == b"idempotency-key" and more:
            # disq's addition: a retried add with the same key (same queue, within the
            # node's window) answers the first job's id instead of adding another.
            if not argv[j + 1]:
                return b"-ERR IDEMPOTENCY-KEY must not be empty\r\n", False
            idem_key = queue_name(argv[j + 1])
            j += 1
        else:
            return SYNTAX_ERR, not idem_key and headers is None
        j += 1
    if b"delay" in numbers and b"delayms" in numbers:
        return _DELAY_EXCLUSIVE, not idem_key and headers is None
    timeout = _timeout(argv[3])
    if isinstance(timeout, bytes):
        return timeout, not idem_key and headers is None
    options = AddOptions(
        timeout,
        numbers.get(b"replicate"),
        numbers.get(b"delay", 0),
        numbers.get(b"retry"),
        numbers.get(b"ttl"),
        numbers.get(b"maxlen"),
        async_,
        idem_key,
        numbers.get(b"delayms", 0),
        headers,
    )
    return options, not idem_key and headers is None


def _headers(argv: list[bytes], at: int) -> Headers | bytes:
    """HEADERS' count at ``argv[at]`` and the pairs after it, or the error reply: a count
    out of 0..HEADERS_MAX, fewer arguments than it names, or pairs job_record.py refuses."""
    n = parse_ll(argv[at])
    if n is None or n < 0 or n > HEADERS_MAX:
        return b"-ERR HEADERS count must be between 0 and %d\r\n" % HEADERS_MAX
    if at + 1 + 2 * n > len(argv):
        return b"-ERR HEADERS needs %d key/value pairs\r\n" % n
    pairs: list[tuple[str, bytes]] = []
    for i in range(at + 1, at + 1 + 2 * n, 2):
        try:
            key = argv[i].decode("utf-8")
        except UnicodeDecodeError:
            return b"-ERR HEADERS key is not valid UTF-8\r\n"
        pairs.append((key, argv[i + 1]))
    headers = tuple(pairs)
    why = headers_error(headers)
    return _err("ERR " + why) if why else headers


def _addjob(c: Client, argv: list[bytes], now_ms: int) -> bytes | Pending:
    """ADDJOB queue body ms-timeout [REPLICATE n] [DELAY s | DELAYMS ms] [RETRY s] [TTL s]
    [MAXLEN n] [ASYNC] [IDEMPOTENCY-KEY key] [HEADERS n k1 v1 ... kn vn]."""
    key = tuple(argv[3:])
    options = _ADD_OPTIONS.get(key)
    if options is None:
        options, keep = _add_options(argv)
        if keep:
            if len(_ADD_OPTIONS) >= _ADD_OPTIONS_MAX:
                _ADD_OPTIONS.clear()
            _ADD_OPTIONS[key] = options
    if isinstance(options, bytes):
        return options
    full = c.node.disk_full
    if full is not None:
        # A definite refusal, in Disque's words for "not added, no room" (its -OOM): nothing
        # was added, the client may retry later or elsewhere.
        return _err("OOM " + full)
    token = c.new_token()
    r = c.node.core.add_job(now_ms, token, queue_name(argv[1]), argv[2], options)
    if isinstance(r, Pending):
        return c.block(token, _addjob_deferred)
    return b"+" + _id_bytes(r) + _CRLF


def _addjob_deferred(result: DeferredResult) -> bytes:
    if isinstance(result, str):
        return b"+" + _id_bytes(result) + _CRLF
    if isinstance(result, DisqueError):
        return _disque_error(result)
    return _err(f"ERR internal error: unexpected ADDJOB result {type(result).__name__}")


def _getjob_deferred(withcounters: bool, withheaders: bool, null: bytes) -> Deferred:
    """The blocked GETJOB's reply; ``null`` is the timeout's (``*-1``, or ``_`` in RESP3)."""

    def deferred(result: DeferredResult) -> bytes:
        if result is None:
            return null  # timed out
        if isinstance(result, list):
            return _jobs_reply(result, withcounters, withheaders)
        if isinstance(result, DisqueError):
            return _disque_error(result)  # LEAVING for clients already blocked
        return _err(f"ERR internal error: unexpected GETJOB result {type(result).__name__}")

    return deferred


# The blocked GETJOB's replies, made once: by (WITHCOUNTERS, WITHHEADERS, RESP3).
_GETJOB_DEFERRED = {
    (counters, headers, resp3): _getjob_deferred(counters, headers, NULL3 if resp3 else NULL_ARRAY)
    for counters in (False, True)
    for headers in (False, True)
    for resp3 in (False, True)
}


def _getjob(c: Client, argv: list[bytes], now_ms: int) -> bytes | Pending:
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] [WITHHEADERS] [INORDER] FROM q1 ... qN:
    options only before FROM, everything after FROM is a queue name. INORDER is disq's (the
    gRPC API's ``in_order``): a queue's jobs before the next queue's, where Disque takes one
    per queue per pass; the integrations' priority steps, highest first."""
    timeout = 0
    count = 1
    nohang = False
    withcounters = False
    withheaders = False
    in_order = False
    queues: list[bytes] | None = None
    n = len(argv)
    j = 1
    while j < n:
        opt = argv[j].lower()
        more = j < n - 1
        if opt == b"nohang":
            nohang = True
        elif opt == b"withcounters":
            withcounters = True
        elif opt == b"withheaders":
            withheaders = True
        elif opt == b"inorder":
            in_order = True
        elif opt == b"timeout" and more:
            t = _timeout(argv[j + 1])
            if isinstance(t, bytes):
                return t
            timeout = t
            j += 1
        elif opt == b"count" and more:
            v = parse_ll(argv[j + 1])
            if v is None or v <= 0:
                return b"-ERR COUNT must be a number greater than zero\r\n"
            count = v
            j += 1
        elif opt == b"from":
            queues = argv[j + 1 :]
            break
        else:
            return SYNTAX_ERR
        j += 1
    if not queues:
        return SYNTAX_ERR  # FROM is mandatory, with at least one queue
    token = c.new_token()
    r = c.node.core.get_job(
        now_ms,
        token,
        [queue_name(q) for q in queues],
        nohang=nohang,
        timeout_ms=timeout,
        count=count,
        in_order=in_order,
    )
    if r is None:
        return NULL3 if c.protocol == 3 else NULL_ARRAY
    if isinstance(r, Pending):
        return c.block(token, _GETJOB_DEFERRED[withcounters, withheaders, c.protocol == 3])
    # The jobs are arrays in both protocols: the WITHCOUNTERS pairs stay in the job's flat
    # array (Disque's shape, which clients index), and WITHHEADERS' array after them, so
    # RESP3 changes nothing here.
    return _jobs_reply(r, withcounters, withheaders)


def _ids_command(method: Callable[[NodeCore, int, list[str]], int]) -> Handler:
    """ACKJOB, FASTACK, DELJOB, ENQUEUE, NACK, DEQUEUE: all ids valid, then an integer."""

    def handler(c: Client, argv: list[bytes], now_ms: int) -> bytes:
        ids = _job_ids(argv[1:])
        if ids is None:
            return BADID_ERR
        return b":%d\r\n" % method(c.node.core, now_ms, ids)

    return handler


_ackjob = _ids_command(lambda core, now_ms, ids: core.ack_job(now_ms, ids))
_fastack = _ids_command(lambda core, now_ms, ids: core.fast_ack(now_ms, ids))

# NACK's DELAY (disq's): the longest a NACK may hold a job back, 30 days.
NACK_DELAY_MAX_S = 30 * 86400
_NACK_DELAY_ERR = b"-ERR DELAY must be between 0 and %d\r\n" % NACK_DELAY_MAX_S


def _nack(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """NACK <id> ... [DELAY <seconds>]: without DELAY (or DELAY 0) Disque's, queued again
    at once; with it, queued again on every holder once the delay has passed."""
    delay_s = 0
    args = argv[1:]
    if len(args) >= 2 and args[-2].lower() == b"delay":
        v = parse_ll(args[-1])
        if v is None or v < 0 or v > NACK_DELAY_MAX_S:
            return _NACK_DELAY_ERR
        delay_s = v
        args = args[:-2]
    ids = _job_ids(args)  # none: :0, as Disque's NACK with no ids
    if ids is None:
        return BADID_ERR
    return b":%d\r\n" % c.node.core.nack(now_ms, ids, delay_s * 1000)


def _working(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if not _valid_id(argv[1]):
        return BADID_ERR
    return b":%d\r\n" % c.node.core.working(now_ms, argv[1].decode("latin-1"))


def _show(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if not _valid_id(argv[1]):
        return BADID_ERR
    return _pairs_reply(c.node.core.show(now_ms, argv[1].decode("latin-1")), c.protocol == 3)
