"""The RESP port's introspection state: connected clients (CLIENT LIST/KILL/PAUSE), MONITOR
streams, the slow log and the latency monitor.

Sans-IO: :class:`AdminState` is node-wide (one per RESP hub) and shared by every
:class:`~disq.doors.disque.client.Client`; the transport registers connections, installs the
callbacks that reach a socket (``Client.wake``, ``Client.kill``, :attr:`AdminState.on_pause`)
and reads the clock through the node. Everything here costs nothing on the command path while
it is idle: :func:`~disq.doors.disque.table.execute` checks :attr:`AdminState.monitors` (empty
set) and compares the duration it already measures with :attr:`AdminState.slow_us`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from disq.doors.disque.node_api import NodeApi

# The server hands the door its logger (disq/logging.py's, which loads structlog once the
# ports serve and which this pure layer may not import); until then, structlog's own.
_logger: list[Any] = []


def set_logger(logger: Any) -> None:
    _logger[:] = [logger]


def _log() -> Any:
    if _logger:
        return _logger[0]
    import structlog

    return structlog.get_logger("disq.resp.admin")


# Disque's command table, filled in by disq.doors.disque.table when it is imported (the table
# imports the handlers, which import this module: a direct import would be a circle).
DEFAULT_COMMANDS: dict[bytes, Any] = {}  # name -> table.CommandSpec

# slowlog.h: SLOWLOG_ENTRY_MAX_ARGC / SLOWLOG_ENTRY_MAX_STRING.
SLOWLOG_MAX_ARGC = 32
SLOWLOG_MAX_STRING = 128
# latency.h: LATENCY_TS_LEN samples are kept per event.
LATENCY_TS_LEN = 160
# A MONITOR connection that does not read is closed past this much unsent output (Redis's
# client-output-buffer-limit for pubsub clients, whose stream a monitor resembles: 32 MB).
MONITOR_MAX_OUTPUT_BYTES = 32 * 1024 * 1024
_NEVER = 1 << 62  # slow_us while both the slow log and the latency monitor are off

DEFAULTS = {
    "slowlog-log-slower-than": 10000,
    "slowlog-max-len": 128,
    "latency-monitor-threshold": 0,
}


class ClientView(Protocol):
    """What this state reads and sets of a connection: :class:`.client.Client` (typed here
    by its shape, since the client module imports this one)."""

    cid: int
    addr: bytes
    laddr: bytes
    fd: int
    unix_path: bytes | None
    ctime_ms: int
    last_ms: int
    last_cmd: str
    monitor: bool
    outbox: list[bytes]
    outbox_bytes: int
    wake: Callable[[], None] | None
    kill: Callable[[], None] | None
    closing: bool
    name: bytes | None
    lib_name: bytes | None
    lib_ver: bytes | None
    pending_token: int | None

    def monitor_peer(self) -> bytes: ...


# ---------------------------------------------------------------- argument rendering
_REPR_ESC = {
    ord("\\"): b"\\\\",
    ord('"'): b'\\"',
    ord("\n"): b"\\n",
    ord("\r"): b"\\r",
    ord("\t"): b"\\t",
    7: b"\\a",
    8: b"\\b",
}


def repr_arg(arg: bytes) -> bytes:
    """sdscatrepr: the quoted, escaped form MONITOR prints (``"a\\r\\n\\x00"``)."""
    if arg.isascii() and arg.isalnum():
        return b'"' + arg + b'"'  # the common case, without a per-byte loop
    out = bytearray(b'"')
    for x in arg:
        esc = _REPR_ESC.get(x)
        if esc is not None:
            out += esc
        elif 0x20 <= x <= 0x7E:
            out.append(x)
        else:
            out += b"\\x%02x" % x
    out.append(0x22)
    return bytes(out)


def redact(argv: list[bytes], command: str | None = None) -> list[bytes]:
    """Redis 6.2.4+ shows AUTH and HELLO's AUTH credentials as ``(redacted)`` in MONITOR and
    SLOWLOG: the password never leaves through introspection. ``command``: the command's own
    name when known (a ``rename-command``'d AUTH is still AUTH); else ``argv[0]``."""
    name = command.encode() if command is not None else argv[0].lower()
    if name == b"auth":
        return [argv[0], *(b"(redacted)" for _ in argv[1:])]
    if name == b"hello":
        out = list(argv)
        for i, a in enumerate(argv):
            if a.lower() == b"auth":
                for j in range(i + 1, min(i + 3, len(out))):
                    out[j] = b"(redacted)"
        return out
    return argv


def slowlog_argv(argv: list[bytes]) -> list[bytes]:
    """slowlogCreateEntry's trimming: at most 32 arguments (the last one then says how many
    more there were) and at most 128 bytes of each (with how many more bytes)."""
    argc = len(argv)
    kept = min(argc, SLOWLOG_MAX_ARGC)
    out: list[bytes] = []
    for j in range(kept):
        if kept != argc and j == kept - 1:
            out.append(b"... (%d more arguments)" % (argc - kept + 1))
            break
        a = argv[j]
        if len(a) > SLOWLOG_MAX_STRING:
            a = a[:SLOWLOG_MAX_STRING] + b"... (%d more bytes)" % (len(a) - SLOWLOG_MAX_STRING)
        out.append(a)
    return out


# ---------------------------------------------------------------- slow log
class SlowEntry(NamedTuple):
    id: int
    time_s: int  # unix time the command ran
    duration_us: int
    argv: list[bytes]
    addr: bytes  # ip:port of the client
    name: bytes  # its CLIENT SETNAME, or empty


class SlowLog:
    """The slow log: newest first, at most ``max_len`` entries, ids never reused."""

    __slots__ = ("entries", "max_len", "next_id")

    def __init__(self, max_len: int = 128) -> None:
        self.entries: collections.deque[SlowEntry] = collections.deque()
        self.max_len = max_len
        self.next_id = 0

    def push(
        self, argv: list[bytes], duration_us: int, time_s: int, addr: bytes, name: bytes
    ) -> None:
        entry = SlowEntry(self.next_id, time_s, duration_us, slowlog_argv(argv), addr, name)
        self.next_id += 1
        self.entries.appendleft(entry)
        self.trim()

    def trim(self) -> None:
        """Drop the oldest entries past ``max_len`` (also after CONFIG SET slowlog-max-len)."""
        while len(self.entries) > self.max_len:
            self.entries.pop()

    def get(self, count: int) -> list[SlowEntry]:
        return list(self.entries)[: max(0, count)] if count >= 0 else list(self.entries)

    def reset(self) -> None:
        self.entries.clear()


# ---------------------------------------------------------------- latency monitor
@dataclass(slots=True)
class LatencyEvent:
    """latencyTimeSeries: the last samples of one event (one per second at most)."""

    samples: collections.deque[tuple[int, int]]  # (unix time s, latency ms)
    max_ms: int = 0

    def add(self, time_s: int, ms: int) -> None:
        # latencyAddSample: a second sample in the same second keeps the larger of the two.
        samples = self.samples
        if samples and samples[-1][0] == time_s:
            if ms > samples[-1][1]:
                samples[-1] = (time_s, ms)
        else:
            samples.append((time_s, ms))
        if ms > self.max_ms:
            self.max_ms = ms


class LatencyMonitor:
    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: dict[bytes, LatencyEvent] = {}

    def add(self, event: bytes, time_s: int, ms: int) -> None:
        ev = self.events.get(event)
        if ev is None:
            ev = self.events[event] = LatencyEvent(collections.deque(maxlen=LATENCY_TS_LEN))
        ev.add(time_s, ms)

    def reset(self, names: list[bytes]) -> int:
        """LATENCY RESET [event ...]: the number of event series removed."""
        if not names:
            n = len(self.events)
            self.events.clear()
            return n
        return sum(self.events.pop(n.decode("latin-1").encode(), None) is not None for n in names)


# ---------------------------------------------------------------- CLIENT KILL filters
@dataclass(slots=True)
class KillFilter:
    """CLIENT KILL's criteria; every given one must match."""

    addr: bytes | None = None
    laddr: bytes | None = None
    client_id: int | None = None
    client_type: str | None = None  # normal | master | replica | pubsub
    user: bytes | None = None
    skipme: bool = True
    maxage_s: int | None = None
    old_form: bool = False  # CLIENT KILL addr: OK / "No such client" instead of a count


_TYPES = {"normal": "normal", "master": "master", "slave": "replica", "replica": "replica"}
_TYPES["pubsub"] = "pubsub"


def parse_kill(args: list[bytes]) -> KillFilter | bytes:
    """The arguments after ``CLIENT KILL``: a filter, or the error reply Redis gives."""
    if len(args) == 1:
        return KillFilter(addr=args[0], skipme=False, old_form=True)
    if len(args) % 2:
        return b"-ERR syntax error\r\n"
    f = KillFilter()
    for i in range(0, len(args), 2):
        opt = args[i].lower()
        val = args[i + 1]
        if opt == b"id":
            try:
                cid = int(val)
            except ValueError:
                cid = 0
            if cid <= 0:
                return b"-ERR client-id should be greater than 0\r\n"
            f.client_id = cid
        elif opt == b"type":
            t = _TYPES.get(val.decode("latin-1").lower())
            if t is None:
                return b"-ERR Unknown client type '" + val + b"'\r\n"
            f.client_type = t
        elif opt == b"addr":
            f.addr = val
        elif opt == b"laddr":
            f.laddr = val
        elif opt == b"user":
            if val != b"default":  # the only user: Disque has no ACLs
                return b"-ERR No such user '" + val + b"'\r\n"
            f.user = val
        elif opt == b"skipme":
            low = val.lower()
            if low not in (b"yes", b"no"):
                return b"-ERR syntax error\r\n"
            f.skipme = low == b"yes"
        elif opt == b"maxage":
            try:
                f.maxage_s = int(val)
            except ValueError:
                return b"-ERR syntax error\r\n"
        else:
            return b"-ERR syntax error\r\n"
    return f


def kill_matches(f: KillFilter, c: ClientView, me: ClientView, now_ms: int) -> bool:
    if f.skipme and c is me:
        return False
    if f.addr is not None and c.addr != f.addr:
        return False
    if f.laddr is not None and c.laddr != f.laddr:
        return False
    if f.client_id is not None and c.cid != f.client_id:
        return False
    # getClientType: a MONITOR client is a normal one (CLIENT_MONITOR is not CLIENT_SLAVE
    # alone), and disq has no replicas, masters or pub/sub clients.
    if f.client_type is not None and f.client_type != "normal":
        return False
    if f.maxage_s is not None and (now_ms - c.ctime_ms) // 1000 < f.maxage_s:
        return False
    return True


# ---------------------------------------------------------------- the node-wide state
class AdminState:
    """Everything CLIENT, MONITOR, SLOWLOG and LATENCY share across the connections."""

    __slots__ = (
        "clients",
        "commands",
        "latency",
        "latency_threshold_ms",
        "monitors",
        "next_id",
        "on_pause",
        "pause_end_ms",
        "slow_us",
        "slowlog",
        "slowlog_slower_than",
    )

    def __init__(self, commands: dict[bytes, Any] | None = None) -> None:
        if commands is None:
            commands = DEFAULT_COMMANDS
        # The command table execute() dispatches through: Disque's, or the one the
        # configuration's rename-command lines made (table.command_table), built once.
        self.commands = commands
        self.clients: dict[int, ClientView] = {}  # CLIENT LIST order: by id
        self.next_id = 1
        self.monitors: set[ClientView] = set()
        self.slowlog = SlowLog(DEFAULTS["slowlog-max-len"])
        self.slowlog_slower_than = DEFAULTS["slowlog-log-slower-than"]
        self.latency = LatencyMonitor()
        self.latency_threshold_ms = DEFAULTS["latency-monitor-threshold"]
        self.slow_us = _NEVER
        # CLIENT PAUSE: until this wall-clock ms normal clients' commands wait (0: no pause).
        self.pause_end_ms = 0
        self.on_pause: Callable[[int], None] | None = None  # the transport's wake-up timer
        self._update_slow_us()

    # ------------------------------------------------------------ config
    def load_config(self, node: NodeApi) -> None:
        """Read the three keys from the node's config store: at start and after every
        CONFIG SET, so a change takes effect for the next command."""
        values = dict(DEFAULTS)
        for key in values:
            try:
                pairs = node.config_get(key)
            except Exception:  # a node without a store keeps Disque's defaults
                pairs = []
            for k, v in pairs:
                if k == key:
                    try:
                        values[key] = int(v)
                    except ValueError:
                        _log().warning("admin_config_not_int", key=key, value=v)
        self.slowlog_slower_than = values["slowlog-log-slower-than"]
        self.slowlog.max_len = max(0, values["slowlog-max-len"])
        self.slowlog.trim()
        self.latency_threshold_ms = values["latency-monitor-threshold"]
        self._update_slow_us()

    def _update_slow_us(self) -> None:
        # The one threshold execute() compares with: the lower of the enabled ones.
        slow = self.slowlog_slower_than if self.slowlog_slower_than >= 0 else _NEVER
        lat = self.latency_threshold_ms * 1000 if self.latency_threshold_ms > 0 else _NEVER
        self.slow_us = min(slow, lat)

    # ------------------------------------------------------------ clients
    def register(self, c: ClientView, now_ms: int) -> None:
        c.cid = self.next_id
        self.next_id += 1
        c.ctime_ms = c.last_ms = now_ms
        self.clients[c.cid] = c

    def unregister(self, c: ClientView) -> None:
        self.clients.pop(c.cid, None)
        self.monitors.discard(c)

    # ------------------------------------------------------------ MONITOR
    def feed_monitors(self, c: ClientView, argv: list[bytes], command: str | None = None) -> None:
        """replicationFeedMonitors: one status line per command to every monitor (``command``:
        the command's own name, see :func:`redact`)."""
        now = time.time()
        parts = [b"+%.6f [0 " % now, c.monitor_peer(), b"] "]
        parts.append(b" ".join(map(repr_arg, redact(argv, command))))
        parts.append(b"\r\n")
        line = b"".join(parts)
        for m in list(self.monitors):
            was_empty = not m.outbox
            m.outbox.append(line)
            m.outbox_bytes += len(line)
            if m.outbox_bytes > MONITOR_MAX_OUTPUT_BYTES:
                _log().warning(
                    "monitor_output_limit",
                    client=m.addr.decode("latin-1"),
                    bytes=m.outbox_bytes,
                )
                self.kill(m)
            elif was_empty and m.wake is not None:
                m.wake()

    def kill(self, c: ClientView) -> None:
        """Close another connection now (freeClient): its unsent output is dropped."""
        self.unregister(c)
        c.outbox.clear()
        c.outbox_bytes = 0
        c.closing = True
        if c.kill is not None:
            c.kill()

    # ------------------------------------------------------------ slow commands
    def slow(
        self,
        c: ClientView,
        argv: list[bytes],
        duration_us: int,
        fast: bool,
        command: str | None = None,
    ) -> None:
        """A command took at least :attr:`slow_us`: the slow log and the latency monitor
        each apply their own threshold (``command``: the command's own name, see
        :func:`redact`)."""
        now_s = int(time.time())
        if 0 <= self.slowlog_slower_than <= duration_us:
            self.slowlog.push(redact(argv, command), duration_us, now_s, c.addr, c.name or b"")
        thr = self.latency_threshold_ms
        if thr > 0 and duration_us // 1000 >= thr:
            self.latency.add(b"fast-command" if fast else b"command", now_s, duration_us // 1000)

    # ------------------------------------------------------------ CLIENT PAUSE
    def pause(self, end_ms: int) -> None:
        # pauseClients: a later end extends the pause, an earlier one does not shorten it.
        if end_ms > self.pause_end_ms:
            self.pause_end_ms = end_ms
            if self.on_pause is not None:
                self.on_pause(end_ms)

    def unpause(self) -> None:
        """CLIENT UNPAUSE: the transport's timer hook (called with 0) wakes everyone now."""
        if self.pause_end_ms:
            self.pause_end_ms = 0
            if self.on_pause is not None:
                self.on_pause(0)

    def paused(self, now_ms: int) -> bool:
        end = self.pause_end_ms
        if end and now_ms > end:  # over once passed: now_ms is truncated (core/timers.py)
            self.pause_end_ms = 0
            return False
        return end != 0
