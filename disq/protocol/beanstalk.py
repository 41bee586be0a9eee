"""The beanstalkd 1.12 protocol, sans-IO: feed bytes, get commands.

Like h11, this module never sees a socket. ``BeanstalkParser.feed(data)`` returns the complete
commands in ``data`` (plus what was buffered), as tuples ``(op, *args)``; incomplete input
stays buffered. Malformed input yields ``(OP_ERROR, reply_bytes)`` and parsing goes on where
beanstalkd goes on:

* a line longer than 224 bytes (CRLF included) is thrown away up to its CRLF, then
  BAD_FORMAT; the connection goes on;
* ``put`` with ``bytes`` over the job size limit skips ``bytes + 2`` and answers JOB_TOO_BIG;
* a body not followed by CRLF answers EXPECTED_CRLF.

Commands are matched by prefix in beanstalkd's order; a dict lookup on the first word is only
a fast path that gives the same answer.
"""

from __future__ import annotations

import re
from typing import Any

LINE_MAX = 224  # beanstalkd LINE_BUF_SIZE, CRLF included
MAX_TUBE_NAME = 200
U32_MAX = 4294967295
INT_MAX = 2147483647
U64_MAX = 18446744073709551615

(
    OP_ERROR,
    OP_PUT,
    OP_PEEK,
    OP_PEEK_READY,
    OP_PEEK_DELAYED,
    OP_PEEK_BURIED,
    OP_RESERVE,
    OP_RESERVE_TIMEOUT,
    OP_RESERVE_JOB,
    OP_DELETE,
    OP_RELEASE,
    OP_BURY,
    OP_KICK,
    OP_KICK_JOB,
    OP_TOUCH,
    OP_STATS,
    OP_STATS_JOB,
    OP_STATS_TUBE,
    OP_USE,
    OP_WATCH,
    OP_IGNORE,
    OP_LIST_TUBES,
    OP_LIST_TUBE_USED,
    OP_LIST_TUBES_WATCHED,
    OP_QUIT,
    OP_PAUSE_TUBE,
    OP_BAD_BODY,
) = range(27)
OP_COUNT = 27

BAD_FORMAT = b"BAD_FORMAT\r\n"
UNKNOWN_COMMAND = b"UNKNOWN_COMMAND\r\n"
EXPECTED_CRLF = b"EXPECTED_CRLF\r\n"
JOB_TOO_BIG = b"JOB_TOO_BIG\r\n"

ERR_BAD_FORMAT = (OP_ERROR, BAD_FORMAT)
ERR_UNKNOWN = (OP_ERROR, UNKNOWN_COMMAND)
# Errors beanstalkd counts in a cmd-* stat carry the op to count as a third element.
ERR_PUT_BAD_FORMAT = (OP_ERROR, BAD_FORMAT, OP_PUT)
ERR_JOB_TOO_BIG = (OP_ERROR, JOB_TOO_BIG, OP_PUT)

# beanstalkd's which_cmd order. Entries ending in a space take arguments.
_PREFIXES: tuple[tuple[bytes, int], ...] = (
    (b"put ", OP_PUT),
    (b"peek ", OP_PEEK),
    (b"peek-ready", OP_PEEK_READY),
    (b"peek-delayed", OP_PEEK_DELAYED),
    (b"peek-buried", OP_PEEK_BURIED),
    (b"reserve-with-timeout ", OP_RESERVE_TIMEOUT),
    (b"reserve-job ", OP_RESERVE_JOB),
    (b"reserve", OP_RESERVE),
    (b"delete ", OP_DELETE),
    (b"release ", OP_RELEASE),
    (b"bury ", OP_BURY),
    (b"kick ", OP_KICK),
    (b"kick-job ", OP_KICK_JOB),
    (b"touch ", OP_TOUCH),
    (b"stats-job ", OP_STATS_JOB),
    (b"stats-tube ", OP_STATS_TUBE),
    (b"stats", OP_STATS),
    (b"use ", OP_USE),
    (b"watch ", OP_WATCH),
    (b"ignore ", OP_IGNORE),
    (b"list-tubes-watched", OP_LIST_TUBES_WATCHED),
    (b"list-tube-used", OP_LIST_TUBE_USED),
    (b"list-tubes", OP_LIST_TUBES),
    (b"quit", OP_QUIT),
    (b"pause-tube", OP_PAUSE_TUBE),
)
# Commands without arguments must match the whole line.
_EXACT = {
    OP_PEEK_READY,
    OP_PEEK_DELAYED,
    OP_PEEK_BURIED,
    OP_RESERVE,
    OP_STATS,
    OP_LIST_TUBES,
    OP_LIST_TUBE_USED,
    OP_LIST_TUBES_WATCHED,
}
# Fast path: first word -> op, valid only when the line has arguments (or none, for _EXACT).
_WORD_OPS = {p.rstrip(b" "): op for p, op in _PREFIXES if op != OP_PAUSE_TUBE}

_ONE_INT = frozenset(
    {OP_DELETE, OP_PEEK, OP_TOUCH, OP_KICK_JOB, OP_STATS_JOB, OP_RESERVE_JOB, OP_RESERVE_TIMEOUT}
)

OP_NAMES = {op: p.rstrip(b" ").decode() for p, op in _PREFIXES}

NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()")

Command = tuple[Any, ...]

# A put line of plain numbers (pri, delay and ttr below 10**9, so within u32).
_PUT_LINE = re.compile(rb"put ([0-9]{1,9}) ([0-9]{1,9}) ([0-9]{1,9}) ([0-9]{1,10})\r\n")


class _BadFormat(Exception):
    pass


def _read_uint(line: bytes, pos: int, max_value: int) -> tuple[int, int]:
    """beanstalkd's read_u32/read_u64: skip spaces, then at least one digit."""
    n = len(line)
    while pos < n and line[pos] == 0x20:
        pos += 1
    start = pos
    while pos < n and 0x30 <= line[pos] <= 0x39:
        pos += 1
    if pos == start:
        raise _BadFormat
    value = int(line[start:pos])
    if value > max_value:
        raise _BadFormat
    return value, pos


def _strtol(line: bytes, pos: int, *, require_digits: bool, unsigned: bool) -> int:
    """C's strtol/strtoul as beanstalkd uses them for ``kick`` and ``reserve-with-timeout``."""
    n = len(line)
    while pos < n and line[pos] in b" \t\n\v\f\r":
        pos += 1
    negative = False
    if pos < n and line[pos] in b"+-":
        negative = line[pos] == 0x2D
        pos += 1
    start = pos
    while pos < n and 0x30 <= line[pos] <= 0x39:
        pos += 1
    if pos == start:
        if require_digits:
            raise _BadFormat
        return 0
    value = int(line[start:pos])
    if unsigned:
        if value > U64_MAX:
            raise _BadFormat  # ERANGE
        return (-value) % (U64_MAX + 1) if negative else value
    value = -value if negative else value
    if not -(1 << 63) <= value < (1 << 63):
        raise _BadFormat
    return value


def _read_last_uint(line: bytes, pos: int, max_value: int) -> int:
    value, end = _read_uint(line, pos, max_value)
    if end != len(line):
        raise _BadFormat
    return value


def _valid_name(name: bytes) -> bool:
    return 0 < len(name) <= MAX_TUBE_NAME and name[0] != 0x2D and NAME_CHARS.issuperset(name)


def _read_name(line: bytes, pos: int) -> str:
    name = line[pos:]
    if not _valid_name(name):
        raise _BadFormat
    return name.decode("ascii")


def parse_line(line: bytes) -> Command | tuple[int, int, int, int, int]:
    """Parse one command line (without CRLF).

    For ``put`` the result is ``(OP_PUT, pri, delay_s, ttr_s, size)``: the caller reads the
    body. Errors come back as ``(OP_ERROR, reply)``.
    """
    if b"\x00" in line:
        return ERR_BAD_FORMAT
    sp = line.find(b" ")
    op = _WORD_OPS.get(line if sp < 0 else line[:sp])
    if op in _ONE_INT and sp >= 0:
        # Fast path for the hot single-number commands: plain digits, nothing else.
        arg = line[sp + 1 :]
        if arg.isdigit():
            value = int(arg)
            if value <= (INT_MAX if op == OP_RESERVE_TIMEOUT else U64_MAX):
                return (op, value)
    if op is None or (sp < 0) != (op in _EXACT):
        op = None
        for prefix, candidate in _PREFIXES:
            if line.startswith(prefix):
                op = candidate
                break
        if op is None:
            return ERR_UNKNOWN
    if op in _EXACT:
        if sp >= 0 or len(line) != len(OP_NAMES[op]):
            return ERR_BAD_FORMAT
        return (op,)
    args_at = len(OP_NAMES[op]) + 1
    try:
        if op == OP_PUT:
            parts = line.split(b" ")
            if len(parts) == 5:
                p, d, t, z = parts[1], parts[2], parts[3], parts[4]
                if p.isdigit() and d.isdigit() and t.isdigit() and z.isdigit():
                    pri, delay, ttr, size = int(p), int(d), int(t), int(z)
                    if pri <= U32_MAX and delay <= U32_MAX and ttr <= U32_MAX:
                        if size <= U32_MAX:
                            return (OP_PUT, pri, delay, ttr, size)
                    return ERR_BAD_FORMAT
            pri, pos = _read_uint(line, args_at, U32_MAX)
            delay, pos = _read_uint(line, pos, U32_MAX)
            ttr, pos = _read_uint(line, pos, U32_MAX)
            size, pos = _read_uint(line, pos, U32_MAX)
            # The size check comes before the trailing-garbage check, as in beanstalkd:
            # the caller answers JOB_TOO_BIG for an oversized put whatever follows.
            return (OP_PUT, pri, delay, ttr, size, pos != len(line))
        if op in (OP_DELETE, OP_PEEK, OP_TOUCH, OP_KICK_JOB, OP_STATS_JOB, OP_RESERVE_JOB):
            return (op, _read_last_uint(line, args_at, U64_MAX))
        if op == OP_RELEASE:
            job_id, pos = _read_uint(line, args_at, U64_MAX)
            pri, pos = _read_uint(line, pos, U32_MAX)
            return (op, job_id, pri, _read_last_uint(line, pos, U32_MAX))
        if op == OP_BURY:
            job_id, pos = _read_uint(line, args_at, U64_MAX)
            return (op, job_id, _read_last_uint(line, pos, U32_MAX))
        if op == OP_KICK:
            # strtoul, unchecked tail, truncated to unsigned int: "kick 1x" and "kick -1"
            # are accepted by beanstalkd 1.12.
            value = _strtol(line, args_at, require_digits=True, unsigned=True)
            return (op, value & U32_MAX)
        if op == OP_RESERVE_TIMEOUT:
            # strtol into a C int, unchecked tail: "x" is 0, 4294967296 is 0, and a
            # negative timeout (-1, or 2147483648..4294967295) waits forever.
            value = _strtol(line, args_at, require_digits=False, unsigned=False) & U32_MAX
            return (op, value - (1 << 32) if value >= (1 << 31) else value)
        if op in (OP_USE, OP_WATCH, OP_IGNORE, OP_STATS_TUBE):
            return (op, _read_name(line, args_at))
        if op == OP_PAUSE_TUBE:
            # Matched as "pause-tube" with no space: the name is the run of name
            # characters after any spaces, so "pause-tubex 1" pauses tube "x".
            pos = len(b"pause-tube")
            while pos < len(line) and line[pos] == 0x20:
                pos += 1
            end = pos
            while end < len(line) and line[end] in NAME_CHARS:
                end += 1
            name = line[pos:end]
            if not _valid_name(name):
                # beanstalkd counts the command before it reads the name, not the delay.
                return (OP_ERROR, BAD_FORMAT, OP_PAUSE_TUBE)
            return (op, name.decode("ascii"), _read_last_uint(line, end, U32_MAX))
        if op == OP_QUIT:
            return (OP_QUIT,)
    except _BadFormat:
        return ERR_BAD_FORMAT
    return ERR_UNKNOWN


_WANT_LINE = 0
_WANT_BODY = 1
_SKIP = 2
_WANT_ENDLINE = 3


class BeanstalkParser:
    """Incremental parser for one connection. ``feed`` returns the complete commands.

    A put comes out as ``(OP_PUT, pri, delay_s, ttr_s, body)`` once its body has arrived.
    """

    __slots__ = ("_buf", "_pending_put", "_skip_left", "_state", "max_job_size")

    def __init__(self, max_job_size: int = 65535) -> None:
        self.max_job_size = max_job_size
        self._buf = b""
        self._state = _WANT_LINE
        self._pending_put: tuple[int, int, int, int] = (0, 0, 0, 0)
        self._skip_left = 0

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Command]:
        buf = self._buf + data if self._buf else data
        out: list[Command] = []
        pos = 0
        n = len(buf)
        find = buf.find
        state = self._state
        max_size = self.max_job_size
        put_match = _PUT_LINE.match
        while pos < n:
            if state == _WANT_LINE:
                m = put_match(buf, pos)
                if m is not None:
                    # The hottest command, matched in one C call: four plain numbers, each
                    # small enough that no bound check is needed but the size limit.
                    end = m.end()
                    size = int(m[4])
                    body_end = end + size
                    if size <= max_size and body_end + 2 <= n:
                        if buf[body_end : body_end + 2] == b"\r\n":
                            out.append((OP_PUT, int(m[1]), int(m[2]), int(m[3]), buf[end:body_end]))
                            pos = body_end + 2
                            continue
                eol = find(b"\r\n", pos)
                if eol < 0 and n - pos < LINE_MAX:
                    break
                if eol < 0 or eol + 2 - pos > LINE_MAX:
                    # Too long. beanstalkd fills its 224-byte buffer, throws it away, then
                    # throws away input up to the next CRLF: a 225-byte line loses its CR
                    # with the buffer, so the *next* line's CRLF ends the discard.
                    pos += LINE_MAX
                    state = _WANT_ENDLINE
                    continue
                line = buf[pos:eol]
                pos = eol + 2
                cmd = parse_line(line)
                if cmd[0] == OP_PUT:
                    size = cmd[4]
                    # From here on beanstalkd has counted the put, whatever the outcome.
                    if size > max_size:
                        self._skip_left = size + 2
                        state = _SKIP
                        continue
                    if len(cmd) == 6 and cmd[5]:
                        out.append(ERR_PUT_BAD_FORMAT)
                        continue
                    self._pending_put = (cmd[1], cmd[2], cmd[3], size)
                    state = _WANT_BODY
                    continue
                out.append(cmd)
            elif state == _WANT_BODY:
                pri, delay, ttr, size = self._pending_put
                end = pos + size
                if n < end + 2:
                    break
                if buf[end : end + 2] != b"\r\n":
                    out.append((OP_BAD_BODY,))
                else:
                    out.append((OP_PUT, pri, delay, ttr, buf[pos:end]))
                pos = end + 2
                state = _WANT_LINE
            elif state == _SKIP:
                take = min(self._skip_left, n - pos)
                pos += take
                self._skip_left -= take
                if self._skip_left:
                    break
                out.append(ERR_JOB_TOO_BIG)
                state = _WANT_LINE
            else:  # _WANT_ENDLINE
                eol = find(b"\r\n", pos)
                if eol < 0:
                    pos = n - 1 if n > pos and buf[n - 1] == 0x0D else n
                    break
                pos = eol + 2
                out.append(ERR_BAD_FORMAT)
                state = _WANT_LINE
        self._state = state
        self._buf = buf[pos:] if pos < n else b""
        return out


# ------------------------------------------------------------------ replies
def yaml_dict(pairs: list[tuple[str, object]]) -> bytes:
    body = "---\n" + "".join(f"{k}: {v}\n" for k, v in pairs)
    data = body.encode()
    return b"OK %d\r\n%s\r\n" % (len(data), data)


def yaml_list(names: list[str]) -> bytes:
    data = ("---\n" + "".join(f"- {n}\n" for n in names)).encode()
    return b"OK %d\r\n%s\r\n" % (len(data), data)
