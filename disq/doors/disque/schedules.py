"""SCHEDULE: recurring jobs the cluster keeps (disq's addition; disq/core/schedule/).

    SCHEDULE ADD <name> <spec> <queue> <body> [TZ <zone>] [REPLICATE <n>] [RETRY <s>]
                 [TTL <s>] [ASYNC] [MISFIRE SKIP|CATCHUP <n>]      +OK (a name is replaced)
    SCHEDULE DEL|PAUSE|RESUME <name>                               :1, or :0 (no such name)
    SCHEDULE LIST                                                  the names, sorted
    SCHEDULE SHOW <name>                                           field/value pairs (a map
                                                                   in RESP3), or null

Every error names what is wrong (the option, the value) and stores nothing.
"""

from __future__ import annotations

from disq.core.messages import MISFIRE_CATCHUP, MISFIRE_SKIP, ScheduleDef
from disq.core.schedule.scheduler import ScheduleError
from disq.doors.disque.client import Client
from disq.doors.disque.numbers import parse_ll
from disq.doors.disque.replies import (
    OK,
    _bulk,
    _err,
    _pairs_reply,
    queue_bytes,
    queue_name,
)

_SUBCOMMANDS = "ADD, DEL, PAUSE, RESUME, LIST, SHOW"


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _shown(b: bytes) -> str:
    """An argument quoted in an error: printable, short."""
    s = b[:64].decode("utf-8", "replace").replace("\r", " ").replace("\n", " ")
    return s + ("..." if len(b) > 64 else "")


def _schedule(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    sched = c.node.scheduler
    if sched is None:
        return _err("ERR schedules need the node's cluster core")
    sub = argv[1].lower()
    n = len(argv)
    if sub == b"add":
        if n < 6:
            return _err("ERR wrong number of arguments for 'schedule add' command")
        try:
            d = _parse_add(argv)
            sched.add(now_ms, d)
        except ScheduleError as exc:
            return _err(f"{exc.code} {exc.message}")
        return OK
    if sub in (b"del", b"pause", b"resume"):
        if n != 3:
            return _err(f"ERR wrong number of arguments for 'schedule {sub.decode()}' command")
        name = _text(argv[2])
        if sub == b"del":
            done = sched.delete(now_ms, name)
        elif sub == b"pause":
            done = sched.pause(now_ms, name)
        else:
            done = sched.resume(now_ms, name)
        return b":1\r\n" if done else b":0\r\n"
    if sub == b"list":
        if n != 2:
            return _err("ERR wrong number of arguments for 'schedule list' command")
        names = sched.names()
        return b"*%d\r\n" % len(names) + b"".join(_bulk(queue_bytes(x)) for x in names)
    if sub == b"show":
        if n != 3:
            return _err("ERR wrong number of arguments for 'schedule show' command")
        return _pairs_reply(sched.describe(_text(argv[2]), now_ms), c.protocol == 3)
    return _err(f"ERR unknown SCHEDULE subcommand '{_shown(argv[1])}'. Try {_SUBCOMMANDS}.")


def _number(argv: list[bytes], j: int, option: str, low: int) -> int:
    if j >= len(argv):
        raise ScheduleError(f"{option} needs a value")
    v = parse_ll(argv[j])
    if v is None or v < low or v > 0xFFFFFFF:
        raise ScheduleError(
            f"{option} value '{_shown(argv[j])}' is not an integer of at least {low}"
        )
    return v


def _parse_add(argv: list[bytes]) -> ScheduleDef:
    """ADD's arguments, options in any order (each at most once would be stricter than
    ADDJOB, which takes the last: so does this)."""
    try:
        spec = argv[3].decode("utf-8")
    except UnicodeDecodeError:
        raise ScheduleError(f"invalid schedule spec '{_shown(argv[3])}'") from None
    d = ScheduleDef(_text(argv[2]), spec, "UTC", queue_name(argv[4]), bytes(argv[5]))
    j = 6
    n = len(argv)
    while j < n:
        opt = argv[j].lower()
        if opt == b"tz":
            if j + 1 >= n:
                raise ScheduleError("TZ needs a zone name")
            try:
                d.zone = argv[j + 1].decode("utf-8")
            except UnicodeDecodeError:
                raise ScheduleError(f"invalid time zone '{_shown(argv[j + 1])}'") from None
            j += 2
        elif opt == b"replicate":
            d.repl = _number(argv, j + 1, "REPLICATE", 1)
            j += 2
        elif opt == b"retry":
            d.retry_s = _number(argv, j + 1, "RETRY", 0)
            j += 2
        elif opt == b"ttl":
            d.ttl_s = _number(argv, j + 1, "TTL", 1)
            j += 2
        elif opt == b"async":
            d.async_ = True
            j += 1
        elif opt == b"misfire":
            if j + 1 >= n:
                raise ScheduleError("MISFIRE needs SKIP or CATCHUP <n>")
            policy = argv[j + 1].lower()
            if policy == b"skip":
                d.misfire, d.catchup = MISFIRE_SKIP, 0
                j += 2
            elif policy == b"catchup":
                d.misfire = MISFIRE_CATCHUP
                d.catchup = _number(argv, j + 2, "MISFIRE CATCHUP", 0)
                j += 3
            else:
                raise ScheduleError(
                    f"MISFIRE takes SKIP or CATCHUP <n>, not '{_shown(argv[j + 1])}'"
                )
        else:
            raise ScheduleError(
                f"unknown SCHEDULE ADD option '{_shown(argv[j])}' (TZ, REPLICATE, RETRY, "
                "TTL, ASYNC, MISFIRE)"
            )
    return d
