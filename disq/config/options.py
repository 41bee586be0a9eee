"""The option table: every directive Disque knows (and disq's own), with its kind, default and
parsers, and the value parsers. File parsers raise ``_Invalid`` (Disque's reason); CONFIG SET
parsers raise ``_Invalid`` too and the store turns it into "Invalid argument '...' for CONFIG
SET '...'".
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from disq.config.errors import ConfigSetError, _Invalid, _Unsupported
from disq.config.syntax import LLONG_MAX, _encode, parse_memory

AUTHPASS_MAX_LEN = 512
BINDADDR_MAX = 16
MIN_HZ, MAX_HZ = 1, 500
CLIENT_CLASSES = ("normal", "slave", "pubsub")
# Redis's defaults for the classes Disque's sample file names (Disque itself knows "normal").
CLIENT_LIMIT_DEFAULTS: dict[str, tuple[int, int, int]] = {
    "normal": (0, 0, 0),
    "slave": (256 << 20, 64 << 20, 60),
    "pubsub": (32 << 20, 8 << 20, 60),
}

# Reasons, verbatim from Disque's config.c (and Redis 7 where Disque had none).
BAD_DIRECTIVE = "Bad directive or wrong number of arguments"
UNBALANCED = "Unbalanced quotes in configuration line"
YES_NO = "argument must be 'yes' or 'no'"
NOT_AN_INTEGER = "argument couldn't be parsed into an integer"
NOT_MEMORY = "argument must be a memory value"
DAEMONIZE_REFUSED = (
    "daemonize yes is not supported: disq-node always stays in the foreground "
    "(let systemd, a container runtime or supervisord run it in the background)"
)

_ATOI_RE = re.compile(r"[+-]?[0-9]+")
_LL_RE = re.compile(r"-?(?:0|[1-9][0-9]*)")  # string2ll: no '+', no leading zeros

Parser = Callable[[str], str]


def _file_int(reason: str, lo: int = -LLONG_MAX - 1, hi: int = LLONG_MAX) -> Parser:
    def parse(arg: str) -> str:
        if _ATOI_RE.fullmatch(arg) is None:
            raise _Invalid(reason)
        n = int(arg)
        if not lo <= n <= hi:
            raise _Invalid(reason)
        return str(n)

    return parse


def _set_int(lo: int = 0, hi: int = LLONG_MAX) -> Parser:
    # Disque's config_set_numerical_field: getLongLongFromObject, then ll < 0 is refused
    # whatever the option, then the option's own bounds.
    def parse(arg: str) -> str:
        if _LL_RE.fullmatch(arg) is None:
            raise _Invalid("")
        n = int(arg)
        if n < 0 or not lo <= n <= hi:
            raise _Invalid("")
        return str(n)

    return parse


def _yes_no(arg: str) -> str:
    low = arg.lower()
    if low not in ("yes", "no"):
        raise _Invalid(YES_NO)
    return low


def _enum(choices: Sequence[str], reason: str) -> Parser:
    def parse(arg: str) -> str:
        low = arg.lower()
        if low not in choices:
            raise _Invalid(reason)
        return low

    return parse


def _memory(reason: str, lo: int) -> Parser:
    def parse(arg: str) -> str:
        n = parse_memory(arg)
        if n is None or n < lo:
            raise _Invalid(reason)
        return str(n)

    return parse


def _any_string(arg: str) -> str:
    return arg


def _hz_file(arg: str) -> str:
    # Hz is a hint: out-of-range values are clamped, not refused (Disque).
    if _ATOI_RE.fullmatch(arg) is None:
        raise _Invalid(NOT_AN_INTEGER)
    return str(min(max(int(arg), MIN_HZ), MAX_HZ))


def _hz_set(arg: str) -> str:
    return str(min(max(int(_set_int()(arg)), MIN_HZ), MAX_HZ))


def _octal_perm(arg: str) -> str:
    if re.fullmatch(r"[0-7]+", arg) is None or int(arg, 8) > 0o777:
        raise _Invalid("Invalid socket file permissions")
    return format(int(arg, 8), "o")


# The files disq keeps in ``dir`` under its own names (formats that are not Disque's, so that a
# Disque data directory is never read or clobbered). Disque's default names are accepted as
# aliases so that its sample disque.conf starts; any other name is refused.
AOF_NAME = "disq.aof"
VIEW_NAME = "cluster.json"


def _fixed_file(option: str, ours: str, disque: str, where: str, kind: str) -> Callable[[str], str]:
    """The check of a file name disq fixes: its own, or Disque's (read as its own)."""

    def check(arg: str) -> str:
        if arg not in (ours, disque):
            raise _Invalid(
                f"{option} '{arg}' is not supported: {where} DIR/{ours} ({kind}; Disque's "
                f"name '{disque}' is read as that)"
            )
        return ours

    return check


_aof_name = _fixed_file(
    "appendfilename", AOF_NAME, "disque.aof", "disq's AOF is always", "its own format"
)
_cluster_config_file = _fixed_file(
    "cluster-config-file", VIEW_NAME, "nodes.conf", "disq keeps the cluster view in", "JSON"
)


def _appendfilename(arg: str) -> str:
    if "/" in arg:
        raise _Invalid("appendfilename can't be a path, just a filename")
    return _aof_name(arg)


def _requirepass_file(arg: str) -> str:
    if len(_encode(arg)) > AUTHPASS_MAX_LEN:
        raise _Invalid("Password is longer than CONFIG_AUTHPASS_MAX_LEN")
    return arg


def _requirepass_set(arg: str) -> str:
    if len(_encode(arg)) > AUTHPASS_MAX_LEN:
        raise _Invalid("")
    return arg


def _daemonize(arg: str) -> str:
    if _yes_no(arg) == "yes":
        raise _Invalid(DAEMONIZE_REFUSED)
    return "no"


def _slowlog_max_len(arg: str) -> str:
    if _ATOI_RE.fullmatch(arg) is None:
        raise _Invalid(NOT_AN_INTEGER)
    if int(arg) < 0:
        raise _Invalid("slowlog-max-len can't be negative")
    return str(int(arg))


WILDCARD_HOSTS = ("0.0.0.0", "::", "*")


def advertise_host_problem(arg: str) -> str | None:
    """Why ``arg`` cannot be the address a node gives its peers and clients (None: it can).
    A host name is fine (peers resolve it when they dial); a wildcard is no one's address."""
    if not arg or any(c.isspace() for c in arg):
        return "advertise-host must be one address or host name"
    if arg in WILDCARD_HOSTS:
        return (
            f"advertise-host {arg} is a wildcard: give the address peers and clients reach "
            "this node at"
        )
    if arg.startswith("["):
        return "advertise-host: write an IPv6 address without brackets"
    return None


def _advertise_host(arg: str) -> str:
    problem = advertise_host_problem(arg)
    if problem is not None:
        raise _Invalid(problem)
    return arg


Kind = Literal["int", "bool", "enum", "memory", "string", "octal", "special"]


@dataclass(frozen=True, slots=True)
class _Option:
    name: str
    kind: Kind
    default: str | None  # canonical text; None: unset (a string option Disque keeps NULL)
    parse_file: Parser | None  # None: not a file directive (Bad directive)
    parse_set: Parser | None  # None: "Unsupported CONFIG parameter"


_LOGLEVELS = ("debug", "verbose", "notice", "warning")
_FACILITIES = ("user", *(f"local{i}" for i in range(8)))
_FSYNCS = ("always", "everysec", "no")
_POLICIES = ("acks", "noeviction")
# Disque's reasons, named so that the table below stays one option per line.
_PORT = "Invalid port"
_MAXMEM = "You need to specify a memory limit greater than zero"
_SAMPLES = "maxmemory-samples must be 1 or greater"
_TIMEOUT = "Invalid timeout value"
_KEEPALIVE = "Invalid tcp-keepalive value"
_PERCENT = "Invalid negative percentage for AOF auto rewrite"
_LATENCY = "The latency threshold can't be negative"
_BACKLOG = "Invalid backlog value"
_DATABASES = "Invalid number of databases"
_MAXCLIENTS = "Invalid max clients limit"
_NODE_TIMEOUT = "cluster node timeout must be 1 or greater"
_REPLICATE = "beanstalk-replicate must be between 1 and 65535"
_DRAIN = "drain-timeout must be 0 or greater"
_LANE_PORT = "Invalid job-lane-port: 0 (any free port), -1 (off) or a port"
_POLICY = "Invalid maxmemory policy"
_LOGLEVEL = "Invalid log level. Must be one of debug, verbose, notice, warning"
_FSYNC = "argument must be 'no', 'always' or 'everysec'"
_FACILITY = "Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7"
_O = _Option

# In Disque's CONFIG GET order (strings, numbers, yes/no, enums, specials), plus the keys it
# accepted but forgot to show, plus disq's extensions.
_OPTIONS: tuple[_Option, ...] = (
    _O("requirepass", "string", None, _requirepass_file, _requirepass_set),
    _O("unixsocket", "string", None, _any_string, None),
    _O("logfile", "string", "", _any_string, None),
    _O("pidfile", "string", "/var/run/disque.pid", _any_string, None),
    _O("appendfilename", "string", AOF_NAME, _appendfilename, None),
    _O("cluster-config-file", "string", VIEW_NAME, _cluster_config_file, None),
    _O("syslog-ident", "string", "disque", _any_string, None),
    _O("maxmemory", "memory", "0", _memory(_MAXMEM, 1), _memory("", 0)),
    _O("maxmemory-samples", "int", "5", _file_int(_SAMPLES, 1), _set_int(1)),
    _O("timeout", "int", "0", _file_int(_TIMEOUT, 0), _set_int(0)),
    _O("tcp-keepalive", "int", "0", _file_int(_KEEPALIVE, 0), _set_int(0)),
    _O("auto-aof-rewrite-percentage", "int", "100", _file_int(_PERCENT, 0), _set_int(0)),
    _O(
        "auto-aof-rewrite-min-size", "memory", str(64 << 20), _memory(NOT_MEMORY, 0), _memory("", 0)
    ),
    _O("slowlog-log-slower-than", "int", "10000", _file_int(NOT_AN_INTEGER), _set_int(0)),
    _O("latency-monitor-threshold", "int", "0", _file_int(_LATENCY, 0), _set_int(0)),
    _O("slowlog-max-len", "int", "128", _slowlog_max_len, _set_int(0)),
    _O("port", "int", "7711", _file_int(_PORT, 0, 65535), None),
    _O("tcp-backlog", "int", "511", _file_int(_BACKLOG, 0), None),
    _O("databases", "int", "16", _file_int(_DATABASES, 1), None),
    _O("maxclients", "int", "10000", _file_int(_MAXCLIENTS, 1), _set_int(1)),
    _O("watchdog-period", "int", "0", None, _set_int(0)),
    _O("hz", "int", "10", _hz_file, _hz_set),
    _O("cluster-node-timeout", "int", "15000", _file_int(_NODE_TIMEOUT, 1), _set_int(1)),
    _O("beanstalk-port", "int", "0", _file_int(_PORT, 0, 65535), None),
    _O("grpc-port", "special", None, _file_int(_PORT, 0, 65535), None),
    _O("metrics-port", "special", None, _file_int(_PORT, 0, 65535), None),  # port + 2000
    # disq: the address peers and clients are told (Redis's cluster-announce-ip); unset: the
    # bind address, or a guess when that is a wildcard (disq.server.advertise)
    _O("advertise-host", "string", None, _advertise_host, None),
    # disq: the job lane's port (disq.server.job_lane): 0 ephemeral, -1 off (gRPC only)
    _O("job-lane-port", "int", "0", _file_int(_LANE_PORT, -1, 65535), None),
    _O("beanstalk-replicate", "int", "1", _file_int(_REPLICATE, 1, 65535), _set_int(1, 65535)),
    # disq: seconds a SIGTERM hands jobs off before the node stops (0: stop at once; drain.py)
    _O("drain-timeout", "int", "20", _file_int(_DRAIN, 0), None),
    _O("no-appendfsync-on-rewrite", "bool", "no", _yes_no, _yes_no),
    _O("daemonize", "bool", "no", _daemonize, None),
    _O("activerehashing", "bool", "yes", _yes_no, _yes_no),
    _O("aof-rewrite-incremental-fsync", "bool", "yes", _yes_no, _yes_no),
    _O("aof-load-truncated", "bool", "yes", _yes_no, _yes_no),
    _O("aof-enqueue-jobs-once", "bool", "no", _yes_no, _yes_no),
    _O("syslog-enabled", "bool", "no", _yes_no, None),
    _O("maxmemory-policy", "enum", "acks", _enum(_POLICIES, _POLICY), _enum(_POLICIES, "")),
    _O("loglevel", "enum", "notice", _enum(_LOGLEVELS, _LOGLEVEL), _enum(_LOGLEVELS, "")),
    _O("appendfsync", "enum", "always", _enum(_FSYNCS, _FSYNC), _enum(_FSYNCS, "")),
    _O("syslog-facility", "enum", "local0", _enum(_FACILITIES, _FACILITY), None),
    _O("appendonly", "bool", "no", _yes_no, _yes_no),
    _O("dir", "special", None, None, None),  # handled by the parser and the store
    _O("client-output-buffer-limit", "special", None, None, None),
    _O("unixsocketperm", "octal", "0", _octal_perm, None),
    _O("bind", "special", None, None, None),
    # TLS on the gRPC port (Redis's names; disq.tls). tls-auth-clients unset: yes with a CA.
    _O("tls-cert-file", "string", None, _any_string, None),
    _O("tls-key-file", "string", None, _any_string, None),
    _O("tls-ca-cert-file", "string", None, _any_string, None),
    _O("tls-auth-clients", "bool", None, _yes_no, None),
    # TLS RESP and beanstalk ports (disq.server.tls_ports); 0: off.
    _O("tls-port", "int", "0", _file_int(_PORT, 0, 65535), None),
    _O("beanstalk-tls-port", "int", "0", _file_int(_PORT, 0, 65535), None),
)

# Keys whose other values disq cannot honour: the values it accepts (what it does) and why the
# others are refused. A file naming another value stops the start at that line; CONFIG SET of
# one is refused with the reason. Every key not here is applied (at start, and by CONFIG SET
# where it has a parse_set) -- the audit is in docs/config.md.
_RESTRICTED: dict[str, tuple[tuple[str, ...], str]] = {
    "hz": (
        ("10",),
        "disq has no fixed-rate cron: its one timer fires at the next job or peer deadline",
    ),
    "maxmemory-samples": (("5",), "disq does not sample keys to evict"),
    "maxmemory-policy": (
        ("acks",),
        "disq implements Disque's default memory levels (acks) only, not noeviction",
    ),
    "auto-aof-rewrite-percentage": (
        ("100",),
        "disq rewrites the AOF when it is over twice the live data (Disque's 100%); "
        "other percentages and 0 (off) are not implemented",
    ),
    "no-appendfsync-on-rewrite": (("no",), "disq keeps fsyncing the AOF during a rewrite"),
    "aof-rewrite-incremental-fsync": (
        ("yes",),
        "disq's rewrite always writes and fsyncs the new file in steps",
    ),
    "aof-load-truncated": (
        ("yes",),
        "disq always loads an AOF with a torn tail (cut at the last whole record); a corrupt "
        "record stops the start (disq-node --repair-aof)",
    ),
    "activerehashing": (("yes",), "Python's dicts resize at once: there is nothing to rehash"),
    "databases": (("16",), "Disque has one keyspace: only SELECT 0 exists"),
    "watchdog-period": (("0",), "disq has no software watchdog"),
}


def _restricted(option: _Option) -> _Option:
    rule = _RESTRICTED.get(option.name)
    if rule is None:
        return option
    accepted, why = rule
    name = option.name

    def wrap(parse: Parser | None) -> Parser | None:
        if parse is None:
            return None
        inner = parse

        def check(arg: str) -> str:
            value = inner(arg)
            if value not in accepted:
                text = f"'{name} {value}' is not supported ({why}); accepted: {', '.join(accepted)}"
                raise _Unsupported(text)
            return value

        return check

    return replace(
        option,
        parse_file=wrap(option.parse_file),
        parse_set=wrap(option.parse_set),
    )


_OPTIONS = tuple(_restricted(o) for o in _OPTIONS)
_BY_NAME = {o.name: o for o in _OPTIONS}

# Disque's rewriteConfig() order, then disq's keys. Not rewritten, so their lines stay as they
# are: include, rename-command, databases (Disque's choice), watchdog-period (not a directive).
_REWRITE_ORDER = (
    "daemonize", "pidfile", "port", "tcp-backlog", "bind", "unixsocket", "unixsocketperm",
    "timeout", "tcp-keepalive", "loglevel", "logfile", "syslog-enabled", "syslog-ident",
    "syslog-facility", "dir", "requirepass", "maxclients", "maxmemory", "maxmemory-policy",
    "maxmemory-samples", "appendonly", "appendfilename", "appendfsync",
    "no-appendfsync-on-rewrite", "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size",
    "cluster-config-file", "cluster-node-timeout", "slowlog-log-slower-than",
    "latency-monitor-threshold", "slowlog-max-len", "activerehashing",
    "client-output-buffer-limit", "hz", "aof-rewrite-incremental-fsync", "aof-load-truncated",
    "aof-enqueue-jobs-once", "beanstalk-port", "grpc-port", "beanstalk-replicate", "drain-timeout",
    "tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-auth-clients", "metrics-port",
    "tls-port", "beanstalk-tls-port", "job-lane-port", "advertise-host",
)  # fmt: skip

# The two options whose values are not one token: `dir` (a chdir) and
# `client-output-buffer-limit` (a class and three limits).


def _change_dir(cwd: Path, name: str, *, file_error: bool) -> Path:
    """Where ``chdir(name)`` from ``cwd`` would land (physical path, as getcwd reports)."""
    target = cwd / name
    code = 0
    try:
        if not stat.S_ISDIR(os.stat(target).st_mode):
            code = errno.ENOTDIR
        elif not os.access(target, os.X_OK):
            code = errno.EACCES
    except OSError as exc:
        code = exc.errno or errno.ENOENT
    if code:
        reason = os.strerror(code)
        if file_error:
            raise _Invalid(f"Can't chdir to '{name}': {reason}")
        raise ConfigSetError(f"ERR Changing directory: {reason}")
    return Path(os.path.realpath(target))


def _client_limit(args: Sequence[str]) -> tuple[str, tuple[int, int, int]]:
    klass = args[0].lower()
    if klass not in CLIENT_CLASSES:
        raise _Invalid("Unrecognized client limit class")
    hard, soft = parse_memory(args[1]), parse_memory(args[2])
    if hard is None or soft is None or hard < 0 or soft < 0:
        raise _Invalid(NOT_MEMORY)
    if _ATOI_RE.fullmatch(args[3]) is None:
        raise _Invalid(NOT_AN_INTEGER)
    seconds = int(args[3])
    if seconds < 0:
        raise _Invalid("Negative number of seconds in soft limit is invalid")
    if klass == "normal" and (hard, soft, seconds) != CLIENT_LIMIT_DEFAULTS["normal"]:
        # disq never disconnects a slow reader: past its high-water mark it stops reading from
        # the client (disq.server.flow). Disque has no replicas or pub/sub clients, so the
        # other two classes apply to no client, in Disque as here: accepted.
        raise _Unsupported(
            "client-output-buffer-limit for the normal class is not supported (disq applies "
            "backpressure to slow readers instead of disconnecting them); only 'normal 0 0 0'"
        )
    return klass, (hard, soft, seconds)
