"""Disque's command set on the RESP port: argument parsing, checks and reply formatting.

Sans-IO like the door that drives it (:mod:`disq.server.resp_door`): a handler takes the
per-connection :class:`Client`, the command's arguments and the clock reading, calls the job
core (:class:`~disq.core.cluster.ClusterCore`) or the node (:class:`NodeApi`), and returns the
encoded reply, or :data:`~disq.core.cluster_api.PENDING` when the command blocks (GETJOB
without jobs, synchronous ADDJOB): the answer then comes through ``core.replies`` and
:meth:`Client.take_deferred` formats it.

Everything a client can observe follows Disque 1.0 (``server.c`` command table and
``processCommand``, ``job.c``, ``queue.c``, ``ack.c``, ``cluster.c``, ``config.c``,
``debug.c``, ``networking.c``): the order in which options are parsed (so which error wins
when several apply), the exact error strings, and the reply types (ADDJOB's id is a status
reply, HELLO's port a bulk string, QSCAN's cursor a bulk string, JSCAN's ids status replies).
Numbers are parsed like Redis 3's ``getLongLongFromObject`` (``strtoll`` on the C string:
``+5``, ``007`` and even the empty string are numbers, `` 5`` is not), cursors like
``strtoul`` (``-1`` wraps around).

Deliberate differences, each marked where it lives: ECHO, SELECT, CLIENT SETINFO and
SHUTDOWN NOSAVE|SAVE exist so Redis clients (redis-py, redis-cli) connect; DEBUG DROP-PEERS
is disq's fault-injection hook for the cluster lab; CLIENT LIST/KILL/PAUSE/REPLY, MONITOR,
SLOWLOG, LATENCY and LOADJOB are not served.

Names of queues are bytes on the wire and ``str`` in the core: they are decoded as UTF-8 with
``surrogateescape``, so any byte string round-trips. Job ids are decoded as Latin-1 (one char
per byte), so an id's length and positions are those Disque checks.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

from disq.core.cluster_api import PENDING, DeferredResult, DisqueError, Pending
from disq.core.djob import STATE_BY_NAME, DJob
from disq.core.messages import PAUSE_IN, PAUSE_OUT
from disq.protocol import resp

if TYPE_CHECKING:
    from disq.core.cluster import ClusterCore

DISQUE_VERSION = "1.0-rc1"  # the Disque release whose protocol the RESP port speaks

# ------------------------------------------------------------------ shared replies
OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NULL_BULK = b"$-1\r\n"
NULL_ARRAY = b"*-1\r\n"
EMPTY_ARRAY = b"*0\r\n"
SYNTAX_ERR = b"-ERR syntax error\r\n"
NOAUTH_ERR = b"-NOAUTH Authentication required.\r\n"
BADID_ERR = b"-BADID Invalid Job ID format.\r\n"
NOT_AN_INT_ERR = b"-ERR value is not an integer or out of range\r\n"
TIMEOUT_NOT_INT_ERR = b"-ERR timeout is not an integer or out of range\r\n"
TIMEOUT_NEGATIVE_ERR = b"-ERR timeout is negative\r\n"
CURSOR_ERR = b"-ERR invalid cursor or option name\r\n"  # Disque's parseScanCursorOrReply

_LLONG_MAX = (1 << 63) - 1
_ULONG_MAX = (1 << 64) - 1
_ISSPACE = frozenset(b" \t\n\v\f\r")
_SIGNS = frozenset(b"+-")
_JOB_ID_LEN = 40
_CRLF = b"\r\n"


# ------------------------------------------------------------------ number parsing
def _c_number(s: bytes) -> tuple[bool, int] | None:
    """``strtol``'s view of ``s`` as Redis checks it: (negative, magnitude), or None.

    Redis reads arguments as C strings, so a NUL ends them. A leading blank is refused
    (Redis tests ``isspace(s[0])``), trailing junk too (``eptr[0] != '\\0'``); the empty
    string is a valid 0 (``strtoll("")`` consumes nothing and stops at the NUL).
    """
    nul = s.find(b"\0")
    if nul >= 0:
        s = s[:nul]
    if not s:
        return (False, 0)
    neg = False
    if s[0] in _SIGNS:
        neg = s[0] == 0x2D
        s = s[1:]
    if not s.isdigit():  # ASCII digits only; b"" (a lone sign) is not a number
        return None
    digits = s.lstrip(b"0")
    if len(digits) > 20:  # past any 64-bit value; also keeps int() away from huge strings
        return None
    return (neg, int(digits) if digits else 0)


def parse_ll(s: bytes) -> int | None:
    """``getLongLongFromObject``: a signed 64-bit integer, or None (ERANGE or junk)."""
    r = _c_number(s)
    if r is None:
        return None
    neg, mag = r
    if neg:
        return -mag if mag <= _LLONG_MAX + 1 else None
    return mag if mag <= _LLONG_MAX else None


def parse_cursor(s: bytes) -> int | None:
    """``strtoul`` as ``parseScanCursorOrReply`` uses it: ``-n`` wraps around modulo 2**64
    (C's unsigned negation), only a magnitude past 2**64-1 is out of range."""
    r = _c_number(s)
    if r is None:
        return None
    neg, mag = r
    if mag > _ULONG_MAX:
        return None
    return (-mag) & _ULONG_MAX if neg else mag


_STRTOD_PREFIX = re.compile(rb"[ \t\n\v\f\r]*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")


def parse_strtod(s: bytes) -> float:
    """``strtod`` without error checks, as DEBUG SLEEP uses it: the leading number, else 0."""
    m = _STRTOD_PREFIX.match(s)
    return float(m.group(1)) if m else 0.0


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


# ------------------------------------------------------------------ node interface
class NodeEntry(NamedTuple):
    """One cluster member as HELLO and CLUSTER NODES show it (this node included)."""

    node_id: str  # 40 hex chars
    host: str
    client_port: int  # the RESP port clients should use
    state: str  # messages.MEMBER_STATE_NAMES: alive | suspect | dead | left
    leaving: bool
    priority: int  # HELLO priority: 1 ok, 5 no link, 10 suspect, 100 dead or leaving


@dataclass(slots=True)
class RespStats:
    """Counters of the RESP port, kept by the doors and the transport, read by INFO."""

    commands: int = 0  # total_commands_processed
    connections_received: int = 0  # total_connections_received
    rejected_connections: int = 0
    net_input_bytes: int = 0  # total_net_input_bytes
    net_output_bytes: int = 0  # total_net_output_bytes
    calls: dict[str, list[int]] = field(default_factory=dict)  # name -> [calls, usec]

    def reset(self) -> None:
        """CONFIG RESETSTAT (resetServerStats + resetCommandTableStats)."""
        self.commands = 0
        self.connections_received = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.calls.clear()


# Disque's INFO keys per section, in its order (server.c genDisqueInfoString), for the node's
# info_fields: tests and tools parse these names. Persistence adds aof_current_size,
# aof_base_size, aof_pending_rewrite, aof_buffer_length, aof_rewrite_buffer_length,
# aof_pending_bio_fsync and aof_delayed_fsync while the AOF is on.
DISQUE_INFO_KEYS: dict[str, tuple[str, ...]] = {
    "server": (
        "disque_version",
        "disque_git_sha1",
        "disque_git_dirty",
        "disque_build_id",
        "os",
        "arch_bits",
        "multiplexing_api",
        "gcc_version",
        "process_id",
        "run_id",
        "tcp_port",
        "uptime_in_seconds",
        "uptime_in_days",
        "hz",
        "executable",
        "config_file",
    ),
    "clients": (
        "connected_clients",
        "client_longest_output_list",
        "client_biggest_input_buf",
        "blocked_clients",
    ),
    "memory": (
        "used_memory",
        "used_memory_human",
        "used_memory_rss",
        "used_memory_peak",
        "used_memory_peak_human",
        "mem_fragmentation_ratio",
        "mem_allocator",
    ),
    "persistence": (
        "loading",
        "aof_enabled",
        "aof_state",
        "aof_rewrite_in_progress",
        "aof_rewrite_scheduled",
        "aof_last_rewrite_time_sec",
        "aof_current_rewrite_time_sec",
        "aof_last_bgrewrite_status",
        "aof_last_write_status",
    ),
    "stats": (
        "total_connections_received",
        "total_commands_processed",
        "instantaneous_ops_per_sec",
        "total_net_input_bytes",
        "total_net_output_bytes",
        "instantaneous_input_kbps",
        "instantaneous_output_kbps",
        "rejected_connections",
        "latest_fork_usec",
    ),
    "cpu": ("used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"),
}


def bytes_to_human(n: int) -> str:
    """bytesToHuman, for used_memory_human: ``100B``, ``2.00K``, ``1.50M``, ..."""
    if n < 1024:
        return f"{n}B"
    for unit, shift in (("K", 10), ("M", 20), ("G", 30), ("T", 40), ("P", 50)):
        if n < 1 << (shift + 10):
            return f"{n / (1 << shift):.2f}{unit}"
    return f"{n}B"


class NodeApi(Protocol):
    """What the RESP commands need from the node besides the job core. The node implements
    it; tests use a fake. Methods that can fail raise :class:`DisqueError`, whose code and
    message become the reply (``-ERR <message>`` for code ``ERR``)."""

    @property
    def core(self) -> ClusterCore:
        """The job core. Its ``view`` gives this node's id (HELLO, CLUSTER MYID)."""
        ...

    @property
    def requirepass(self) -> str | None:
        """The password clients must AUTH with, or None. Read on every command, so CONFIG
        SET requirepass takes effect at once for every connection, as in Disque."""
        ...

    @property
    def aof_error(self) -> str | None:
        """Why the last AOF write failed (strerror text), or None. While set, write commands
        and PING get ``-MISCONF Errors writing to the AOF file: <text>``."""
        ...

    @property
    def resp_stats(self) -> RespStats:
        """Shared counters: the doors count commands, the transport connections."""
        ...

    def now_ms(self) -> int:
        """Wall clock in ms: passed to the core (TTL, ctime) and used by TIME."""
        ...

    def info_fields(self, section: str) -> list[tuple[str, str | int | float]]:
        """The ``key:value`` lines of one INFO section, in order. ``section`` is one of
        ``server clients memory persistence stats cpu`` (Jobs and Queues come from the core).
        Floats print with two decimals. Disque's keys: server ``disque_version``, ``run_id``,
        ``tcp_port``, ``uptime_in_seconds``, ...; clients ``connected_clients``,
        ``blocked_clients``, ...; memory ``used_memory``, ...; persistence ``aof_enabled``,
        ``aof_state``, ...; stats ``total_connections_received``,
        ``total_commands_processed`` (from ``resp_stats``), ...; cpu ``used_cpu_sys``, ..."""
        ...

    def cluster_nodes(self) -> list[NodeEntry]:
        """Every known node, this one included (HELLO lists them all, as Disque does)."""
        ...

    def cluster_meet(self, host: str, port: int) -> bool:
        """Start joining the node at host:port (its RESP port). False: the address is
        invalid (``Invalid node address specified``). The join itself is asynchronous."""
        ...

    def cluster_forget(self, node_id: str) -> None:
        """Forget a known peer (never this node; the command checks both)."""
        ...

    def cluster_leaving(self, flag: bool | None) -> bool:
        """Set this node's leaving flag (unless None) and return it; gossip spreads it."""
        ...

    def cluster_reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every peer; ``hard`` also takes a new node id."""
        ...

    def cluster_info(self) -> list[tuple[str, str | int]]:
        """CLUSTER INFO lines: cluster_state, cluster_known_nodes, cluster_reachable_nodes,
        cluster_size, cluster_stats_messages_sent, cluster_stats_messages_received."""
        ...

    def cluster_saveconfig(self) -> None:
        """Persist the membership now (raises ``ERR error saving the cluster node config:
        <strerror>``)."""
        ...

    def config_get(self, pattern: str) -> list[tuple[str, str]]:
        """CONFIG GET: (name, value) of every parameter matching the glob pattern."""
        ...

    def config_set(self, name: str, value: str) -> None:
        """CONFIG SET. Raises ``ERR Unsupported CONFIG parameter: <name>`` or ``ERR Invalid
        argument '<value>' for CONFIG SET '<name>'``."""
        ...

    def config_rewrite(self) -> None:
        """CONFIG REWRITE. Raises ``ERR The server is running without a config file`` or
        ``ERR Rewriting config file: <strerror>``."""
        ...

    def config_resetstat(self) -> None:
        """CONFIG RESETSTAT for the node's own counters (the command resets ``resp_stats``)."""
        ...

    def shutdown(self, mode: str) -> None:
        """SHUTDOWN; mode is ``default``, ``rewrite-aof``, ``save`` or ``nosave``. Returns
        once the stop is scheduled (the client gets no reply: the server goes away); raises
        ``ERR Errors trying to SHUTDOWN. Check logs.`` when it cannot stop."""
        ...

    def bgrewriteaof(self) -> str:
        """Start an AOF rewrite; the status text to reply (``Background append only file
        rewriting started``). Raises an ERR when one is already running or AOF is off."""
        ...

    def debug_sleep(self, seconds: float) -> None:
        """DEBUG SLEEP: stall the whole node for ``seconds`` (Disque blocks its event loop;
        the cluster lab uses it to fake a hung node)."""
        ...

    def drop_peers(self, node_ids: list[str]) -> None:
        """DEBUG DROP-PEERS (disq extension): drop every message to and from these peers
        until the next call; an empty list heals. Fault injection for the cluster lab."""
        ...


# ------------------------------------------------------------------ per connection
Deferred = Callable[[DeferredResult], bytes]


class Client:
    """One connection's state: authentication, name, and the command it is blocked on."""

    __slots__ = (
        "authenticated",
        "closing",
        "deferred",
        "lib_name",
        "lib_ver",
        "name",
        "new_token",
        "node",
        "pending_token",
    )

    def __init__(self, node: NodeApi, new_token: Callable[[], int]) -> None:
        self.node = node
        self.new_token = new_token  # unique across every door of the node
        self.authenticated = False  # only consulted while a password is set
        self.closing = False  # QUIT, SHUTDOWN or a protocol error: close after the replies
        self.name: bytes | None = None
        self.lib_name: bytes | None = None
        self.lib_ver: bytes | None = None
        self.pending_token: int | None = None
        self.deferred: Deferred | None = None

    def block(self, token: int, deferred: Deferred) -> Pending:
        self.pending_token = token
        self.deferred = deferred
        return PENDING

    def take_deferred(self, result: DeferredResult) -> bytes:
        """The deferred reply of the blocked command, which unblocks the connection."""
        deferred = self.deferred
        self.deferred = None
        self.pending_token = None
        if deferred is None:
            return b""
        return deferred(result)


# ------------------------------------------------------------------ the command table
Handler = Callable[[Client, list[bytes], int], "bytes | Pending"]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One row of Disque's ``serverCommandTable``: arity N means exactly N arguments
    (the name included), -N at least N; flags are Disque's letters."""

    name: str
    handler: Handler
    arity: int
    flags: str
    first_key: int = 0
    last_key: int = 0
    key_step: int = 0

    @property
    def write(self) -> bool:
        return "w" in self.flags


_FLAG_NAMES = (
    ("w", "write"),
    ("r", "readonly"),
    ("m", "denyoom"),
    ("a", "admin"),
    ("l", "loading"),
    ("M", "skip_monitor"),
    ("F", "fast"),
)


def execute(client: Client, argv: list[bytes], now_ms: int) -> bytes | Pending:
    """processCommand: QUIT, lookup, arity, AUTH, MISCONF, then the command. Disque checks
    the name and the arity before authentication, so an unknown command gets its error even
    from a client that has not authenticated."""
    name = argv[0].lower()
    if name == b"quit":
        client.closing = True
        return OK
    spec = COMMANDS.get(name)
    if spec is None:
        return _err_arg(b"ERR unknown command '", argv[0], b"'")
    arity = spec.arity
    argc = len(argv)
    if (arity > 0 and arity != argc) or argc < -arity:
        return b"-ERR wrong number of arguments for '%s' command\r\n" % spec.name.encode()
    node = client.node
    if not client.authenticated and spec.handler is not _auth and node.requirepass:
        return NOAUTH_ERR
    if (spec.write or spec.handler is _ping) and node.aof_error is not None:
        return _err("MISCONF Errors writing to the AOF file: " + node.aof_error)
    stats = node.resp_stats
    stats.commands += 1
    t0 = time.perf_counter_ns()
    try:
        out = spec.handler(client, argv, now_ms)
    except DisqueError as exc:
        out = _disque_error(exc)
    calls = stats.calls.get(spec.name)
    if calls is None:
        calls = stats.calls[spec.name] = [0, 0]
    calls[0] += 1
    calls[1] += (time.perf_counter_ns() - t0) // 1000
    return out


# ------------------------------------------------------------------ jobs
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
    b"maxlen": (1, _LLONG_MAX, b"-ERR MAXLEN must be a positive number\r\n"),
}


def _addjob(c: Client, argv: list[bytes], now_ms: int) -> bytes | Pending:
    """ADDJOB queue body ms-timeout [REPLICATE n] [DELAY s] [RETRY s] [TTL s] [MAXLEN n]
    [ASYNC] [IDEMPOTENCY-KEY key]. Options are checked before the timeout, as in
    addjobCommand; the checks that combine options (RETRY 0 with REPLICATE > 1, DELAY >=
    TTL) and the defaults are the core's, since they depend on the cluster size."""
    numbers: dict[bytes, int] = {}  # REPLICATE, TTL, RETRY, DELAY, MAXLEN
    async_ = False
    idem_key = ""
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
                return error
            numbers[opt] = v
            j += 1
        elif opt == b"async":
            async_ = True
        elif opt == b"idempotency-key" and more:
            # disq's addition: a retried add with the same key (same queue, within the
            # node's window) answers the first job's id instead of adding another.
            if not argv[j + 1]:
                return b"-ERR IDEMPOTENCY-KEY must not be empty\r\n"
            idem_key = queue_name(argv[j + 1])
            j += 1
        else:
            return SYNTAX_ERR
        j += 1
    timeout = _timeout(argv[3])
    if isinstance(timeout, bytes):
        return timeout
    token = c.new_token()
    r = c.node.core.add_job(
        now_ms,
        token,
        queue_name(argv[1]),
        argv[2],
        timeout_ms=timeout,
        repl=numbers.get(b"replicate"),
        delay_s=numbers.get(b"delay", 0),
        retry_s=numbers.get(b"retry"),
        ttl_s=numbers.get(b"ttl"),
        maxlen=numbers.get(b"maxlen"),
        async_=async_,
        idem_key=idem_key,
    )
    if isinstance(r, Pending):
        return c.block(token, _addjob_deferred)
    return b"+" + _id_bytes(r) + _CRLF


def _addjob_deferred(result: DeferredResult) -> bytes:
    if isinstance(result, str):
        return b"+" + _id_bytes(result) + _CRLF
    if isinstance(result, DisqueError):
        return _disque_error(result)
    return _err(f"ERR internal error: unexpected ADDJOB result {type(result).__name__}")


_COUNTERS = b"$5\r\nnacks\r\n:%d\r\n$21\r\nadditional-deliveries\r\n:%d\r\n"


def _job_entry(j: DJob, withcounters: bool, out: list[bytes]) -> None:
    """addReplyJob: ``[queue, id, body]``, plus the counters as key/value pairs."""
    q = queue_bytes(j.queue)
    jid = _id_bytes(j.id)
    body = j.body
    out.append(
        b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n"
        % (b"*7\r\n" if withcounters else b"*3\r\n", len(q), q, len(jid), jid, len(body))
    )
    out.append(body)
    out.append(_CRLF)
    if withcounters:
        out.append(_COUNTERS % (j.nacks, j.add_deliveries))


def _jobs_reply(jobs: list[DJob], withcounters: bool) -> bytes:
    out = [b"*%d\r\n" % len(jobs)]
    for j in jobs:
        _job_entry(j, withcounters, out)
    return b"".join(out)


def _getjob_deferred(withcounters: bool) -> Deferred:
    def deferred(result: DeferredResult) -> bytes:
        if result is None:
            return NULL_ARRAY  # timed out
        if isinstance(result, list):
            return _jobs_reply(result, withcounters)
        if isinstance(result, DisqueError):
            return _disque_error(result)  # LEAVING for clients already blocked
        return _err(f"ERR internal error: unexpected GETJOB result {type(result).__name__}")

    return deferred


_GETJOB_PLAIN = _getjob_deferred(False)
_GETJOB_COUNTERS = _getjob_deferred(True)


def _getjob(c: Client, argv: list[bytes], now_ms: int) -> bytes | Pending:
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM q1 ... qN: options only
    before FROM, everything after FROM is a queue name."""
    timeout = 0
    count = 1
    nohang = False
    withcounters = False
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
    )
    if r is None:
        return NULL_ARRAY
    if isinstance(r, Pending):
        return c.block(token, _GETJOB_COUNTERS if withcounters else _GETJOB_PLAIN)
    return _jobs_reply(r, withcounters)


def _ids_command(method: Callable[[ClusterCore, int, list[str]], int]) -> Handler:
    """ACKJOB, FASTACK, DELJOB, ENQUEUE, NACK, DEQUEUE: all ids valid, then an integer."""

    def handler(c: Client, argv: list[bytes], now_ms: int) -> bytes:
        ids = _job_ids(argv[1:])
        if ids is None:
            return BADID_ERR
        return b":%d\r\n" % method(c.node.core, now_ms, ids)

    return handler


def _core_ackjob(core: ClusterCore, now_ms: int, ids: list[str]) -> int:
    return core.ack_job(now_ms, ids)


def _core_fastack(core: ClusterCore, now_ms: int, ids: list[str]) -> int:
    return core.fast_ack(now_ms, ids)


def _core_deljob(core: ClusterCore, now_ms: int, ids: list[str]) -> int:
    return core.del_job(now_ms, ids)


def _core_enqueue(core: ClusterCore, now_ms: int, ids: list[str]) -> int:
    return core.enqueue(now_ms, ids)


def _core_nack(core: ClusterCore, now_ms: int, ids: list[str]) -> int:
    return core.nack(now_ms, ids)


def _core_dequeue(core: ClusterCore, now_ms: int, ids: list[str]) -> int:
    return core.dequeue(now_ms, ids)


def _working(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if not _valid_id(argv[1]):
        return BADID_ERR
    return b":%d\r\n" % c.node.core.working(now_ms, argv[1].decode("latin-1"))


def _value(key: str, v: object, out: list[bytes]) -> None:
    """One value of a SHOW / QSTAT pair, typed as Disque sends it."""
    if v is None:
        out.append(NULL_BULK)
    elif isinstance(v, int):
        out.append(b":%d\r\n" % v)
    elif isinstance(v, bytes):
        out.append(_bulk(v))
    elif isinstance(v, str):
        out.append(_bulk(_id_bytes(v) if key == "id" else queue_bytes(v)))
    elif isinstance(v, list | tuple | set | frozenset):
        items = sorted(v) if isinstance(v, set | frozenset) else v
        out.append(b"*%d\r\n" % len(items))
        for item in items:
            out.append(_bulk(str(item).encode()))
    else:
        raise TypeError(f"cannot send {type(v).__name__} in a key/value reply")


def _pairs(pairs: list[tuple[str, object]], out: list[bytes]) -> None:
    out.append(b"*%d\r\n" % (2 * len(pairs)))
    for k, v in pairs:
        out.append(_bulk(k.encode()))
        _value(k, v, out)


def _show(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if not _valid_id(argv[1]):
        return BADID_ERR
    pairs = c.node.core.show(now_ms, argv[1].decode("latin-1"))
    if pairs is None:
        return NULL_BULK
    out: list[bytes] = []
    _pairs(pairs, out)
    return b"".join(out)


# ------------------------------------------------------------------ queues
def _qlen(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    return b":%d\r\n" % c.node.core.qlen(queue_name(argv[1]))


def _qstat(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    pairs = c.node.core.qstat(now_ms, queue_name(argv[1]))
    if pairs is None:
        return NULL_ARRAY
    out: list[bytes] = []
    _pairs(pairs, out)
    return b"".join(out)


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


_QSCAN_NUMBERS = frozenset((b"count", b"minlen", b"maxlen", b"importrate"))


def _qscan(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE r]: the first
    argument that is not an option is the cursor, wherever it is; a second one is a syntax
    error. An option word without its value is taken as the cursor (and is not one)."""
    numbers: dict[bytes, int] = {}  # COUNT, MINLEN, MAXLEN, IMPORTRATE
    busyloop = False
    cursor = 0
    cursor_set = False
    n = len(argv)
    j = 1
    while j < n:
        opt = argv[j].lower()
        if opt in _QSCAN_NUMBERS and j < n - 1:
            v = parse_ll(argv[j + 1])
            if v is None:
                return NOT_AN_INT_ERR
            numbers[opt] = v
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
    count = numbers.get(b"count", 100)
    minlen = numbers.get(b"minlen")
    maxlen = numbers.get(b"maxlen")
    importrate = numbers.get(b"importrate")
    nxt, names = c.node.core.qscan(
        cursor,
        count,
        busyloop=busyloop,
        minlen=minlen,
        maxlen=maxlen,
        importrate=importrate,
        now_ms=now_ms,
    )
    return _scan_reply(nxt, [_bulk(queue_bytes(q)) for q in names])


def _jscan(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s]... [REPLY all|id]."""
    count = 100
    busyloop = False
    queue: str | None = None
    states: set[int] = set()
    reply_all = False
    cursor = 0
    cursor_set = False
    n = len(argv)
    j = 1
    while j < n:
        opt = argv[j].lower()
        more = j < n - 1
        if opt == b"count" and more:
            v = parse_ll(argv[j + 1])
            if v is None:
                return NOT_AN_INT_ERR
            count = v
            j += 1
        elif opt == b"busyloop":
            busyloop = True
        elif opt == b"queue" and more:
            queue = queue_name(argv[j + 1])
            j += 1
        elif opt == b"state" and more:
            st = STATE_BY_NAME.get(argv[j + 1].lower().decode("latin-1"))
            if st is None:
                return b"-ERR Invalid job state name\r\n"
            states.add(st)
            j += 1
        elif opt == b"reply" and more:
            kind = argv[j + 1].lower()
            if kind == b"id":
                reply_all = False
            elif kind == b"all":
                reply_all = True
            else:
                return b"-ERR Invalid REPLY type, try ID or ALL\r\n"
            j += 1
        else:
            if cursor_set:
                return SYNTAX_ERR
            cur = parse_cursor(argv[j])
            if cur is None:
                return CURSOR_ERR
            cursor = cur
            cursor_set = True
        j += 1
    core = c.node.core
    nxt, jobs = core.jscan(cursor, count, busyloop=busyloop, queue=queue, states=states or None)
    items: list[bytes] = []
    for job in jobs:
        if not job.delivered:
            continue  # jscanCallback skips the dummy jobs that only hold an ACK
        if reply_all:
            pairs = core.show(now_ms, job.id)
            if pairs is None:
                items.append(NULL_BULK)
                continue
            out: list[bytes] = []
            _pairs(pairs, out)
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


# ------------------------------------------------------------------ cluster
def _hello(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """``[1, myid, [id, ip, port, priority]...]``; port and priority are bulk strings."""
    node = c.node
    nodes = node.cluster_nodes()
    out = [b"*%d\r\n:1\r\n" % (2 + len(nodes)), _bulk(node.core.view.my_id.encode())]
    for e in nodes:
        out.append(b"*4\r\n")
        out.append(_bulk(e.node_id.encode()))
        out.append(_bulk(e.host.encode()))
        out.append(_bulk(b"%d" % e.client_port))
        out.append(_bulk(b"%d" % e.priority))
    return b"".join(out)


_NODE_FLAGS = {"suspect": "fail?", "dead": "fail"}


def _node_line(e: NodeEntry, my_id: str) -> bytes:
    """clusterGenNodeDescription: ``id ip:port flags ping_sent pong_received link``. disq
    has no ping timestamps to show (SWIM probes are not per-pair), so they are 0."""
    flags = []
    if e.node_id == my_id:
        flags.append("myself")
    if e.state in _NODE_FLAGS:
        flags.append(_NODE_FLAGS[e.state])
    if e.leaving:
        flags.append("leaving")
    link = "connected" if e.node_id == my_id or e.priority != 5 else "disconnected"
    return (
        f"{e.node_id} {e.host}:{e.client_port} {','.join(flags) or 'noflags'} 0 0 {link}\n"
    ).encode()


def _cluster(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    node = c.node
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"meet" and argc == 4:
        port = parse_ll(argv[3])
        if port is None:
            return _err_arg(b"ERR Invalid TCP port specified: ", argv[3])
        if not node.cluster_meet(argv[2].decode("utf-8", "replace"), port):
            return _err_arg(b"ERR Invalid node address specified: ", argv[2] + b":" + argv[3])
        return OK
    if sub == b"nodes" and argc == 2:
        my_id = node.core.view.my_id
        return _bulk(b"".join(_node_line(e, my_id) for e in node.cluster_nodes()))
    if sub == b"myid" and argc == 2:
        return _bulk(node.core.view.my_id.encode())
    if sub == b"info" and argc == 2:
        return _bulk("".join(f"{k}:{v}\r\n" for k, v in node.cluster_info()).encode())
    if sub == b"saveconfig" and argc == 2:
        node.cluster_saveconfig()
        return OK
    if sub == b"forget" and argc == 3:
        if len(argv[2]) != 40:
            return b"-ERR Invalid node identifier\r\n"
        target = argv[2].decode("latin-1")
        if target == node.core.view.my_id:
            return b"-ERR I tried hard but I can't forget myself...\r\n"
        if all(e.node_id != target for e in node.cluster_nodes()):
            return _err_arg(b"ERR Unknown node ", argv[2])
        node.cluster_forget(target)
        return OK
    if sub == b"reset" and argc in (2, 3):
        hard = False
        if argc == 3:
            mode = argv[2].lower()
            if mode == b"hard":
                hard = True
            elif mode != b"soft":
                return SYNTAX_ERR
        node.cluster_reset(hard)
        return OK
    if sub == b"leaving" and argc in (2, 3):
        if argc == 2:
            return b"+yes\r\n" if node.cluster_leaving(None) else b"+no\r\n"
        flag = argv[2].lower()
        if flag == b"yes":
            node.cluster_leaving(True)
            return OK
        if flag == b"no":
            node.cluster_leaving(False)
            return OK
        return b"-ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'\r\n"
    return b"-ERR Wrong CLUSTER subcommand or number of arguments\r\n"


# ------------------------------------------------------------------ server
_INFO_SECTIONS = (
    ("server", "Server"),
    ("clients", "Clients"),
    ("memory", "Memory"),
    ("jobs", "Jobs"),
    ("queues", "Queues"),
    ("persistence", "Persistence"),
    ("stats", "Stats"),
    ("cpu", "CPU"),
)


def _info_value(v: str | int | float) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def info_text(node: NodeApi, section: str) -> str:
    """genDisqueInfoString: ``# Title\\r\\nkey:value\\r\\n...`` per section, a blank line
    between sections; ``default`` and ``all`` give every section (``all`` adds
    Commandstats); an unknown section gives an empty string."""
    section = section.lower()
    every = section in ("default", "all")
    parts: list[str] = []
    for key, title in _INFO_SECTIONS:
        if not every and section != key:
            continue
        if key == "jobs":
            fields: list[tuple[str, str | int | float]] = [("registered_jobs", len(node.core.jobs))]
        elif key == "queues":
            fields = [("registered_queues", len(node.core.queues))]
        else:
            fields = node.info_fields(key)
        lines = "".join(f"{k}:{_info_value(v)}\r\n" for k, v in fields)
        parts.append(f"# {title}\r\n{lines}")
    if section in ("all", "commandstats"):
        lines = "".join(
            f"cmdstat_{name}:calls={calls},usec={usec},usec_per_call={usec / calls:.2f}\r\n"
            for name, (calls, usec) in node.resp_stats.calls.items()
            if calls
        )
        parts.append(f"# Commandstats\r\n{lines}")
    return "\r\n".join(parts)


def _info(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if len(argv) > 2:
        return SYNTAX_ERR
    section = argv[1].decode("latin-1") if len(argv) == 2 else "default"
    return _bulk(info_text(c.node, section).encode())


def _ping(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if len(argv) > 2:
        return b"-ERR wrong number of arguments for 'ping' command\r\n"
    return PONG if len(argv) == 1 else _bulk(argv[1])


def _echo(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    # Redis's ECHO, for clients that probe with it; Disque has none.
    return _bulk(argv[1])


def _time(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    # The node's clock is in ms (the door is sans-IO): microseconds are a multiple of 1000.
    now = c.node.now_ms()
    return b"*2\r\n" + _bulk(b"%d" % (now // 1000)) + _bulk(b"%d" % (now % 1000 * 1000))


def _command_entry(spec: CommandSpec | None) -> bytes:
    """addReplyCommand: name, arity, flags (status replies), first key, last key, step."""
    if spec is None:
        return NULL_BULK
    flags = [b"+" + name.encode() + _CRLF for letter, name in _FLAG_NAMES if letter in spec.flags]
    return b"".join(
        [
            b"*6\r\n",
            _bulk(spec.name.encode()),
            b":%d\r\n*%d\r\n" % (spec.arity, len(flags)),
            *flags,
            b":%d\r\n:%d\r\n:%d\r\n" % (spec.first_key, spec.last_key, spec.key_step),
        ]
    )


def _command(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    if len(argv) == 1:
        return b"*%d\r\n" % len(COMMANDS) + b"".join(map(_command_entry, COMMANDS.values()))
    sub = argv[1].lower()
    if sub == b"info":
        names = argv[2:]
        return b"*%d\r\n" % len(names) + b"".join(
            _command_entry(COMMANDS.get(n.lower())) for n in names
        )
    if sub == b"count" and len(argv) == 2:
        return b":%d\r\n" % len(COMMANDS)
    return b"-ERR Unknown subcommand or wrong number of arguments.\r\n"


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
        out = [b"*%d\r\n" % (2 * len(pairs))]
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
    # Constant time, like time_independent_strcmp.
    if hmac.compare_digest(argv[1], pw.encode("utf-8", "surrogateescape")):
        c.authenticated = True
        return OK
    c.authenticated = False
    return b"-ERR invalid password\r\n"


_CLIENT_SYNTAX = (
    b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)\r\n"
)


def _printable(b: bytes) -> bool:
    return all(0x21 <= x <= 0x7E for x in b)


def _client(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    sub = argv[1].lower()
    argc = len(argv)
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


def _select(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    # Redis's SELECT, for clients configured with a db: Disque has one keyspace, db 0.
    db = parse_ll(argv[1])
    if db is None:
        return b"-ERR invalid DB index\r\n"
    if db != 0:
        return b"-ERR DB index is out of range\r\n"
    return OK


# Disque's table order (server.c), then the Redis commands clients need.
COMMANDS: dict[bytes, CommandSpec] = {
    spec.name.encode(): spec
    for spec in (
        CommandSpec("auth", _auth, 2, "rlF"),
        CommandSpec("ping", _ping, -1, "rF"),
        CommandSpec("info", _info, -1, "rl"),
        CommandSpec("shutdown", _shutdown, -1, "arl"),
        CommandSpec("debug", _debug, -2, "a"),
        CommandSpec("config", _config, -2, "ar"),
        CommandSpec("cluster", _cluster, -2, "ar"),
        CommandSpec("client", _client, -2, "ar"),
        CommandSpec("time", _time, 1, "rF"),
        CommandSpec("command", _command, 0, "rl"),
        CommandSpec("hello", _hello, 1, "rF"),
        CommandSpec("addjob", _addjob, -4, "wmF"),
        CommandSpec("getjob", _getjob, -2, "wF"),
        CommandSpec("ackjob", _ids_command(_core_ackjob), -1, "wF"),
        CommandSpec("fastack", _ids_command(_core_fastack), -1, "wF"),
        CommandSpec("deljob", _ids_command(_core_deljob), -1, "wF"),
        CommandSpec("show", _show, 2, "rF"),
        CommandSpec("bgrewriteaof", _bgrewriteaof, 1, "ar"),
        CommandSpec("qlen", _qlen, 2, "rF"),
        CommandSpec("qpeek", _qpeek, 3, "r"),
        CommandSpec("qstat", _qstat, 2, "rF"),
        CommandSpec("qscan", _qscan, -1, "r"),
        CommandSpec("jscan", _jscan, -1, "r"),
        CommandSpec("enqueue", _ids_command(_core_enqueue), -1, "mwF"),
        CommandSpec("nack", _ids_command(_core_nack), -1, "mwF"),
        CommandSpec("dequeue", _ids_command(_core_dequeue), -1, "wF"),
        CommandSpec("working", _working, 2, "wF"),
        CommandSpec("pause", _pause, -3, "rF"),
        # Not in Disque: Redis commands that Redis clients send.
        CommandSpec("echo", _echo, 2, "rF"),
        CommandSpec("select", _select, 2, "rlF"),
    )
}
