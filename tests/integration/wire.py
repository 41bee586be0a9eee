"""A tiny blocking client for byte-exact beanstalkd wire tests.

This module is deliberately minimal: it does not know the beanstalkd protocol beyond the
framing needed to read replies.  Tests send raw bytes and assert raw bytes, the same way
beanstalkd's own ``testserv.c`` does with ``mustsend``/``ckresp``.

Every read has a timeout (5 s by default, like ``testserv.c``), so a server that does not
answer makes the test fail instead of hanging.

Typical use::

    c = Conn(port)
    c.send(b"put 0 0 10 1\\r\\nx\\r\\n")
    c.expect(b"INSERTED 1\\r\\n")
    data, raw = c.stats_job(1)       # sends ``stats-job 1`` and parses the YAML reply
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable

# Same read timeout as testserv.c ("Global timeout set for reading response in tests; 5sec").
DEFAULT_TIMEOUT = 5.0

_OK_LINE = re.compile(rb"^OK (\d+)\r\n$")


class WireError(AssertionError):
    """Raised on a timeout, an early close or a reply that does not match."""


class Conn:
    """One client connection (TCP on 127.0.0.1, or a UNIX socket when ``unix_path`` is set).

    Reads are buffered internally so that ``expect``/``read_line``/``read_yaml`` can be freely
    mixed, and so that several pipelined replies that arrive in one TCP segment are split
    correctly.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        unix_path: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.timeout = timeout
        self._buf = bytearray()
        if unix_path is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix_path)
            self.peer = f"unix:{unix_path}"
        else:
            if port is None:
                raise ValueError("Conn needs a port or a unix_path")
            self.sock = socket.create_connection((host, port), timeout=timeout)
            # Like testserv.c (issue #430): small writes must go out at once.
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.peer = f"{host}:{port}"
        self.closed = False

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Close our end (idempotent)."""
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        """Send raw bytes (all of them)."""
        self.sock.sendall(data)

    def _fill(self, deadline: float, want: str) -> bool:
        """Receive more bytes into the buffer before ``deadline``.

        Returns False on EOF.  Raises WireError on timeout, naming what we waited for and
        what was already buffered (to make mismatches readable).
        """
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WireError(
                f"timeout waiting for {want} from {self.peer}; buffered {bytes(self._buf)!r}"
            )
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise WireError(
                f"timeout waiting for {want} from {self.peer}; buffered {bytes(self._buf)!r}"
            ) from None
        except ConnectionResetError:
            return False
        if not chunk:
            return False
        self._buf += chunk
        return True

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    # ------------------------------------------------------------------ reading

    def read_exact(self, n: int, timeout: float | None = None) -> bytes:
        """Read exactly ``n`` bytes or fail (timeout or connection closed)."""
        deadline = self._deadline(timeout)
        while len(self._buf) < n:
            if not self._fill(deadline, f"{n} bytes"):
                raise WireError(
                    f"connection closed by {self.peer} after {bytes(self._buf)!r}; wanted {n} bytes"
                )
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def expect(self, expected: bytes, timeout: float | None = None) -> None:
        """Read exactly ``len(expected)`` bytes and assert they equal ``expected``.

        On a mismatch the message shows both, plus anything else already received, so a
        wrong reply is easy to read.  A timeout or an early close also fails, showing the
        bytes received so far.
        """
        deadline = self._deadline(timeout)
        while len(self._buf) < len(expected):
            # Fail early if what we have already cannot be a prefix of what we expect.
            if not expected.startswith(bytes(self._buf)):
                break
            try:
                alive = self._fill(deadline, repr(expected))
            except WireError as e:
                raise WireError(f"expected {expected!r}: {e}") from None
            if not alive:
                raise WireError(
                    f"connection closed by {self.peer}: expected {expected!r}, "
                    f"got {bytes(self._buf)!r}"
                )
        got = bytes(self._buf[: len(expected)])
        if got != expected:
            raise WireError(
                f"reply mismatch from {self.peer}:\n  expected {expected!r}\n"
                f"  got      {got!r}\n  (buffered {bytes(self._buf)!r})"
            )
        del self._buf[: len(expected)]

    def read_line(self, timeout: float | None = None) -> bytes:
        """Read one reply line and return it **including** its ``\\r\\n``."""
        deadline = self._deadline(timeout)
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[: i + 2])
                del self._buf[: i + 2]
                return line
            if not self._fill(deadline, "a line"):
                raise WireError(
                    f"connection closed by {self.peer} in mid line {bytes(self._buf)!r}"
                )

    def read_yaml(self, timeout: float | None = None) -> tuple[dict[str, str] | list[str], bytes]:
        """Read an ``OK <n>\\r\\n<n bytes>\\r\\n`` reply.

        Returns ``(parsed, raw)`` where ``raw`` is the n-byte YAML body (without the final
        CRLF) and ``parsed`` is either a dict of ``key: value`` lines (values kept as the exact
        strings sent, no quote stripping or number conversion) or a list for ``- item``
        bodies (list-tubes).  The key order of the dict is the wire order.

        Asserts: the header is exactly ``OK <digits>\\r\\n``, the body is followed by
        ``\\r\\n`` (not counted in n), the body starts with ``---\\n`` and every line ends in
        ``\\n``.
        """
        header = self.read_line(timeout)
        m = _OK_LINE.match(header)
        if m is None:
            raise WireError(f"expected 'OK <n>\\r\\n' from {self.peer}, got {header!r}")
        n = int(m.group(1))
        body = self.read_exact(n, timeout)
        trailer = self.read_exact(2, timeout)
        if trailer != b"\r\n":
            raise WireError(f"YAML body of {n} bytes not followed by CRLF: {trailer!r}")
        return parse_yaml(body), body

    def read_job(self, verb: bytes, job_id: int, body: bytes) -> None:
        """Expect ``<verb> <id> <len>\\r\\n<body>\\r\\n`` (RESERVED or FOUND)."""
        self.expect(b"%s %d %d\r\n%s\r\n" % (verb, job_id, len(body), body))

    def expect_closed(self, timeout: float | None = None) -> None:
        """Assert that the server closes the connection (EOF or reset) with no more data."""
        deadline = self._deadline(timeout)
        while True:
            if self._buf:
                raise WireError(f"expected {self.peer} to close, but got {bytes(self._buf)!r}")
            if not self._fill(deadline, "the connection to close"):
                return

    def expect_silence(self, seconds: float) -> None:
        """Assert that nothing arrives for ``seconds`` (and the connection stays open).

        Proving a negative needs a fixed window; keep ``seconds`` short.
        """
        if self._buf:
            raise WireError(f"expected silence from {self.peer}, have {bytes(self._buf)!r}")
        self.sock.settimeout(seconds)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return
        finally:
            self.sock.settimeout(self.timeout)
        if not chunk:
            raise WireError(f"expected silence, but {self.peer} closed the connection")
        raise WireError(f"expected silence from {self.peer}, got {chunk!r}")

    # ------------------------------------------------------------------ shortcuts

    def cmd(self, line: bytes, expected: bytes) -> None:
        """Send ``line + CRLF`` and expect the exact reply ``expected``."""
        self.send(line + b"\r\n")
        self.expect(expected)

    def put(
        self, body: bytes, pri: int = 0, delay: int = 0, ttr: int = 1, expect_id: int | None = None
    ) -> int:
        """``put`` a job and return its id (asserting ``INSERTED <expect_id>`` if given)."""
        self.send(b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))
        line = self.read_line()
        m = re.fullmatch(rb"INSERTED (\d+)\r\n", line)
        if m is None:
            raise WireError(f"expected INSERTED <id>, got {line!r}")
        job_id = int(m.group(1))
        if expect_id is not None and job_id != expect_id:
            raise WireError(f"expected INSERTED {expect_id}, got {line!r}")
        return job_id

    def yaml_cmd(self, line: bytes) -> tuple[dict[str, str] | list[str], bytes]:
        """Send a command whose reply is ``OK <n>`` + YAML and return ``read_yaml()``."""
        self.send(line + b"\r\n")
        return self.read_yaml()

    def stats(self) -> dict[str, str]:
        data, _ = self.yaml_cmd(b"stats")
        assert isinstance(data, dict)
        return data

    def stats_job(self, job_id: int) -> dict[str, str]:
        data, _ = self.yaml_cmd(b"stats-job %d" % job_id)
        assert isinstance(data, dict)
        return data

    def stats_tube(self, tube: bytes) -> dict[str, str]:
        data, _ = self.yaml_cmd(b"stats-tube " + tube)
        assert isinstance(data, dict)
        return data


def parse_yaml(body: bytes) -> dict[str, str] | list[str]:
    """Parse beanstalkd's flat YAML: ``---\\n`` then ``key: value\\n`` or ``- item\\n`` lines."""
    if not body.startswith(b"---\n"):
        raise WireError(f"YAML body does not start with '---\\n': {body!r}")
    if not body.endswith(b"\n"):
        raise WireError(f"YAML body does not end with '\\n': {body!r}")
    lines = body[4:-1].split(b"\n") if len(body) > 4 else []
    if lines and all(x.startswith(b"- ") for x in lines):
        return [x[2:].decode() for x in lines]
    out: dict[str, str] = {}
    for raw in lines:
        key, sep, value = raw.partition(b": ")
        if not sep:
            raise WireError(f"bad YAML line {raw!r} in {body!r}")
        k = key.decode()
        if k in out:
            raise WireError(f"duplicate YAML key {k!r} in {body!r}")
        out[k] = value.decode()
    return out


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate()`` until it returns a truthy value; return that value.

    Used where the protocol gives no event to block on (e.g. a job moving from delayed to
    ready, or drain mode taking effect after a signal).  Fails after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WireError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def lines(*parts: bytes | Iterable[bytes]) -> bytes:
    """Join command lines with CRLF terminators: ``lines(b"use a", b"use b")``."""
    out = bytearray()
    for p in parts:
        if isinstance(p, bytes):
            out += p + b"\r\n"
        else:
            for q in p:
                out += q + b"\r\n"
    return bytes(out)
