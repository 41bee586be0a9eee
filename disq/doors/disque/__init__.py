"""Disque's command set on the RESP port: argument parsing, checks and reply formatting.

Sans-IO like the door that drives it (:mod:`disq.doors.resp_door`): a handler takes the
per-connection :class:`Client`, the command's arguments and the clock reading, gives the
command to the node core (``NodeApi.core``, :class:`~disq.core.node_core.NodeCore`: the one
API of every door, the simulator and the tests) or asks the node (:class:`NodeApi`), and
returns the encoded reply, or :data:`~disq.core.disque.api.PENDING` when the command blocks
(GETJOB without jobs, synchronous ADDJOB): the answer then comes in the node core's next
Ready and :meth:`Client.take_deferred` formats it.

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
is disq's fault-injection hook for the cluster lab; CLIENT REPLY and LOADJOB are not served.
MONITOR, SLOWLOG, LATENCY and CLIENT (:mod:`.introspect`, over :mod:`.admin`'s node-wide
state) follow Redis's documented reply formats.

Names of queues are bytes on the wire and ``str`` in the core: they are decoded as UTF-8 with
``surrogateescape``, so any byte string round-trips. Job ids are decoded as Latin-1 (one char
per byte), so an id's length and positions are those Disque checks.

Layout: :mod:`.numbers` (C-compatible number parsing), :mod:`.replies` (shared reply
encoders, names and encodings), :mod:`.node_api` (the node interface and INFO's rendering),
:mod:`.client` (per connection state), :mod:`.admin` (the port-wide CLIENT, MONITOR,
SLOWLOG and LATENCY state), the handlers by group (:mod:`.jobs`, :mod:`.queues`,
:mod:`.cluster`, :mod:`.server`, :mod:`.introspect`), and :mod:`.table` (the command table
and :func:`execute`), which imports the handlers; no handler imports the table.
"""

from disq.doors.disque.client import Client, Deferred, Handler
from disq.doors.disque.node_api import (
    DISQUE_INFO_KEYS,
    DISQUE_VERSION,
    NodeApi,
    NodeEntry,
    RespStats,
    bytes_to_human,
    info_dict,
    info_text,
)
from disq.doors.disque.numbers import parse_cursor, parse_ll, parse_strtod
from disq.doors.disque.replies import queue_bytes, queue_name
from disq.doors.disque.table import COMMANDS, CommandSpec, execute

__all__ = [
    "COMMANDS",
    "DISQUE_INFO_KEYS",
    "DISQUE_VERSION",
    "Client",
    "CommandSpec",
    "Deferred",
    "Handler",
    "NodeApi",
    "NodeEntry",
    "RespStats",
    "bytes_to_human",
    "execute",
    "info_dict",
    "info_text",
    "parse_cursor",
    "parse_ll",
    "parse_strtod",
    "queue_bytes",
    "queue_name",
]
