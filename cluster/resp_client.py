"""A small synchronous RESP2 client for the cluster lab.

``disq.protocol.resp`` parses *requests* (what a server reads), so the reply side lives here:
:class:`ReplyParser` reads ``+ - : $ *`` including the null bulk ``$-1`` and the null
multibulk ``*-1``.

Reply types, chosen so that the lab's code stays short:

* status ``+OK`` -> ``str`` (status lines are ASCII: ``OK``, ``PONG``, Disque job ids);
* bulk ``$n`` -> ``bytes`` (bodies are binary); null bulk / null multibulk -> ``None``;
* integer -> ``int``; multibulk -> ``list``;
* error ``-ERR ...`` -> :class:`RespError`. :meth:`RespClient.call` raises it; inside arrays
  and in :meth:`RespClient.pipeline` results it is returned as a value, like redis-py's
  ``raise_on_error=False``, because one failed command must not hide the others' replies.

Failures of the connection itself are ``OSError``s and always close the socket, because after
a timeout or a short read nobody knows where the next reply starts:

* :class:`RespConnectError` (a ``ConnectionError``): the TCP connect failed, so **nothing was
  sent**; a caller may count the command as definitely not executed.
* ``TimeoutError`` or any other ``OSError`` after connecting: the command may or may not have
  run (indeterminate).
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Sequence
from typing import Any, TypeAlias

Arg: TypeAlias = bytes | str | int | float
Reply: TypeAlias = Any  # str | bytes | int | list[Reply] | RespError | None

_CRLF = b"\r\n"
_RECV_SIZE = 256 * 1024


class RespError(Exception):
    """An error reply (``-CODE text``). ``str(err)`` is the text without the ``-``."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    @property
    def code(self) -> str:
        """The first word, e.g. ``NOREPL``, ``ERR``, ``LEAVING`` (Redis's error prefix)."""
        return self.text.split(" ", 1)[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RespError) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"RespError({self.text!r})"


class RespProtocolError(ConnectionError):
    """The server sent bytes that are not a RESP2 reply; the connection is unusable."""


class RespConnectError(ConnectionError):
    """Connecting failed: the command was never sent."""


class _Incomplete(Exception):
    """Internal: the buffer ends inside a reply."""


class ReplyParser:
    """Incremental RESP2 reply parser: :meth:`feed` bytes, :meth:`get` whole replies.

    A reply is consumed only when it is complete, so a partial array is re-parsed from its
    start on the next :meth:`get`. Replies in the lab are small; simplicity wins.
    """

    NOTHING: Any = object()  # the "need more bytes" sentinel (None is a valid reply)

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        self._buf += data

    def get(self) -> Reply:
        """The next complete reply, or :attr:`ReplyParser.NOTHING` if more bytes are needed."""
        try:
            value, pos = self._parse(self._pos)
        except _Incomplete:
            return self.NOTHING
        self._pos = pos
        # Compact now and then instead of slicing on every reply (pipelines read many).
        if self._pos > 65536 or self._pos == len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        return value

    def _line(self, pos: int) -> tuple[bytes, int]:
        end = self._buf.find(_CRLF, pos)
        if end < 0:
            raise _Incomplete
        return bytes(self._buf[pos:end]), end + 2

    def _parse(self, pos: int) -> tuple[Reply, int]:
        if pos >= len(self._buf):
            raise _Incomplete
        kind = self._buf[pos]
        line, pos = self._line(pos + 1)
        if kind == 0x2B:  # '+'
            return line.decode("utf-8", "replace"), pos
        if kind == 0x2D:  # '-'
            return RespError(line.decode("utf-8", "replace")), pos
        if kind == 0x3A:  # ':'
            return self._int(line), pos
        if kind == 0x24:  # '$'
            n = self._int(line)
            if n < 0:
                return None, pos
            if len(self._buf) < pos + n + 2:
                raise _Incomplete
            if self._buf[pos + n : pos + n + 2] != _CRLF:
                raise RespProtocolError(f"bulk of {n} bytes not followed by CRLF")
            return bytes(self._buf[pos : pos + n]), pos + n + 2
        if kind == 0x2A:  # '*'
            n = self._int(line)
            if n < 0:
                return None, pos
            items: list[Reply] = []
            for _ in range(n):
                item, pos = self._parse(pos)
                items.append(item)
            return items, pos
        raise RespProtocolError(f"unexpected reply type byte {bytes([kind])!r}")

    @staticmethod
    def _int(line: bytes) -> int:
        try:
            return int(line)
        except ValueError:
            raise RespProtocolError(f"bad integer {line!r}") from None


def encode_command(args: Sequence[Arg]) -> bytes:
    """One request as a RESP multibulk (binary safe, unlike inline commands)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


class RespClient:
    """One lazily opened connection to one node.

    ``timeout`` (seconds) bounds each :meth:`call` / :meth:`pipeline` as a whole: connect,
    send and every reply. Not thread safe: give each thread its own client.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 7711,
        *,
        timeout: float = 5.0,
        connect_timeout: float | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        self._sock: socket.socket | None = None
        self._parser = ReplyParser()

    def __enter__(self) -> RespClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RespClient({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self, timeout: float | None = None) -> None:
        if self._sock is not None:
            return
        t = self.connect_timeout if timeout is None else timeout
        try:
            sock = socket.create_connection((self.host, self.port), timeout=t)
        except OSError as exc:
            raise RespConnectError(f"connect {self.host}:{self.port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._parser = ReplyParser()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    @staticmethod
    def _peer_gone(sock: socket.socket) -> bool:
        """Whether an idle connection was already closed by the server (e.g. it was killed).

        Checked before sending so that such a command goes on a fresh connection: then a
        refused connect proves it was never sent, instead of a reset after sending that
        leaves it indeterminate. Between commands an idle connection has nothing to read,
        so readable means EOF, a reset, or a stray reply: unusable in every case.
        """
        try:
            return bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def call(self, *args: Arg, timeout: float | None = None) -> Reply:
        """Send one command and return its reply; an error reply is raised as RespError."""
        (reply,) = self.pipeline([args], timeout=timeout)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def pipeline(
        self, cmds: Sequence[Sequence[Arg]], *, timeout: float | None = None
    ) -> list[Reply]:
        """Send every command in one write, then read one reply per command, in order.

        Error replies are returned in the list as :class:`RespError` values.
        """
        if not cmds:
            return []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        if self._sock is not None and self._peer_gone(self._sock):
            self.close()
        self.connect(timeout=max(0.001, deadline - time.monotonic()))
        sock = self._sock
        assert sock is not None
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(b"".join(encode_command(c) for c in cmds))
            replies: list[Reply] = []
            while len(replies) < len(cmds):
                reply = self._parser.get()
                if reply is not ReplyParser.NOTHING:
                    replies.append(reply)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.host}:{self.port}: no reply in time")
                sock.settimeout(left)
                data = sock.recv(_RECV_SIZE)
                if not data:
                    raise ConnectionResetError(f"{self.host}:{self.port}: connection closed")
                self._parser.feed(data)
            return replies
        except BaseException:
            # Timeout, reset, protocol error or KeyboardInterrupt: the stream position is
            # unknown, so this connection can never be trusted again.
            self.close()
            raise


def info_fields(text: bytes | str) -> dict[str, str]:
    """Parse an ``INFO`` / ``CLUSTER INFO`` reply (``key:value`` lines, ``#`` headers)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        out[k] = v
    return out
