"""The integrations' publish over the node's RESP port: one ADDJOB on a socket, one reply.

Why: a unary gRPC AddJob costs ~230 us of the client's CPU and 520-660 us of the node's;
the same ADDJOB on the node's RESP port ~10 us and ~85 us (docs/benchmarks.md, "Celery and
Dramatiq"). A Celery or Dramatiq producer adds one message at a time, so that cost
is its publish rate. Used by the kombu transport's default-exchange publish (Celery's
tasks) and the Dramatiq broker's enqueue; option ``publish_over`` (``resp``, the default,
or ``grpc``).

What stays the SDK's (:class:`disq.client.Client`): the view of the cluster (which node,
in which order, the backoffs of failed ones, the home node), learned with the gRPC HELLO,
which also gives each node's host and RESP port. So a RESP add goes to the node the gRPC add
would have chosen, and a failure here sets the node aside for both paths.

Connections: one per thread per node (thread-local: no lock on the publish path), opened
on first use with TCP_NODELAY, AUTH sent first when the client has a password. One ADDJOB,
one reply, no pipelining. Replies are parsed by hiredis (a dependency of the package). A
connection remembers the process that opened it: in a forked child (Celery's prefork pool
publishes too) it is dropped unused, never written to, and the child opens its own.

Errors are the SDK's classes, as the gRPC path raises them (the node's ``-CODE message``
mapped by its code), so the integrations' error handling and retries see no difference:
NOREPL, PAUSED, MAXLEN, OOM, LEAVING (the add moves to the next node, as over gRPC), NOAUTH
or a refused password (AuthError), ERR (InvalidArgumentError). A connection that fails
before the ADDJOB was written: nothing was sent, the add may go elsewhere; after: the answer
was lost, :class:`IndeterminateError` (a caller's retry may add the job twice, never lose
it). A reused connection is checked before the write (a poll, no wait): one the node closed
(a restart) is replaced, so its stale socket does not turn a clean add into an
indeterminate one.

Fallback to gRPC: a node whose RESP port does not answer (firewalled, not exposed by the
deployment, or the node is down) gets its adds over gRPC for ``RESP_RETRY_S``, then RESP is
tried again; so does every add while the client knows no RESP port (HELLO not asked yet).
TLS: the node's RESP TLS port (``--resp-tls-port``) is not in HELLO, so a client with TLS
options publishes over gRPC (which is TLS), never over plaintext RESP.
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
from typing import Any

import hiredis
import structlog

from disq.client import (
    AuthError,
    BadIdError,
    Client,
    DisqError,
    IndeterminateError,
    InvalidArgumentError,
    LeavingError,
    MaxLenError,
    NodeAddr,
    NoJobError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
    TooLateError,
    UnavailableError,
)
from disq.integrations.common import Settings

log = structlog.get_logger("disq.resp_adds")

# A node whose RESP port did not connect publishes over gRPC this long before RESP is tried
# again: a firewalled port costs one connect timeout per node per period, not per add.
RESP_RETRY_S = 30.0
# An ADDJOB's reply is a job id or one error line: anything longer is not a reply to it.
MAX_REPLY_BYTES = 64 << 10
_RECV_BYTES = 4096
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
    """The connection failed before the ADDJOB was written: the add may go elsewhere."""


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
        between two adds): not usable for an add."""
        return bool(self.poll.poll(0))

    def call(self, command: bytes, timeout_s: float) -> Any:
        """Write ``command`` (raises _NotSent if that fails), then read one reply (a lost
        answer raises OSError or hiredis.ProtocolError)."""
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
        return self.read()

    def read(self) -> Any:
        reader = self.reader
        reply = reader.gets()
        received = 0
        while reply is False:
            data = self.sock.recv(_RECV_BYTES)
            if not data:
                raise ConnectionResetError("connection closed by the node")
            received += len(data)
            if received > MAX_REPLY_BYTES:
                raise hiredis.ProtocolError(f"reply over {MAX_REPLY_BYTES} bytes")
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


def addjob_command(queue: str, body: bytes | str, **options: Any) -> bytes:
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


def addjob_options(
    *,
    replicate: int | None = None,
    repl_timeout_ms: int = 5000,
    delay_s: int = 0,
    retry_s: int | None = None,
    ttl_s: int | None = None,
    maxlen: int | None = None,
    async_: bool = False,
    idempotency_key: str | None = None,
) -> tuple[int, bytes]:
    """ADDJOB's arguments after the body, encoded, and the command's argument count; set as
    the gRPC request sets them (:func:`disq.client.aio._fill_add`): a falsy REPLICATE,
    DELAY or MAXLEN is the node's default; RETRY 0 and TTL are sent when given."""
    for name, value in (
        ("replicate", replicate),
        ("repl_timeout_ms", repl_timeout_ms),
        ("delay_s", delay_s),
        ("retry_s", retry_s),
        ("ttl_s", ttl_s),
        ("maxlen", maxlen),
    ):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"add_job {name}: a non-negative integer, got {value!r}")
    args = [b"%d" % repl_timeout_ms]
    if replicate:
        args += [b"REPLICATE", b"%d" % replicate]
    if delay_s:
        args += [b"DELAY", b"%d" % delay_s]
    if retry_s is not None:
        args += [b"RETRY", b"%d" % retry_s]
    if ttl_s is not None:
        args += [b"TTL", b"%d" % ttl_s]
    if maxlen:
        args += [b"MAXLEN", b"%d" % maxlen]
    if async_:
        args.append(b"ASYNC")
    if idempotency_key:
        args += [b"IDEMPOTENCY-KEY", idempotency_key.encode()]
    return len(args) + 3, b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def refusal(reply: hiredis.ReplyError, addr: str) -> DisqError:
    """The node's ``-CODE message`` as the SDK's error of that code (the message is the
    whole line, as the gRPC door sends it)."""
    text = str(reply)
    code = text.split(" ", 1)[0]
    return _BY_CODE.get(code, DisqError)(text, node=addr)


class RespAdds:
    """``add_job`` over the nodes' RESP ports, with ``client``'s view of the cluster and its
    ``add_job`` (gRPC) as the fallback. Made in the process that uses it (beside its
    client); used after a fork, every add goes to ``client.add_job``, which says what is
    wrong with a client inherited from the parent."""

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
        # The client's own deadlines: a connect, and an answer past the add's timeout.
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
        # A node's RESP port failed to connect: its adds go over gRPC until then (monotonic).
        self._resp_down_until: dict[str, float] = {}

    def close(self) -> None:
        """Close every thread's connections (of this process); later adds go over gRPC."""
        with self._lock:
            self._closed = True
            conns = list(self._open)
            self._open = weakref.WeakSet()
        for conn in conns:
            conn.close()

    def add_job(self, queue: str, body: bytes | str, **options: Any) -> str:
        """``Client.add_job``'s options, errors and result, over RESP when the node's port
        is known and answers."""
        if not self.enabled or self._closed or os.getpid() != self._pid:
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
        refused: set[str] = set()  # said LEAVING to this add
        for n in self._client.add_candidates():
            if n.addr in refused:
                continue
            if not n.resp_port and not self._asked:
                self._learn_ports()
            if not self._resp_usable(n):
                # The node the gRPC add would choose first: it decides (and fails over).
                return self._client.add_job(queue, body, **options)
            try:
                conn = self._conn(n)
                reply = conn.call(cmd, reply_s)
            except _NotSent as exc:
                self._resp_failed(n, str(exc))
                return self._client.add_job(queue, body, **options)
            except (OSError, hiredis.ProtocolError) as exc:
                self._drop(n.addr)
                self._client.add_failed(n)
                raise IndeterminateError(
                    f"add sent to {n.addr} (RESP) but no answer came ({exc}): the job may exist",
                    node=n.addr,
                ) from None
            if isinstance(reply, hiredis.ReplyError):
                if _MAX_CLIENTS in str(reply):
                    # Refused at connect: the ADDJOB was not run; the node closes it.
                    self._resp_failed(n, str(reply))
                    return self._client.add_job(queue, body, **options)
                err = refusal(reply, n.addr)
                if isinstance(err, LeavingError):
                    refused.add(n.addr)
                    self._client.add_failed(n, leaving=True)
                    continue
                raise err
            if not isinstance(reply, bytes):
                self._drop(n.addr)
                raise IndeterminateError(
                    f"add sent to {n.addr} (RESP): unexpected reply {reply!r}", node=n.addr
                )
            self._client.add_answered(n)
            return reply.decode()
        if refused:
            raise LeavingError(f"every node is leaving: {sorted(refused)}")
        raise UnavailableError("AddJob: no node known")

    def _learn_ports(self) -> None:
        """One HELLO when the client has not asked for the RESP ports (discovery off, and
        no HELLO yet in this process: a forked child's new client): it sets them."""
        self._asked = True
        try:
            self._client.hello()
        except DisqError as exc:
            log.info("resp_ports_unknown", error=str(exc))  # the add goes over gRPC

    # -- connections ------------------------------------------------------------------------
    def _resp_usable(self, n: NodeAddr) -> bool:
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


def resp_adds_for(client: Client, settings: Settings) -> RespAdds:
    """The RESP adds of an integration's ``client``, as its settings ask (``publish_over``,
    the password, TLS)."""
    return RespAdds(
        client, password=settings.client_options.get("password"), enabled=settings.over_resp
    )
