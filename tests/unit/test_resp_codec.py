"""The sans-IO RESP2 codec: every input whole, byte by byte, at every cut and cut at EOF.

Expected bytes follow Redis 3 / Disque 1.0 networking.c (processMultibulkBuffer,
processInlineBuffer) and sds.c (sdssplitargs).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disq.protocol import resp as r

SMALL = {"max_bulk_bytes": 16, "max_inline_bytes": 32, "max_multibulk_len": 8}


def feed_all(data: bytes, **limits: int) -> list[r.Command]:
    return r.RespParser(**limits).feed(data)


def feed_bytewise(data: bytes, **limits: int) -> list[r.Command]:
    parser = r.RespParser(**limits)
    out: list[r.Command] = []
    for i in range(len(data)):
        out.extend(parser.feed(data[i : i + 1]))
    return out


def feed_split(data: bytes, cut: int, **limits: int) -> list[r.Command]:
    parser = r.RespParser(**limits)
    return parser.feed(data[:cut]) + parser.feed(data[cut:])


def feed_chunks(data: bytes, size: int, **limits: int) -> list[r.Command]:
    parser = r.RespParser(**limits)
    out: list[r.Command] = []
    for i in range(0, len(data), size):
        out.extend(parser.feed(data[i : i + size]))
    return out


def err(text: bytes) -> r.ProtocolError:
    return r.ProtocolError(b"-ERR Protocol error: " + text + b"\r\n")


INVALID_MB = err(b"invalid multibulk length")
INVALID_BULK = err(b"invalid bulk length")
TOO_BIG_INLINE = err(b"too big inline request")
TOO_BIG_MB = err(b"too big mbulk count string")
TOO_BIG_BULK = err(b"too big bulk count string")
UNBALANCED = err(b"unbalanced quotes in request")
PING = [b"PING"]
MB_PING = b"*1\r\n$4\r\nPING\r\n"

# (input, expected commands) at the default limits.
CASES: list[tuple[bytes, list[r.Command]]] = [
    # ---- multibulk
    (MB_PING, [PING]),
    (b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n", [[b"SET", b"key", b"value"]]),
    (b"*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n", [[b"GET", b"a\r\nb"]]),  # binary-safe body
    (b"*2\r\n$0\r\n\r\n$1\r\n\x00\r\n", [[b"", b"\x00"]]),
    (MB_PING + MB_PING, [PING, PING]),
    (b"*1\r\n$4095\r\n" + b"x" * 4095 + b"\r\n", [[b"x" * 4095]]),  # largest table length
    (b"*1\r\n$4096\r\n" + b"y" * 4096 + b"\r\n", [[b"y" * 4096]]),  # first general one
    (b"*1025\r\n" + b"$1\r\na\r\n" * 1025, [[b"a"] * 1025]),  # count off the table
    (b"*0\r\n" + MB_PING, [PING]),  # *0 and negative counts: skipped, no reply
    (b"*-1\r\n" + MB_PING, [PING]),
    (b"*-5\r\n" + MB_PING, [PING]),
    (b"*-9223372036854775808\r\n" + MB_PING, [PING]),  # LLONG_MIN parses: skipped
    (b"*-9223372036854775809\r\n", [INVALID_MB]),
    (b"*0\r\nPING\r\n", [PING]),  # each request picks its own form
    # Redis skips the byte after a count or length line's "\r" and the two bytes after a
    # body without looking at them.
    (b"*1\rX$4\r\nPING\r\n", [PING]),
    (b"*1\r\n$4\r\x00PINGxy*1\r\n$1\r\nx\r\n", [PING, [b"x"]]),
    (b"*1\r\n$4\r\nPING\n\n", [PING]),
    (b"*x\r\n", [INVALID_MB]),
    (b"*\r\n", [INVALID_MB]),
    (b"*01\r\n", [INVALID_MB]),
    (b"*+1\r\n", [INVALID_MB]),
    (b"* 1\r\n", [INVALID_MB]),
    (b"*1 \r\n", [INVALID_MB]),
    (b"*-0\r\n", [INVALID_MB]),
    (b"*1\n$4\r\nPING\r\n", [INVALID_MB]),  # the count line ends at "\r", not "\n"
    (b"*1048577\r\n", [INVALID_MB]),
    (b"*1048576\r\n$1\r\n", []),  # at the limit: waits for the arguments
    (b"*99999999999999999999\r\n", [INVALID_MB]),
    (b"*1\r\n$-1\r\n", [INVALID_BULK]),  # a null bulk is not a request argument
    (b"*1\r\n$\r\n", [INVALID_BULK]),
    (b"*1\r\n$x\r\n", [INVALID_BULK]),
    (b"*1\r\n$01\r\n", [INVALID_BULK]),
    (b"*1\r\n$+1\r\n", [INVALID_BULK]),
    (b"*1\r\n$-0\r\n", [INVALID_BULK]),
    (b"*1\r\n$1 \r\n", [INVALID_BULK]),
    (b"*1\r\n$536870913\r\n", [INVALID_BULK]),
    (b"*1\r\n$536870912\r\nabc", []),  # at the limit: waits for the body
    (b"*1\r\nPING\r\n", [err(b"expected '$', got 'P'")]),
    (b"*2\r\n$1\r\na\r\n:1\r\n", [err(b"expected '$', got ':'")]),
    (b"*1\r\n\r\n", [err(b"expected '$', got ' '")]),  # "\r" and "\n" become spaces
    (b"*1\r\n\n\r\n", [err(b"expected '$', got ' '")]),
    (b"*1\r\n\xff\r\n", [err(b"expected '$', got '\xff'")]),  # 8-bit bytes go out raw
    (b"*1\r\n\x00\r\n", [err(b"expected '$', got '")]),  # sdscatvprintf stops at the NUL
    (b"*1\r\nx", []),  # '$' is checked only once the line is complete
    (b"*1\r\nx\r", []),
    # Commands before an error are returned, nothing after it.
    (b"PING\r\n*x\r\nPING\r\n", [PING, INVALID_MB]),
    (MB_PING + b"*1\r\n$4\r\nPI", [PING]),
    # ---- inline
    (b"PING\r\n", [PING]),
    (b"PING\n", [PING]),  # a bare "\n" is a line end
    (b"PING\nPING\r\nPING\n", [PING, PING, PING]),
    (b"ping  a \t b\r\n", [[b"ping", b"a", b"b"]]),
    (b"  PING  \r\n", [PING]),
    (b"\r\n\n  \r\n\t\r\nPING\r\n", [PING]),  # empty lines are skipped
    (b"PING\r\r\n", [PING]),  # only one "\r" is dropped; the other is a blank
    (b"a\rb\r\n", [[b"a", b"b"]]),
    (b"GET \xff\xfe\r\n", [[b"GET", b"\xff\xfe"]]),
    (b"SET k *x\r\n", [[b"SET", b"k", b"*x"]]),
    (b'ADDJOB q "hello world" 0\r\n', [[b"ADDJOB", b"q", b"hello world", b"0"]]),
    (b'SET k "a\\nb\\r\\t\\b\\a"\r\n', [[b"SET", b"k", b"a\nb\r\t\b\x07"]]),
    (b'SET k "\\x41\\x4a\\xff\\x00z"\r\n', [[b"SET", b"k", b"AJ\xff\x00z"]]),
    (b'SET k "\\"\\\\\\q"\r\n', [[b"SET", b"k", b'"\\q']]),  # \c is c for any other c
    (b'SET k "\\x4"\r\n', [[b"SET", b"k", b"x4"]]),  # half a \xHH is \x, then 4
    (b'SET k "\\xg0"\r\n', [[b"SET", b"k", b"xg0"]]),
    (b"SET k 'it\\'s'\r\n", [[b"SET", b"k", b"it's"]]),
    (b"SET k 'a\\nb \"c\"'\r\n", [[b"SET", b"k", b'a\\nb "c"']]),  # no escapes but \'
    (b'SET k ""\r\n', [[b"SET", b"k"]]),  # empty arguments are dropped
    (b"SET k '' v\r\n", [[b"SET", b"k", b"v"]]),
    (b'""\r\nPING\r\n', [PING]),  # a line of empty arguments is skipped
    (b'a"b c"d e\r\n', [UNBALANCED]),  # a quote opens mid-argument, must close at a blank
    (b'a"b c" d\r\n', [[b"ab c", b"d"]]),
    (b'"a"\x0bb\r\n', [[b"a", b"b"]]),  # after a closing quote any isspace() will do
    (b"a\x0bb\x0cc\r\n", [[b"a\x0bb\x0cc"]]),  # \v \f do not end an argument...
    (b"a \x0b\x0cb\r\n", [[b"a", b"b"]]),  # ...but are skipped between arguments
    (b"PING\x00junk\r\nPING\r\n", [PING, PING]),  # sdssplitargs stops at a NUL
    (b'"ab\x00c"\r\n', [UNBALANCED]),
    (b'SET k "abc\r\n', [UNBALANCED]),
    (b"SET k 'abc\r\n", [UNBALANCED]),
    (b'"foo"bar\r\n', [UNBALANCED]),
    (b"'foo'bar\r\n", [UNBALANCED]),
    (b'"abc\\"\r\n', [UNBALANCED]),
    (b'"abc\\\r\n', [UNBALANCED]),
    (b"PING\r\n'x\nPING\r\n", [PING, UNBALANCED]),
    (b"PING", []),
]

# (input, expected) with SMALL limits: bulk 16, line 32, count 8.
LIMIT_CASES: list[tuple[bytes, list[r.Command]]] = [
    (b"a" * 32 + b"\n", [[b"a" * 32]]),  # 32 bytes before "\n": allowed
    (b"a" * 31 + b"\r\n", [[b"a" * 31]]),  # the "\r" counts
    (b"a" * 32 + b"\r\n", [TOO_BIG_INLINE]),
    (b"a" * 33 + b"\n", [TOO_BIG_INLINE]),
    (b"a" * 32, []),
    (b"a" * 33, [TOO_BIG_INLINE]),
    (b"PING\r\n" * 10, [PING] * 10),  # the limit is per line, not per buffer
    (b"*" + b"1" * 31, []),
    (b"*" + b"1" * 31 + b"\r", []),
    (b"*" + b"1" * 32, [TOO_BIG_MB]),
    (b"*" + b"1" * 32 + b"\r\n", [TOO_BIG_MB]),
    (b"*" + b"0" * 31 + b"\r\n", [INVALID_MB]),
    (b"*8\r\n" + b"$1\r\na\r\n" * 8, [[b"a"] * 8]),
    (b"*9\r\n", [INVALID_MB]),
    (b"*1\r\n$16\r\n" + b"b" * 16 + b"\r\n", [[b"b" * 16]]),
    (b"*1\r\n$17\r\n", [INVALID_BULK]),
    (b"*1\r\n$" + b"1" * 31, []),
    (b"*1\r\n$" + b"1" * 32, [TOO_BIG_BULK]),
    (b"*1\r\n" + b"x" * 31 + b"\r\n", [err(b"expected '$', got 'x'")]),
    # Too long is too long even if the "\r" is there: byte by byte Redis fails it first.
    (b"*1\r\n" + b"x" * 33 + b"\r\n", [TOO_BIG_BULK]),
    (b"*2\r\n$16\r\n" + b"c" * 16 + b"\r\n$" + b"1" * 32, [TOO_BIG_BULK]),
    (b"PING\r\n" + b"z" * 40, [PING, TOO_BIG_INLINE]),
]

ALL: list[tuple[bytes, list[r.Command], dict[str, int]]] = [(d, e, {}) for d, e in CASES] + [
    (d, e, SMALL) for d, e in LIMIT_CASES
]
IDS = [repr(d[:40]) for d, _, _ in ALL]


@pytest.mark.parametrize(("data", "expected", "limits"), ALL, ids=IDS)
def test_whole(data: bytes, expected: list[r.Command], limits: dict[str, int]) -> None:
    assert feed_all(data, **limits) == expected


@pytest.mark.parametrize(("data", "expected", "limits"), ALL, ids=IDS)
def test_byte_by_byte(data: bytes, expected: list[r.Command], limits: dict[str, int]) -> None:
    assert feed_bytewise(data, **limits) == expected


@pytest.mark.parametrize(("data", "expected", "limits"), ALL, ids=IDS)
def test_every_cut(data: bytes, expected: list[r.Command], limits: dict[str, int]) -> None:
    step = max(1, len(data) // 300)  # the few long cases: every byte near the ends only
    cuts = (
        set(range(0, len(data) + 1, step))
        | set(range(40))
        | set(range(len(data) - 40, 1 + len(data)))
    )
    for cut in sorted(c for c in cuts if 0 <= c <= len(data)):
        assert feed_split(data, cut, **limits) == expected, cut


@pytest.mark.parametrize(("data", "expected", "limits"), ALL, ids=IDS)
def test_cut_at_eof_gives_only_complete_commands(
    data: bytes, expected: list[r.Command], limits: dict[str, int]
) -> None:
    # Input that stops early yields a prefix of the commands, never a wrong one.
    step = max(1, len(data) // 300)
    for cut in range(0, len(data), step):
        got = feed_all(data[:cut], **limits)
        assert got == expected[: len(got)], cut


def test_protocol_error_closes_and_ignores_the_rest() -> None:
    parser = r.RespParser()
    assert parser.feed(b"PING\r\n*1\r\n$x\r\nPING\r\n") == [PING, INVALID_BULK]
    assert parser.closed
    assert INVALID_BULK.close
    assert INVALID_BULK.message == "ERR Protocol error: invalid bulk length"
    assert parser.feed(MB_PING) == []
    assert parser.feed(b"PING\r\n") == []
    assert parser.buffered == 0


def test_error_strings_are_redis_exact() -> None:
    assert INVALID_MB.reply == b"-ERR Protocol error: invalid multibulk length\r\n"
    assert r.ERR_INVALID_MULTIBULK_LEN == INVALID_MB
    assert r.ERR_INVALID_BULK_LEN == INVALID_BULK
    assert r.ERR_TOO_BIG_INLINE == TOO_BIG_INLINE
    assert r.ERR_TOO_BIG_MBULK_COUNT == TOO_BIG_MB
    assert r.ERR_TOO_BIG_BULK_COUNT == TOO_BIG_BULK
    assert r.ERR_UNBALANCED_QUOTES == UNBALANCED
    assert r.expected_dollar(ord("x")).reply == b"-ERR Protocol error: expected '$', got 'x'\r\n"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (b"0", 0),
        (b"7", 7),
        (b"-7", -7),
        (b"9223372036854775807", 9223372036854775807),
        (b"-9223372036854775808", -9223372036854775808),
        (b"9223372036854775808", None),
        (b"-9223372036854775809", None),
        (b"", None),
        (b"-", None),
        (b"-0", None),
        (b"00", None),
        (b"01", None),
        (b"+1", None),
        (b" 1", None),
        (b"1 ", None),
        (b"1_0", None),
        (b"\xd9\xa1", None),  # a non-ASCII digit
        (b"1" * 5000, None),  # past Python's int() digit limit: no ValueError
    ],
)
def test_string2ll(text: bytes, value: int | None) -> None:
    assert r._string2ll(text) == value


# ------------------------------------------------------------------ limits and big inputs
def test_inline_limit_at_default_size() -> None:
    ok = b"a" * 65536 + b"\n"
    for feed in (feed_all, feed_bytewise, lambda d: feed_chunks(d, 1000)):
        assert feed(ok) == [[b"a" * 65536]]
        assert feed(b"a" * 65537 + b"\n") == [TOO_BIG_INLINE]
        assert feed(b"a" * 65536 + b"\r\n") == [TOO_BIG_INLINE]


def test_tiny_line_limit_still_checks_short_headers() -> None:
    # "$10" is a 3-byte line: over a 2-byte limit, even though it is a common header.
    assert feed_all(b"*1\r\n$10\r\n", max_inline_bytes=2) == [TOO_BIG_BULK]
    assert feed_all(b"*10\r\n", max_inline_bytes=2) == [TOO_BIG_MB]
    assert feed_all(b"*1\r\n$4\r\nPING\r\n", max_inline_bytes=2) == [PING]


def test_count_line_of_many_digits_is_refused_not_raised() -> None:
    # int() refuses over 4300 digits; Redis's string2ll just fails.
    assert feed_all(b"*" + b"1" * 60000 + b"\r\n") == [INVALID_MB]
    assert feed_all(b"*1\r\n$" + b"1" * 60000 + b"\r\n") == [INVALID_BULK]


def test_endless_inline_line_stays_bounded() -> None:
    parser = r.RespParser()
    for _ in range(64):
        assert parser.feed(b"z" * 1024) == []
    assert parser.buffered == 65536
    assert parser.feed(b"z") == [TOO_BIG_INLINE]
    assert parser.buffered == 0
    assert parser.feed(b"z" * 10**6) == []
    assert parser.buffered == 0


def test_one_huge_read_of_garbage_is_not_kept() -> None:
    for junk in (b"x" * (8 << 20), b"*" + b"9" * (8 << 20), b"*1\r\n$" + b"9" * (8 << 20)):
        parser = r.RespParser()
        assert len(parser.feed(junk)) == 1
        assert parser.closed and parser.buffered == 0


def test_big_body_in_many_reads_is_linear() -> None:
    body = bytes(range(256)) * (8 * 4096)  # 8 MiB
    data = b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$%d\r\n%s\r\n" % (len(body), body) + MB_PING
    parser = r.RespParser()
    out: list[r.Command] = []
    start = time.perf_counter()
    for i in range(0, len(data), 1024):  # 8192 reads; re-copying the buffer would be ~32 GB
        out.extend(parser.feed(data[i : i + 1024]))
        assert parser.buffered <= len(body) + 1
    assert time.perf_counter() - start < 5
    assert out == [[b"ADDJOB", b"q", body], PING]


def test_body_split_inside_trailing_crlf() -> None:
    data = b"*2\r\n$1\r\na\r\n$5\r\nhello\r\n"
    for cut in (len(data) - 2, len(data) - 1):
        parser = r.RespParser()
        assert parser.feed(data[:cut]) == []
        assert parser.feed(data[cut:]) == [[b"a", b"hello"]]
    parser = r.RespParser()
    parts = [data[:17], data[17:19], data[19:20], data[20:22], data[22:]]
    got = [c for p in parts for c in parser.feed(p)]
    assert got == [[b"a", b"hello"]]


def test_feed_yields_bytes() -> None:
    # feed takes bytes (what data_received gets; compiled, anything else is a TypeError) and
    # its arguments are bytes too, never views into its buffer, however the input was cut.
    parser = r.RespParser()
    got = parser.feed(b"*1\r\n$3\r\nab") + parser.feed(b"c\r\n") + parser.feed(b"x y\r\n")
    assert got == [[b"abc"], [b"x", b"y"]]
    assert all(type(a) is bytes for cmd in got for a in cmd)  # type: ignore[union-attr]
    assert parser.feed(b"") == []


# ------------------------------------------------------------------ hypothesis
def quote_double(arg: bytes) -> bytes:
    out = bytearray(b'"')
    named = {0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t", 0x08: b"\\b", 0x07: b"\\a"}
    for c in arg:
        if c in (0x22, 0x5C):
            out += b"\\" + bytes((c,))
        elif c in named:
            out += named[c]
        elif 0x20 <= c < 0x7F:
            out.append(c)
        else:
            out += b"\\x%02x" % c if c & 1 else b"\\x%02X" % c
    return bytes(out + b'"')


def encode_inline_arg(arg: bytes, style: str, first: bool) -> bytes:
    raw_ok = not any(c in b" \t\n\v\f\r\"'\x00" for c in arg) and not (first and arg[:1] == b"*")
    if style == "raw" and raw_ok:
        return arg
    # In single quotes only \' is an escape, so a final backslash would eat the closing quote.
    if style == "single" and b"\n" not in arg and b"\x00" not in arg and arg[-1:] != b"\\":
        return b"'" + arg.replace(b"'", b"\\'") + b"'"
    return quote_double(arg)


_args = st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=5)


@settings(max_examples=150, deadline=None)
@given(commands=st.lists(_args, min_size=1, max_size=8), cuts=st.data())
def test_multibulk_round_trip(commands: list[list[bytes]], cuts: st.DataObject) -> None:
    data = b"".join(r.array(c) for c in commands)
    assert feed_all(data) == commands
    points = sorted(cuts.draw(st.lists(st.integers(0, len(data)), max_size=6)))
    parser = r.RespParser()
    got: list[r.Command] = []
    prev = 0
    for c in [*points, len(data)]:
        got.extend(parser.feed(data[prev:c]))
        prev = c
    assert got == commands


@settings(max_examples=150, deadline=None)
@given(
    commands=st.lists(
        st.lists(
            st.tuples(
                st.binary(min_size=1, max_size=12), st.sampled_from(["raw", "single", "double"])
            ),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=6,
    ),
    seps=st.lists(st.sampled_from([b" ", b"  ", b"\t", b" \x0b"]), min_size=1),
    ends=st.lists(st.sampled_from([b"\r\n", b"\n", b"\r\n\r\n", b" \r\n"]), min_size=1),
    cuts=st.data(),
)
def test_inline_round_trip(
    commands: list[list[tuple[bytes, str]]],
    seps: list[bytes],
    ends: list[bytes],
    cuts: st.DataObject,
) -> None:
    lines = []
    for i, cmd in enumerate(commands):
        words = [encode_inline_arg(a, style, j == 0) for j, (a, style) in enumerate(cmd)]
        lines.append(seps[i % len(seps)].join(words) + ends[i % len(ends)])
    data = b"".join(lines)
    expected = [[a for a, _ in cmd] for cmd in commands]
    assert feed_all(data) == expected
    points = sorted(cuts.draw(st.lists(st.integers(0, len(data)), max_size=6)))
    parser = r.RespParser()
    got: list[r.Command] = []
    prev = 0
    for c in [*points, len(data)]:
        got.extend(parser.feed(data[prev:c]))
        prev = c
    assert got == expected


_tokens = st.sampled_from(
    [
        MB_PING,
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
        b"*1\r\n$20\r\n",
        b"*0\r\n",
        b"*-1\r\n",
        b"*",
        b"*9\r\n",
        b"$",
        b"$5\r\n",
        b"$99\r\n",
        b"$-1\r\n",
        b"PING\r\n",
        b'"a b"\r\n',
        b"'",
        b'"',
        b"\\",
        b"\r\n",
        b"\r",
        b"\n",
        b" ",
        b"x" * 40,
        b"9" * 40,
    ]
)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(_tokens | st.binary(max_size=40), max_size=30), cuts=st.data())
def test_garbage_never_raises_and_stays_bounded(chunks: list[bytes], cuts: st.DataObject) -> None:
    data = b"".join(chunks)
    whole = feed_all(data, **SMALL)
    points = sorted(cuts.draw(st.lists(st.integers(0, len(data)), max_size=8)))
    parser = r.RespParser(**SMALL)
    got: list[r.Command] = []
    prev = 0
    for c in [*points, len(data)]:
        got.extend(parser.feed(data[prev:c]))
        prev = c
        # One element at most: a line of 32 bytes and its "\r", or a body of 16 and 1 byte.
        assert parser.buffered <= max(SMALL["max_inline_bytes"], SMALL["max_bulk_bytes"]) + 1
    assert got == whole
    for i, cmd in enumerate(whole):
        if isinstance(cmd, r.ProtocolError):
            assert i == len(whole) - 1 and parser.closed and cmd.close
            assert cmd.reply.startswith(b"-ERR Protocol error: ") and cmd.reply.endswith(b"\r\n")
            assert b"\r" not in cmd.reply[:-2] and b"\n" not in cmd.reply[:-2]
        else:
            assert cmd  # empty lines and *0 are skipped, never returned
            assert all(type(a) is bytes for a in cmd)


# ------------------------------------------------------------------ reply encoders
def test_simple_and_error() -> None:
    assert r.simple("OK") == b"+OK\r\n" == r.OK
    assert r.simple("PONG") == b"+PONG\r\n"
    assert r.error("ERR unknown command 'FOO'") == b"-ERR unknown command 'FOO'\r\n"
    assert r.error("NOJOB no such job") == b"-NOJOB no such job\r\n"
    # A newline would end the reply early; Redis's addReplyErrorFormat makes it a space.
    assert r.error("ERR a\r\nb") == b"-ERR a  b\r\n"
    assert r.simple("a\nb") == b"+a b\r\n"
    assert r.simple("é") == b"+\xc3\xa9\r\n"


def test_integer_and_bulk() -> None:
    assert r.integer(0) == b":0\r\n"
    assert r.integer(-1) == b":-1\r\n"
    assert r.integer(2**63) == b":9223372036854775808\r\n"
    assert r.bulk(b"") == b"$0\r\n\r\n"
    assert r.bulk(b"a\r\nb") == b"$4\r\na\r\nb\r\n"
    assert r.bulk(None) == b"$-1\r\n" == r.NULL_BULK


def test_array() -> None:
    assert r.array([]) == b"*0\r\n"
    assert r.array(None) == b"*-1\r\n" == r.NULL_ARRAY
    assert r.array([b"a", b"bc"]) == b"*2\r\n$1\r\na\r\n$2\r\nbc\r\n"
    assert r.array([1, None, "é", [b"x", [2]], (), r.SimpleString("OK")]) == (
        b"*6\r\n:1\r\n$-1\r\n$2\r\n\xc3\xa9\r\n*2\r\n$1\r\nx\r\n*1\r\n:2\r\n*0\r\n+OK\r\n"
    )
    assert r.array([r.ErrorString("ERR x"), True, False]) == b"*3\r\n-ERR x\r\n:1\r\n:0\r\n"


def test_encode_maps_python_values() -> None:
    assert r.encode(b"ab") == b"$2\r\nab\r\n"
    assert r.encode("ab") == b"$2\r\nab\r\n"
    assert r.encode(bytearray(b"ab")) == b"$2\r\nab\r\n"
    assert r.encode(memoryview(b"ab")) == b"$2\r\nab\r\n"
    assert r.encode(None) == b"$-1\r\n"
    assert r.encode(42) == b":42\r\n"
    assert r.encode(r.SimpleString("QUEUED")) == b"+QUEUED\r\n"
    assert r.encode(r.ErrorString("ERR no")) == b"-ERR no\r\n"
    assert r.encode([b"a", [1, None]]) == r.array([b"a", [1, None]])
    assert r.encode((b"a",)) == b"*1\r\n$1\r\na\r\n"
    for bad in (1.5, {"a": 1}, {b"a"}, object()):
        with pytest.raises(TypeError):
            r.encode(bad)  # type: ignore[arg-type]


def test_encode_into_keeps_big_bodies_uncopied() -> None:
    body = b"x" * 100_000
    out: list[bytes] = []
    r.encode_into([b"id", body], out)
    assert any(chunk is body for chunk in out)
    assert b"".join(out) == b"*2\r\n$2\r\nid\r\n$100000\r\n" + body + b"\r\n"
    assert r.encode(body) == r.bulk(body)


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.binary(max_size=8) | st.integers(), st.lists, max_leaves=20))
def test_encode_is_array_or_scalar(value: r.Reply) -> None:
    out: list[bytes] = []
    r.encode_into(value, out)
    assert b"".join(out) == r.encode(value)
    if isinstance(value, list):
        assert r.encode(value) == r.array(value)


# ------------------------------------------------------------------ the hiredis fast path
def _slow(data: bytes, **limits: int) -> list[r.Command]:
    """The loop alone: the parser with its fast path switched off."""
    p = r.RespParser(**limits)
    p._fast = None
    return p.feed(data)


def _multibulk(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


@pytest.mark.parametrize(
    "data",
    [
        # What hiredis reads as something else than a request, each behind a good command:
        # a status, a verbatim string, a big number, a set, a push, a map, an attribute, an
        # integer, a null, a double, a boolean, an error, a nested array, an empty array.
        _multibulk([b"PING"]) + b"*2\r\n$3\r\nfoo\r\n+bar\r\n",
        _multibulk([b"PING"]) + b"*2\r\n$3\r\nfoo\r\n=7\r\ntxt:bar\r\n",
        _multibulk([b"PING"]) + b"*1\r\n(12345\r\n",
        _multibulk([b"PING"]) + b"~1\r\n$3\r\nfoo\r\n",
        _multibulk([b"PING"]) + b">1\r\n$3\r\nfoo\r\n",
        _multibulk([b"PING"]) + b"%1\r\n$1\r\na\r\n$1\r\nb\r\n",
        _multibulk([b"PING"]) + b"*1\r\n|1\r\n+a\r\n+b\r\n$3\r\nfoo\r\n",
        b"*2\r\n$3\r\nfoo\r\n:5\r\n",
        b"*2\r\n$3\r\nfoo\r\n$-1\r\n",
        b"*2\r\n$3\r\nfoo\r\n_\r\n",
        b"*2\r\n$3\r\nfoo\r\n,1.5\r\n",
        b"*2\r\n$3\r\nfoo\r\n#t\r\n",
        b"*2\r\n$3\r\nfoo\r\n-ERR x\r\n",
        b"*2\r\n$3\r\nfoo\r\n*1\r\n$1\r\na\r\n",
        b"*0\r\n" + _multibulk([b"PING"]),
        b"*-1\r\n" + _multibulk([b"PING"]),
        # Numbers hiredis or Redis refuse, a bad terminator, an inline command in the middle.
        b"*1\r\n$04\r\nPING\r\n",
        b"*01\r\n$4\r\nPING\r\n",
        b"*1\rX$4\r\nPING\r\n",
        b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n",
        _multibulk([b"PING"]) + b"PING\r\n",
        # Reads that end inside a request hiredis has begun: an array waiting for items (no
        # bytes left unread), one holding a whole nested array, one waiting for its count.
        _multibulk([b"PING"]) + b"*3\r\n$3\r\nfoo\r\n",
        _multibulk([b"PING"]) + b"*2\r\n*1\r\n$3\r\nfoo\r\n",
        _multibulk([b"PING"]) + b"*1048577\r\n",
        _multibulk([b"PING"]) + b"*1\r\n$10\r\nab\r\n",
        # A request cut in the middle, and one whose body holds a risky sequence.
        _multibulk([b"ADDJOB", b"q", b"x" * 50]) + b"*3\r\n$6\r\nADDJOB\r\n",
        _multibulk([b"ADDJOB", b"q", b"a\r\n+b\r\n"]),
    ],
)
def test_fast_path_answers_as_the_loop_does(data: bytes) -> None:
    assert r.RespParser().feed(data) == _slow(data)


def test_fast_path_takes_whole_pipelines_and_keeps_serving() -> None:
    p = r.RespParser()
    batch = b"".join(_multibulk([b"ADDJOB", b"q%d" % i, b"x" * 100, b"0"]) for i in range(16))
    for _ in range(3):
        out = p.feed(batch)
        assert out == [[b"ADDJOB", b"q%d" % i, b"x" * 100, b"0"] for i in range(16)]
    # After a read the fast path refused (cut mid-request), the loop carries on from it.
    assert p.feed(batch[:-5]) == [[b"ADDJOB", b"q%d" % i, b"x" * 100, b"0"] for i in range(15)]
    assert p.feed(batch[-5:] + batch) == [
        [b"ADDJOB", b"q%d" % i, b"x" * 100, b"0"] for i in [15, *range(16)]
    ]


def test_fast_path_respects_small_limits() -> None:
    data = _multibulk([b"SET", b"k", b"v" * 100])
    limits = {"max_bulk_bytes": 50, "max_multibulk_len": 2}
    assert r.RespParser(**limits).feed(data) == _slow(data, **limits)
    assert r.RespParser(**limits).feed(data)[0] == r.ERR_INVALID_MULTIBULK_LEN


_ANY_BYTES = st.binary(max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    commands=st.lists(st.lists(_ANY_BYTES, min_size=1, max_size=6), min_size=1, max_size=8),
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.sampled_from(list(b"*$+=(~>%|:-_,#\r\n0 1-x"))),
        max_size=3,
    ),
)
def test_fast_path_equals_the_loop_on_mutated_pipelines(
    commands: list[list[bytes]], edits: list[tuple[int, int]]
) -> None:
    data = bytearray(b"".join(_multibulk(c) for c in commands))
    for pos, byte in edits:
        data[pos % len(data)] = byte
    raw = bytes(data)
    assert r.RespParser().feed(raw) == _slow(raw)


@pytest.mark.parametrize(
    "after_body",
    [b"*\n~1\r\n", b"XY~1\r\n", b"\n\r>1\r\n", b"ab%1\r\n", b"\r\n~1\r\n", b"**|1\r\n"],
)
def test_fast_path_never_takes_a_type_byte_after_a_bad_bulk_terminator(after_body: bytes) -> None:
    # hiredis, like Redis, skips the two bytes after a body unread; a set, push or map
    # header there is a command for hiredis and an inline line for the loop (found by the
    # property above).
    raw = _multibulk([b"SET", b"k", b"v" * 8])[:-2] + after_body + b"$2\r\nab\r\n"
    assert r.RespParser().feed(raw) == _slow(raw)
    body_cr = _multibulk([b"A", b"x\r"])[:-2] + b"\n~1\r\n$1\r\nz\r\n"  # CR + skipped "\n~"
    assert r.RespParser().feed(body_cr) == _slow(body_cr)
