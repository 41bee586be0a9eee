"""Server commands: INFO, PING, ECHO, TIME, CONFIG, DEBUG, SHUTDOWN, BGREWRITEAOF, AUTH,
SELECT. (COMMAND describes the table, so it lives in :mod:`.table`; CLIENT, MONITOR, SLOWLOG
and LATENCY in :mod:`.introspect`.)"""

from __future__ import annotations

from disq.doors.disque.client import Client
from disq.doors.disque.node_api import info_text
from disq.doors.disque.numbers import parse_ll, parse_strtod
from disq.doors.disque.replies import (
    OK,
    PONG,
    SYNTAX_ERR,
    _bulk,
    _err_arg,
    queue_bytes,
    queue_name,
)
from disq.protocol import resp


def _info(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if len(argv) > 2:
        return SYNTAX_ERR
    section = argv[1].decode("latin-1") if len(argv) == 2 else "default"
    text = info_text(c.node, section).encode()
    # Redis 7 sends INFO as a verbatim string ("=LEN\r\ntxt:...") to a RESP3 client; RESP2
    # keeps the bulk string.
    return resp.verbatim(text) if c.protocol == 3 else _bulk(text)


def _ping(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if len(argv) > 2:
        return b"-ERR wrong number of arguments for 'ping' command\r\n"
    return PONG if len(argv) == 1 else _bulk(argv[1])


def _echo(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    # Redis's ECHO, for clients that probe with it; Disque has none.
    return _bulk(argv[1])


def _time(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    # The wall clock, in ms (the door is sans-IO): microseconds are a multiple of 1000.
    now = c.node.wall_ms()
    return b"*2\r\n" + _bulk(b"%d" % (now // 1000)) + _bulk(b"%d" % (now % 1000 * 1000))


def _config(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    node = c.node
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"set":
        if argc != 4:
            return _err_arg(b"ERR Wrong number of arguments for CONFIG ", argv[1])
        node.config_set(queue_name(argv[2]), queue_name(argv[3]))
        return OK
    if sub == b"get":
        if argc != 3:
            return _err_arg(b"ERR Wrong number of arguments for CONFIG ", argv[1])
        pairs = node.config_get(queue_name(argv[2]))
        # Redis 7: a map of name -> value in RESP3 ("%N"), the flat array in RESP2.
        out = [resp.map_header(len(pairs)) if c.protocol == 3 else b"*%d\r\n" % (2 * len(pairs))]
        for k, v in pairs:
            out.append(_bulk(queue_bytes(k)))
            out.append(_bulk(queue_bytes(v)))
        return b"".join(out)
    if sub == b"resetstat":
        if argc != 2:
            return _err_arg(b"ERR Wrong number of arguments for CONFIG ", argv[1])
        node.resp_stats.reset()
        node.config_resetstat()
        return OK
    if sub == b"rewrite":
        if argc != 2:
            return _err_arg(b"ERR Wrong number of arguments for CONFIG ", argv[1])
        node.config_rewrite()
        return OK
    return b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n"


def _debug(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    node = c.node
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"flushall":
        node.core.flushall()
        return OK
    if sub == b"sleep" and argc == 3:
        node.debug_sleep(parse_strtod(argv[2]))
        return OK
    if sub == b"drop-peers":
        # disq extension (cluster lab): isolate this node from the listed peers.
        node.drop_peers([a.decode("latin-1") for a in argv[2:]])
        return OK
    if sub == b"error" and argc == 3:
        return _err_arg(b"", argv[2])
    return _err_arg(
        b"ERR Unknown DEBUG subcommand or wrong number of arguments for '", argv[1], b"'"
    )


_SHUTDOWN_MODES = {b"rewrite-aof": "rewrite-aof", b"save": "save", b"nosave": "nosave"}


def _shutdown(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """SHUTDOWN [REWRITE-AOF] (Disque), and Redis's NOSAVE / SAVE so scripts written for
    Redis work. On success there is no reply: the connection closes as the node stops."""
    if len(argv) > 2:
        return SYNTAX_ERR
    mode = "default"
    if len(argv) == 2:
        m = _SHUTDOWN_MODES.get(argv[1].lower())
        if m is None:
            return SYNTAX_ERR
        mode = m
    c.node.shutdown(mode)
    c.closing = True
    return b""


def _bgrewriteaof(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    return resp.simple(c.node.bgrewriteaof())


def _auth(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    pw = c.node.requirepass
    if not pw:
        return b"-ERR Client sent AUTH, but no password is set\r\n"
    import hmac  # here: hashlib's OpenSSL set-up is 2 ms of every start

    # Constant time, like time_independent_strcmp.
    if hmac.compare_digest(argv[1], pw.encode("utf-8", "surrogateescape")):
        c.authenticated = True
        return OK
    c.authenticated = False
    return b"-ERR invalid password\r\n"


def _select(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    # Redis's SELECT, for clients configured with a db: Disque has one keyspace, db 0.
    db = parse_ll(argv[1])
    if db is None:
        return b"-ERR invalid DB index\r\n"
    if db != 0:
        return b"-ERR DB index is out of range\r\n"
    return OK
