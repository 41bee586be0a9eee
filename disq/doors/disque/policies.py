"""QPOLICY: queue policies the cluster keeps (disq's addition; disq/core/policy/).

    QPOLICY SET <queue> [MAXDELIVERIES <n>] [DEADLETTER <queue>] [BACKOFF <base-s> <max-s>]
                        +OK: the queue's whole policy (a field not given is unset)
    QPOLICY GET <queue> its set fields as field/value pairs (a map in RESP3), or null
    QPOLICY DEL <queue> :1, or :0 (the queue had no policy)
    QPOLICY LIST        every queue with a policy, by name: queue, then its fields as GET
                        answers them (a flat array; a map of maps in RESP3)

    QREDRIVE <dead-letter-queue> [TO <queue>] [COUNT <n>]
                        the dead letters queued on this node back to their source queue (or
                        TO), as new jobs with fresh counters: how many moved (COUNT: at most
                        that many, 1 to 10000; all of them, up to 10000, without it)

Bounds: MAXDELIVERIES 1 to 1,000,000; BACKOFF 0 <= base <= max, 0 < max <= 2592000 (30
days); names as queues' elsewhere (1 to 1000 bytes); at most 100,000 policies. Every error
names what is wrong and stores nothing.
"""

from __future__ import annotations

from disq.core.disque.api import DeferredResult, DisqueError, Pending
from disq.core.disque.deadletter import REDRIVE_MAX
from disq.core.policy.table import BACKOFF_MAX_S, MAX_DELIVERIES_MAX, PolicyError
from disq.doors.disque.client import Client
from disq.doors.disque.numbers import parse_ll
from disq.doors.disque.replies import (
    OK,
    _bulk,
    _disque_error,
    _err,
    _pairs,
    _pairs_reply,
    queue_name,
)
from disq.protocol import resp

_SUBCOMMANDS = "SET, GET, DEL, LIST"


def _shown(b: bytes) -> str:
    """An argument quoted in an error: printable, short."""
    s = b[:64].decode("utf-8", "replace").replace("\r", " ").replace("\n", " ")
    return s + ("..." if len(b) > 64 else "")


def _qpolicy(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    core = c.node.core
    sub = argv[1].lower()
    n = len(argv)
    try:
        if sub == b"list":
            if n != 2:
                return _err("ERR wrong number of arguments for 'qpolicy list' command")
            return _list_reply(core.qpolicy_list(), c.protocol == 3)
        if n < 3:
            return _err("ERR wrong number of arguments for 'qpolicy' command")
        if sub == b"set":
            max_deliveries, dead_letter, base, top = _parse_set(argv)
            core.qpolicy_set(now_ms, queue_name(argv[2]), max_deliveries, dead_letter, base, top)
            return OK
        if n != 3:
            return _err(f"ERR wrong number of arguments for 'qpolicy {_shown(sub)}' command")
        if sub == b"get":
            return _pairs_reply(core.qpolicy_get(queue_name(argv[2])), c.protocol == 3)
        if sub == b"del":
            return b":%d\r\n" % core.qpolicy_del(now_ms, queue_name(argv[2]))
    except PolicyError as exc:
        return _err(f"{exc.code} {exc.message}")
    return _err(f"ERR unknown QPOLICY subcommand '{_shown(argv[1])}'. Try {_SUBCOMMANDS}.")


def _qredrive(c: Client, argv: list[bytes], now_ms: int) -> bytes | Pending:
    queue = queue_name(argv[1])
    to, count = "", 0
    seen: set[bytes] = set()
    j = 2
    try:
        if not queue:
            raise PolicyError("queue name must not be empty")
        while j < len(argv):
            opt = argv[j].lower()
            if opt in seen:
                raise PolicyError(f"QREDRIVE option '{_shown(argv[j])}' given twice")
            seen.add(opt)
            if opt == b"to":
                if j + 1 >= len(argv) or not argv[j + 1]:
                    raise PolicyError("TO needs a queue name")
                to = queue_name(argv[j + 1])
            elif opt == b"count":
                count = _number(argv, j + 1, "COUNT", 1, REDRIVE_MAX)
            else:
                raise PolicyError(f"unknown QREDRIVE option '{_shown(argv[j])}' (TO, COUNT)")
            j += 2
        token = c.new_token()
        got = c.node.core.qredrive(now_ms, token, queue, to, count)
    except PolicyError as exc:
        return _err(f"{exc.code} {exc.message}")
    except DisqueError as exc:
        return _disque_error(exc)
    if isinstance(got, Pending):
        return c.block(token, _redrive_deferred)
    return b":%d\r\n" % got


def _redrive_deferred(result: DeferredResult) -> bytes:
    if isinstance(result, str):
        return b":%d\r\n" % int(result)
    if isinstance(result, DisqueError):
        return _disque_error(result)
    return _err(f"ERR internal error: unexpected QREDRIVE result {type(result).__name__}")


def _list_reply(policies: list[tuple[str, list[tuple[str, object]]]], resp3: bool) -> bytes:
    out = [resp.map_header(len(policies)) if resp3 else b"*%d\r\n" % (2 * len(policies))]
    for queue, fields in policies:
        out.append(_bulk(queue.encode()))
        _pairs(fields, out, resp3)
    return b"".join(out)


def _number(argv: list[bytes], j: int, option: str, low: int, high: int) -> int:
    if j >= len(argv):
        raise PolicyError(f"{option} needs a value")
    v = parse_ll(argv[j])
    if v is None or not low <= v <= high:
        raise PolicyError(f"{option} value '{_shown(argv[j])}' is not an integer {low}..{high}")
    return v


def _parse_set(argv: list[bytes]) -> tuple[int, str, int, int]:
    """SET's options, in any order, each at most once."""
    max_deliveries, dead_letter, base, top = 0, "", 0, 0
    seen: set[bytes] = set()
    j = 3
    n = len(argv)
    while j < n:
        opt = argv[j].lower()
        if opt in seen:
            raise PolicyError(f"QPOLICY SET option '{_shown(argv[j])}' given twice")
        seen.add(opt)
        if opt == b"maxdeliveries":
            max_deliveries = _number(argv, j + 1, "MAXDELIVERIES", 1, MAX_DELIVERIES_MAX)
            j += 2
        elif opt == b"deadletter":
            if j + 1 >= n:
                raise PolicyError("DEADLETTER needs a queue name")
            dead_letter = queue_name(argv[j + 1])
            if not dead_letter:
                raise PolicyError("DEADLETTER queue name must not be empty")
            j += 2
        elif opt == b"backoff":
            base = _number(argv, j + 1, "BACKOFF base", 0, BACKOFF_MAX_S)
            top = _number(argv, j + 2, "BACKOFF max", 1, BACKOFF_MAX_S)
            if top < base:
                raise PolicyError("BACKOFF max must be at least its base")
            j += 3
        else:
            raise PolicyError(
                f"unknown QPOLICY SET option '{_shown(argv[j])}' "
                "(MAXDELIVERIES, DEADLETTER, BACKOFF)"
            )
    return max_deliveries, dead_letter, base, top
