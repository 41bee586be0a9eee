"""RESP2, the Redis protocol Disque speaks on port 7711, sans-IO: feed bytes, get commands.

Like :mod:`disq.protocol.beanstalk` (and h11), this module never sees a socket.
``RespParser.feed(data)`` returns the complete commands in ``data`` (plus what was buffered):
each is a ``list[bytes]`` of arguments, or a :class:`ProtocolError` carrying Redis's exact
error reply. Incomplete input stays buffered.

The parser copies Redis 3 / Disque 1.0 ``networking.c`` (``processInputBuffer``,
``processMultibulkBuffer``, ``processInlineBuffer``) and ``sds.c`` (``sdssplitargs``):

* a request starting with ``*`` is multibulk, anything else is an inline line;
* ``*0`` and any negative count (``*-1``, ``*-5``) are skipped without a reply;
* a protocol error is replied to and the connection is closed (``CLIENT_CLOSE_AFTER_REPLY``):
  the parser returns the error with ``close=True`` and ignores all further input.

Where Redis depends on how the bytes were split into reads (its size limits are checked only
while a line is still incomplete, and Redis 3 mis-skips a bare ``\\n``), this parser gives the
answer Redis gives for byte-by-byte input, so every split of the same bytes yields the same
commands. See the notes in the code.

Redis finds line ends with ``strchr``, which stops at a NUL byte, so there a NUL before the end
of a count, length or inline line stalls the request until the 64 KiB limit. Here lines are
found with ``bytes.find``, which is binary-safe; only the inline splitter stops at a NUL, as
``sdssplitargs`` does, since it reads a C string.

Reply encoders (:func:`simple`, :func:`error`, :func:`integer`, :func:`bulk`, :func:`array`,
:func:`encode`, :func:`encode_into`) are pure functions. Requests are the same in RESP3
(Redis 6+); only replies differ, for a connection that switched with ``HELLO 3``: the RESP3
encoders (:data:`NULL`, :func:`map_header`, :func:`double`, :func:`verbatim`, :func:`encode3`)
are at the end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TypeAlias, cast

import hiredis
from mypy_extensions import mypyc_attr

# server.h: PROTO_INLINE_MAX_SIZE, and the hard-coded limits in processMultibulkBuffer.
MAX_INLINE_BYTES = 64 * 1024
MAX_BULK_BYTES = 512 * 1024 * 1024
MAX_MULTIBULK_LEN = 1024 * 1024

_LLONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """A malformed request: send ``reply``, then close the connection if ``close``.

    Redis sets ``CLIENT_CLOSE_AFTER_REPLY`` on every protocol error, so ``close`` is always
    true here; it is a field so that the door can treat all parser outcomes alike.
    """

    reply: bytes
    close: bool = True

    @property
    def message(self) -> str:
        """The error text without the ``-`` and CRLF, for logs."""
        return self.reply[1:-2].decode("utf-8", "backslashreplace")


Command: TypeAlias = list[bytes] | ProtocolError


def _err(text: bytes) -> ProtocolError:
    # addReplyError: "-ERR " + text + "\r\n".
    return ProtocolError(b"-ERR Protocol error: " + text + b"\r\n")


ERR_INVALID_MULTIBULK_LEN = _err(b"invalid multibulk length")
ERR_INVALID_BULK_LEN = _err(b"invalid bulk length")
ERR_TOO_BIG_INLINE = _err(b"too big inline request")
ERR_TOO_BIG_MBULK_COUNT = _err(b"too big mbulk count string")
ERR_TOO_BIG_BULK_COUNT = _err(b"too big bulk count string")
ERR_UNBALANCED_QUOTES = _err(b"unbalanced quotes in request")


def expected_dollar(byte: int) -> ProtocolError:
    """``Protocol error: expected '$', got '%c'``, byte for byte as Redis sends it.

    addReplyErrorFormat turns ``\\r`` and ``\\n`` into spaces so the reply stays one line, and
    formats through sdscatvprintf, whose ``sdscat`` stops at the first NUL: a NUL byte cuts the
    message just before it (``got '`` and the CRLF). Other bytes, 8-bit ones too, go out raw.
    """
    if byte == 0:
        return _err(b"expected '$', got '")
    if byte in (0x0A, 0x0D):
        byte = 0x20
    return _err(b"expected '$', got '" + bytes((byte,)) + b"'")


def _string2ll(s: bytes) -> int | None:
    """Redis util.c string2ll: an optional ``-``, digits, no leading zero, no ``+``, no
    spaces, no ``-0``, within a signed 64-bit long long; ``None`` when Redis returns 0."""
    # Python's int() accepts " 1", "+1", "1_0" and "01", and refuses more than 4300 digits
    # with ValueError: check the form first. 20 characters hold any long long.
    if len(s) > 20:
        return None
    if s.isdigit():  # bytes.isdigit is ASCII-only, and false for b""
        if s[0] == 0x30 and len(s) > 1:
            return None
        v = int(s)
        return v if v <= _LLONG_MAX else None
    if len(s) > 1 and s[0] == 0x2D:
        digits = s[1:]
        if digits.isdigit() and digits[0] != 0x30:
            v = int(digits)
            return -v if v <= _LLONG_MAX + 1 else None
    return None


# Redis 6+'s own commands (HELLO's protocol version) parse numbers this strict way too.
string2ll = _string2ll


# ------------------------------------------------------------------ inline splitting
# isspace() in the C locale, used by sdssplitargs to skip blanks between arguments and to
# check what follows a closing quote.
_ISSPACE = frozenset(b" \t\n\v\f\r")
# ...but inside an unquoted argument only these end it (sdssplitargs' switch): "a\vb" is one
# argument, "a \vb" two.
_TOKEN_END = frozenset(b" \n\r\t")
_ESCAPES = {0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09, 0x62: 0x08, 0x61: 0x07}  # \n \r \t \b \a
_HEX = frozenset(b"0123456789abcdefABCDEF")
# Bytes for which bytes.split() would differ from sdssplitargs: quotes, NUL (a C string ends
# there) and \v \f (blanks between arguments, not inside one).
_NEEDS_SLOW_SPLIT = re.compile(rb"[\"'\x00\x0b\x0c]")


def split_inline(line: bytes) -> list[bytes] | None:
    """Split an inline request line like Redis: sdssplitargs, then drop empty arguments.

    Returns ``None`` for unbalanced quotes, or a closing quote followed by something other
    than a blank (``"foo"bar``), which Redis answers with "unbalanced quotes in request".
    """
    if _NEEDS_SLOW_SPLIT.search(line) is None:
        return line.split()
    # sdssplitargs reads a C string: a NUL ends the line.
    nul = line.find(b"\x00")
    if nul >= 0:
        line = line[:nul]
    n = len(line)

    def at(i: int) -> int:
        # C reads the terminating NUL past the end.
        return line[i] if i < n else 0

    out: list[bytes] = []
    i = 0
    while True:
        while i < n and line[i] in _ISSPACE:
            i += 1
        if i >= n:
            # processInlineBuffer (Redis 3, Disque) drops zero-length arguments, so `""` and
            # `''` vanish: `SET k ""` arrives as two arguments.
            return [a for a in out if a]
        cur = bytearray()
        quote = 0  # the quote the argument is inside of (0x22 or 0x27), else 0
        while True:
            c = at(i)
            if quote:
                if (
                    quote == 0x22
                    and c == 0x5C
                    and at(i + 1) == 0x78
                    and at(i + 2) in _HEX
                    and at(i + 3) in _HEX
                ):
                    cur.append(int(line[i + 2 : i + 4], 16))  # \xHH
                    i += 3
                elif quote == 0x22 and c == 0x5C and at(i + 1):
                    i += 1
                    e = line[i]
                    cur.append(_ESCAPES.get(e, e))  # \" and \\ and any \c give c
                elif quote == 0x27 and c == 0x5C and at(i + 1) == 0x27:
                    i += 1
                    cur.append(0x27)  # \' is the only escape in single quotes
                elif c == quote:
                    nxt = at(i + 1)
                    if nxt and nxt not in _ISSPACE:
                        return None  # a closing quote must end the argument
                    i += 1
                    break
                elif c == 0:
                    return None  # unterminated quotes
                else:
                    cur.append(c)
            elif c == 0 or c in _TOKEN_END:
                break
            elif c == 0x22 or c == 0x27:
                quote = c  # a quote may open mid-argument: a"b c" is `ab c`
            else:
                cur.append(c)
            i += 1
        out.append(bytes(cur))


# ------------------------------------------------------------------ the parser
_IDLE = 0  # between commands, or mid-multibulk at a line start, with nothing buffered
_LINE = 1  # part of a line is buffered: waiting for its terminator
_BODY = 2  # part of a bulk body is buffered: waiting for bulklen + 2 bytes

_CR = b"\r"
_LF = b"\n"

# The usual count and length lines, looked up whole in one dict probe instead of checked byte
# by byte: a hit is a well-formed "*N" or "$N" (no sign, no leading zero). Anything else,
# longer lengths included, takes the general path, which follows Redis step by step.
_COUNT_HEADERS = {b"*%d" % i: i for i in range(1, 1025)}
_BULK_HEADERS = {b"$%d" % i: i for i in range(4096)}
_EMPTY: dict[bytes, int] = {}


# ------------------------------------------------------------------ the fast path
# hiredis's reader (C) parses a pipelined read of well-formed multibulk requests about ten
# times faster than the loop below (0.3 us against 3-5 us per 8-argument ADDJOB). It reads
# replies, not requests, so it accepts more than a request may be, and its error messages
# are not Redis's: it is only trusted with a read that it parses whole into commands the
# loop below would return unchanged, and every other read (an inline command, a split
# request, anything odd) goes to the loop, from the same bytes. The checks:
# - the read starts with "*" and ends with "\r\n", and is at most FAST_MAX_BYTES, so no
#   element can pass the size limits;
# - no CRLF in it is followed by a type byte that hiredis turns into bytes or into a list
#   without complaint (status "+", verbatim "=", big number "(", set "~", push ">", map "%",
#   attribute "|"): a body that holds such a sequence only sends its read the slow way;
# - every result is a non-empty list whose items are all bytes (one C join over them all:
#   an integer, a null, an error object or a nested list makes it raise), and hiredis
#   ends the read between requests (a probe request fed after it comes back alone);
# - a read that holds one of those type bytes anywhere (hiredis skips the two bytes after a
#   body unread, so a bad terminator can put one where a "*" or "$" belongs) must also end
#   every bulk with CRLF: counted with C calls, its CRLFs are one per header and per body
#   end plus the bodies' own. A read without any of them needs no such count.
# Under these checks the read is exactly a run of "*N" arrays of "$L" bulks with canonical
# lengths (hiredis refuses leading zeros, signs and bad terminators), which the loop parses
# the same way.
FAST_MAX_BYTES = 1024 * 1024
_FAST_RISKY = re.compile(rb"\r\n[+=(~>%|]")
_FAST_PROBE = b"*1\r\n$1\r\n\x00\r\n"
_FAST_PROBE_ARGS = [b"\x00"]


def _has_risky_byte(data: bytes) -> bool:
    """A byte hiredis reads as a type the loop refuses (status, verbatim, big number, set,
    push, map, attribute), anywhere: seven memchr scans, cheaper than a regex's class."""
    return (
        b"+" in data
        or b"=" in data
        or b"(" in data
        or b"~" in data
        or b">" in data
        or b"%" in data
        or b"|" in data
    )


class RespParser:
    """Incremental RESP2 request parser for one connection. ``feed`` returns the complete
    commands: argument lists, or at most one :class:`ProtocolError`, always last, after which
    the parser is closed and ignores all further input.

    Buffering is bounded by one element: a pending line is at most ``max_inline_bytes + 1``
    bytes and a pending bulk body at most ``max_bulk_bytes + 1``. A large body arriving in many
    reads is kept as a list of the reads and joined once, so it is copied once, not per read.
    (The arguments already parsed for an unfinished multibulk command are held as well, as
    Redis holds ``argv``; each is within the limits.)
    """

    __slots__ = (
        "_args",
        "_bulk_header",
        "_bulklen",
        "_closed",
        "_count_header",
        "_fast",
        "_have",
        "_left",
        "_line_err",
        "_mode",
        "_tail",
        "_term",
        "max_bulk_bytes",
        "max_inline_bytes",
        "max_multibulk_len",
    )

    def __init__(
        self,
        max_bulk_bytes: int = MAX_BULK_BYTES,
        max_inline_bytes: int = MAX_INLINE_BYTES,
        max_multibulk_len: int = MAX_MULTIBULK_LEN,
    ) -> None:
        self.max_bulk_bytes = max_bulk_bytes
        self.max_inline_bytes = max_inline_bytes
        self.max_multibulk_len = max_multibulk_len
        self._mode = _IDLE
        self._tail: list[bytes] = []  # buffered bytes of the pending element, as received
        self._have = 0  # total length of _tail
        self._term = _LF  # _LINE: the byte that ends the pending line
        self._line_err = ERR_TOO_BIG_INLINE  # _LINE: the error if it grows past the limit
        self._args: list[bytes] | None = None  # arguments of the unfinished multibulk command
        self._left = 0  # bulk arguments still to come in it
        self._bulklen = -1  # _BODY: length of the pending bulk
        self._closed = False
        # A table hit skips the line-length check: only valid if "$4095" / "*1024" fit.
        short_ok = max_inline_bytes >= 5
        self._count_header = _COUNT_HEADERS if short_ok else _EMPTY
        self._bulk_header = _BULK_HEADERS if short_ok else _EMPTY
        # The fast path (above) holds only while its reads cannot reach a limit: a read of
        # at most fast_max bytes holds no bulk over max_bulk_bytes, no count over
        # max_multibulk_len (an argument takes 6 bytes at least) and no header line over
        # max_inline_bytes (8 bytes at most).
        fast_max = min(FAST_MAX_BYTES, max_bulk_bytes, 6 * max_multibulk_len)
        self._fast = (hiredis.Reader(), fast_max) if max_inline_bytes >= 32 else None

    @property
    def buffered(self) -> int:
        """Bytes held for the element being received (not counting finished arguments)."""
        return self._have

    @property
    def closed(self) -> bool:
        """True once a protocol error was returned: the connection must close."""
        return self._closed

    def feed(self, data: bytes) -> list[Command]:
        if self._closed or not data:
            return []
        if type(data) is not bytes:
            data = bytes(data)  # arguments must be bytes, not views of a caller's buffer
        mode = self._mode
        if mode == _IDLE:
            fast = self._fast
            if (
                fast is not None
                and data[0] == 0x2A
                and data.endswith(b"\r\n")
                and len(data) <= fast[1]
            ):
                risky = _has_risky_byte(data)
                whole = (
                    self._fast_parse(fast[0], data, risky)
                    if not risky or _FAST_RISKY.search(data) is None
                    else None
                )
                if whole is not None:
                    return whole
            return self._parse(data, 0, [])
        tail = self._tail
        if mode == _LINE:
            # Only join when the line can have ended, so a line dribbled in byte by byte
            # costs O(1) per read instead of a copy of the whole buffer each time.
            if self._term in data or (self._term == _CR and tail[-1][-1] == 0x0D):
                tail.append(data)
                buf = b"".join(tail)
                self._reset_tail()
                return self._parse(buf, 0, [])
            have = self._have + len(data)
            if have > self.max_inline_bytes:
                return self._fail([], self._line_err)
            tail.append(data)
            self._have = have
            return []
        # _BODY
        have = self._have
        bulklen = self._bulklen
        need = bulklen + 2
        if have + len(data) < need:
            tail.append(data)
            self._have = have + len(data)
            return []
        if have >= bulklen:
            # The body is all in the tail; some of the 2 bytes after it may be too.
            arg = b"".join(tail)[:bulklen]
        elif have:
            arg = b"".join([*tail, memoryview(data)[: bulklen - have]])
        else:
            arg = data[:bulklen]
        self._reset_tail()
        args = self._args
        assert args is not None
        args.append(arg)
        self._left -= 1
        out: list[Command] = []
        if not self._left:
            out.append(args)
            self._args = None
        return self._parse(data, need - have, out)

    # -------------------------------------------------------------- internals
    def _fast_parse(self, reader: hiredis.Reader, data: bytes, risky: bool) -> list[Command] | None:
        """``data`` parsed whole by hiredis, or None (nothing consumed): the loop's turn.
        ``risky``: the read holds a byte that hiredis takes for a type the loop refuses."""
        reader.feed(data)
        out: list[list[bytes]] = []
        gets = reader.gets
        try:
            while (cmd := gets()) is not False:
                out.append(cmd)
            if not risky:
                # Every item bytes: the join raises on anything else, a nested list too.
                b"".join(chain.from_iterable(out))
                whole = True
            else:
                args = list(chain.from_iterable(out))  # the join below checks them as well
                in_bodies = b"\r\n".join(args).count(b"\r\n") - len(args) + 1
                # hiredis (like Redis) skips the two bytes after a body unread, so with a
                # risky byte about, "<body>XY~1..." would parse on as a set where the loop
                # sees an inline command: every bulk must end with CRLF. So the read's CRLFs
                # are exactly one per header, one per body's end and the bodies' own, and no
                # body but the last ends with CR (CR + a skipped "\nX" would pass for one).
                whole = (
                    data.count(b"\r\n") == len(out) + 2 * len(args) + in_bodies
                    and b"\n".join(args).count(b"\r\n") == in_bodies
                )
            # Nothing left half-parsed inside hiredis (an array still waiting for its items
            # leaves no unread bytes, so has_data() cannot tell): a probe request fed now
            # comes back whole and alone only if hiredis was between requests.
            reader.feed(_FAST_PROBE)
            whole = whole and gets() == _FAST_PROBE_ARGS and gets() is False and all(out)
        except (hiredis.ProtocolError, TypeError):
            whole = False
        if whole:
            return cast(list[Command], out)
        self._fast = (hiredis.Reader(), self._fast[1]) if self._fast is not None else None
        return None

    def _reset_tail(self) -> None:
        self._tail = []
        self._have = 0
        self._mode = _IDLE
        self._bulklen = -1

    def _fail(self, out: list[Command], err: ProtocolError) -> list[Command]:
        # setProtocolError: CLIENT_CLOSE_AFTER_REPLY, and processInputBuffer stops reading.
        self._reset_tail()
        self._args = None
        self._left = 0
        self._closed = True
        out.append(err)
        return out

    def _wait_line(
        self, buf: bytes, pos: int, term: bytes, err: ProtocolError, out: list[Command]
    ) -> list[Command]:
        if pos < len(buf):
            self._tail = [buf[pos:]]
            self._have = len(buf) - pos
            self._mode = _LINE
            self._term = term
            self._line_err = err
        return out

    def _parse(self, buf: bytes, pos: int, out: list[Command]) -> list[Command]:
        n = len(buf)
        last = n - 1  # a line's "\r" must come before this: Redis wants one byte after it
        find = buf.find
        max_inline = self.max_inline_bytes
        max_bulk = self.max_bulk_bytes
        max_count = self.max_multibulk_len
        count_header = self._count_header.get
        bulk_header = self._bulk_header.get
        args = self._args
        left = self._left
        # Every exit that stops mid-command stores them back.
        self._args = None
        self._left = 0
        while True:
            if args is None:
                if pos >= n:
                    return out
                if buf[pos] != 0x2A:  # processInputBuffer: '*' starts a multibulk request
                    nl = find(b"\n", pos)
                    # processInlineBuffer looks for "\n" and, while there is none, fails once
                    # the buffer passes PROTO_INLINE_MAX_SIZE. A line that arrives whole is not
                    # checked there; we check it too, so the answer does not depend on how the
                    # line was split into reads (byte by byte, Redis fails it).
                    if nl < 0:
                        if n - pos > max_inline:
                            return self._fail(out, ERR_TOO_BIG_INLINE)
                        return self._wait_line(buf, pos, _LF, ERR_TOO_BIG_INLINE, out)
                    if nl - pos > max_inline:
                        return self._fail(out, ERR_TOO_BIG_INLINE)
                    # A bare "\n" ends the line too; a "\r" just before it is dropped. (Redis 3
                    # then skips querylen+2 bytes, eating the first byte of the next request
                    # after a bare "\n"; Redis 5 fixed that, and so do we.)
                    end = nl - 1 if nl > pos and buf[nl - 1] == 0x0D else nl
                    parsed = split_inline(buf[pos:end])
                    pos = nl + 1
                    if parsed is None:
                        return self._fail(out, ERR_UNBALANCED_QUOTES)
                    if parsed:  # an empty line has no arguments and is skipped
                        out.append(parsed)
                    continue
                # The count line ends at the first "\r", and the byte after it is skipped
                # unchecked: Redis only requires that it is there.
                cr = find(b"\r", pos)
                if 0 <= cr < last and (count := count_header(buf[pos:cr])) is not None:
                    pass  # "*1".."*1024", looked up whole: '*', digits and range in one go
                else:
                    # Same rule as for inline lines: too long is an error even when the "\r"
                    # is already here, as it is for Redis when the line comes byte by byte.
                    if (cr if cr >= 0 else n) - pos > max_inline:
                        return self._fail(out, ERR_TOO_BIG_MBULK_COUNT)
                    if cr < 0 or cr >= last:
                        return self._wait_line(buf, pos, _CR, ERR_TOO_BIG_MBULK_COUNT, out)
                    count = _string2ll(buf[pos + 1 : cr])
                    if count is None:
                        return self._fail(out, ERR_INVALID_MULTIBULK_LEN)
                if count > max_count:
                    return self._fail(out, ERR_INVALID_MULTIBULK_LEN)
                pos = cr + 2
                if count <= 0:
                    continue  # "*0", "*-1", even "*-5": no command, no reply
                args = []
                left = count
            # The bulk arguments: each is "$<len>\r\n", <len> bytes, and two more bytes, which
            # Redis skips without checking that they are "\r\n".
            while left:
                cr = find(b"\r", pos)
                if 0 <= cr < last and (size := bulk_header(buf[pos:cr])) is not None:
                    pass  # "$0".."$4095": '$', digits, no leading zero, in one dict lookup
                else:
                    if (cr if cr >= 0 else n) - pos > max_inline:
                        return self._fail(out, ERR_TOO_BIG_BULK_COUNT)
                    if cr < 0 or cr >= last:
                        self._args = args
                        self._left = left
                        return self._wait_line(buf, pos, _CR, ERR_TOO_BIG_BULK_COUNT, out)
                    # Redis checks for '$' only once the whole line is in: "x" without a
                    # "\r" waits for more input.
                    if buf[pos] != 0x24:
                        return self._fail(out, expected_dollar(buf[pos]))
                    size = _string2ll(buf[pos + 1 : cr])
                    if size is None or size < 0:
                        # "$-1" is a null in replies but an error in requests.
                        return self._fail(out, ERR_INVALID_BULK_LEN)
                if size > max_bulk:
                    return self._fail(out, ERR_INVALID_BULK_LEN)
                pos = cr + 2
                end = pos + size
                if end + 2 > n:
                    self._args = args
                    self._left = left
                    self._bulklen = size
                    if pos < n:
                        self._tail = [buf[pos:]]
                        self._have = n - pos
                    self._mode = _BODY
                    return out
                args.append(buf[pos:end])
                pos = end + 2
                left -= 1
            out.append(args)
            args = None


# ------------------------------------------------------------------ replies
# str subclasses stay Python classes: mypyc's native classes cannot subclass str.
@mypyc_attr(native_class=False)
class SimpleString(str):
    """A status reply (``+OK``) where :func:`encode` would otherwise send a bulk string."""

    __slots__ = ()


@mypyc_attr(native_class=False)
class ErrorString(str):
    """An error reply inside an array; the text includes the code word (``ERR ...``)."""

    __slots__ = ()


Reply: TypeAlias = "bytes | bytearray | memoryview | str | int | Sequence[Reply] | None"

NULL_BULK = b"$-1\r\n"
NULL_ARRAY = b"*-1\r\n"
OK = b"+OK\r\n"

# Bodies at least this big go out as their own chunk instead of being copied into the header.
_BIG_BODY = 16 * 1024


def _one_line(s: str) -> bytes:
    # addReplyErrorFormat replaces "\r" and "\n" with spaces so a reply stays one line; we do
    # it for status replies too, since either would break the framing.
    b = s.encode()
    if b"\r" in b or b"\n" in b:
        b = b.replace(b"\r", b" ").replace(b"\n", b" ")
    return b


def simple(s: str) -> bytes:
    """A status reply: ``simple("OK") == b"+OK\\r\\n"``."""
    return b"+" + _one_line(s) + b"\r\n"


def error(s: str) -> bytes:
    """An error reply; ``s`` includes the code word: ``error("ERR no") == b"-ERR no\\r\\n"``."""
    return b"-" + _one_line(s) + b"\r\n"


def integer(n: int) -> bytes:
    return b":%d\r\n" % n


def bulk(b: bytes | None) -> bytes:
    """A bulk string, or the null bulk ``$-1`` for ``None``."""
    if b is None:
        return NULL_BULK
    return b"$%d\r\n%s\r\n" % (len(b), b)


def array(items: Sequence[Reply] | None) -> bytes:
    """An array of replies (encoded as by :func:`encode`), or the null array for ``None``."""
    if items is None:
        return NULL_ARRAY
    out: list[bytes] = []
    encode_into(items, out)
    return b"".join(out)


def encode(value: Reply) -> bytes:
    """Encode a Python value as a reply.

    ``None`` is the null bulk; bytes-like is a bulk string; ``str`` is a UTF-8 bulk string,
    except :class:`SimpleString` (``+``) and :class:`ErrorString` (``-``); ``int`` (and
    ``bool``) is an integer; any other sequence (list, tuple) is an array, recursively.
    """
    if type(value) is bytes:
        return b"$%d\r\n%s\r\n" % (len(value), value)
    out: list[bytes] = []
    encode_into(value, out)
    return b"".join(out)


def encode_into(value: Reply, out: list[bytes]) -> None:
    """Append the encoding of ``value`` to ``out`` as chunks, for a vectored write or one
    join; a large body is appended as it is, not copied."""
    if isinstance(value, bytes):
        if len(value) >= _BIG_BODY:
            out.append(b"$%d\r\n" % len(value))
            out.append(value)
            out.append(b"\r\n")
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif isinstance(value, str):
        if isinstance(value, SimpleString):
            out.append(simple(value))
        elif isinstance(value, ErrorString):
            out.append(error(value))
        else:
            b = value.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    elif value is None:
        out.append(NULL_BULK)
    elif isinstance(value, int):
        out.append(b":%d\r\n" % value)
    elif isinstance(value, bytearray | memoryview):
        encode_into(bytes(value), out)
    elif isinstance(value, Sequence):
        out.append(b"*%d\r\n" % len(value))
        append = out.append
        for item in value:
            if type(item) is bytes and len(item) < _BIG_BODY:
                append(b"$%d\r\n%s\r\n" % (len(item), item))  # the common case, inline
            else:
                encode_into(item, out)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as a RESP reply")


# ------------------------------------------------------------------ RESP3 replies
# A connection that sent ``HELLO 3`` gets Redis 6+'s typed replies. Only the types that differ
# from RESP2 have their own encoders; everything else (status, error, integer, bulk, array)
# is the same bytes in both protocols, so the RESP2 encoders above serve RESP3 too.
NULL = b"_\r\n"  # RESP3's one null, for both the null bulk and the null array


def map_header(n: int) -> bytes:
    """The header of a map of ``n`` key/value pairs: ``%n``, then 2n replies."""
    return b"%%%d\r\n" % n


def double(x: float) -> bytes:
    """A RESP3 double: ``,1.5``, ``,inf``, ``,-inf``, ``,nan``. ``repr`` gives the shortest
    text that reads back as the same double, which is what the spec asks of a server."""
    if x != x:
        return b",nan\r\n"
    if x in (float("inf"), float("-inf")):
        return b",inf\r\n" if x > 0 else b",-inf\r\n"
    return b",%s\r\n" % repr(float(x)).encode()


def verbatim(text: bytes, fmt: bytes = b"txt") -> bytes:
    """A RESP3 verbatim string (``=``): a 3-byte format, a colon, then the text; Redis 7
    sends INFO-like text this way (``txt``), and RESP3 clients show it as is."""
    if len(fmt) != 3:
        raise ValueError("a verbatim string's format is exactly 3 bytes")
    return b"=%d\r\n%s:%s\r\n" % (len(text) + 4, fmt, text)


Reply3: TypeAlias = (
    "bytes | bytearray | memoryview | str | bool | int | float"
    " | Sequence[Reply3] | Mapping[bytes | str, Reply3] | None"
)


def encode3(value: Reply3) -> bytes:
    """Encode a Python value as a RESP3 reply: as :func:`encode`, except that ``None`` is the
    null ``_``, a mapping is a map (``%``, keys encoded like values, in the mapping's order),
    ``bool`` is a boolean (``#t`` / ``#f``) and ``float`` a double."""
    out: list[bytes] = []
    encode3_into(value, out)
    return b"".join(out)


def encode3_into(value: Reply3, out: list[bytes]) -> None:
    """Append the RESP3 encoding of ``value`` to ``out`` (see :func:`encode3`)."""
    if value is None:
        out.append(NULL)
    elif isinstance(value, bool):
        out.append(b"#t\r\n" if value else b"#f\r\n")
    elif isinstance(value, float):
        out.append(double(value))
    elif isinstance(value, Mapping):
        out.append(map_header(len(value)))
        for k, v in value.items():
            encode3_into(k, out)
            encode3_into(v, out)
    elif isinstance(value, bytes | bytearray | memoryview | str | int):
        encode_into(value, out)
    elif isinstance(value, Sequence):
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            encode3_into(item, out)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as a RESP3 reply")
