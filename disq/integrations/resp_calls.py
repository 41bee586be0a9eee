"""The integrations' calls over the node's RESP port: an add, a blocking GETJOB, an ack and
a nack, each one command on a socket and one reply.

Why: a unary gRPC AddJob costs ~230 us of the client's CPU and 520-660 us of the node's;
the same ADDJOB on the node's RESP port ~10 us and ~85 us (docs/benchmarks.md, "The gRPC
SDK beside RESP"). A Celery or Dramatiq producer adds one message at a time, so that cost is
its publish rate. And a consumer's blocking GETJOB is a read on a socket here, not a gRPC
call in flight: a Celery worker's parent forks its pool's children (``--max-tasks-per-child``,
``--autoscale``) while it waits for jobs, and a fork waits for the client's gRPC calls in
flight (disq/client/forking.py). A wait there of up to a GETJOB's second widened billiard's
own race between its supervisor and autoscaler threads (a child not yet started is taken for
one that exited: "Thread 'Supervisor' crashed: KeyError(None)") until it hit at every run.
Used by the kombu transport (publish to the default exchange, consume, ack, reject) and the
Dramatiq broker's enqueue; option ``publish_over`` (``resp``, the default, or ``grpc``).

What stays the SDK's (:class:`disq.client.Client`): the view of the cluster (which node,
in which order, the backoffs of failed ones, the home node), learned with the gRPC HELLO,
which also gives each node's host and RESP port, and the failover loop itself
(``Client.send_with_failover``: the order, the marks, what a failure means). So a call here
goes to the node the gRPC call would have chosen (an ack or a nack to the node that created
the job, as the SDK sends them), and a failure here is judged as there and sets the node
aside for both paths.

Connections: one per thread per node (thread-local: no lock on the hot path), opened on
first use with TCP_NODELAY, AUTH sent first when the client has a password. One command,
one reply, no pipelining. Replies are parsed by hiredis (a dependency of the package). A
connection remembers the process that opened it: in a forked child (Celery's prefork pool
publishes too) it is dropped unused, never written to, and the child opens its own.

Errors are the SDK's classes, as the gRPC path raises them (the node's ``-CODE message``
mapped by its code), so the integrations' error handling and retries see no difference:
NOREPL, PAUSED, MAXLEN, OOM, LEAVING (the call moves to the next node, as over gRPC),
NOAUTH or a refused password (AuthError), ERR (InvalidArgumentError). A connection that
fails before the command was written: nothing was sent, the call may go elsewhere. After:
an add's answer was lost, :class:`IndeterminateError` (a caller's retry may add the job
twice, never lose it); a GETJOB is asked of the next node, as the SDK asks again (jobs the
lost answer held come back after their RETRY); an ack or a nack goes over gRPC. A reused
connection is checked before the write (a poll, no wait): one the node closed (a restart)
is replaced, so its stale socket does not turn a clean add into an indeterminate one.

Fallback to gRPC: a node whose RESP port does not answer (firewalled, not exposed by the
deployment, or the node is down) gets its calls over gRPC for ``RESP_RETRY_S``, then RESP is
tried again; so does every call while the client knows no RESP port (HELLO not asked yet).
TLS: the node's RESP TLS port (``--resp-tls-port``) is not in HELLO, so a client with TLS
options calls over gRPC (which is TLS), never over plaintext RESP.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Unpack

import hiredis
import structlog

from disq.client import (
    AuthError,
    BadIdError,
    Client,
    DisqError,
    IndeterminateError,
    InvalidArgumentError,
    Job,
    LeavingError,
    MaxLenError,
    NodeAddr,
    NoJobError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
    TooLateError,
)
from disq.client.adds import REPL_TIMEOUT_MS, AddOptions, check_add_options, header_items
from disq.client.failover import NoAnswer
from disq.client.results import SetResultOptions
from disq.integrations.common import Settings

log = structlog.get_logger("disq.resp_calls")

# A node whose RESP port did not connect gets its calls over gRPC this long before RESP is
# tried again: a firewalled port costs one connect timeout per node per period, not per call.
RESP_RETRY_S = 30.0
# An ADDJOB's, ACKJOB's or NACK's reply is a job id, a number or one error line: anything
# longer is not a reply to it.
MAX_REPLY_BYTES = 64 << 10
# A GETJOB's reply carries its jobs' bodies: bounded as the SDK's gRPC channel bounds a
# GetJobs answer (its max_receive_message_length).
MAX_JOBS_REPLY_BYTES = 64 << 20
_RECV_BYTES = 65536
# Distinct option sets whose ADDJOB encoding an adder keeps (a producer has one or a few:
# the TTL or DELAY of a message varies with its ETA); cleared when full.
MAX_KEPT_OPTIONS = 256

# The node's error codes (``-CODE message``), as the gRPC door maps them to reasons.
_BY_CODE: dict[str, type[DisqError]] = {
    "NOREPL": NoReplError,
    "PAUSED": PausedError,
    "MAXLEN": MaxLenError,
    "OOM": OutOfMemoryError,
    "LEAVING": LeavingError,
    "NOAUTH": AuthError,
    "WRONGPASS": AuthError,
    "ERR": InvalidArgumentError,
    "BADID": BadIdError,
    "NOJOB": NoJobError,
    "TOOLATE": TooLateError,
}
# The RESP door's refusal of a connection over its maxclients: the ADDJOB was not run.
_MAX_CLIENTS = "max number of clients"
_NO_PASSWORD_SET = "no password is set"


class _NotSent(Exception):
    """The connection failed before the command was written: the call may go elsewhere."""


class _OverGrpc(Exception):
    """The node's RESP port cannot take the call (nothing was sent): the SDK's gRPC call
    makes it, and fails over as it does."""


class _Conn:
    """One thread's connection to one node's RESP port."""

    __slots__ = ("__weakref__", "pid", "poll", "reader", "sock", "timeout_s")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pid = os.getpid()
        self.reader = hiredis.Reader()
        self.poll = select.poll()
        self.poll.register(sock.fileno(), select.POLLIN)
        self.timeout_s = -1.0

    def stale(self) -> bool:
        """The node closed it, reset it or sent something unasked for (nothing is due
        between two calls): not usable."""
        return bool(self.poll.poll(0))

    def call(self, command: bytes, timeout_s: float, limit: int = MAX_REPLY_BYTES) -> Any:
        """Write ``command`` (raises _NotSent if that fails), then read one reply of at most
        ``limit`` bytes (a lost answer raises OSError or hiredis.ProtocolError)."""
        if timeout_s != self.timeout_s:
            # The kernel's timeouts on a blocking socket, not Python's settimeout: that one
            # polls before every recv, a system call more per add. A timed-out recv raises
            # BlockingIOError (an OSError: the answer was lost).
            tv = struct.pack("ll", int(timeout_s), int(timeout_s % 1 * 1e6))
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
            self.timeout_s = timeout_s
        try:
            self.sock.sendall(command)
        except OSError as exc:
            # sendall may have written part of it: a partial command the node cannot run
            # (its parser waits for the rest, and the socket is closed now).
            raise _NotSent(str(exc)) from exc
        return self.read(limit)

    def read(self, limit: int = MAX_REPLY_BYTES) -> Any:
        reader = self.reader
        reply = reader.gets()
        received = 0
        while reply is False:
            data = self.sock.recv(_RECV_BYTES)
            if not data:
                raise ConnectionResetError("connection closed by the node")
            received += len(data)
            if received > limit:
                raise hiredis.ProtocolError(f"reply over {limit} bytes")
            reader.feed(data)
            reply = reader.gets()
        return reply

    def close(self) -> None:
        # close(), never shutdown(): in a forked child the socket is the parent's too, and
        # closing our copy of the descriptor leaves the parent's connection as it was.
        try:
            self.sock.close()
        except OSError:
            pass


def command(*args: bytes) -> bytes:
    """A RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def addjob_command(queue: str, body: bytes | str, **options: Unpack[AddOptions]) -> bytes:
    """ADDJOB with ``Client.add_job``'s keyword arguments (:func:`addjob_options`)."""
    q = queue.encode()
    data = body.encode() if isinstance(body, str) else bytes(body)
    argc, tail = addjob_options(**options)
    return b"*%d\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (
        argc,
        len(q),
        q,
        len(data),
        data,
        tail,
    )


def addjob_options(**options: Unpack[AddOptions]) -> tuple[int, bytes]:
    """ADDJOB's arguments after the body, encoded, and the command's argument count; set as
    the gRPC request sets them (:func:`disq.client.adds.fill_add`, the same checks): a falsy
    REPLICATE, DELAY or MAXLEN is the node's default; RETRY 0 and TTL are sent when given."""
    check_add_options(options)
    args = [b"%d" % options.get("repl_timeout_ms", REPL_TIMEOUT_MS)]
    if replicate := options.get("replicate"):
        args += [b"REPLICATE", b"%d" % replicate]
    if delay_s := options.get("delay_s"):
        args += [b"DELAY", b"%d" % delay_s]
    if delay_ms := options.get("delay_ms"):
        args += [b"DELAYMS", b"%d" % delay_ms]
    if (retry_s := options.get("retry_s")) is not None:
        args += [b"RETRY", b"%d" % retry_s]
    if (ttl_s := options.get("ttl_s")) is not None:
        args += [b"TTL", b"%d" % ttl_s]
    if maxlen := options.get("maxlen"):
        args += [b"MAXLEN", b"%d" % maxlen]
    if options.get("async_"):
        args.append(b"ASYNC")
    if idempotency_key := options.get("idempotency_key"):
        args += [b"IDEMPOTENCY-KEY", idempotency_key.encode()]
    if headers := options.get("headers"):
        pairs = header_items(headers)
        args += [b"HEADERS", b"%d" % len(pairs)]
        args += [x for k, v in pairs for x in (k.encode(), v)]
    return len(args) + 3, b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def refusal(reply: hiredis.ReplyError, addr: str) -> DisqError:
    """The node's ``-CODE message`` as the SDK's error of that code (the message is the
    whole line, as the gRPC door sends it)."""
    text = str(reply)
    code = text.split(" ", 1)[0]
    return _BY_CODE.get(code, DisqError)(text, node=addr)


def getjob_command(
    queues: list[str], *, count: int, timeout_s: float | None, nohang: bool, in_order: bool
) -> bytes:
    """GETJOB as ``Client.get_jobs`` asks it (WITHCOUNTERS always: the integrations read the
    nacks and additional deliveries); INORDER is disq's (a queue's jobs before the next's)."""
    args = [b"GETJOB"]
    if nohang:
        args.append(b"NOHANG")
    else:
        wait_ms = 0 if timeout_s is None else max(1, int(timeout_s * 1000))
        args += [b"TIMEOUT", b"%d" % wait_ms]
    args += [b"COUNT", b"%d" % count, b"WITHCOUNTERS"]
    if in_order:
        args.append(b"INORDER")
    args.append(b"FROM")
    args += [q.encode() for q in queues]
    return command(*args)


def jobs_of(reply: Any) -> list[Job]:
    """GETJOB WITHCOUNTERS's reply: ``[queue, id, body, "nacks", n, "additional-deliveries",
    m]`` per job; a null (nothing came in time) is none."""
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise hiredis.ProtocolError(f"not a GETJOB reply: {reply!r:.200}")
    out = []
    for entry in reply:
        if not isinstance(entry, list) or len(entry) != 7:
            raise hiredis.ProtocolError(f"not a GETJOB entry: {entry!r:.200}")
        queue, job_id, body, _, nacks, _, additional = entry
        out.append(Job(job_id.decode(), queue.decode(), body, nacks, additional))
    return out


class RespCalls:
    """``add_job``, ``get_jobs``, ``ack`` and ``nack`` over the nodes' RESP ports, with
    ``client``'s view of the cluster and its gRPC calls as the fallback. Made in the
    process that uses it (beside its client); used after a fork, every call goes to
    ``client``, which survives the fork (disq/client/forking.py)."""

    def __init__(
        self,
        client: Client,
        *,
        password: str | None = None,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._auth = command(b"AUTH", password.encode()) if password else b""
        self.enabled = enabled
        # The client's own deadlines: a connect, and an answer past the call's own wait.
        self._connect_timeout_s = client.aio.connect_timeout_s
        self._timeout_s = client.aio.timeout_s
        self._clock = clock
        self._pid = os.getpid()
        self._local = threading.local()
        self._lock = threading.Lock()  # guards _open and _closed
        self._open: weakref.WeakSet[_Conn] = weakref.WeakSet()
        self._closed = False
        self._asked = False  # _learn_ports ran
        self._options: dict[tuple[tuple[str, Any], ...], tuple[int, bytes]] = {}
        # A node's RESP port failed to connect: its calls go over gRPC until then (monotonic).
        self._resp_down_until: dict[str, float] = {}

    def close(self) -> None:
        """Close every thread's connections (of this process); later calls go over gRPC."""
        with self._lock:
            self._closed = True
            conns = list(self._open)
            self._open = weakref.WeakSet()
        for conn in conns:
            conn.close()

    def _on(self) -> bool:
        return self.enabled and not self._closed and os.getpid() == self._pid

    # -- adds -----------------------------------------------------------------------------
    def add_job(self, queue: str, body: bytes | str, **options: Unpack[AddOptions]) -> str:
        """``Client.add_job``'s options, errors and result, over RESP when the node's port
        is known and answers."""
        if not self._on():
            return self._client.add_job(queue, body, **options)
        # A producer sends the same options with every message: their encoding is kept (by
        # the options as given, in their order), bounded; only the queue and body are new.
        key = tuple(options.items())
        encoded = self._options.get(key)
        if encoded is None:
            encoded = addjob_options(**options)  # TypeError/ValueError: a bad argument
            if len(self._options) >= MAX_KEPT_OPTIONS:
                self._options.clear()
            self._options[key] = encoded
        argc, tail = encoded
        q = queue.encode()
        data = body.encode() if isinstance(body, str) else body
        cmd = b"*%d\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (
            argc,
            len(q),
            q,
            len(data),
            data,
            tail,
        )
        reply_s = options.get("repl_timeout_ms", 5000) / 1000 + self._timeout_s

        def send(n: NodeAddr) -> str:
            reply = self._call_on(n, cmd, reply_s)
            if not isinstance(reply, bytes):
                self._drop(n.addr)
                raise IndeterminateError(
                    f"add sent to {n.addr} (RESP): unexpected reply {reply!r}", node=n.addr
                )
            return reply.decode()

        try:
            return self._client.send_with_failover(send, what="add")
        except _OverGrpc:
            # The node the gRPC add would choose: it decides (and fails over).
            return self._client.add_job(queue, body, **options)

    # -- consuming ------------------------------------------------------------------------
    def get_jobs(
        self,
        queues: list[str],
        *,
        count: int = 1,
        timeout_s: float | None = 1.0,
        nohang: bool = False,
        in_order: bool = False,
    ) -> list[Job]:
        """``Client.get_jobs`` (WITHCOUNTERS), over RESP when the node's port is known and
        answers: the wait is on the node and in this thread's socket read, no gRPC call in
        flight meanwhile."""
        if not self._on():
            return self._client.get_jobs(
                queues, count=count, timeout_s=timeout_s, nohang=nohang, in_order=in_order
            )
        cmd = getjob_command(
            queues, count=count, timeout_s=timeout_s, nohang=nohang, in_order=in_order
        )
        # As the SDK's deadline: the node's own wait, then time to answer "nothing".
        reply_s = (0.0 if nohang or timeout_s is None else timeout_s) + self._timeout_s
        if timeout_s is None and not nohang:
            reply_s = 365 * 86400.0  # blocks until jobs come, asked for explicitly

        def send(n: NodeAddr) -> list[Job]:
            reply = self._call_on(n, cmd, reply_s, MAX_JOBS_REPLY_BYTES)
            try:
                return jobs_of(reply)
            except hiredis.ProtocolError as exc:
                self._drop(n.addr)
                raise NoAnswer(f"RESP: {exc}") from None

        try:
            # Safe to ask the next node after a lost answer, as the SDK does: jobs the lost
            # answer held come back after their RETRY. LEAVING moves on too.
            return self._client.send_with_failover(send, what="GetJobs", repeatable=True)
        except _OverGrpc:
            return self._client.get_jobs(
                queues, count=count, timeout_s=timeout_s, nohang=nohang, in_order=in_order
            )

    def ack(self, job_id: str) -> None:
        """ACKJOB at the node that created the job; over gRPC (queued, batched) when RESP
        cannot. Never raises for a lost ack: the job comes back after its RETRY."""
        if not self._job_call(b"ACKJOB", job_id):
            self._client.ack_nowait(job_id)

    def nack(self, job_id: str) -> None:
        """NACK at the node that created the job (back in the queue at once); over gRPC when
        RESP cannot."""
        if not self._job_call(b"NACK", job_id):
            self._client.nack(job_id)

    def _job_call(self, name: bytes, job_id: str) -> bool:
        """``name job_id`` at the job's creator (or the first node, Disque's acks reach
        every holder from any node); False when it did not run over RESP."""
        if not self._on():
            return False
        nodes = self._client.add_candidates(prefer=job_id[2:10])
        if not nodes:
            return False
        try:
            self._call_on(nodes[0], command(name, job_id.encode()), self._timeout_s)
        except BadIdError:
            raise
        except (_OverGrpc, NoAnswer, DisqError):
            return False  # LEAVING, OOM, a lost answer: the gRPC path finds another node
        return True

    # -- results --------------------------------------------------------------------------
    # Every node keeps every result (disq/core/disque/results.py): any node serves a get or
    # a wait, so each call asks the node the failover loop picks and moves on when it does
    # not answer. A set repeated after a lost answer stores the same value again: harmless.
    def set_result(self, key: str, value: bytes | str, **options: Unpack[SetResultOptions]) -> None:
        """RESULT SET: returns once ``replicate`` nodes hold it (the node's default: min(3,
        nodes)); ``ack``: ``key`` is a job's id, acked once the result is held. Raises
        NoReplError, OutOfMemoryError, InvalidArgumentError (a bad key), BadIdError."""
        data = value.encode() if isinstance(value, str) else bytes(value)
        repl_timeout_ms = options.get("repl_timeout_ms", REPL_TIMEOUT_MS)
        args = [b"RESULT", b"SET", key.encode(), data, b"TIMEOUT", b"%d" % repl_timeout_ms]
        if (ttl_s := options.get("ttl_s")) is not None:
            args += [b"TTL", b"%d" % ttl_s]
        if (replicate := options.get("replicate")) is not None:
            args += [b"REPLICATE", b"%d" % replicate]
        if options.get("ack"):
            args.append(b"ACK")
        cmd = command(*args)
        reply_s = repl_timeout_ms / 1000 + self._timeout_s
        if not self._on():
            self._client.set_result(key, data, **options)
            return

        def send(n: NodeAddr) -> None:
            self._call_on(n, cmd, reply_s)

        try:
            self._client.send_with_failover(send, what="SetResult", repeatable=True)
        except _OverGrpc:
            self._client.set_result(key, data, **options)

    def result(self, key: str, timeout_s: float | None = 0.0) -> bytes | None:
        """The result of ``key``, or None: at once (``timeout_s`` 0, RESULT GET), else once
        it is set, waiting up to ``timeout_s`` (None: forever) on the node (RESULT WAIT)."""
        if not self._on():
            return self._client.result(key, timeout_s)
        k = key.encode()
        if timeout_s is not None and timeout_s <= 0:
            cmd = command(b"RESULT", b"GET", k)
            reply_s = self._timeout_s
        else:
            wait_ms = 0 if timeout_s is None else max(1, int(timeout_s * 1000))
            cmd = command(b"RESULT", b"WAIT", k, b"%d" % wait_ms)
            reply_s = 365 * 86400.0 if timeout_s is None else timeout_s + self._timeout_s

        def send(n: NodeAddr) -> bytes | None:
            reply = self._call_on(n, cmd, reply_s, MAX_JOBS_REPLY_BYTES)
            if reply is not None and not isinstance(reply, bytes):
                self._drop(n.addr)
                raise NoAnswer(f"RESP: not a RESULT reply: {reply!r:.200}")
            return reply

        try:
            return self._client.send_with_failover(send, what="GetResult", repeatable=True)
        except _OverGrpc:
            return self._client.result(key, timeout_s)

    def delete_result(self, key: str) -> bool:
        """RESULT DEL, on every node; whether the node asked held it."""
        if not self._on():
            return self._client.delete_result(key)
        cmd = command(b"RESULT", b"DEL", key.encode())

        def send(n: NodeAddr) -> bool:
            return bool(self._call_on(n, cmd, self._timeout_s))

        try:
            return self._client.send_with_failover(send, what="DeleteResult", repeatable=True)
        except _OverGrpc:
            return self._client.delete_result(key)

    def result_anywhere(self, key: str) -> bytes | None:
        """RESULT GET of ``key`` on every node the client knows, until one holds it: its
        value, or None when no node that answered holds it. A set is answered once REPLICATE
        nodes hold it (a majority), the others getting it a moment later: one node's GET may
        not see a set that has been answered yet, every node's does. Over gRPC (RESP off, or
        no node's RESP port usable) one ``result(key)``, as the failover loop asks it."""
        if not self._on():
            return self._client.result(key)
        cmd = command(b"RESULT", b"GET", key.encode())
        asked = False
        for n in self._client.add_candidates():
            try:
                reply = self._call_on(n, cmd, self._timeout_s, MAX_JOBS_REPLY_BYTES)
            except (_OverGrpc, NoAnswer, DisqError):
                continue  # this node cannot say; the others may
            asked = True
            if isinstance(reply, bytes):
                return reply
        return None if asked else self.result(key)

    def _learn_ports(self) -> None:
        """One HELLO when the client has not asked for the RESP ports (discovery off, and
        no HELLO yet in this process: a forked child's new client): it sets them."""
        self._asked = True
        try:
            self._client.hello()
        except DisqError as exc:
            log.info("resp_ports_unknown", error=str(exc))  # the call goes over gRPC

    # -- connections ------------------------------------------------------------------------
    def _call_on(
        self, n: NodeAddr, cmd: bytes, reply_s: float, limit: int = MAX_REPLY_BYTES
    ) -> Any:
        """``cmd`` on ``n``'s RESP port: its reply, or what the failover loop judges
        (disq/client/failover.py): the node's refusal raised as the SDK's error, NoAnswer
        when the answer was lost after the write; _OverGrpc when its RESP port cannot take
        the call (not known, not connecting, full: nothing was sent)."""
        if not self._resp_usable(n):
            raise _OverGrpc
        try:
            reply = self._conn(n).call(cmd, reply_s, limit)
        except _NotSent as exc:
            self._resp_failed(n, str(exc))
            raise _OverGrpc from None
        except (OSError, hiredis.ProtocolError) as exc:
            self._drop(n.addr)
            raise NoAnswer(f"RESP: {exc}") from None
        if isinstance(reply, hiredis.ReplyError):
            if _MAX_CLIENTS in str(reply):
                # Refused at connect: the command was not run; the node closes it.
                self._resp_failed(n, str(reply))
                raise _OverGrpc
            raise refusal(reply, n.addr)
        return reply

    def _resp_usable(self, n: NodeAddr) -> bool:
        if not n.resp_port and not self._asked:
            self._learn_ports()
        if not n.resp_port:
            return False
        until = self._resp_down_until.get(n.addr)
        if until is None:
            return True
        if self._clock() < until:
            return False
        self._resp_down_until.pop(n.addr, None)
        return True

    def _resp_failed(self, n: NodeAddr, why: str) -> None:
        self._drop(n.addr)
        if n.addr not in self._resp_down_until:
            log.info("resp_port_unreachable", node=n.addr, resp_port=n.resp_port, error=why)
        self._resp_down_until[n.addr] = self._clock() + RESP_RETRY_S

    def _conns(self) -> dict[str, _Conn]:
        conns: dict[str, _Conn] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        return conns

    def _drop(self, addr: str) -> None:
        conn = self._conns().pop(addr, None)
        if conn is not None:
            conn.close()

    def _conn(self, n: NodeAddr) -> _Conn:
        """This thread's connection to ``n``'s RESP port, checked; a new one when there is
        none, it was made before a fork, or the node closed it. Raises _NotSent."""
        conns = self._conns()
        conn = conns.get(n.addr)
        if conn is not None:
            if conn.pid == os.getpid() and not conn.stale():
                return conn
            del conns[n.addr]
            if conn.pid == os.getpid():
                conn.close()
            # else: the parent's (thread-locals are copied by fork): not ours to touch
        conn = self._connect(n)
        with self._lock:
            if self._closed:
                conn.close()
                raise _NotSent("closed")
            self._open.add(conn)
        conns[n.addr] = conn
        return conn

    def _connect(self, n: NodeAddr) -> _Conn:
        host = n.addr.rsplit(":", 1)[0].strip("[]")
        try:
            sock = socket.create_connection((host, n.resp_port), timeout=self._connect_timeout_s)
        except OSError as exc:
            raise _NotSent(f"connect to {host}:{n.resp_port}: {exc}") from exc
        sock.settimeout(None)  # blocking, with the kernel's timeouts (_Conn.call)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock)
        if not self._auth:
            return conn
        try:
            reply = conn.call(self._auth, self._timeout_s)
        except (OSError, hiredis.ProtocolError) as exc:
            conn.close()
            raise _NotSent(f"AUTH on {host}:{n.resp_port}: {exc}") from exc
        if isinstance(reply, hiredis.ReplyError):
            text = str(reply)
            if _NO_PASSWORD_SET in text:
                return conn  # the node wants none: gRPC accepts the password as well
            conn.close()
            if _MAX_CLIENTS in text:
                raise _NotSent(text)
            raise AuthError(text, node=n.addr)
        return conn


def resp_calls_for(client: Client, settings: Settings) -> RespCalls:
    """The RESP calls of an integration's ``client``, as its settings ask (``publish_over``,
    the password, TLS)."""
    return RespCalls(
        client, password=settings.client_options.get("password"), enabled=settings.over_resp
    )


def connect(settings: Settings) -> tuple[Client, RespCalls]:
    """An integration's SDK client for ``settings`` (its URL's nodes and client options) and
    its RESP calls: the kombu transport's, the Celery result backend's."""
    client = Client(settings.addresses, **settings.client_options)
    return client, resp_calls_for(client, settings)
