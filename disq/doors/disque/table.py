"""Disque's command table: :class:`CommandSpec` rows, :func:`execute` (processCommand's
checks, then the handler), COMMAND (which describes the table), the table itself and
:func:`command_table`, which applies ``rename-command`` lines to it.

The table a connection dispatches through is its :class:`AdminState`'s ``commands`` (one per
RESP hub, so per node): :data:`COMMANDS` unless the configuration renames commands, in which
case the hub builds the renamed table once, at start. A renamed command keeps its
:attr:`CommandSpec.name` (Disque's ``cmd->name``): error texts, ``INFO commandstats``,
``CLIENT LIST cmd=`` and the COMMAND entries show the original name, as Disque shows them;
only the name a client must send changes."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from disq.core.disque.api import DisqueError, Pending
from disq.doors.disque.admin import DEFAULT_COMMANDS
from disq.doors.disque.client import Client, Handler
from disq.doors.disque.cluster import _cluster, _hello
from disq.doors.disque.introspect import _client, _config_live, _latency, _monitor, _slowlog
from disq.doors.disque.jobs import (
    _ackjob,
    _addjob,
    _fastack,
    _getjob,
    _ids_command,
    _nack,
    _show,
    _working,
)
from disq.doors.disque.policies import _qpolicy, _qredrive
from disq.doors.disque.queues import _jscan, _pause, _qlen, _qpeek, _qpurge, _qscan, _qstat
from disq.doors.disque.replies import (
    _CRLF,
    NOAUTH_ERR,
    NULL_BULK,
    OK,
    _bulk,
    _disque_error,
    _err,
    _err_arg,
)
from disq.doors.disque.results import _result
from disq.doors.disque.schedules import _schedule
from disq.doors.disque.server import (
    _auth,
    _bgrewriteaof,
    _debug,
    _echo,
    _info,
    _ping,
    _select,
    _shutdown,
    _time,
)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One row of Disque's ``serverCommandTable``: arity N means exactly N arguments
    (the name included), -N at least N; flags are Disque's letters."""

    name: str
    handler: Handler
    arity: int
    flags: str

    @property
    def write(self) -> bool:
        return "w" in self.flags

    @property
    def fast(self) -> bool:
        """Slow runs count as LATENCY's ``fast-command`` event rather than ``command``."""
        return "F" in self.flags

    @property
    def unmonitored(self) -> bool:
        """Not shown by MONITOR: skip_monitor, and admin commands as Redis hides them (so
        CONFIG SET requirepass never shows a password)."""
        return "M" in self.flags or "a" in self.flags


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
    admin = client.admin
    if admin.monitors and client.monitor:
        # A MONITOR connection only streams: what else it sends is read and dropped, so no
        # reply ever lands in the middle of the stream.
        return b""
    spec: CommandSpec | None = admin.commands.get(name)
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
    if admin.monitors and not spec.unmonitored:
        # call(): before the command runs, as Disque does
        admin.feed_monitors(client, argv, spec.name)
    stats = node.resp_stats
    stats.commands += 1
    client.last_ms = now_ms
    client.last_cmd = spec.name
    t0 = time.perf_counter_ns()
    try:
        out = spec.handler(client, argv, now_ms)
    except DisqueError as exc:
        out = _disque_error(exc)
    calls = stats.calls.get(spec.name)
    if calls is None:
        calls = stats.calls[spec.name] = [0, 0]
    calls[0] += 1
    us = (time.perf_counter_ns() - t0) // 1000
    calls[1] += us
    # The lower of the enabled thresholds (the slow log's 10 ms by default): one comparison.
    if us >= admin.slow_us:
        admin.slow(client, argv, us, spec.fast, spec.name)
    return out


def _command_entry(spec: CommandSpec | None) -> bytes:
    """addReplyCommand: name, arity, flags (status replies), first key, last key, step (0, 0
    and 0: no Disque command takes keys)."""
    if spec is None:
        return NULL_BULK
    flags = [b"+" + name.encode() + _CRLF for letter, name in _FLAG_NAMES if letter in spec.flags]
    return b"".join(
        [
            b"*6\r\n",
            _bulk(spec.name.encode()),
            b":%d\r\n*%d\r\n" % (spec.arity, len(flags)),
            *flags,
            b":0\r\n:0\r\n:0\r\n",
        ]
    )


def _command(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    # The connection's table: a removed command is not listed, a renamed one is found by its
    # new name (and, as in Disque, described under its original one).
    commands = c.admin.commands
    if len(argv) == 1:
        return b"*%d\r\n" % len(commands) + b"".join(map(_command_entry, commands.values()))
    sub = argv[1].lower()
    if sub == b"info":
        names = argv[2:]
        return b"*%d\r\n" % len(names) + b"".join(
            _command_entry(commands.get(n.lower())) for n in names
        )
    if sub == b"count" and len(argv) == 2:
        return b":%d\r\n" % len(commands)
    return b"-ERR Unknown subcommand or wrong number of arguments.\r\n"


# Disque's table order (server.c), then the Redis commands clients need.
COMMANDS: dict[bytes, CommandSpec] = {
    spec.name.encode(): spec
    for spec in (
        CommandSpec("auth", _auth, 2, "rlF"),
        CommandSpec("ping", _ping, -1, "rF"),
        CommandSpec("info", _info, -1, "rl"),
        CommandSpec("shutdown", _shutdown, -1, "arl"),
        CommandSpec("monitor", _monitor, 1, "ar"),
        CommandSpec("debug", _debug, -2, "a"),
        CommandSpec("config", _config_live, -2, "ar"),
        CommandSpec("cluster", _cluster, -2, "ar"),
        CommandSpec("client", _client, -2, "ar"),
        CommandSpec("slowlog", _slowlog, -2, "r"),
        CommandSpec("time", _time, 1, "rF"),
        CommandSpec("command", _command, 0, "rl"),
        CommandSpec("latency", _latency, -2, "arl"),
        CommandSpec("hello", _hello, -1, "rF"),
        CommandSpec("addjob", _addjob, -4, "wmF"),
        CommandSpec("getjob", _getjob, -2, "wF"),
        CommandSpec("ackjob", _ackjob, -1, "wF"),
        CommandSpec("fastack", _fastack, -1, "wF"),
        CommandSpec(
            "deljob", _ids_command(lambda core, now_ms, ids: core.del_job(now_ms, ids)), -1, "wF"
        ),
        CommandSpec("show", _show, 2, "rF"),
        CommandSpec("bgrewriteaof", _bgrewriteaof, 1, "ar"),
        CommandSpec("qlen", _qlen, 2, "rF"),
        CommandSpec("qpeek", _qpeek, 3, "r"),
        CommandSpec("qstat", _qstat, 2, "rF"),
        CommandSpec("qscan", _qscan, -1, "r"),
        CommandSpec("jscan", _jscan, -1, "r"),
        CommandSpec(
            "enqueue", _ids_command(lambda core, now_ms, ids: core.enqueue(now_ms, ids)), -1, "mwF"
        ),
        CommandSpec("nack", _nack, -1, "mwF"),  # disq's DELAY: after the ids
        CommandSpec(
            "dequeue", _ids_command(lambda core, now_ms, ids: core.dequeue(now_ms, ids)), -1, "wF"
        ),
        CommandSpec("working", _working, 2, "wF"),
        CommandSpec("pause", _pause, -3, "rF"),
        CommandSpec("schedule", _schedule, -2, "w"),  # disq's: recurring jobs
        CommandSpec("qpurge", _qpurge, 2, "wF"),  # disq's: empty a queue on this node
        CommandSpec("result", _result, -3, "w"),  # disq's: jobs' results, on every node
        CommandSpec("qpolicy", _qpolicy, -2, "w"),  # disq's: queue policies, on every node
        CommandSpec("qredrive", _qredrive, -2, "w"),  # disq's: dead letters back (deadletter.py)
        # Not in Disque: Redis commands that Redis clients send.
        CommandSpec("echo", _echo, 2, "rF"),
        CommandSpec("select", _select, 2, "rlF"),
    )
}
DEFAULT_COMMANDS.update(COMMANDS)  # what an AdminState dispatches through by default


class RenameError(ValueError):
    """A ``rename-command`` line Disque refuses: ``index`` is its position among the
    configuration's renames, ``reason`` Disque's text."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason


def command_table(renames: Iterable[tuple[str, str]]) -> dict[bytes, CommandSpec]:
    """The command table after the ``rename-command`` lines ``(name, new name)``, applied in
    order as Disque's config.c applies them: the name is looked up in the table as the earlier
    lines left it ("No such command in rename-command" if absent), removed, and added back
    under the new name unless that is "" ("Target command name already exists" if taken).
    Without renames this is :data:`COMMANDS` itself."""
    table = COMMANDS
    for index, (old, new) in enumerate(renames):
        if table is COMMANDS:
            table = dict(COMMANDS)
        spec = table.pop(old.encode("utf-8", "surrogateescape").lower(), None)
        if spec is None:
            raise RenameError(index, "No such command in rename-command")
        if new:
            key = new.encode("utf-8", "surrogateescape").lower()
            if key in table:
                raise RenameError(index, "Target command name already exists")
            table[key] = spec
    return table
