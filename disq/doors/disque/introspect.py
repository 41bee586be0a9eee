"""Introspection commands: MONITOR, SLOWLOG, LATENCY and CLIENT, over the node-wide
:class:`~disq.doors.disque.admin.AdminState` every client shares. Replies follow Redis's
documented formats (Disque 1.0 took these commands from Redis 3; where Redis later settled a
format clients now parse, such as SLOWLOG's six-element entries and CLIENT LIST's fields, the
later one is used)."""

from __future__ import annotations

from disq.doors.disque.admin import AdminState, ClientView, KillFilter, kill_matches, parse_kill
from disq.doors.disque.client import Client
from disq.doors.disque.numbers import parse_ll
from disq.doors.disque.replies import NULL_BULK, OK, _bulk, _err_arg
from disq.doors.disque.server import _config

_INT_ERR = b"-ERR value is not an integer or out of range\r\n"


# ---------------------------------------------------------------- CONFIG (live keys)
def _config_live(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """CONFIG, then re-read the keys the admin state caches once a SET went through: the
    next command already sees the new slow log and latency thresholds."""
    out = _config(c, argv, now_ms)
    if argv[1].lower() == b"set" and out == OK:
        c.admin.load_config(c.node)
    return out


# ---------------------------------------------------------------- MONITOR
def _monitor(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if c.monitor:
        return b""  # monitorCommand ignores a client that already streams
    c.monitor = True
    c.admin.monitors.add(c)
    return OK


# ---------------------------------------------------------------- SLOWLOG
def _slowlog(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    log = c.admin.slowlog
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"reset" and argc == 2:
        log.reset()
        return OK
    if sub == b"len" and argc == 2:
        return b":%d\r\n" % len(log.entries)
    if sub == b"get" and argc in (2, 3):
        count = 10
        if argc == 3:
            n = parse_ll(argv[2])
            if n is None:
                return _INT_ERR
            if n < -1:
                return b"-ERR count should be greater than or equal to -1\r\n"
            count = n
        entries = log.get(count)
        out = [b"*%d\r\n" % len(entries)]
        for e in entries:
            out.append(
                b"*6\r\n:%d\r\n:%d\r\n:%d\r\n*%d\r\n" % (e.id, e.time_s, e.duration_us, len(e.argv))
            )
            out.extend(_bulk(a) for a in e.argv)
            out.append(_bulk(e.addr))
            out.append(_bulk(e.name))
        return b"".join(out)
    return b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"


# ---------------------------------------------------------------- LATENCY
def _latency(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    lat = c.admin.latency
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"latest" and argc == 2:
        out = [b"*%d\r\n" % len(lat.events)]
        for name, ev in lat.events.items():
            t, ms = ev.samples[-1]
            out.append(b"*4\r\n" + _bulk(name) + b":%d\r\n:%d\r\n:%d\r\n" % (t, ms, ev.max_ms))
        return b"".join(out)
    if sub == b"history" and argc == 3:
        hist = lat.events.get(argv[2])
        if hist is None:
            return b"*0\r\n"
        return b"*%d\r\n" % len(hist.samples) + b"".join(
            b"*2\r\n:%d\r\n:%d\r\n" % s for s in hist.samples
        )
    if sub == b"reset" and argc >= 2:
        return b":%d\r\n" % lat.reset(argv[2:])
    if sub == b"doctor" and argc == 2:
        return _bulk(_doctor(c.admin).encode())
    return _err_arg(
        b"ERR Unknown LATENCY subcommand or wrong number of arguments for '", argv[1], b"'"
    )


def _doctor(admin: AdminState) -> str:
    """A short LATENCY DOCTOR: what was seen per event, and the usual advice."""
    if admin.latency_threshold_ms <= 0:
        return (
            "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Disque "
            'instance. You may use "CONFIG SET latency-monitor-threshold <milliseconds>." '
            "in order to enable it.\n"
        )
    if not admin.latency.events:
        return (
            "Dave, no latency spike was observed during the lifetime of this Disque "
            "instance, not in the slightest bit. I honestly think you ought to sleep tonight.\n"
        )
    lines = ["Dave, I have observed latency spikes in this Disque instance.\n"]
    for i, (name, ev) in enumerate(admin.latency.events.items(), 1):
        avg = sum(ms for _, ms in ev.samples) // len(ev.samples)
        lines.append(
            f"{i}. {name.decode('latin-1')}: {len(ev.samples)} latency spikes "
            f"(average {avg}ms, worst {ev.max_ms}ms).\n"
        )
    lines.append(
        "\nI have a few advices for you:\n- Check the slow log (SLOWLOG GET) for the commands "
        "that took long, and avoid running them on a busy node.\n"
    )
    return "".join(lines)


# ---------------------------------------------------------------- CLIENT
_CLIENT_SYNTAX = (
    b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)\r\n"
)


def _printable(b: bytes) -> bool:
    return all(0x21 <= x <= 0x7E for x in b)


def client_info_line(c: ClientView, now_ms: int) -> bytes:
    """catClientInfoString, Redis 7's fields: what disq does not have (pub/sub, MULTI,
    buffers it does not track) reads 0."""
    flags = b""
    if c.monitor:
        flags += b"O"
    if c.pending_token is not None:
        flags += b"b"
    if c.closing:
        flags += b"c"
    if c.unix_path is not None:
        flags += b"U"
    name = c.name or b""
    age = max(0, now_ms - c.ctime_ms) // 1000
    idle = max(0, now_ms - c.last_ms) // 1000
    events = b"rw" if c.outbox else b"r"
    proto = getattr(c, "protocol", 2)
    return (
        b"id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=0 sub=0 psub=0 "
        b"ssub=0 multi=-1 watch=0 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 "
        b"obl=0 oll=%d omem=%d tot-mem=0 events=%s cmd=%s user=default redir=-1 resp=%d "
        b"lib-name=%s lib-ver=%s\n"
        % (
            c.cid,
            c.addr,
            c.laddr,
            c.fd,
            name,
            age,
            idle,
            flags or b"N",
            len(c.outbox),
            c.outbox_bytes,
            events,
            c.last_cmd.encode(),
            proto,
            c.lib_name or b"",
            c.lib_ver or b"",
        )
    )


def _client_list(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """CLIENT LIST [TYPE normal|...] [ID id ...]."""
    clients = list(c.admin.clients.values())
    rest = argv[2:]
    if rest:
        opt = rest[0].lower()
        if opt == b"type" and len(rest) == 2:
            t = rest[1].lower()
            if t not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
                return _err_arg(b"ERR Unknown client type '", rest[1], b"'")
            if t != b"normal":
                clients = []
        elif opt == b"id" and len(rest) >= 2:
            ids: set[int] = set()
            for a in rest[1:]:
                n = parse_ll(a)
                if n is None or n <= 0:
                    return b"-ERR Invalid client ID\r\n"
                ids.add(n)
            clients = [x for x in clients if x.cid in ids]
        else:
            return b"-ERR syntax error\r\n"
    return _bulk(b"".join(client_info_line(x, now_ms) for x in clients))


def _client_kill(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    f = parse_kill(argv[2:])
    if isinstance(f, bytes):
        return f
    return _kill(c, f, now_ms)


def _kill(c: Client, f: KillFilter, now_ms: int) -> bytes:
    admin = c.admin
    killed = 0
    for other in list(admin.clients.values()):
        if not kill_matches(f, other, c, now_ms):
            continue
        killed += 1
        if other is c:
            c.closing = True  # CLIENT_CLOSE_AFTER_REPLY: this reply still leaves
        else:
            admin.kill(other)
    if f.old_form:
        return OK if killed else b"-ERR No such client\r\n"
    return b":%d\r\n" % killed


def _client_pause(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """CLIENT PAUSE timeout [ALL]: no command of any client runs until it ends (Disque's
    pauseClients; WRITE, Redis 6.2's write-only pause, is not offered)."""
    argc = len(argv)
    if argc == 4 and argv[3].lower() != b"all":
        return b"-ERR syntax error\r\n"
    ms = parse_ll(argv[2])
    if ms is None:
        return b"-ERR timeout is not an integer or out of range\r\n"
    if ms < 0:
        return b"-ERR timeout is negative\r\n"
    c.admin.pause(now_ms + ms)
    return OK


def _client(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"list":
        return _client_list(c, argv, now_ms)
    if sub == b"kill" and argc >= 3:
        return _client_kill(c, argv, now_ms)
    if sub == b"id" and argc == 2:
        return b":%d\r\n" % c.cid
    if sub == b"info" and argc == 2:
        return _bulk(client_info_line(c, now_ms))
    if sub == b"pause" and argc in (3, 4):
        return _client_pause(c, argv, now_ms)
    if sub == b"unpause" and argc == 2:
        c.admin.unpause()
        return OK
    if sub == b"setname" and argc == 3:
        name = argv[2]
        if not name:
            c.name = None
            return OK
        if not _printable(name):
            return b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
        c.name = name
        return OK
    if sub == b"getname" and argc == 2:
        return NULL_BULK if c.name is None else _bulk(c.name)
    if sub == b"setinfo" and argc == 4:
        # Redis 7.2's CLIENT SETINFO, which redis-py sends on every connect.
        attr = argv[2].lower()
        if attr not in (b"lib-name", b"lib-ver"):
            return _err_arg(b"ERR Unrecognized option '", argv[2], b"'")
        if not _printable(argv[3]) and argv[3]:
            return _err_arg(
                b"ERR ", argv[2], b" cannot contain spaces, newlines or special characters."
            )
        if attr == b"lib-name":
            c.lib_name = argv[3]
        else:
            c.lib_ver = argv[3]
        return OK
    return _CLIENT_SYNTAX
