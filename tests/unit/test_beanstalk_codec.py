"""The sans-IO beanstalk codec: every input whole, byte by byte, and cut at EOF (h11 style)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disq.protocol import beanstalk as bp


def feed_all(data: bytes, max_job_size: int = 65535) -> list[bp.Command]:
    return bp.BeanstalkParser(max_job_size).feed(data)


def feed_bytewise(data: bytes, max_job_size: int = 65535) -> list[bp.Command]:
    parser = bp.BeanstalkParser(max_job_size)
    out: list[bp.Command] = []
    for i in range(len(data)):
        out.extend(parser.feed(data[i : i + 1]))
    return out


def feed_split(data: bytes, cut: int, max_job_size: int = 65535) -> list[bp.Command]:
    parser = bp.BeanstalkParser(max_job_size)
    return parser.feed(data[:cut]) + parser.feed(data[cut:])


CASES: list[tuple[bytes, list[bp.Command]]] = [
    (b"put 1 2 3 5\r\nhello\r\n", [(bp.OP_PUT, 1, 2, 3, b"hello")]),
    (b"put 0 0 0 0\r\n\r\n", [(bp.OP_PUT, 0, 0, 0, b"")]),
    (b"put  0  0  1  3\r\nabc\r\n", [(bp.OP_PUT, 0, 0, 1, b"abc")]),
    (b"put 4294967295 0 1 1\r\nx\r\n", [(bp.OP_PUT, 4294967295, 0, 1, b"x")]),
    (b"put 4294967296 0 1 1\r\n", [bp.ERR_BAD_FORMAT]),
    (b"put -1 0 1 1\r\n", [bp.ERR_BAD_FORMAT]),
    (b"put 0 0 1 3 \r\nabc\r\n", [bp.ERR_PUT_BAD_FORMAT, bp.ERR_UNKNOWN]),
    (b"put 0 0 1 1\r\nxy\r\n", [(bp.OP_BAD_BODY,)]),
    (b"put 0 0 1 1\r\nxy\r\nstats\r\n", [(bp.OP_BAD_BODY,), bp.ERR_UNKNOWN]),
    (b"put 0 0 1 10b\r\n", [bp.ERR_PUT_BAD_FORMAT]),
    (b"reserve\r\n", [(bp.OP_RESERVE,)]),
    (b"reservex\r\n", [bp.ERR_BAD_FORMAT]),
    (b"reserve-job\r\n", [bp.ERR_BAD_FORMAT]),
    (b"reserve-job 7\r\n", [(bp.OP_RESERVE_JOB, 7)]),
    (b"reserve-with-timeout 5\r\n", [(bp.OP_RESERVE_TIMEOUT, 5)]),
    (b"reserve-with-timeout x\r\n", [(bp.OP_RESERVE_TIMEOUT, 0)]),
    (b"reserve-with-timeout -1\r\n", [(bp.OP_RESERVE_TIMEOUT, -1)]),
    (b"reserve-with-timeout 4294967296\r\n", [(bp.OP_RESERVE_TIMEOUT, 0)]),
    (b"reserve-with-timeout 2147483648\r\n", [(bp.OP_RESERVE_TIMEOUT, -2147483648)]),
    (b"reserve-with-timeout 99999999999999999999\r\n", [bp.ERR_BAD_FORMAT]),
    (b"delete 12\r\n", [(bp.OP_DELETE, 12)]),
    (b"delete  12\r\n", [(bp.OP_DELETE, 12)]),
    (b"delete 12 \r\n", [bp.ERR_BAD_FORMAT]),
    (b"delete\r\n", [bp.ERR_UNKNOWN]),
    (b"peek 18446744073709551615\r\n", [(bp.OP_PEEK, 18446744073709551615)]),
    (b"peek 18446744073709551616\r\n", [bp.ERR_BAD_FORMAT]),
    (b"peek 111foo\r\n", [bp.ERR_BAD_FORMAT]),
    (b"peek foo111\r\n", [bp.ERR_BAD_FORMAT]),
    (b"peek\r\n", [bp.ERR_UNKNOWN]),
    (b"peek-ready\r\n", [(bp.OP_PEEK_READY,)]),
    (b"peek-readyx\r\n", [bp.ERR_BAD_FORMAT]),
    (b"release 1 2 3\r\n", [(bp.OP_RELEASE, 1, 2, 3)]),
    (b"release 1 2\r\n", [bp.ERR_BAD_FORMAT]),
    (b"bury 1 2\r\n", [(bp.OP_BURY, 1, 2)]),
    (b"bury 5\r\n", [bp.ERR_BAD_FORMAT]),
    (b"kick 10\r\n", [(bp.OP_KICK, 10)]),
    (b"kick 1x\r\n", [(bp.OP_KICK, 1)]),
    (b"kick -1\r\n", [(bp.OP_KICK, 4294967295)]),
    (b"kick x\r\n", [bp.ERR_BAD_FORMAT]),
    (b"kick\r\n", [bp.ERR_UNKNOWN]),
    (b"kick-job 3\r\n", [(bp.OP_KICK_JOB, 3)]),
    (b"touch 3\r\n", [(bp.OP_TOUCH, 3)]),
    (b"stats\r\n", [(bp.OP_STATS,)]),
    (b"stats \r\n", [bp.ERR_BAD_FORMAT]),
    (b"stats-job 111 222\r\n", [bp.ERR_BAD_FORMAT]),
    (b"stats-tube default\r\n", [(bp.OP_STATS_TUBE, "default")]),
    (b"use foo\r\n", [(bp.OP_USE, "foo")]),
    (b"use a b\r\n", [bp.ERR_BAD_FORMAT]),
    (b"use -a\r\n", [bp.ERR_BAD_FORMAT]),
    (b"use _a\r\n", [(bp.OP_USE, "_a")]),
    (b"use \r\n", [bp.ERR_BAD_FORMAT]),
    (b"watch x\r\n", [(bp.OP_WATCH, "x")]),
    (b"ignore x\r\n", [(bp.OP_IGNORE, "x")]),
    (b"list-tubes\r\n", [(bp.OP_LIST_TUBES,)]),
    (b"list-tube-used\r\n", [(bp.OP_LIST_TUBE_USED,)]),
    (b"list-tubes-watched\r\n", [(bp.OP_LIST_TUBES_WATCHED,)]),
    (b"list-tubes-watchedx\r\n", [bp.ERR_BAD_FORMAT]),
    (b"quit\r\n", [(bp.OP_QUIT,)]),
    (b"quitx\r\n", [(bp.OP_QUIT,)]),
    (b"pause-tube foo 10\r\n", [(bp.OP_PAUSE_TUBE, "foo", 10)]),
    (b"pause-tube  foo 0\r\n", [(bp.OP_PAUSE_TUBE, "foo", 0)]),
    (b"pause-tubex 1\r\n", [(bp.OP_PAUSE_TUBE, "x", 1)]),
    (b"pause-tube\r\n", [(bp.OP_ERROR, bp.BAD_FORMAT, bp.OP_PAUSE_TUBE)]),
    (b"pause-tube foo 1 \r\n", [bp.ERR_BAD_FORMAT]),
    (b"Put 0 0 1 1\r\n", [bp.ERR_UNKNOWN]),
    (b"\r\n", [bp.ERR_UNKNOWN]),
    (b"stats\x00\r\n", [bp.ERR_BAD_FORMAT]),
    (b"use " + b"a" * 200 + b"\r\n", [(bp.OP_USE, "a" * 200)]),
    (b"use " + b"a" * 201 + b"\r\n", [bp.ERR_BAD_FORMAT]),
    (b"x" * 500 + b"\r\nstats\r\n", [bp.ERR_BAD_FORMAT, (bp.OP_STATS,)]),
    (b"x" * 223 + b"\r\nstats\r\nstats\r\n", [bp.ERR_BAD_FORMAT, (bp.OP_STATS,)]),
    (b"x" * 224 + b"\r\nstats\r\n", [bp.ERR_BAD_FORMAT, (bp.OP_STATS,)]),
    (
        b"pause-tube " + b"a" * 200 + b" 4294967295\r\n",
        [(bp.OP_PAUSE_TUBE, "a" * 200, 4294967295)],
    ),
    (b"stats\r\nstats\r\n", [(bp.OP_STATS,), (bp.OP_STATS,)]),
]


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_whole(data: bytes, expected: list[bp.Command]) -> None:
    assert feed_all(data) == expected


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_byte_by_byte(data: bytes, expected: list[bp.Command]) -> None:
    assert feed_bytewise(data) == expected


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_every_cut(data: bytes, expected: list[bp.Command]) -> None:
    for cut in range(len(data) + 1):
        assert feed_split(data, cut) == expected, cut


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_cut_at_eof_gives_only_complete_commands(data: bytes, expected: list[bp.Command]) -> None:
    # Input that stops early yields a prefix of the commands, never a wrong command.
    for cut in range(len(data)):
        got = feed_all(data[:cut])
        assert got == expected[: len(got)], cut


def test_job_too_big_skips_body_then_goes_on() -> None:
    data = b"put 0 0 1 11\r\nhello world\r\nstats\r\n"
    assert feed_all(data, max_job_size=10) == [bp.ERR_JOB_TOO_BIG, (bp.OP_STATS,)]
    assert feed_bytewise(data, max_job_size=10) == [bp.ERR_JOB_TOO_BIG, (bp.OP_STATS,)]


def test_job_too_big_comes_before_trailing_garbage() -> None:
    data = b"put 0 0 1 70000x\r\n" + b"a" * 70000 + b"\r\nlist-tube-used\r\n"
    assert feed_all(data) == [bp.ERR_JOB_TOO_BIG, (bp.OP_LIST_TUBE_USED,)]


def test_line_of_224_bytes_is_accepted_and_225_is_not() -> None:
    ok = b"pause-tube " + b"a" * 200 + b" 4294967295\r\n"
    assert len(ok) == bp.LINE_MAX
    assert feed_all(ok)[0][0] == bp.OP_PAUSE_TUBE
    too_long = b"pause-tube " + b"a" * 202 + b" 4294967295\r\n"
    assert feed_all(too_long + b"stats\r\n") == [bp.ERR_BAD_FORMAT, (bp.OP_STATS,)]


def test_endless_line_stays_bounded() -> None:
    parser = bp.BeanstalkParser()
    for _ in range(1000):
        assert parser.feed(b"z" * 1000) == []
        assert parser.buffered <= 1
    assert parser.feed(b"\r\nstats\r\n") == [bp.ERR_BAD_FORMAT, (bp.OP_STATS,)]


def test_body_may_contain_crlf_and_commands() -> None:
    body = b"a\r\nstats\r\n"
    data = b"put 0 0 1 %d\r\n%s\r\n" % (len(body), body)
    assert feed_all(data) == [(bp.OP_PUT, 0, 0, 1, body)]


_tokens = st.sampled_from(
    [
        b"put 0 0 1 3\r\nabc\r\n",
        b"put 1 2 3 0\r\n\r\n",
        b"reserve\r\n",
        b"reserve-with-timeout 0\r\n",
        b"delete 1\r\n",
        b"stats\r\n",
        b"use t\r\n",
        b"put 0 0 1 99999\r\n",
        b"x" * 230,
        b"\r\n",
        b"\r",
        b"\n",
        b" ",
        b"put ",
        b"kick 5\r\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(_tokens | st.binary(max_size=40), max_size=30), cuts=st.data())
def test_any_split_gives_same_commands(chunks: list[bytes], cuts: st.DataObject) -> None:
    data = b"".join(chunks)
    whole = feed_all(data)
    cut_points = sorted(cuts.draw(st.lists(st.integers(0, len(data)), max_size=6)))
    parser = bp.BeanstalkParser()
    got: list[bp.Command] = []
    prev = 0
    for c in [*cut_points, len(data)]:
        got.extend(parser.feed(data[prev:c]))
        prev = c
    assert got == whole
    # Every command is well formed: an op and, for errors, a protocol reply.
    for cmd in whole:
        assert 0 <= cmd[0] < bp.OP_COUNT
        if cmd[0] == bp.OP_ERROR:
            assert cmd[1].endswith(b"\r\n")
            assert len(cmd) == 2 or cmd[2] in (bp.OP_PUT, bp.OP_PAUSE_TUBE)
