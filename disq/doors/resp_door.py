"""The RESP door: one connection's bytes in, its replies out, Disque's commands in between.

Sans-IO like the beanstalk door: the transport hands in bytes and writes out what comes
back; the clock is read through the node. Commands of one connection are answered strictly
in order, however they were pipelined. A command that blocks (GETJOB without jobs, a
synchronous ADDJOB) holds every later command of the connection until its reply arrives:
Redis and Disque process nothing more from a blocked client, and a client that pipelines
behind a blocking call counts on that order.

Blocking and tokens: a blocking command takes a token from the node-wide counter (so tokens
are unique across connections), passes it to the core and leaves it in
:attr:`RespDoor.pending_token`. The core later appends ``(token, result)`` to
``core.replies``; the node routes that entry to the door that holds the token and calls
:meth:`RespDoor.deliver`, which formats the reply and runs the commands that were waiting.
A door that goes away cancels its token in the core (:meth:`RespDoor.close`), so no job is
handed to a client that is gone.

ADDJOB run-ahead (disq, not Disque): a synchronous ADDJOB blocks its connection for a whole
replication round trip, so a client that pipelines 16 ADDJOBs would have one in flight.
When the blocked command is followed in the queue by more ADDJOBs, they are started at once
(each with its own token) and their replies are held and sent strictly in order once the
ones before them are answered. Only ADDJOBs run ahead, so every other command still waits for
everything before it. The visible difference: a later job of the pipeline may be queued (and
consumed) before the producer saw the earlier one's reply, which Disque's best-effort
ordering allows, and a MAXLEN check sees the queue without the earlier jobs still waiting for
their copies.

Bounds: the parser bounds one element (Redis's limits, see :mod:`disq.protocol.resp`). Parsed
commands that cannot run yet (behind a blocked command, or past one batch of output) wait in
:attr:`RespDoor.queue`; :attr:`RespDoor.queued_bytes` lets the transport stop reading the
socket past a high-water mark, and past ``max_queued_bytes`` (Redis's 1 GB query-buffer
limit) the connection is closed, as Redis closes such a client.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from disq.core.disque.api import DeferredResult, Pending
from disq.doors.disque import Client, Deferred, NodeApi, execute
from disq.doors.disque.admin import AdminState
from disq.doors.disque.cluster import hello_before_auth
from disq.doors.disque.replies import NOAUTH_ERR, NULL3, NULL_ARRAY, NULL_BULK
from disq.protocol.resp import Command, ProtocolError, RespParser

# One feed's replies are built in batches of about this size: a client that pipelines
# expensive commands (big QPEEKs, JSCAN REPLY ALL) and never reads cannot make the node build
# unbounded output, nor hold the loop from other clients for long. The rest waits in the queue.
OUT_BATCH_BYTES = 256 * 1024
# Disque's client_max_querybuf_len (PROTO_MAX_QUERYBUF_LEN): past it the client is closed.
MAX_QUEUED_BYTES = 1024 * 1024 * 1024
_CMD_COST = 16  # bytes charged per queued argument besides its length
MAX_AHEAD = 64  # ADDJOBs in flight behind a blocked one on one connection


def _cost(cmd: Command) -> int:
    if isinstance(cmd, ProtocolError):
        return _CMD_COST
    return sum(map(len, cmd)) + _CMD_COST * len(cmd)


class _Ahead:
    """An ADDJOB started while the connection was blocked: its token, or its reply."""

    __slots__ = ("deferred", "reply", "token")

    def __init__(self, token: int | None, deferred: Deferred | None, reply: bytes | None):
        self.token = token
        self.deferred = deferred
        self.reply = reply


class RespDoor:
    __slots__ = (
        "ahead",
        "client",
        "closed",
        "max_queued_bytes",
        "node",
        "parser",
        "queue",
        "queued_bytes",
    )

    def __init__(
        self,
        node: NodeApi,
        new_token: Callable[[], int],
        *,
        parser: RespParser | None = None,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        admin: AdminState | None = None,
    ) -> None:
        self.node = node
        self.client = Client(node, new_token, admin)
        self.parser = parser if parser is not None else RespParser()
        self.queue: collections.deque[Command] = collections.deque()
        self.queued_bytes = 0
        self.max_queued_bytes = max_queued_bytes
        self.closed = False
        self.ahead: collections.deque[_Ahead] = collections.deque()

    # ---------------------------------------------------------------- state
    @property
    def pending_token(self) -> int | None:
        """The token of the blocked command, or None: the node routes replies by it."""
        return self.client.pending_token

    @property
    def pending_tokens(self) -> list[int]:
        """Every token this connection waits on: the blocked command's and the run-ahead
        ADDJOBs' (the node routes a reply for any of them here)."""
        head = self.client.pending_token
        tokens = [head] if head is not None else []
        tokens.extend(a.token for a in self.ahead if a.token is not None and a.reply is None)
        return tokens

    @property
    def blocked(self) -> bool:
        return self.client.pending_token is not None

    @property
    def closing(self) -> bool:
        """Write the replies, then close (QUIT, SHUTDOWN, a protocol error, an overflow)."""
        return self.client.closing

    @property
    def runnable(self) -> bool:
        """Queued commands that could run now (not behind a blocked command)."""
        return (
            bool(self.queue) and not self.blocked and not self.client.closing and not self._paused()
        )

    def _paused_now(self) -> bool:
        # Inlined check first: no call on the hot path while no pause is set.
        return self.client.admin.pause_end_ms != 0 and self._paused()

    def _paused(self) -> bool:
        """CLIENT PAUSE holds every command (one attribute read while no pause is set)."""
        admin = self.client.admin
        return admin.pause_end_ms != 0 and admin.paused(self.node.now_ms())

    # ---------------------------------------------------------------- input
    def feed(self, data: bytes) -> bytes:
        """Parse ``data``; run what can run now; return its replies in one buffer."""
        if self.closed or self.client.closing:
            return b""
        commands = self.parser.feed(data)
        if not commands:
            return b""
        if self.queue or self.client.pending_token is not None or self._paused_now():
            self._enqueue(commands, 0)
            return b""
        out: list[bytes] = []
        client = self.client
        now_ms = self.node.now_ms()
        size = 0
        n = len(commands)
        i = 0
        while i < n:
            cmd = commands[i]
            i += 1
            r = self._one(cmd, now_ms)
            if isinstance(r, Pending):
                self._enqueue(commands, i)
                self._run_ahead(now_ms, cmd)
                break
            out.append(r)
            if client.closing:
                break
            size += len(r)
            # A CLIENT PAUSE in the pipeline holds the commands behind it too.
            if (size >= OUT_BATCH_BYTES or client.admin.pause_end_ms) and i < n:
                self._enqueue(commands, i)
                break
        return out[0] if len(out) == 1 else b"".join(out)

    def run_pending(self) -> bytes:
        """Run queued commands until one blocks, the connection closes, or a batch of output
        is ready; the transport calls it again (after writing) while :attr:`runnable`."""
        out: list[bytes] = []
        self._drain(out)
        return b"".join(out)

    def deliver(self, result: DeferredResult, token: int | None = None) -> bytes:
        """The core's answer for ``token`` (default: the blocked command). For the blocked
        command: its reply, the run-ahead replies that are ready, then the commands that
        waited (up to one batch). For a run-ahead ADDJOB: kept until its turn."""
        client = self.client
        if client.pending_token is None:
            return b""
        if token is not None and token != client.pending_token:
            for a in self.ahead:
                if a.token == token and a.reply is None and a.deferred is not None:
                    a.reply = a.deferred(result)
                    a.deferred = None
                    break
            return b""
        out = [client.take_deferred(result)]
        while self.ahead:
            a = self.ahead[0]
            if a.reply is None:
                # Its turn now: it becomes the blocked command.
                self.ahead.popleft()
                client.pending_token, client.deferred = a.token, a.deferred
                return b"".join(out)
            self.ahead.popleft()
            out.append(a.reply)
        self._drain(out)
        return b"".join(out)

    def close(self) -> None:
        """The connection is gone: cancel the blocked command in the core, drop the queue."""
        if self.closed:
            return
        self.closed = True
        token = self.client.pending_token
        if token is not None:
            self.client.pending_token = None
            self.client.deferred = None
            self.node.core.cancel(token)
        for a in self.ahead:
            if a.token is not None and a.reply is None:
                self.node.core.cancel(a.token)
        self.ahead.clear()
        self.queue.clear()
        self.queued_bytes = 0

    # ---------------------------------------------------------------- internals
    def _one(self, cmd: Command, now_ms: int) -> bytes | Pending:
        if isinstance(cmd, ProtocolError):
            # The error reply, then close (CLIENT_CLOSE_AFTER_REPLY); the parser has already
            # stopped, so nothing follows it.
            self.client.closing = True
            return cmd.reply
        client = self.client
        r = execute(client, cmd, now_ms)
        # The common case costs one identity and one int comparison: RESP2 replies go out
        # exactly as the handlers built them.
        if r is NOAUTH_ERR or client.protocol != 2:
            return self._unusual(cmd, r)
        return r

    def _unusual(self, cmd: list[bytes], r: bytes | Pending) -> bytes | Pending:
        """The two replies the door adjusts. ``HELLO 3 AUTH user pass`` before
        authenticating: Redis exempts HELLO from the NOAUTH check (it may carry the
        credentials), which the command table does not know, so it runs here. And on a RESP3
        connection a whole reply that is RESP2's null (from a handler with no RESP3 variant,
        such as CLIENT GETNAME's) becomes RESP3's ``_``."""
        if r is NOAUTH_ERR:
            if self._is(cmd, "hello") and len(cmd) > 1:
                return hello_before_auth(self.client, cmd)
            return r
        if r == NULL_BULK or r == NULL_ARRAY:
            return NULL3
        return r

    def _is(self, cmd: list[bytes], name: str) -> bool:
        """Is ``cmd`` Disque's command ``name``, under whatever name rename-command gave it?"""
        spec = self.client.admin.commands.get(cmd[0].lower())
        return spec is not None and spec.name == name

    def _run_ahead(self, now_ms: int, blocked: Command) -> None:
        """Start the ADDJOBs queued right behind a blocked ADDJOB (see the module doc).
        Never behind a GETJOB: the jobs of later ADDJOBs could then serve that GETJOB,
        which a client that pipelines behind it does not expect."""
        if isinstance(blocked, ProtocolError) or not self._is(blocked, "addjob"):
            return
        queue = self.queue
        client = self.client
        head = (client.pending_token, client.deferred)
        while queue and len(self.ahead) < MAX_AHEAD and not client.closing:
            cmd = queue[0]
            if isinstance(cmd, ProtocolError) or not self._is(cmd, "addjob"):
                break
            queue.popleft()
            self.queued_bytes -= _cost(cmd)
            client.unblock()
            r = execute(client, cmd, now_ms)
            if isinstance(r, Pending):
                token, deferred = client.unblock()
                self.ahead.append(_Ahead(token, deferred, None))
            else:
                self.ahead.append(_Ahead(None, None, r))
        client.pending_token, client.deferred = head

    def _enqueue(self, commands: list[Command], start: int) -> None:
        if start >= len(commands):
            return
        rest = commands[start:] if start else commands
        self.queue.extend(rest)
        self.queued_bytes += sum(map(_cost, rest))
        if self.queued_bytes > self.max_queued_bytes:
            # freeClient on an oversized query buffer: no reply, the connection goes.
            self.queue.clear()
            self.queued_bytes = 0
            self.client.closing = True

    def _drain(self, out: list[bytes]) -> None:
        queue = self.queue
        client = self.client
        if not queue or client.pending_token is not None or client.closing or self._paused_now():
            return
        now_ms = self.node.now_ms()
        size = sum(map(len, out))
        while queue:
            cmd = queue.popleft()
            self.queued_bytes -= _cost(cmd)
            r = self._one(cmd, now_ms)
            if isinstance(r, Pending):
                self._run_ahead(now_ms, cmd)
                return
            out.append(r)
            if client.closing:
                queue.clear()
                self.queued_bytes = 0
                return
            size += len(r)
            if size >= OUT_BATCH_BYTES or client.admin.pause_end_ms:
                return
