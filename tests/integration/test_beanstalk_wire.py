"""Byte-exact wire tests for the beanstalkd protocol, ported from beanstalkd's ``testserv.c``.

Each test starts a fresh server process (fixture ``server`` / ``server_factory`` in
``conftest.py``), talks raw bytes to it, and asserts raw bytes back, just like ``testserv.c``
does with ``mustsend``/``ckresp``.  The tests are validated against the real beanstalkd 1.12:

    DISQ_TEST_SERVER=beanstalkd .venv/bin/pytest tests/integration/test_beanstalk_wire.py

and are meant to pass unchanged against disq (the default ``DISQ_TEST_SERVER=disq``).

Sections follow ``testserv.c``: protocol errors, sizes, peek/kick/bury, timing, reserve-job,
ownership, tubes, drain and sockets, binlog.  Each ported test names its ``cttest_*`` origin.
Tests after those ("extra") pin down behaviour that ``testserv.c`` does not check but that a
drop-in replacement must copy; several of them document surprising beanstalkd 1.12 behaviour
(see the docstrings marked "beanstalkd 1.12 quirk").

Timing: no fixed sleeps where an event can be waited on.  Where the protocol itself needs time
to pass (a 1 s delay, pause or TTR), elapsed time is measured with ``time.monotonic`` around a
blocking read and checked loosely (>= 0.9 s).  Tests that take more than ~1 s are marked slow.
"""

from __future__ import annotations

import re
import signal
import socket
import time

import pytest
from wire import Conn, WireError, lines, wait_until

# ----------------------------------------------------------------------------------------------
# Reference data (exact key orders as emitted by beanstalkd 1.12)
# ----------------------------------------------------------------------------------------------

# `stats` keys, in wire order (beanstalkd 1.12 STATS_FMT).  Note: no cmd-reserve-job and no
# cmd-kick-job key, even though those commands exist.
STATS_KEYS = [
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "cmd-put",
    "cmd-peek",
    "cmd-peek-ready",
    "cmd-peek-delayed",
    "cmd-peek-buried",
    "cmd-reserve",
    "cmd-reserve-with-timeout",
    "cmd-delete",
    "cmd-release",
    "cmd-use",
    "cmd-watch",
    "cmd-ignore",
    "cmd-bury",
    "cmd-kick",
    "cmd-touch",
    "cmd-stats",
    "cmd-stats-job",
    "cmd-stats-tube",
    "cmd-list-tubes",
    "cmd-list-tube-used",
    "cmd-list-tubes-watched",
    "cmd-pause-tube",
    "job-timeouts",
    "total-jobs",
    "max-job-size",
    "current-tubes",
    "current-connections",
    "current-producers",
    "current-workers",
    "current-waiting",
    "total-connections",
    "pid",
    "version",
    "rusage-utime",
    "rusage-stime",
    "uptime",
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
    "binlog-max-size",
    "draining",
    "id",
    "hostname",
    "os",
    "platform",
]

# Values that legitimately differ between servers: only the shape is checked.
# beanstalkd 1.12 quotes only `version`; hostname/os/platform are NOT quoted (1.13 quotes them).
STATS_SHAPES = {
    "pid": r"[1-9][0-9]*",
    "version": r'"[^"\s]+"',
    "rusage-utime": r"[0-9]+\.[0-9]{6}",
    "rusage-stime": r"[0-9]+\.[0-9]{6}",
    "uptime": r"[0-9]+",
    "binlog-oldest-index": r"[0-9]+",
    "binlog-current-index": r"[0-9]+",
    "binlog-records-migrated": r"[0-9]+",
    "binlog-records-written": r"[0-9]+",
    "binlog-max-size": r"[0-9]+",
    "id": r"[0-9a-f]{16}",
    "hostname": r'[^"\s][^\n]*',
    "os": r'[^"\n][^\n]*',
    "platform": r'[^"\s][^\n]*',
}

# `stats-tube` keys in wire order.  `name` is not quoted in 1.12.
STATS_TUBE_KEYS = [
    "name",
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "current-using",
    "current-watching",
    "current-waiting",
    "cmd-delete",
    "cmd-pause-tube",
    "pause",
    "pause-time-left",
]

# `stats-job` keys in wire order.  `tube` is not quoted in 1.12.
STATS_JOB_KEYS = [
    "id",
    "tube",
    "state",
    "pri",
    "age",
    "delay",
    "ttr",
    "time-left",
    "file",
    "reserves",
    "timeouts",
    "releases",
    "buries",
    "kicks",
]

NAME_200 = b"0123456789" * 20  # STRING_LEN_200 in testserv.c
UINT64_MAX = b"18446744073709551615"
UINT64_MAX_PLUS_1 = b"18446744073709551616"
JOB_DATA_SIZE_LIMIT_MAX = 1073741824  # 1 GiB, the -z ceiling


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------


def elapsed_since(t0: float) -> float:
    return time.monotonic() - t0


def wait_waiting(conn: Conn, tube: bytes, n: int) -> None:
    """Block (polling stats-tube) until ``n`` connections wait on ``tube``.

    Used to make sure a `reserve` sent on another connection is really blocked before the
    test goes on, without a fixed sleep.
    """
    wait_until(
        lambda: conn.stats_tube(tube)["current-waiting"] == str(n),
        what=f"current-waiting: {n} on {tube!r}",
    )


def job_state(conn: Conn, job_id: int) -> str:
    return conn.stats_job(job_id)["state"]


# ==============================================================================================
# Protocol errors (testserv.c)
# ==============================================================================================


def test_unknown_command(server):
    """cttest_unknown_command."""
    c = server.connect()
    c.send(b"nont10knowncommand\r\n")
    c.expect(b"UNKNOWN_COMMAND\r\n")


def test_too_long_commandline(server):
    """cttest_too_long_commandline: a 500-byte line gives BAD_FORMAT, the conn goes on (#337)."""
    c = server.connect()
    for _ in range(10):
        c.send(b"a" * 50)  # 500 bytes, sent in pieces like testserv.c
    c.send(b"\r\n")
    c.expect(b"BAD_FORMAT\r\n")
    # The next command must be parsed normally (not UNKNOWN_COMMAND: issue #337).
    c.send(b"put 0 0 1 1\r\n")
    c.send(b"A\r\n")
    c.expect(b"INSERTED 1\r\n")


def test_peek_bad_format(server):
    """cttest_peek_bad_format."""
    c = server.connect()
    c.cmd(b"peek " + UINT64_MAX_PLUS_1, b"BAD_FORMAT\r\n")
    c.cmd(b"peek 184467440737095516160000000000000000000000000000", b"BAD_FORMAT\r\n")
    c.cmd(b"peek foo111", b"BAD_FORMAT\r\n")
    c.cmd(b"peek 111foo", b"BAD_FORMAT\r\n")


def test_touch_bad_format(server):
    """cttest_touch_bad_format."""
    c = server.connect()
    c.cmd(b"touch a111", b"BAD_FORMAT\r\n")
    c.cmd(b"touch 111a", b"BAD_FORMAT\r\n")
    c.cmd(b"touch !@#!@#", b"BAD_FORMAT\r\n")


def test_bury_bad_format(server):
    """cttest_bury_bad_format."""
    c = server.connect()
    c.cmd(b"bury 111abc 2", b"BAD_FORMAT\r\n")
    c.cmd(b"bury 111", b"BAD_FORMAT\r\n")
    c.cmd(b"bury 111 222abc", b"BAD_FORMAT\r\n")


def test_kickjob_bad_format(server):
    """cttest_kickjob_bad_format."""
    c = server.connect()
    c.cmd(b"kick-job a111", b"BAD_FORMAT\r\n")
    c.cmd(b"kick-job 111a", b"BAD_FORMAT\r\n")
    c.cmd(b"kick-job !@#!@#", b"BAD_FORMAT\r\n")


def test_delete_bad_format(server):
    """cttest_delete_bad_format."""
    c = server.connect()
    c.cmd(b"delete " + UINT64_MAX_PLUS_1, b"BAD_FORMAT\r\n")
    c.cmd(b"delete 184467440737095516160000000000000000000000000000", b"BAD_FORMAT\r\n")
    c.cmd(b"delete foo111", b"BAD_FORMAT\r\n")
    c.cmd(b"delete 111foo", b"BAD_FORMAT\r\n")


def test_release_bad_format(server):
    """cttest_release_bad_format."""
    c = server.connect()
    # bad id
    c.cmd(b"release " + UINT64_MAX_PLUS_1 + b" 1 1", b"BAD_FORMAT\r\n")
    c.cmd(b"release 184467440737095516160000000000000000000000000000 1 1", b"BAD_FORMAT\r\n")
    c.cmd(b"release foo111", b"BAD_FORMAT\r\n")
    c.cmd(b"release 111foo", b"BAD_FORMAT\r\n")
    # bad priority
    c.cmd(b"release " + UINT64_MAX + b" abc 1", b"BAD_FORMAT\r\n")
    # bad duration
    c.cmd(b"release " + UINT64_MAX + b" 1 abc", b"BAD_FORMAT\r\n")


def test_statsjob_ck_format(server):
    """cttest_statsjob_ck_format."""
    c = server.connect()
    c.cmd(b"stats-job 111ABC", b"BAD_FORMAT\r\n")
    c.cmd(b"stats-job 111 222", b"BAD_FORMAT\r\n")
    c.cmd(b"stats-job 111", b"NOT_FOUND\r\n")


def test_job_size_invalid(server_factory):
    """cttest_job_size_invalid: bad <bytes> fields give BAD_FORMAT; replies stay in order."""
    srv = server_factory("-z", str(JOB_DATA_SIZE_LIMIT_MAX))
    c = srv.connect()
    c.send(b"put 0 0 0 4294967296\r\n")
    c.send(b"put 0 0 0 10b\r\n")
    c.send(b"put 0 0 0 --!@#$%^&&**()0b\r\n")
    c.send(b"put 0 0 0 1\r\n")
    c.send(b"x\r\n")
    c.expect(b"BAD_FORMAT\r\n")
    c.expect(b"BAD_FORMAT\r\n")
    c.expect(b"BAD_FORMAT\r\n")
    c.expect(b"INSERTED 1\r\n")


def test_negative_delay(server):
    """cttest_negative_delay."""
    c = server.connect()
    c.send(b"put 512 -1 100 0\r\n")
    c.expect(b"BAD_FORMAT\r\n")


def test_garbage_priority(server):
    """cttest_garbage_priority."""
    c = server.connect()
    c.send(b"put -1kkdj9djjkd9 0 100 1\r\n")
    c.send(b"a\r\n")
    c.expect(b"BAD_FORMAT\r\n")


def test_negative_priority(server):
    """cttest_negative_priority."""
    c = server.connect()
    c.send(b"put -1 0 100 1\r\n")
    c.send(b"a\r\n")
    c.expect(b"BAD_FORMAT\r\n")


def test_max_priority(server):
    """cttest_max_priority: 4294967295 (UINT32_MAX) is a valid priority."""
    c = server.connect()
    c.send(b"put 4294967295 0 100 1\r\n")
    c.send(b"a\r\n")
    c.expect(b"INSERTED 1\r\n")
    assert c.stats_job(1)["pri"] == "4294967295"


def test_too_big_priority(server):
    """cttest_too_big_priority."""
    c = server.connect()
    c.send(b"put 4294967296 0 100 1\r\n")
    c.send(b"a\r\n")
    c.expect(b"BAD_FORMAT\r\n")


# ==============================================================================================
# Sizes (testserv.c)
# ==============================================================================================


def test_too_big(server_factory):
    """cttest_too_big: with -z 10 an 11-byte put is skipped (body+CRLF), JOB_TOO_BIG is sent,
    and the pipelined commands after it still work."""
    srv = server_factory("-z", "10")
    c = srv.connect()
    c.send(b"put 0 0 0 11\r\n")
    c.send(b"delete 9999\r\n")  # 13 bytes = 11 + CRLF: this *is* the skipped body
    c.send(b"put 0 0 0 1\r\n")
    c.send(b"x\r\n")
    c.expect(b"JOB_TOO_BIG\r\n")
    c.expect(b"INSERTED 1\r\n")


@pytest.mark.slow
def test_job_size_max_plus_1(server_factory):
    """cttest_job_size_max_plus_1: 1 GiB + 1 bytes with -z 1 GiB gives JOB_TOO_BIG."""
    srv = server_factory("-z", str(JOB_DATA_SIZE_LIMIT_MAX))
    c = srv.connect(timeout=60)
    c.send(b"put 0 0 0 1073741825\r\n")
    chunk = b"a" * (1024 * 1024)
    for _ in range(JOB_DATA_SIZE_LIMIT_MAX // len(chunk)):
        c.send(chunk)
    c.send(b"x")
    c.send(b"\r\n")
    c.expect(b"JOB_TOO_BIG\r\n")


def test_use_tube_long(server):
    """cttest_use_tube_long: a 200-char tube name is fine, 201 chars is BAD_FORMAT."""
    c = server.connect()
    c.cmd(b"use " + NAME_200, b"USING " + NAME_200 + b"\r\n")
    c.cmd(b"use " + NAME_200 + b"Z", b"BAD_FORMAT\r\n")


def test_longest_command(server):
    """cttest_longest_command: `pause-tube <200> 4294967295` is exactly 224 bytes with CRLF."""
    c = server.connect()
    c.cmd(b"use " + NAME_200, b"USING " + NAME_200 + b"\r\n")
    line = b"pause-tube " + NAME_200 + b" 4294967295\r\n"
    assert len(line) == 224
    c.send(line)
    c.expect(b"PAUSED\r\n")


def test_underscore(server):
    """cttest_underscore."""
    c = server.connect()
    c.cmd(b"use x_y", b"USING x_y\r\n")


def test_2cmdpacket(server):
    """cttest_2cmdpacket: two commands in one TCP packet."""
    c = server.connect()
    c.send(b"use a\r\nuse b\r\n")
    c.expect(b"USING a\r\n")
    c.expect(b"USING b\r\n")


# ==============================================================================================
# Peek / kick / bury (testserv.c)
# ==============================================================================================


def test_peek_ok(server):
    """cttest_peek_ok."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\n")
    c.send(b"a\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"peek 1\r\n")
    c.expect(b"FOUND 1 1\r\n")
    c.expect(b"a\r\n")


def test_peek_not_found(server):
    """cttest_peek_not_found (including UINT64_MAX, which is a valid id)."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\n")
    c.send(b"a\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"peek 2", b"NOT_FOUND\r\n")
    c.cmd(b"peek " + UINT64_MAX, b"NOT_FOUND\r\n")


def test_peek_ok_unix(server_factory):
    """cttest_peek_ok_unix: the same over a UNIX socket (-l unix:/path)."""
    path = server_factory.base_dir / "socket"
    srv = server_factory(listen=f"unix:{path}")
    assert path.is_socket()
    c = srv.connect()
    c.send(b"put 0 0 1 1\r\n")
    c.send(b"a\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"peek 1\r\n")
    c.expect(b"FOUND 1 1\r\n")
    c.expect(b"a\r\n")


def test_peek_delayed(server):
    """cttest_peek_delayed: peek-delayed gives the soonest deadline, NOT_FOUND when empty."""
    c = server.connect()
    c.cmd(b"peek-delayed", b"NOT_FOUND\r\n")
    c.send(b"put 0 0 1 1\r\nA\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"put 0 99 1 1\r\nB\r\n")
    c.expect(b"INSERTED 2\r\n")
    c.send(b"put 0 1 1 1\r\nC\r\n")
    c.expect(b"INSERTED 3\r\n")

    c.cmd(b"peek-delayed", b"FOUND 3 1\r\nC\r\n")
    c.cmd(b"delete 3", b"DELETED\r\n")
    c.cmd(b"peek-delayed", b"FOUND 2 1\r\nB\r\n")
    c.cmd(b"delete 2", b"DELETED\r\n")
    c.cmd(b"peek-delayed", b"NOT_FOUND\r\n")


def test_peek_buried_kick(server):
    """cttest_peek_buried_kick."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\nA\r\n")
    c.expect(b"INSERTED 1\r\n")

    # cannot bury an unreserved job
    c.cmd(b"bury 1 0", b"NOT_FOUND\r\n")
    c.cmd(b"peek-buried", b"NOT_FOUND\r\n")

    c.cmd(b"reserve-with-timeout 0", b"RESERVED 1 1\r\nA\r\n")

    # now we can bury
    c.cmd(b"bury 1 0", b"BURIED\r\n")
    c.cmd(b"peek-buried", b"FOUND 1 1\r\nA\r\n")

    # kick and verify the job is ready
    c.cmd(b"kick 1", b"KICKED 1\r\n")
    c.cmd(b"peek-buried", b"NOT_FOUND\r\n")
    c.cmd(b"peek-ready", b"FOUND 1 1\r\nA\r\n")

    # nothing is left to kick
    c.cmd(b"kick 1", b"KICKED 0\r\n")


def test_kickjob_buried(server):
    """cttest_kickjob_buried."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\nA\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"reserve", b"RESERVED 1 1\r\nA\r\n")
    c.cmd(b"bury 1 0", b"BURIED\r\n")
    c.cmd(b"kick-job 100", b"NOT_FOUND\r\n")
    c.cmd(b"kick-job 1", b"KICKED\r\n")
    c.cmd(b"kick-job 1", b"NOT_FOUND\r\n")


def test_kickjob_delayed(server):
    """cttest_kickjob_delayed: kick-job on a ready job is NOT_FOUND."""
    c = server.connect()
    # jid=1 - no delay, jid=2 - delay
    c.send(b"put 0 0 1 1\r\nA\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"put 0 10 1 1\r\nB\r\n")
    c.expect(b"INSERTED 2\r\n")
    c.cmd(b"kick-job 1", b"NOT_FOUND\r\n")
    c.cmd(b"kick-job 2", b"KICKED\r\n")
    c.cmd(b"kick-job 2", b"NOT_FOUND\r\n")


# ==============================================================================================
# Timing (testserv.c)
# ==============================================================================================


@pytest.mark.slow
def test_pause(server):
    """cttest_pause: pause-tube 1 delays a reserve by about 1 s."""
    c = server.connect()
    c.send(b"put 0 0 0 1\r\nx\r\n")
    c.expect(b"INSERTED 1\r\n")
    t0 = time.monotonic()
    c.cmd(b"pause-tube default 1", b"PAUSED\r\n")
    c.send(b"reserve\r\n")
    c.expect(b"RESERVED 1 1\r\n")
    c.expect(b"x\r\n")
    assert elapsed_since(t0) >= 0.9


def test_unpause_tube(server):
    """cttest_unpause_tube: pause 86400, then pause 0 releases a waiting reserver at once."""
    c0 = server.connect()
    c1 = server.connect()
    c0.send(b"put 0 0 0 0\r\n\r\n")
    c0.expect(b"INSERTED 1\r\n")
    c0.cmd(b"pause-tube default 86400", b"PAUSED\r\n")

    c1.send(b"reserve\r\n")
    wait_waiting(c0, b"default", 1)  # c1 is blocked by the pause

    t0 = time.monotonic()
    c0.cmd(b"pause-tube default 0", b"PAUSED\r\n")
    c1.expect(b"RESERVED 1 0\r\n")
    c1.expect(b"\r\n")
    assert elapsed_since(t0) < 1.0  # "pause 0" means 1 ns: unpaused right away


def test_small_delay(server):
    """cttest_small_delay."""
    c = server.connect()
    c.send(b"put 0 1 1 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")


def test_zero_delay(server):
    """cttest_zero_delay."""
    c = server.connect()
    c.send(b"put 0 0 1 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")


@pytest.mark.slow
def test_delayed_to_ready(server):
    """cttest_delayed_to_ready: stats-tube counters before and after the 1 s delay."""
    c = server.connect()
    t0 = time.monotonic()
    c.send(b"put 0 1 1 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")

    st = c.stats_tube(b"default")
    assert (st["current-jobs-ready"], st["current-jobs-delayed"], st["total-jobs"]) == (
        "0",
        "1",
        "1",
    )

    # No event exists for "became ready" (reserving would change the state), so poll.
    st = wait_until(
        lambda: (s := c.stats_tube(b"default"))["current-jobs-ready"] == "1" and s,
        timeout=5,
        what="the delayed job to become ready",
    )
    assert elapsed_since(t0) >= 0.9
    assert (st["current-jobs-ready"], st["current-jobs-delayed"], st["total-jobs"]) == (
        "1",
        "0",
        "1",
    )


@pytest.mark.slow
def test_reserve_with_timeout_2conns(server_factory):
    """cttest_reserve_with_timeout_2conns: reserve-with-timeout 1 answers TIMED_OUT."""
    srv = server_factory("-z", "10")
    c0 = srv.connect()
    c1 = srv.connect()
    c0.cmd(b"watch foo", b"WATCHING 2\r\n")
    t0 = time.monotonic()
    c0.send(b"reserve-with-timeout 1\r\n")
    c1.cmd(b"watch foo", b"WATCHING 2\r\n")
    c0.expect(b"TIMED_OUT\r\n", timeout=3)
    assert elapsed_since(t0) >= 0.9


def test_reserve_ttr_deadline_soon(server):
    """cttest_reserve_ttr_deadline_soon: holding a ttr=1 job, a new reserve gives
    DEADLINE_SOON at once and the job stays reserved."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\na\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"reserve-with-timeout 1", b"RESERVED 1 1\r\na\r\n")
    assert job_state(c, 1) == "reserved"

    # ttr=1 s equals the 1 s safety margin, so the deadline is "soon" right away.
    t0 = time.monotonic()
    c.cmd(b"reserve-with-timeout 1", b"DEADLINE_SOON\r\n")
    assert elapsed_since(t0) < 0.9  # answered at once, not after the 1 s timeout
    assert job_state(c, 1) == "reserved"

    c.cmd(b"release 1 0 0", b"RELEASED\r\n")
    assert job_state(c, 1) == "ready"


@pytest.mark.slow
def test_reserve_job_ttr_deadline_soon(server):
    """cttest_reserve_job_ttr_deadline_soon: a reserve-job reservation behaves like any other:
    DEADLINE_SOON on a later reserve, and release at TTR (a delayed job comes back ready)."""
    c = server.connect()
    c.send(b"put 0 5 1 1\r\na\r\n")
    c.expect(b"INSERTED 1\r\n")
    assert job_state(c, 1) == "delayed"

    t0 = time.monotonic()
    c.cmd(b"reserve-job 1", b"RESERVED 1 1\r\na\r\n")
    assert job_state(c, 1) == "reserved"

    c.cmd(b"reserve-with-timeout 1", b"DEADLINE_SOON\r\n")
    assert job_state(c, 1) == "reserved"

    # Wait for the TTR to run out (no event to block on without reserving the job again).
    wait_until(lambda: job_state(c, 1) != "reserved", timeout=5, what="TTR expiry")
    assert elapsed_since(t0) >= 0.9
    c.send(b"put 0 0 1 1\r\nB\r\n")  # the dummy job of testserv.c
    c.expect(b"INSERTED 2\r\n")
    assert job_state(c, 1) == "ready"


def test_ttrlarge(server):
    """cttest_ttrlarge: large TTRs round-trip exactly through stats-job."""
    c = server.connect()
    ttrs = [120, 4294, 4295, 4296, 4297, 5000, 21600]
    for i, ttr in enumerate(ttrs, start=1):
        c.send(b"put 0 0 %d 1\r\na\r\n" % ttr)
        c.expect(b"INSERTED %d\r\n" % i)
    for i, ttr in enumerate(ttrs, start=1):
        assert c.stats_job(i)["ttr"] == str(ttr)


def test_ttr_small(server):
    """cttest_ttr_small: ttr 0 becomes 1."""
    c = server.connect()
    c.send(b"put 0 0 0 1\r\na\r\n")
    c.expect(b"INSERTED 1\r\n")
    assert c.stats_job(1)["ttr"] == "1"


# ==============================================================================================
# reserve-job (testserv.c)
# ==============================================================================================


def test_reserve_job_already_reserved(server):
    """cttest_reserve_job_already_reserved."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\nA\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"reserve-job 1", b"RESERVED 1 1\r\nA\r\n")
    # Job should not be reserved twice.
    c.cmd(b"reserve-job 1", b"NOT_FOUND\r\n")


def test_reserve_job_ready(server):
    """cttest_reserve_job_ready."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\nA\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"put 0 0 1 1\r\nB\r\n")
    c.expect(b"INSERTED 2\r\n")
    c.cmd(b"reserve-job 2", b"RESERVED 2 1\r\nB\r\n")
    c.cmd(b"reserve-job 3", b"NOT_FOUND\r\n")  # non-existing job
    c.cmd(b"release 1 1 0", b"NOT_FOUND\r\n")  # id=1 was not reserved
    c.cmd(b"release 2 1 0", b"RELEASED\r\n")


def test_reserve_job_delayed(server):
    """cttest_reserve_job_delayed: a delayed job reserved by id and released is ready."""
    c = server.connect()
    for i, body in enumerate([b"A", b"B", b"C"], start=1):
        c.send(b"put 0 100 1 1\r\n" + body + b"\r\n")
        c.expect(b"INSERTED %d\r\n" % i)
    c.cmd(b"reserve-job 2", b"RESERVED 2 1\r\nB\r\n")
    c.cmd(b"release 2 1 0", b"RELEASED\r\n")
    assert job_state(c, 2) == "ready"


def test_reserve_job_buried(server):
    """cttest_reserve_job_buried."""
    c = server.connect()
    # put, reserve and bury (twice)
    c.send(b"put 0 0 1 1\r\nA\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"reserve-job 1", b"RESERVED 1 1\r\nA\r\n")
    c.cmd(b"bury 1 1", b"BURIED\r\n")
    c.send(b"put 0 0 1 1\r\nB\r\n")
    c.expect(b"INSERTED 2\r\n")
    c.cmd(b"reserve-job 2", b"RESERVED 2 1\r\nB\r\n")
    c.cmd(b"bury 2 1", b"BURIED\r\n")

    # reserve by ids
    c.cmd(b"reserve-job 2", b"RESERVED 2 1\r\nB\r\n")
    c.cmd(b"reserve-job 1", b"RESERVED 1 1\r\nA\r\n")

    # release back and check the jobs are ready
    c.cmd(b"release 1 1 0", b"RELEASED\r\n")
    c.cmd(b"release 2 1 0", b"RELEASED\r\n")
    assert job_state(c, 1) == "ready"
    assert job_state(c, 2) == "ready"


# ==============================================================================================
# Ownership (testserv.c)
# ==============================================================================================


def test_delete_ready(server):
    """cttest_delete_ready."""
    c = server.connect()
    c.send(b"put 0 0 0 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"delete 1", b"DELETED\r\n")


def test_delete_reserved_by_other(server):
    """cttest_delete_reserved_by_other."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\na\r\n")
    c.expect(b"INSERTED 1\r\n")
    o = server.connect()
    o.cmd(b"reserve", b"RESERVED 1 1\r\na\r\n")
    c.cmd(b"delete 1", b"NOT_FOUND\r\n")


def test_release_not_found(server):
    """cttest_release_not_found."""
    c = server.connect()
    c.cmd(b"release 1 1 1", b"NOT_FOUND\r\n")


def test_touch_not_found(server):
    """cttest_touch_not_found."""
    c = server.connect()
    c.cmd(b"touch 1", b"NOT_FOUND\r\n")
    c.cmd(b"touch 100000000000000", b"NOT_FOUND\r\n")


def test_close_releases_job(server):
    """cttest_close_releases_job: closing a consumer releases its job well before TTR."""
    cons = server.connect()
    prod = server.connect()
    cons.send(b"reserve-with-timeout 1\r\n")
    prod.send(b"put 0 0 100 1\r\na\r\n")
    prod.expect(b"INSERTED 1\r\n")
    cons.expect(b"RESERVED 1 1\r\na\r\n")
    assert job_state(prod, 1) == "reserved"

    # The closed consumer connection should make the job ready sooner than ttr=100.
    cons.close()
    prod.cmd(b"reserve-with-timeout 1", b"RESERVED 1 1\r\na\r\n")


def test_quit_releases_job(server):
    """cttest_quit_releases_job: same with `quit` instead of a close."""
    cons = server.connect()
    prod = server.connect()
    cons.send(b"reserve-with-timeout 1\r\n")
    prod.send(b"put 0 0 100 1\r\na\r\n")
    prod.expect(b"INSERTED 1\r\n")
    cons.expect(b"RESERVED 1 1\r\na\r\n")
    assert job_state(prod, 1) == "reserved"

    cons.send(b"quit\r\n")
    cons.expect_closed()
    prod.cmd(b"reserve-with-timeout 1", b"RESERVED 1 1\r\na\r\n")


# ==============================================================================================
# Tubes (testserv.c)
# ==============================================================================================


def test_multi_tube(server):
    """cttest_multi_tube: the lowest priority across all watched tubes wins."""
    c = server.connect()
    c.cmd(b"use abc", b"USING abc\r\n")
    c.send(b"put 999999 0 0 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"use def", b"USING def\r\n")
    c.send(b"put 99 0 0 0\r\n\r\n")
    c.expect(b"INSERTED 2\r\n")
    c.cmd(b"watch abc", b"WATCHING 2\r\n")
    c.cmd(b"watch def", b"WATCHING 3\r\n")
    c.cmd(b"reserve", b"RESERVED 2 0\r\n\r\n")


def test_list_tube(server):
    """cttest_list_tube: exact YAML of list-tubes / list-tubes-watched, NOT_IGNORED."""
    c = server.connect()
    c.cmd(b"watch w", b"WATCHING 2\r\n")
    c.cmd(b"use u", b"USING u\r\n")
    c.cmd(b"list-tubes", b"OK 22\r\n---\n- default\n- w\n- u\n\r\n")
    c.cmd(b"list-tube-used", b"USING u\r\n")
    c.cmd(b"list-tubes-watched", b"OK 18\r\n---\n- default\n- w\n\r\n")
    c.cmd(b"ignore default", b"WATCHING 1\r\n")
    c.cmd(b"list-tubes-watched", b"OK 8\r\n---\n- w\n\r\n")
    c.cmd(b"ignore w", b"NOT_IGNORED\r\n")


def test_stats_tube(server):
    """cttest_stats_tube: every stats-tube key after put+delete, for tubea and default."""
    c = server.connect()
    c.cmd(b"use tubea", b"USING tubea\r\n")
    c.send(b"put 0 0 0 1\r\nx\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"delete 1", b"DELETED\r\n")

    data, raw = c.yaml_cmd(b"stats-tube tubea")
    assert list(data) == STATS_TUBE_KEYS
    assert raw == (
        b"---\nname: tubea\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 0\n"
        b"current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\n"
        b"total-jobs: 1\ncurrent-using: 1\ncurrent-watching: 0\ncurrent-waiting: 0\n"
        b"cmd-delete: 1\ncmd-pause-tube: 0\npause: 0\npause-time-left: 0\n"
    )

    data, raw = c.yaml_cmd(b"stats-tube default")
    assert list(data) == STATS_TUBE_KEYS
    assert raw == (
        b"---\nname: default\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 0\n"
        b"current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\n"
        b"total-jobs: 0\ncurrent-using: 0\ncurrent-watching: 1\ncurrent-waiting: 0\n"
        b"cmd-delete: 0\ncmd-pause-tube: 0\npause: 0\npause-time-left: 0\n"
    )


def test_omit_time_left(server):
    """cttest_omit_time_left: a ready job has time-left 0."""
    c = server.connect()
    c.send(b"put 0 0 5 1\r\na\r\n")
    c.expect(b"INSERTED 1\r\n")
    _, raw = c.yaml_cmd(b"stats-job 1")
    assert b"\ntime-left: 0\n" in raw


# ==============================================================================================
# Drain mode and sockets (testserv.c)
# ==============================================================================================


def test_put_in_drain(server):
    """cttest_put_in_drain: after SIGUSR1, put reads the body and answers DRAINING."""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\nx\r\n")
    c.expect(b"INSERTED 1\r\n")
    server.signal(signal.SIGUSR1)

    def put_drains() -> bool:
        c.send(b"put 0 0 1 1\r\nx\r\n")
        line = c.read_line()
        assert line == b"DRAINING\r\n" or line.startswith(b"INSERTED "), line
        return line == b"DRAINING\r\n"

    wait_until(put_drains, timeout=5, what="DRAINING after SIGUSR1")
    # Once draining, it stays so, and the rest of the protocol still works.
    c.send(b"put 0 0 1 1\r\nx\r\n")
    c.expect(b"DRAINING\r\n")
    assert c.stats()["draining"] == "true"
    c.cmd(b"reserve-with-timeout 0", b"RESERVED 1 1\r\nx\r\n")
    c.cmd(b"delete 1", b"DELETED\r\n")


def test_unix_auto_removal(server_factory):
    """cttest_unix_auto_removal: a stale socket file at the path is replaced at start.

    Two ways to leave a stale file: one we make ourselves (bind, close, no unlink), and one
    left by a previous server stopped with SIGTERM (testserv.c starts the server twice).
    """
    path = server_factory.base_dir / "socket"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    assert path.is_socket()  # stale: nobody listens on it

    srv = server_factory(listen=f"unix:{path}")
    c = srv.connect()
    c.send(b"put 0 0 1 1\r\na\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.close()

    srv.restart()  # SIGTERM, then start again on the same path
    c = srv.connect()
    c.cmd(b"list-tube-used", b"USING default\r\n")


# ==============================================================================================
# Binlog (testserv.c; only the cases that do not depend on beanstalkd's file format)
# ==============================================================================================


def test_binlog_empty_exit(server_factory):
    """cttest_binlog_empty_exit: start and stop with an empty binlog, start again, put."""
    srv = server_factory("-z", "10", binlog=True)
    srv.stop()
    srv.start()
    c = srv.connect()
    c.send(b"put 0 0 0 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")


def test_binlog_bury(server_factory):
    """cttest_binlog_bury, plus: the buried job is still buried after a restart."""
    srv = server_factory("-z", "10", binlog=True)
    c = srv.connect()
    c.send(b"put 0 0 100 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"reserve", b"RESERVED 1 0\r\n\r\n")
    c.cmd(b"bury 1 0", b"BURIED\r\n")

    srv.restart()
    c = srv.connect()
    c.cmd(b"peek-buried", b"FOUND 1 0\r\n\r\n")
    assert job_state(c, 1) == "buried"


def test_binlog_basic(server_factory):
    """cttest_binlog_basic: a put survives a restart."""
    srv = server_factory("-z", "10", binlog=True)
    c = srv.connect()
    c.send(b"put 0 0 100 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")

    srv.restart()
    c = srv.connect()
    c.cmd(b"delete 1", b"DELETED\r\n")


@pytest.mark.slow
def test_binlog_read(server_factory):
    """cttest_binlog_read: a release-with-delay and a delete survive a restart; the deleted
    job stays deleted.  (-f 0: fsync every write, like syncrate=0/wantsync=1.)"""
    srv = server_factory("-f", "0", binlog=True)
    c = srv.connect()
    c.cmd(b"use test", b"USING test\r\n")
    c.send(b"put 0 0 120 4\r\ntest\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"put 0 0 120 4\r\ntes1\r\n")
    c.expect(b"INSERTED 2\r\n")
    c.cmd(b"watch test", b"WATCHING 2\r\n")
    c.cmd(b"reserve", b"RESERVED 1 4\r\ntest\r\n")
    c.cmd(b"release 1 1 1", b"RELEASED\r\n")
    c.cmd(b"reserve", b"RESERVED 2 4\r\ntes1\r\n")
    c.cmd(b"delete 2", b"DELETED\r\n")

    srv.restart()
    c = srv.connect()
    c.cmd(b"watch test", b"WATCHING 2\r\n")
    # Job 1 was released with a 1 s delay: this reserve blocks until it is ready.
    c.cmd(b"reserve", b"RESERVED 1 4\r\ntest\r\n")
    c.cmd(b"delete 1", b"DELETED\r\n")
    c.cmd(b"delete 2", b"NOT_FOUND\r\n")


# ==============================================================================================
# Extra: stats / YAML exactness
# ==============================================================================================


def test_stats_fresh_server(server):
    """`stats` on a fresh server: exact key order, counters at 0 (cmd-stats already 1),
    defaults, and the shape of the server-specific values."""
    c = server.connect()
    data, _raw = c.yaml_cmd(b"stats")
    assert list(data) == STATS_KEYS
    expected = {k: "0" for k in STATS_KEYS if k.startswith(("current-jobs-", "cmd-"))}
    expected.update(
        {
            "cmd-stats": "1",  # the stats command counts itself
            "job-timeouts": "0",
            "total-jobs": "0",
            "max-job-size": "65535",
            "current-tubes": "1",
            "current-connections": "1",
            "current-producers": "0",
            "current-workers": "0",
            "current-waiting": "0",
            # the fixture's readiness probe + this connection
            "total-connections": str(server.probe_connections + 1),
            "draining": "false",
        }
    )
    for key, value in expected.items():
        assert data[key] == value, (key, data[key], value)
    for key, shape in STATS_SHAPES.items():
        assert re.fullmatch(shape, data[key]), (key, data[key], shape)
    assert set(expected) | set(STATS_SHAPES) == set(STATS_KEYS)
    # Ids start at 1.
    c.send(b"put 0 0 1 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")


def test_stats_counters_after_commands(server):
    """Global counters and connection-role counters move as beanstalkd's do."""
    c = server.connect()
    w = server.connect()
    c.send(b"put 0 0 10 1\r\na\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"put 2000 5 10 1\r\nb\r\n")
    c.expect(b"INSERTED 2\r\n")
    w.cmd(b"reserve", b"RESERVED 1 1\r\na\r\n")
    w.cmd(b"use other", b"USING other\r\n")
    w.cmd(b"watch other", b"WATCHING 2\r\n")
    w.cmd(b"peek-ready", b"NOT_FOUND\r\n")  # used tube "other" is empty
    st = c.stats()
    got = {k: st[k] for k in st if k not in STATS_SHAPES}
    assert got == {
        "current-jobs-urgent": "0",
        "current-jobs-ready": "0",
        "current-jobs-reserved": "1",
        "current-jobs-delayed": "1",
        "current-jobs-buried": "0",
        "cmd-put": "2",
        "cmd-peek": "0",
        "cmd-peek-ready": "1",
        "cmd-peek-delayed": "0",
        "cmd-peek-buried": "0",
        "cmd-reserve": "1",
        "cmd-reserve-with-timeout": "0",
        "cmd-delete": "0",
        "cmd-release": "0",
        "cmd-use": "1",
        "cmd-watch": "1",
        "cmd-ignore": "0",
        "cmd-bury": "0",
        "cmd-kick": "0",
        "cmd-touch": "0",
        "cmd-stats": "1",
        "cmd-stats-job": "0",
        "cmd-stats-tube": "0",
        "cmd-list-tubes": "0",
        "cmd-list-tube-used": "0",
        "cmd-list-tubes-watched": "0",
        "cmd-pause-tube": "0",
        "job-timeouts": "0",
        "total-jobs": "2",
        "max-job-size": "65535",
        "current-tubes": "2",
        "current-connections": "2",
        "current-producers": "1",
        "current-workers": "1",
        "current-waiting": "0",
        "total-connections": str(server.probe_connections + 2),
        "draining": "false",
    }


# (command, counter it bumps or None).  Run on a fresh connection each, diffing `stats`.
COUNTER_CASES = [
    # BAD_FORMAT from a number that does not parse: not counted...
    (b"put -1 0 0 1\r\n", 1, None),
    (b"put 0 0 0 x\r\n", 1, None),
    # ...but trailing garbage after a good <bytes> (BAD_FORMAT) and JOB_TOO_BIG are counted.
    (b"put 0 0 0 1 x\r\nx\r\n", 2, "cmd-put"),
    (b"put 0 0 0 70000\r\n" + b"a" * 70000 + b"\r\n", 1, "cmd-put"),
    (b"peek x\r\n", 1, None),
    (b"peek 9\r\n", 1, "cmd-peek"),
    (b"peek-readyx\r\n", 1, None),
    (b"peek-ready\r\n", 1, "cmd-peek-ready"),
    (b"peek-delayedx\r\n", 1, None),
    (b"peek-buriedx\r\n", 1, None),
    (b"reservex\r\n", 1, None),
    (b"reserve-with-timeout " + UINT64_MAX + b"\r\n", 1, None),
    (b"reserve-job x\r\n", 1, None),
    (b"reserve-job 9\r\n", 1, None),  # there is no cmd-reserve-job counter
    (b"delete x\r\n", 1, None),
    (b"delete 9\r\n", 1, "cmd-delete"),
    (b"release x 1 1\r\n", 1, None),
    (b"release 9 1 1\r\n", 1, "cmd-release"),
    (b"bury x 1\r\n", 1, None),
    (b"bury 9 1\r\n", 1, "cmd-bury"),
    (b"kick x\r\n", 1, None),
    (b"kick 1\r\n", 1, "cmd-kick"),
    (b"kick-job x\r\n", 1, None),
    (b"kick-job 9\r\n", 1, None),  # there is no cmd-kick-job counter
    (b"touch x\r\n", 1, None),
    (b"touch 9\r\n", 1, "cmd-touch"),
    (b"stats-job x\r\n", 1, None),
    (b"stats-job 9\r\n", 1, "cmd-stats-job"),
    (b"stats-tube -x\r\n", 1, None),
    (b"stats-tube nosuch\r\n", 1, "cmd-stats-tube"),
    (b"statsx\r\n", 1, None),
    (b"use -x\r\n", 1, None),
    (b"use default\r\n", 1, "cmd-use"),
    (b"watch -x\r\n", 1, None),
    (b"watch default\r\n", 1, "cmd-watch"),
    (b"ignore -x\r\n", 1, None),
    (b"ignore default\r\n", 1, "cmd-ignore"),  # NOT_IGNORED is counted
    (b"ignore zz\r\n", 1, "cmd-ignore"),
    (b"list-tubesx\r\n", 1, None),
    (b"list-tube-usedx\r\n", 1, None),
    (b"list-tubes-watchedx\r\n", 1, None),
    # pause-tube: a bad *name* is counted, a bad *delay* is not.
    (b"pause-tube -x 1\r\n", 1, "cmd-pause-tube"),
    (b"pause-tube nosuch 1\r\n", 1, "cmd-pause-tube"),
    (b"pause-tube default x\r\n", 1, None),
    (b"nosuchcommand\r\n", 1, None),
]


def test_which_failed_commands_are_counted(server):
    """beanstalkd 1.12 quirk: most BAD_FORMAT replies are not counted in cmd-*, but a put
    with trailing garbage, JOB_TOO_BIG and a pause-tube with a bad tube name are."""
    for raw, n_replies, counter in COUNTER_CASES:
        c = server.connect()
        before = c.stats()
        c.send(raw)
        for _ in range(n_replies):
            c.read_line()
        after = c.stats()
        changed = {
            k
            for k in STATS_KEYS
            if k.startswith("cmd-") and k != "cmd-stats" and before[k] != after[k]
        }
        assert changed == ({counter} if counter else set()), (raw[:40], changed)
        if counter:
            assert int(after[counter]) == int(before[counter]) + 1, raw[:40]
        c.close()


def test_stats_job_exact(server):
    """`stats-job` YAML: key order and every deterministic value, for each state."""
    c = server.connect()
    c.send(b"put 1023 0 10 3\r\nabc\r\n")
    c.expect(b"INSERTED 1\r\n")
    data, raw = c.yaml_cmd(b"stats-job 1")
    assert list(data) == STATS_JOB_KEYS
    assert re.fullmatch(
        rb"---\nid: 1\ntube: default\nstate: ready\npri: 1023\nage: [0-9]+\ndelay: 0\n"
        rb"ttr: 10\ntime-left: 0\nfile: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\n"
        rb"buries: 0\nkicks: 0\n",
        raw,
    ), raw

    c.cmd(b"reserve", b"RESERVED 1 3\r\nabc\r\n")
    data = c.stats_job(1)
    assert (data["state"], data["reserves"]) == ("reserved", "1")
    assert int(data["time-left"]) in (9, 10)  # seconds left of the TTR, truncated

    c.cmd(b"release 1 5 30", b"RELEASED\r\n")
    data = c.stats_job(1)
    assert (data["state"], data["pri"], data["delay"], data["releases"]) == (
        "delayed",
        "5",
        "30",
        "1",
    )
    assert int(data["time-left"]) in (29, 30)

    c.cmd(b"kick-job 1", b"KICKED\r\n")
    c.cmd(b"reserve", b"RESERVED 1 3\r\nabc\r\n")
    c.cmd(b"bury 1 7", b"BURIED\r\n")
    data = c.stats_job(1)
    assert {k: data[k] for k in STATS_JOB_KEYS if k != "age"} == {
        "id": "1",
        "tube": "default",
        "state": "buried",
        "pri": "7",
        "delay": "30",  # the last delay stays in stats-job after a kick
        "ttr": "10",
        "time-left": "0",
        "file": "0",
        "reserves": "2",
        "timeouts": "0",
        "releases": "1",
        "buries": "1",
        "kicks": "1",
    }


def test_stats_tube_pause_fields(server):
    """pause / pause-time-left / cmd-pause-tube in stats-tube; pause-tube 0 unpauses."""
    c = server.connect()
    c.cmd(b"pause-tube default 10", b"PAUSED\r\n")
    st = c.stats_tube(b"default")
    assert st["pause"] == "10"
    assert st["pause-time-left"] in ("9", "10")  # truncated seconds
    assert st["cmd-pause-tube"] == "1"
    c.cmd(b"pause-tube default 0", b"PAUSED\r\n")
    st = c.stats_tube(b"default")
    assert (st["pause"], st["pause-time-left"], st["cmd-pause-tube"]) == ("0", "0", "2")
    c.cmd(b"pause-tube nosuch 1", b"NOT_FOUND\r\n")


def test_list_tubes_fresh(server):
    """list-tubes, list-tubes-watched and list-tube-used on a fresh server, exact bytes."""
    c = server.connect()
    c.cmd(b"list-tubes", b"OK 14\r\n---\n- default\n\r\n")
    c.cmd(b"list-tubes-watched", b"OK 14\r\n---\n- default\n\r\n")
    c.cmd(b"list-tube-used", b"USING default\r\n")


def test_stats_tube_fresh_exact(server):
    """stats-tube default on a fresh server, whole reply byte for byte."""
    c = server.connect()
    c.cmd(
        b"stats-tube default",
        b"OK 265\r\n---\nname: default\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 0\n"
        b"current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\n"
        b"total-jobs: 0\ncurrent-using: 1\ncurrent-watching: 1\ncurrent-waiting: 0\n"
        b"cmd-delete: 0\ncmd-pause-tube: 0\npause: 0\npause-time-left: 0\n\r\n",
    )
    c.cmd(b"stats-tube nosuch", b"NOT_FOUND\r\n")


def test_tube_freed_when_unused(server):
    """A tube with no jobs, users or watchers disappears from list-tubes."""
    c = server.connect()
    c.cmd(b"use foo", b"USING foo\r\n")
    c.cmd(b"list-tubes", b"OK 20\r\n---\n- default\n- foo\n\r\n")
    c.cmd(b"use default", b"USING default\r\n")
    c.cmd(b"list-tubes", b"OK 14\r\n---\n- default\n\r\n")
    c.cmd(b"stats-tube foo", b"NOT_FOUND\r\n")
    # watch is idempotent; ignoring an unwatched tube is a no-op that still answers WATCHING.
    c.cmd(b"watch foo", b"WATCHING 2\r\n")
    c.cmd(b"watch foo", b"WATCHING 2\r\n")
    c.cmd(b"watch default", b"WATCHING 2\r\n")
    c.cmd(b"ignore zz", b"WATCHING 2\r\n")
    c.cmd(b"ignore foo", b"WATCHING 1\r\n")
    c.cmd(b"list-tubes", b"OK 14\r\n---\n- default\n\r\n")


# ==============================================================================================
# Extra: framing, pipelining, ordering
# ==============================================================================================


def test_pipelined_commands_answered_in_order(server):
    """Many commands in one write: the replies come back in request order."""
    c = server.connect()
    c.send(
        lines(
            b"use t",
            b"put 0 0 1 1",
            b"x",
            b"watch t",
            b"ignore default",
            b"reserve",
            b"peek 1",
            b"delete 1",
            b"list-tube-used",
            b"list-tubes-watched",
            b"bogus",
            b"peek 1",
        )
    )
    c.expect(
        b"USING t\r\n"
        b"INSERTED 1\r\n"
        b"WATCHING 2\r\n"
        b"WATCHING 1\r\n"
        b"RESERVED 1 1\r\nx\r\n"
        b"FOUND 1 1\r\nx\r\n"
        b"DELETED\r\n"
        b"USING t\r\n"
        b"OK 8\r\n---\n- t\n\r\n"
        b"UNKNOWN_COMMAND\r\n"
        b"NOT_FOUND\r\n"
    )


def test_byte_at_a_time(server):
    """Commands and bodies split into 1-byte writes are reassembled by the server."""
    c = server.connect()
    for b in b"put 0 0 1 4\r\nab\r\n\r\nlist-tube-used\r\n":
        c.send(bytes([b]))
    c.expect(b"INSERTED 1\r\nUSING default\r\n")
    c.cmd(b"peek 1", b"FOUND 1 4\r\nab\r\n\r\n")


def test_binary_body(server):
    """A body may contain CR, LF, CRLF and NUL: it is opaque bytes."""
    body = b"\x00\r\n\r\x00\xff\nput 0 0 1 1\r\n"
    c = server.connect()
    c.send(b"put 0 0 1 %d\r\n%s\r\n" % (len(body), body))
    c.expect(b"INSERTED 1\r\n")
    c.cmd(b"reserve", b"RESERVED 1 %d\r\n%s\r\n" % (len(body), body))


def test_blocked_reserve_holds_later_commands(server):
    """A blocked `reserve` holds every later command of the same connection (beanstalkd#647):
    the `use` pipelined after it is answered only after the RESERVED reply."""
    a = server.connect()
    b = server.connect()
    a.send(b"reserve\r\nuse foo\r\n")
    wait_waiting(b, b"default", 1)  # a is really blocked in reserve
    a.expect_silence(0.2)  # ...and `use foo` was not answered meanwhile
    b.send(b"put 0 0 1 1\r\nx\r\n")
    b.expect(b"INSERTED 1\r\n")
    a.expect(b"RESERVED 1 1\r\nx\r\nUSING foo\r\n")


def test_waiting_reservers_served_in_arrival_order(server):
    """Connections blocked in reserve are served first come, first served."""
    a = server.connect()
    b = server.connect()
    p = server.connect()
    a.send(b"reserve\r\n")
    wait_waiting(p, b"default", 1)
    b.send(b"reserve\r\n")
    wait_waiting(p, b"default", 2)
    p.send(b"put 0 0 10 1\r\nx\r\nput 0 0 10 1\r\ny\r\n")
    p.expect(b"INSERTED 1\r\nINSERTED 2\r\n")
    a.expect(b"RESERVED 1 1\r\nx\r\n")
    b.expect(b"RESERVED 2 1\r\ny\r\n")


def test_priority_then_fifo_order(server):
    """Ready jobs come out by priority, then by id (FIFO for equal priorities)."""
    c = server.connect()
    for pri, body in [(5, b"a"), (1, b"b"), (5, b"c"), (1, b"d")]:
        c.put(body, pri=pri, ttr=10)
    c.cmd(b"peek-ready", b"FOUND 2 1\r\nb\r\n")
    for job_id, body in [(2, b"b"), (4, b"d"), (1, b"a"), (3, b"c")]:
        c.cmd(b"reserve-with-timeout 0", b"RESERVED %d 1\r\n%s\r\n" % (job_id, body))
    c.cmd(b"reserve-with-timeout 0", b"TIMED_OUT\r\n")


def test_quit_closes_connection(server):
    """`quit` closes the connection; commands pipelined after it are never answered."""
    c = server.connect()
    c.send(b"use a\r\nquit\r\nuse b\r\n")
    c.expect(b"USING a\r\n")
    c.expect_closed()


# ==============================================================================================
# Extra: line length, prefixes, put parsing
# ==============================================================================================


def test_line_224_bytes_accepted(server):
    """The line buffer is 224 bytes including CRLF: a 224-byte line is parsed normally."""
    c = server.connect()
    line = b"a" * 222 + b"\r\n"
    assert len(line) == 224
    c.send(line)
    c.expect(b"UNKNOWN_COMMAND\r\n")  # parsed (and unknown), not BAD_FORMAT


def test_line_longer_than_224_bad_format(server):
    """A longer line is discarded up to the next CRLF, answered BAD_FORMAT, and the
    connection goes on."""
    c = server.connect()
    c.send(b"a" * 224 + b"\r\n")  # 226 bytes
    c.send(b"list-tube-used\r\n")
    c.expect(b"BAD_FORMAT\r\nUSING default\r\n")
    c.send(b"pause-tube  " + NAME_200 + b" 4294967295x\r\n")  # > 224 even if valid-looking
    c.send(b"list-tube-used\r\n")
    c.expect(b"BAD_FORMAT\r\nUSING default\r\n")


def test_line_of_225_bytes_swallows_next_line(server):
    """beanstalkd 1.12 quirk: with a 225-byte line the CR is the 224th byte, so it is thrown
    away with the full buffer; the lone LF does not end the line, and the *next* line is
    swallowed too.  One BAD_FORMAT for two lines."""
    c = server.connect()
    line = b"a" * 223 + b"\r\n"
    assert len(line) == 225
    c.send(line + b"list-tube-used\r\n" + b"list-tube-used\r\n")
    c.expect(b"BAD_FORMAT\r\nUSING default\r\n")
    c.expect_silence(0.2)  # there is no second USING
    # Same when the next line arrives in its own packet.
    c.send(line)
    c.expect_silence(0.1)
    c.send(b"list-tube-used\r\n")
    c.expect(b"BAD_FORMAT\r\n")
    c.send(b"list-tube-used\r\n")
    c.expect(b"USING default\r\n")


def test_nul_in_command_line(server):
    """An embedded NUL in a command line gives BAD_FORMAT."""
    c = server.connect()
    c.cmd(b"use a\x00b", b"BAD_FORMAT\r\n")
    c.cmd(b"\x00", b"BAD_FORMAT\r\n")
    c.cmd(b"list-tube-used", b"USING default\r\n")


# (line, exact reply).  All on one connection, in this order.
PREFIX_CASES = [
    # Commands without arguments match by prefix, then must be exact: BAD_FORMAT.
    (b"reservex", b"BAD_FORMAT\r\n"),
    (b"reserve-with-timeout", b"BAD_FORMAT\r\n"),  # matches "reserve", wrong length
    (b"reserve-job", b"BAD_FORMAT\r\n"),
    (b"peek-readyx", b"BAD_FORMAT\r\n"),
    (b"peek-ready ", b"BAD_FORMAT\r\n"),
    (b"peek-delayedx", b"BAD_FORMAT\r\n"),
    (b"peek-buriedx", b"BAD_FORMAT\r\n"),
    (b"statsx", b"BAD_FORMAT\r\n"),
    (b"stats-job", b"BAD_FORMAT\r\n"),  # matches "stats"
    (b"stats-tube", b"BAD_FORMAT\r\n"),
    (b"list-tubesx", b"BAD_FORMAT\r\n"),
    (b"list-tubes-watchedx", b"BAD_FORMAT\r\n"),
    (b"list-tube-usedx", b"BAD_FORMAT\r\n"),
    # Commands with arguments are matched with their trailing space.
    (b"", b"UNKNOWN_COMMAND\r\n"),
    (b"peek", b"UNKNOWN_COMMAND\r\n"),
    (b"use", b"UNKNOWN_COMMAND\r\n"),
    (b"watchx", b"UNKNOWN_COMMAND\r\n"),
    (b"kick", b"UNKNOWN_COMMAND\r\n"),
    (b"kickx 1", b"UNKNOWN_COMMAND\r\n"),
    (b"kick-job", b"UNKNOWN_COMMAND\r\n"),
    (b"touch", b"UNKNOWN_COMMAND\r\n"),
    (b"PUT 0 0 0 0", b"UNKNOWN_COMMAND\r\n"),  # case sensitive
    (b"use ", b"BAD_FORMAT\r\n"),
    (b"kick ", b"BAD_FORMAT\r\n"),
    # pause-tube is matched WITHOUT a trailing space (beanstalkd 1.12 quirk).
    (b"pause-tube", b"BAD_FORMAT\r\n"),
    (b"pause-tube-x 1", b"BAD_FORMAT\r\n"),
    (b"pause-tubex default 1", b"BAD_FORMAT\r\n"),
    (b"pause-tubedefault 1", b"PAUSED\r\n"),
    (b"pause-tube  default 0", b"PAUSED\r\n"),
    (b"pause-tube default", b"BAD_FORMAT\r\n"),
    (b"pause-tube default 1 x", b"BAD_FORMAT\r\n"),
    # Numbers: leading spaces are skipped, a sign is not a digit, leading zeros are fine.
    (b"peek  1", b"NOT_FOUND\r\n"),
    (b"peek +1", b"BAD_FORMAT\r\n"),
    (b"peek 01", b"NOT_FOUND\r\n"),
    (b"delete  1", b"NOT_FOUND\r\n"),
    (b"release 1", b"BAD_FORMAT\r\n"),
    (b"release 1 2", b"BAD_FORMAT\r\n"),
    (b"bury 1", b"BAD_FORMAT\r\n"),
    (b"reserve-job x", b"BAD_FORMAT\r\n"),
    (b"reserve-job 1 2", b"BAD_FORMAT\r\n"),
    (b"peek 0", b"NOT_FOUND\r\n"),
    (b"reserve-job 0", b"NOT_FOUND\r\n"),
    # kick uses a lenient strtoul: trailing junk ignored (but a non-digit start is bad).
    (b"kick abc", b"BAD_FORMAT\r\n"),
    (b"kick 1x", b"KICKED 0\r\n"),
    (b"kick 1 2", b"KICKED 0\r\n"),
    (b"kick  2", b"KICKED 0\r\n"),
    (b"kick 0", b"KICKED 0\r\n"),
    # Tube names: the whole rest of the line must be name chars; no leading '-'.
    (b"use a b", b"BAD_FORMAT\r\n"),
    (b"use -a", b"BAD_FORMAT\r\n"),
    (b"use a-", b"USING a-\r\n"),
    (b"use A+/;.$_()9", b"USING A+/;.$_()9\r\n"),
    (b"use a*", b"BAD_FORMAT\r\n"),
    (b"watch a b", b"BAD_FORMAT\r\n"),
    (b"stats-tube -x", b"BAD_FORMAT\r\n"),
]


def test_command_prefix_matching(server):
    """Exact replies for near-miss command names, prefixes and argument parsing, as
    observed on beanstalkd 1.12."""
    c = server.connect()
    for line, reply in PREFIX_CASES:
        c.send(line + b"\r\n")
        try:
            c.expect(reply)
        except WireError as e:
            raise AssertionError(f"for {line!r}: {e}") from None


def test_quit_prefix_closes(server):
    """beanstalkd 1.12 quirk: `quit` is matched by prefix, so `quitx` also closes."""
    c = server.connect()
    c.send(b"quitx\r\n")
    c.expect_closed()


def test_reserve_with_timeout_lenient_number(server):
    """beanstalkd 1.12 quirk: reserve-with-timeout parses its number with strtol and no
    checks.  A non-number is 0 (TIMED_OUT at once), 2^32 wraps to 0; only an out-of-range
    (ERANGE) number is BAD_FORMAT."""
    c = server.connect()
    c.cmd(b"reserve-with-timeout x", b"TIMED_OUT\r\n")
    c.cmd(b"reserve-with-timeout ", b"TIMED_OUT\r\n")
    c.cmd(b"reserve-with-timeout  0", b"TIMED_OUT\r\n")
    c.cmd(b"reserve-with-timeout 0 1", b"TIMED_OUT\r\n")
    c.cmd(b"reserve-with-timeout 4294967296", b"TIMED_OUT\r\n")
    c.cmd(b"reserve-with-timeout " + UINT64_MAX, b"BAD_FORMAT\r\n")


def test_reserve_with_timeout_negative_blocks(server):
    """beanstalkd 1.12 quirk: `reserve-with-timeout -1` is a huge timeout (it blocks), and
    trailing junk after the number is ignored (`1x` waits 1 s is not tested: slow)."""
    c = server.connect()
    p = server.connect()
    c.send(b"reserve-with-timeout -1\r\n")
    wait_waiting(p, b"default", 1)
    p.send(b"put 0 0 1 1\r\nx\r\n")
    p.expect(b"INSERTED 1\r\n")
    c.expect(b"RESERVED 1 1\r\nx\r\n")


def test_put_trailing_garbage(server):
    """Trailing garbage after <bytes> gives BAD_FORMAT; the body is NOT skipped, so it is then
    parsed as a command line (here: UNKNOWN_COMMAND).  Extra leading spaces are fine."""
    c = server.connect()
    c.send(b"put 0 0 1 1 x\r\nx\r\n")
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n")
    c.send(b"put 0 0 1 1x\r\nx\r\n")
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n")
    c.send(b"put 0 0 1 1 \r\nx\r\n")
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n")
    c.send(b"put 0 0 1\r\n")
    c.expect(b"BAD_FORMAT\r\n")
    c.send(b"put 0 0 -1 1\r\nx\r\n")
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n")
    c.send(b"put 0 0 4294967296 1\r\nx\r\n")
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n")
    c.send(b"put 0 0 1 " + UINT64_MAX_PLUS_1 + b"\r\n")
    c.expect(b"BAD_FORMAT\r\n")
    c.send(b"put  0 0 1 1\r\nx\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"put 0 4294967295 4294967295 1\r\nx\r\n")
    c.expect(b"INSERTED 2\r\n")


def test_expected_crlf(server):
    """A body not followed by CRLF gives EXPECTED_CRLF.  Exactly <bytes>+2 bytes are consumed
    as the body, so whatever follows is parsed as the next command line."""
    c = server.connect()
    # body "abc" (3 = 1+2 bytes) is the data chunk; the CRLF after it is an empty line.
    c.send(b"put 0 0 1 1\r\nabc\r\n")
    c.expect(b"EXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\n")
    # body "ab\r": the rest "\nlist-tube-used\r\n" is one (unknown) command line.
    c.send(b"put 0 0 1 1\r\nab\r\nlist-tube-used\r\n")
    c.expect(b"EXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\n")
    c.send(b"put 0 0 1 0\r\nab\r\n")
    c.expect(b"EXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\n")
    c.send(b"put 0 0 1 1\r\nx\rx")
    c.expect(b"EXPECTED_CRLF\r\n")
    c.cmd(b"list-tube-used", b"USING default\r\n")


def test_failed_put_burns_job_id(server):
    """beanstalkd 1.12 quirk: the job (and its id) is made before the body is read, so a put
    answered EXPECTED_CRLF uses up an id.  BAD_FORMAT and JOB_TOO_BIG do not.  (DRAINING
    also comes after the job is made, but that cannot be observed: drain mode never ends.)"""
    c = server.connect()
    c.send(b"put 0 0 1 1\r\nabc\r\n")
    c.expect(b"EXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\n")  # burns id 1
    c.send(b"put 0 0 1 1 x\r\n")
    c.expect(b"BAD_FORMAT\r\n")  # no id
    c.send(b"put 0 0 1 70000\r\n" + b"z" * 70000 + b"\r\n")
    c.expect(b"JOB_TOO_BIG\r\n")  # no id
    c.send(b"put 0 0 1 1\r\nx\r\n")
    c.expect(b"INSERTED 2\r\n")
    st = c.stats()
    # Only the stored job counts in total-jobs.  cmd-put counts all 4 puts: even the
    # trailing-garbage BAD_FORMAT one is counted (see COUNTER_CASES).
    assert (st["total-jobs"], st["current-jobs-ready"], st["cmd-put"]) == ("1", "1", "4")


def test_job_too_big_skips_body_then_pipelined(server_factory):
    """JOB_TOO_BIG skips exactly <bytes>+2 bytes, even with trailing garbage on the put line
    (the size check comes first), and pipelined commands after the body are answered."""
    srv = server_factory("-z", "10")
    c = srv.connect()
    c.send(b"put 0 0 1 11 x\r\n0123456789a\r\nlist-tube-used\r\n")
    c.expect(b"JOB_TOO_BIG\r\nUSING default\r\n")
    c.send(b"put 0 0 1 11\r\n0123456789a\r\nlist-tube-used\r\n")
    c.expect(b"JOB_TOO_BIG\r\nUSING default\r\n")
    c.send(b"put 0 0 1 10\r\n0123456789\r\n")  # exactly -z bytes is fine
    c.expect(b"INSERTED 1\r\n")
    assert c.stats()["max-job-size"] == "10"


def test_default_max_job_size(server):
    """Default max-job-size is 65535: 65535 bytes are accepted, 65536 are too big."""
    c = server.connect()
    body = b"b" * 65535
    c.send(b"put 0 0 1 65535\r\n" + body + b"\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.send(b"put 0 0 1 65536\r\n" + body + b"b\r\n")
    c.expect(b"JOB_TOO_BIG\r\n")
    c.cmd(b"peek 1", b"FOUND 1 65535\r\n" + body + b"\r\n")


def test_ttr_zero_becomes_one(server):
    """ttr 0 is stored as 1 (put and the reserved TTR both show 1)."""
    c = server.connect()
    c.send(b"put 0 0 0 0\r\n\r\n")
    c.expect(b"INSERTED 1\r\n")
    assert c.stats_job(1)["ttr"] == "1"
    c.cmd(b"reserve", b"RESERVED 1 0\r\n\r\n")
    assert c.stats_job(1)["time-left"] in ("0", "1")


# ==============================================================================================
# Extra: DEADLINE_SOON, TTR, kick
# ==============================================================================================


def test_deadline_soon_only_without_ready_job(server):
    """DEADLINE_SOON is answered only when no *watched* tube has a ready job; reserve-job
    never answers it.  (Must finish within the 1 s TTR of job 1.)"""
    c = server.connect()
    c.put(b"a", ttr=1, expect_id=1)
    c.put(b"b", ttr=10, expect_id=2)
    c.cmd(b"reserve", b"RESERVED 1 1\r\na\r\n")  # deadline already "soon" (ttr = margin)
    # A ready job exists: it is reserved, not DEADLINE_SOON.
    c.cmd(b"reserve-with-timeout 0", b"RESERVED 2 1\r\nb\r\n")
    # Nothing ready: DEADLINE_SOON (not TIMED_OUT).
    c.cmd(b"reserve-with-timeout 0", b"DEADLINE_SOON\r\n")
    c.cmd(b"reserve", b"DEADLINE_SOON\r\n")
    # A ready job in a tube we do not watch does not count.
    c.cmd(b"use other", b"USING other\r\n")
    c.put(b"c", ttr=10, expect_id=3)
    c.cmd(b"reserve-with-timeout 0", b"DEADLINE_SOON\r\n")
    # reserve-job takes it anyway.
    c.cmd(b"reserve-job 3", b"RESERVED 3 1\r\nc\r\n")
    assert job_state(c, 1) == "reserved"


@pytest.mark.slow
def test_deadline_soon_wakes_blocked_reserve(server):
    """A connection blocked in reserve while holding a job is woken with DEADLINE_SOON when
    the job's deadline comes within the 1 s safety margin (ttr 2: after about 1 s)."""
    c = server.connect()
    c.put(b"a", ttr=2, expect_id=1)
    c.cmd(b"reserve", b"RESERVED 1 1\r\na\r\n")
    t0 = time.monotonic()
    c.send(b"reserve\r\n")
    c.expect(b"DEADLINE_SOON\r\n", timeout=3)
    assert 0.8 <= elapsed_since(t0) < 2.0
    assert job_state(c, 1) == "reserved"


@pytest.mark.slow
def test_ttr_expiry_releases_job(server):
    """When the TTR runs out the job goes back to ready (and to a waiting reserver); the old
    owner loses it; timeouts and job-timeouts count it.

    beanstalkd 1.12 bug worked around here: if the owner stays idle after `reserve`, 1.12
    sometimes never expires the TTR (its conn_timeout can run 1 s early, while the owner
    still counts as waiting, find nothing expired and never reschedule the connection:
    issue #262 / PR #334).  About 1 run in 3 the job then stays reserved with a negative
    time-left.  Any command from the owner re-arms the timer, so the owner polls stats-job
    while it waits.  A correct server passes with or without the polling.
    """
    a = server.connect()
    b = server.connect()
    a.put(b"a", ttr=1, expect_id=1)
    a.cmd(b"reserve", b"RESERVED 1 1\r\na\r\n")
    t0 = time.monotonic()
    b.send(b"reserve-with-timeout 5\r\n")
    wait_until(lambda: a.stats_job(1)["timeouts"] == "1", timeout=5, what="TTR expiry")
    b.expect(b"RESERVED 1 1\r\na\r\n")
    assert elapsed_since(t0) >= 0.9
    data = b.stats_job(1)
    assert (data["state"], data["reserves"], data["timeouts"]) == ("reserved", "2", "1")
    assert b.stats()["job-timeouts"] == "1"
    a.cmd(b"delete 1", b"NOT_FOUND\r\n")
    a.cmd(b"touch 1", b"NOT_FOUND\r\n")
    b.cmd(b"touch 1", b"TOUCHED\r\n")
    b.cmd(b"delete 1", b"DELETED\r\n")


def test_only_owner_may_touch_release_bury_delete(server):
    """A job reserved by another connection: NOT_FOUND for touch, release, bury, delete,
    reserve-job and kick-job; peek still finds it."""
    owner = server.connect()
    other = server.connect()
    owner.put(b"c", ttr=30, expect_id=1)
    owner.cmd(b"reserve", b"RESERVED 1 1\r\nc\r\n")
    other.cmd(b"touch 1", b"NOT_FOUND\r\n")
    other.cmd(b"release 1 0 0", b"NOT_FOUND\r\n")
    other.cmd(b"bury 1 0", b"NOT_FOUND\r\n")
    other.cmd(b"delete 1", b"NOT_FOUND\r\n")
    other.cmd(b"reserve-job 1", b"NOT_FOUND\r\n")
    other.cmd(b"kick-job 1", b"NOT_FOUND\r\n")
    other.cmd(b"peek 1", b"FOUND 1 1\r\nc\r\n")
    owner.cmd(b"touch 1", b"TOUCHED\r\n")
    owner.cmd(b"release 1 0 0", b"RELEASED\r\n")


def test_kick_buried_first_fifo_then_delayed(server):
    """kick kicks only buried jobs while any exist (in bury order), then delayed jobs
    (soonest first).  KICKED counts what was really kicked."""
    c = server.connect()
    for i in range(1, 4):
        c.put(b"x", ttr=10, expect_id=i)
    for i in range(1, 4):
        c.cmd(b"reserve", b"RESERVED %d 1\r\nx\r\n" % i)
    for i in (3, 1, 2):  # bury order: 3, 1, 2
        c.cmd(b"bury %d 0" % i, b"BURIED\r\n")
    c.put(b"d", delay=100, ttr=10, expect_id=4)
    c.put(b"e", delay=50, ttr=10, expect_id=5)

    c.cmd(b"peek-buried", b"FOUND 3 1\r\nx\r\n")
    c.cmd(b"kick 1", b"KICKED 1\r\n")
    assert job_state(c, 3) == "ready"
    c.cmd(b"peek-buried", b"FOUND 1 1\r\nx\r\n")
    c.cmd(b"kick 10", b"KICKED 2\r\n")  # the 2 buried ones only, delayed untouched
    st = c.stats_tube(b"default")
    assert (st["current-jobs-buried"], st["current-jobs-delayed"]) == ("0", "2")
    c.cmd(b"kick 1", b"KICKED 1\r\n")  # now delayed: soonest deadline (job 5) first
    assert job_state(c, 5) == "ready"
    c.cmd(b"peek-delayed", b"FOUND 4 1\r\nd\r\n")
    c.cmd(b"kick 10", b"KICKED 1\r\n")
    c.cmd(b"kick 10", b"KICKED 0\r\n")
    assert c.stats_job(5)["kicks"] == "1"


def test_kick_negative_kicks_all(server):
    """beanstalkd 1.12 quirk: `kick -1` goes through strtoul, so it is ULONG_MAX: kick all."""
    c = server.connect()
    for i in range(1, 4):
        c.put(b"x", ttr=10, expect_id=i)
        c.cmd(b"reserve", b"RESERVED %d 1\r\nx\r\n" % i)
        c.cmd(b"bury %d 0" % i, b"BURIED\r\n")
    c.cmd(b"kick -1", b"KICKED 3\r\n")
    c.cmd(b"peek-buried", b"NOT_FOUND\r\n")


def test_peek_only_used_tube(server):
    """peek-ready/-delayed/-buried look at the *used* tube only; peek <id> at any tube."""
    c = server.connect()
    c.cmd(b"use a", b"USING a\r\n")
    c.put(b"r", ttr=10, expect_id=1)
    c.put(b"d", delay=100, ttr=10, expect_id=2)
    c.cmd(b"use b", b"USING b\r\n")
    c.cmd(b"peek-ready", b"NOT_FOUND\r\n")
    c.cmd(b"peek-delayed", b"NOT_FOUND\r\n")
    c.cmd(b"peek 1", b"FOUND 1 1\r\nr\r\n")
    c.cmd(b"use a", b"USING a\r\n")
    c.cmd(b"peek-ready", b"FOUND 1 1\r\nr\r\n")
    c.cmd(b"peek-delayed", b"FOUND 2 1\r\nd\r\n")


# ==============================================================================================
# Extra: binlog behaviour that does not depend on the file format
# ==============================================================================================


def test_binlog_survives_sigkill(server_factory):
    """Binlog records are written at once (only fsync is batched): a put survives SIGKILL."""
    srv = server_factory(binlog=True)
    c = srv.connect()
    c.put(b"keep", ttr=100, expect_id=1)
    srv.kill()
    srv.start()
    c = srv.connect()
    c.cmd(b"peek 1", b"FOUND 1 4\r\nkeep\r\n")


def test_binlog_restart_states(server_factory):
    """After a restart: buried stays buried, a release-with-delay stays delayed (with its new
    pri), a job reserved at shutdown is ready, a deleted job is gone, and new ids continue
    after the highest id ever logged."""
    srv = server_factory(binlog=True)
    c = srv.connect()
    for i, body in enumerate([b"a", b"b", b"c", b"d"], start=1):
        c.put(body, ttr=100, expect_id=i)
    c.cmd(b"reserve", b"RESERVED 1 1\r\na\r\n")
    c.cmd(b"bury 1 7", b"BURIED\r\n")
    c.cmd(b"reserve", b"RESERVED 2 1\r\nb\r\n")  # still reserved at shutdown
    c.cmd(b"reserve", b"RESERVED 3 1\r\nc\r\n")
    c.cmd(b"release 3 9 100", b"RELEASED\r\n")
    c.cmd(b"delete 4", b"DELETED\r\n")

    srv.restart()
    c = srv.connect()
    j1, j2, j3 = c.stats_job(1), c.stats_job(2), c.stats_job(3)
    assert (j1["state"], j1["pri"]) == ("buried", "7")
    assert (j2["state"], j2["pri"]) == ("ready", "0")
    assert (j3["state"], j3["pri"], j3["delay"], j3["ttr"]) == ("delayed", "9", "100", "100")
    c.cmd(b"stats-job 4", b"NOT_FOUND\r\n")
    c.put(b"e", ttr=100, expect_id=5)
    st = c.stats()
    # Replayed jobs are not counted in total-jobs / cmd-put of the new process.
    assert (st["total-jobs"], st["cmd-put"]) == ("1", "1")
    assert (st["current-jobs-buried"], st["current-jobs-delayed"]) == ("1", "1")
    assert st["current-jobs-ready"] == "2"


def test_binlog_replay_counters(server_factory, server_kind):
    """Per-job counters after replay: a job reserved at shutdown comes back with the counters
    of its last logged record (reserves 0).  beanstalkd 1.12 replays a bury record as a new
    bury (buries 1 -> 2); disq keeps the counter it logged, and we do not copy that bug."""
    srv = server_factory(binlog=True)
    c = srv.connect()
    c.put(b"a", ttr=100, expect_id=1)
    c.put(b"b", ttr=100, expect_id=2)
    c.cmd(b"reserve", b"RESERVED 1 1\r\na\r\n")
    c.cmd(b"bury 1 7", b"BURIED\r\n")
    c.cmd(b"reserve", b"RESERVED 2 1\r\nb\r\n")
    srv.restart()
    c = srv.connect()
    j1, j2 = c.stats_job(1), c.stats_job(2)
    buries = "2" if server_kind == "beanstalkd" else "1"
    assert (j1["reserves"], j1["buries"]) == ("1", buries)
    assert (j2["reserves"], j2["buries"]) == ("0", "0")
