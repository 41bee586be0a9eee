"""Queue commands: QLEN, QSTAT, QPEEK, QSCAN, JSCAN, PAUSE, and disq's QPURGE."""

from __future__ import annotations

from collections.abc import Callable

from disq.core.disque.job import STATE_BY_NAME
from disq.core.messages import PAUSE_IN, PAUSE_OUT
from disq.doors.disque.client import Client
from disq.doors.disque.numbers import parse_cursor, parse_ll
from disq.doors.disque.replies import (
    _CRLF,
    CURSOR_ERR,
    EMPTY_ARRAY,
    NOT_AN_INT_ERR,
    NULL3,
    NULL_ARRAY,
    NULL_BULK,
    SYNTAX_ERR,
    _bulk,
    _id_bytes,
    _jobs_reply,
    _pairs,
    _pairs_reply,
    queue_bytes,
    queue_name,
)


def _qlen(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    return b":%d\r\n" % c.node.core.qlen(queue_name(argv[1]))


def _qpurge(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """QPURGE queue (a disq extension): ack every job queued on this node in the queue, as
    ACKJOB would (the copies elsewhere are collected); the number acked. Queues are per
    node: emptying one everywhere is a QPURGE on each node."""
    return b":%d\r\n" % c.node.core.qpurge(now_ms, queue_name(argv[1]))


def _qstat(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    pairs = c.node.core.qstat(now_ms, queue_name(argv[1]))
    return _pairs_reply(pairs, c.protocol == 3, NULL_ARRAY)


def _qpeek(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """QPEEK queue count: oldest first, newest first for a negative count."""
    count = parse_ll(argv[2])
    if count is None:
        return NOT_AN_INT_ERR
    jobs = c.node.core.qpeek(queue_name(argv[1]), count)
    if not jobs:
        return EMPTY_ARRAY
    return _jobs_reply(jobs, False)


def _scan_reply(cursor: int, items: list[bytes]) -> bytes:
    out = [b"*2\r\n", _bulk(b"%d" % cursor), b"*%d\r\n" % len(items)]
    out.extend(items)
    return b"".join(out)


def _scan_args(
    argv: list[bytes], options: frozenset[bytes], take: Callable[[bytes, bytes], bytes | None]
) -> tuple[int, bool] | bytes:
    """``(cursor, busyloop)`` of a SCAN-style command (QSCAN, JSCAN), or its error reply. The
    first argument that is not an option is the cursor, wherever it is; a second one is a
    syntax error. An option of ``options`` with its value goes to ``take``, which answers an
    error reply or None; an option word without its value is taken as the cursor (and is
    not one). The first error in argument order is the reply."""
    busyloop = False
    cursor = 0
    cursor_set = False
    n = len(argv)
    j = 1
    while j < n:
        opt = argv[j].lower()
        if opt in options and j < n - 1:
            err = take(opt, argv[j + 1])
            if err is not None:
                return err
            j += 1
        elif opt == b"busyloop":
            busyloop = True
        else:
            if cursor_set:
                return SYNTAX_ERR
            cur = parse_cursor(argv[j])
            if cur is None:
                return CURSOR_ERR
            cursor = cur
            cursor_set = True
        j += 1
    return cursor, busyloop


_QSCAN_NUMBERS = frozenset((b"count", b"minlen", b"maxlen", b"importrate"))


def _qscan(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE r]."""
    numbers: dict[bytes, int] = {}  # COUNT, MINLEN, MAXLEN, IMPORTRATE

    def take(opt: bytes, value: bytes) -> bytes | None:
        v = parse_ll(value)
        if v is None:
            return NOT_AN_INT_ERR
        numbers[opt] = v
        return None

    args = _scan_args(argv, _QSCAN_NUMBERS, take)
    if isinstance(args, bytes):
        return args
    cursor, busyloop = args
    nxt, names = c.node.core.qscan(
        now_ms,
        cursor,
        numbers.get(b"count", 100),
        busyloop=busyloop,
        minlen=numbers.get(b"minlen"),
        maxlen=numbers.get(b"maxlen"),
        importrate=numbers.get(b"importrate"),
    )
    return _scan_reply(nxt, [_bulk(queue_bytes(q)) for q in names])


_JSCAN_OPTIONS = frozenset((b"count", b"queue", b"state", b"reply"))


def _jscan(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s]... [REPLY all|id]."""
    count = 100
    queue: str | None = None
    states: set[int] = set()
    reply_all = False

    def take(opt: bytes, value: bytes) -> bytes | None:
        nonlocal count, queue, reply_all
        if opt == b"count":
            v = parse_ll(value)
            if v is None:
                return NOT_AN_INT_ERR
            count = v
        elif opt == b"queue":
            queue = queue_name(value)
        elif opt == b"state":
            st = STATE_BY_NAME.get(value.lower().decode("latin-1"))
            if st is None:
                return b"-ERR Invalid job state name\r\n"
            states.add(st)
        else:  # REPLY
            kind = value.lower()
            if kind not in (b"id", b"all"):
                return b"-ERR Invalid REPLY type, try ID or ALL\r\n"
            reply_all = kind == b"all"
        return None

    args = _scan_args(argv, _JSCAN_OPTIONS, take)
    if isinstance(args, bytes):
        return args
    cursor, busyloop = args
    core = c.node.core
    resp3 = c.protocol == 3
    nxt, jobs = core.jscan(cursor, count, busyloop=busyloop, queue=queue, states=states or None)
    items: list[bytes] = []
    for job in jobs:
        if not job.delivered:
            continue  # jscanCallback skips the dummy jobs that only hold an ACK
        if reply_all:
            pairs = core.show(now_ms, job.id)
            if pairs is None:
                items.append(NULL3 if resp3 else NULL_BULK)
                continue
            out: list[bytes] = []
            _pairs(pairs, out, resp3)  # each job as SHOW gives it
            items.append(b"".join(out))
        else:
            items.append(b"+" + _id_bytes(job.id) + _CRLF)  # addReplyJobID: a status reply
    return _scan_reply(nxt, items)


_PAUSE_NAMES = (b"+none\r\n", b"+in\r\n", b"+out\r\n", b"+all\r\n")


def _pause(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """PAUSE queue option...: ``none`` clears what the options before it set, ``in`` /
    ``out`` / ``all`` add, ``state`` only reads, ``bcast`` tells every node. The reply is the
    resulting state."""
    flags = 0
    update = False
    bcast = False
    for a in argv[2:]:
        opt = a.lower()
        if opt == b"none":
            flags = 0
            update = True
        elif opt == b"in":
            flags |= PAUSE_IN
            update = True
        elif opt == b"out":
            flags |= PAUSE_OUT
            update = True
        elif opt == b"all":
            flags |= PAUSE_IN | PAUSE_OUT
            update = True
        elif opt == b"state":
            pass
        elif opt == b"bcast":
            bcast = True
        else:
            return SYNTAX_ERR
    r = c.node.core.pause(now_ms, queue_name(argv[1]), flags if update else None, bcast)
    return _PAUSE_NAMES[r & (PAUSE_IN | PAUSE_OUT)]
