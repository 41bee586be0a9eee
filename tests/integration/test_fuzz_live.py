"""Bad input on a live node: fuzzed clients, nasty clients, and a healthy one that must not care.

Every test runs a *health* client next to the bad ones: put/reserve/delete round trips on a
private tube, each answered correctly within ``HEALTH_TIMEOUT``. At the end the node process
is alive, ``stats`` answers, no connection or reservation is left over, and (for disq) the
log has no Traceback.

Three tests pin bounds beanstalkd keeps and a client cannot break: the memory a client that
never reads its replies can make the node use, the memory of commands queued behind a
blocked reserve, and how long one client's pipelined commands can keep the others waiting.

The fuzzed streams come from ``random.Random`` seeded per connection; a failure names the
base seed, and ``DISQ_FUZZ_SEED=<seed>`` replays it. The same tests run against beanstalkd
itself with ``DISQ_TEST_SERVER=beanstalkd`` (which is how the expectations were checked).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from conftest import ServerProcess
from wire import WireError, wait_until

HEALTH_TIMEOUT = 5.0
BASE_SEED = int(os.environ.get("DISQ_FUZZ_SEED", random.randrange(1 << 32)))


# ------------------------------------------------------------------------------ helpers
def _raw(srv: ServerProcess, timeout: float = HEALTH_TIMEOUT) -> socket.socket:
    assert srv.port is not None
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0): the abrupt end of a crashed client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _memory_kb(srv: ServerProcess, key: str) -> int | None:
    """``VmRSS`` / ``VmHWM`` (peak) of the node, in kB; None where /proc is missing."""
    assert srv.proc is not None
    try:
        with open(f"/proc/{srv.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def assert_node_healthy(srv: ServerProcess, *, idle: bool = True) -> dict[str, str]:
    """The process lives, answers ``stats``; ``idle``: nothing is left of other clients."""
    assert srv.proc is not None
    assert srv.proc.poll() is None, f"node died ({srv.proc.returncode}):\n{srv.log_text()}"
    with srv.connect() as c:
        stats = c.stats()
        if idle:
            # Every other connection is gone, so its reservations and waits are too.
            def settled() -> bool:
                s = c.stats()
                return (
                    s["current-connections"] == "1"
                    and s["current-waiting"] == "0"
                    and s["current-jobs-reserved"] == "0"
                )

            wait_until(settled, timeout=10, what="closed clients to be gone")
            stats = c.stats()
    if srv.kind == "disq":
        log = srv.log_text()
        assert "Traceback" not in log, log
        assert "Exception in callback" not in log and "Fatal error" not in log, log
    return stats


class Health(threading.Thread):
    """A well-behaved worker: put + reserve (one segment, so no other client can interleave
    and take the job), check the body, delete; every reply within ``HEALTH_TIMEOUT``."""

    def __init__(self, srv: ServerProcess, seed: int) -> None:
        super().__init__(daemon=True)
        self.srv = srv
        self.rng = random.Random(seed)
        self.tube = b"health-%d" % self.rng.randrange(1 << 40)
        self.stop_event = threading.Event()
        self.rounds = 0
        self.worst = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.srv.connect(timeout=HEALTH_TIMEOUT) as c:
                c.cmd(b"use " + self.tube, b"USING " + self.tube + b"\r\n")
                c.cmd(b"watch " + self.tube, b"WATCHING 2\r\n")
                c.cmd(b"ignore default", b"WATCHING 1\r\n")
                while not self.stop_event.is_set():
                    body = self.rng.randbytes(self.rng.randrange(0, 64)) + b"\r\n"
                    started = time.monotonic()
                    c.send(
                        b"put %d 0 60 %d\r\n%s\r\nreserve-with-timeout 5\r\n"
                        % (self.rng.randrange(5000), len(body), body)
                    )
                    line = c.read_line()
                    m = re.fullmatch(rb"INSERTED (\d+)\r\n", line)
                    assert m is not None, f"health put got {line!r}"
                    job_id = int(m.group(1))
                    c.read_job(b"RESERVED", job_id, body)
                    c.cmd(b"delete %d" % job_id, b"DELETED\r\n")
                    self.worst = max(self.worst, time.monotonic() - started)
                    self.rounds += 1
                    self.stop_event.wait(0.005)
        except BaseException as exc:  # reported by the test thread
            self.error = exc


@contextlib.contextmanager
def healthy_while(srv: ServerProcess, min_rounds: int = 3) -> Iterator[Health]:
    """Run a ``Health`` client for the duration of the block, then demand it was fine.

    It must have completed ``min_rounds`` round trips by the end (it gets ``HEALTH_TIMEOUT``
    more to get there when the block was quick).
    """
    health = Health(srv, BASE_SEED)
    health.start()
    try:
        yield health
        with contextlib.suppress(WireError):
            wait_until(
                lambda: health.rounds >= min_rounds or not health.is_alive(),
                timeout=HEALTH_TIMEOUT,
            )
    finally:
        health.stop_event.set()
        health.join(HEALTH_TIMEOUT * 3)
    assert not health.is_alive(), "health client hung"
    if health.error is not None:
        raise AssertionError(
            f"health client failed after {health.rounds} rounds (seed {BASE_SEED}): {health.error}"
        ) from health.error
    assert health.rounds >= min_rounds, f"only {health.rounds} health rounds"


def wait_rounds(health: Health, more: int, timeout: float = HEALTH_TIMEOUT) -> None:
    """Block until the health client completed ``more`` further rounds: it is being served."""
    target = health.rounds + more
    wait_until(
        lambda: health.rounds >= target or health.error is not None,
        timeout=timeout,
        what=f"{more} health rounds",
    )
    assert health.error is None, health.error


# ------------------------------------------------------------------- fuzzed streams
_NAMES = [b"default", b"default", b"fz", b"fz2", b"x" * 200, b"x" * 201, b"-bad", b"a b"]
_U32 = [0, 1, 2, 1023, 1024, 4294967295, 4294967296]
_IDS = [0, 1, 2, 3, 5, 8, 13, 18446744073709551615, 18446744073709551616]


def _num(rng: random.Random, choices: list[int]) -> int:
    return rng.choice(choices) if rng.random() < 0.5 else rng.randrange(0, 50)


def valid_command(rng: random.Random) -> bytes:
    """One beanstalkd command; its arguments are often out of range or absurd."""
    k = rng.randrange(22)
    if k < 5:
        body = rng.randbytes(rng.randrange(0, 40)) + rng.choice([b"", b"\r\n", b"\r\nstats"])
        size = len(body) + rng.choice([0, 0, 0, 0, 0, 0, -1, 1])
        pri, delay = _num(rng, _U32), rng.choice([0, 0, 0, 1, 4294967295])
        ttr = rng.choice([0, 1, 60, 4294967295])
        return b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, max(size, 0), body)
    lines: list[bytes] = [
        b"reserve-with-timeout %d" % rng.choice([0, 0, 0, 1]),
        b"reserve-job %d" % _num(rng, _IDS),
        b"delete %d" % _num(rng, _IDS),
        b"release %d %d %d" % (_num(rng, _IDS), _num(rng, _U32), rng.choice([0, 1, 4294967295])),
        b"bury %d %d" % (_num(rng, _IDS), _num(rng, _U32)),
        b"touch %d" % _num(rng, _IDS),
        b"kick %d" % _num(rng, _U32),
        b"kick-job %d" % _num(rng, _IDS),
        b"peek %d" % _num(rng, _IDS),
        b"peek-" + rng.choice([b"ready", b"delayed", b"buried"]),
        b"stats",
        b"stats-job %d" % _num(rng, _IDS),
        b"stats-tube " + rng.choice(_NAMES),
        b"use " + rng.choice(_NAMES),
        b"watch " + rng.choice(_NAMES),
        b"ignore " + rng.choice(_NAMES),
        rng.choice([b"list-tubes", b"list-tube-used", b"list-tubes-watched"]),
        b"pause-tube %s %d" % (rng.choice(_NAMES), rng.choice([0, 1, 4294967295])),
    ]
    return rng.choice(lines) + b"\r\n"


_HUGE = [b"4294967296", b"18446744073709551616", b"9" * 40, b"-1", b"0" * 300]
_JUNK = [b"\x00", b"\r", b"\n", b"\r\n", b" ", b"\xff", b"put ", b"x" * 230, b"x" * 5000]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Byte flips, cuts, insertions, NULs, overlong lines and huge numbers."""
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        pos = rng.randrange(len(buf) + 1)
        kind = rng.randrange(7)
        if kind == 0 and pos < len(buf):
            buf[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del buf[pos : pos + rng.randrange(1, 8)]
        elif kind == 2:
            buf[pos:pos] = rng.randbytes(rng.randrange(1, 8))
        elif kind == 3:
            buf[pos:pos] = rng.choice(_JUNK)
        elif kind == 4:
            runs = list(re.finditer(rb"\d+", bytes(buf)))
            if runs:
                m = rng.choice(runs)
                buf[m.start() : m.end()] = rng.choice(_HUGE)
        elif kind == 5:
            del buf[pos:]
        elif pos < len(buf):
            end = rng.randrange(pos, len(buf) + 1)
            buf[end:end] = buf[pos:end]
    return bytes(buf)


def fuzz_stream(rng: random.Random) -> bytes:
    """Valid commands, mutated commands, pure random bytes or a soup of protocol tokens."""
    r = rng.random()
    commands = b"".join(valid_command(rng) for _ in range(rng.randrange(1, 30)))
    if r < 0.35:
        return commands
    if r < 0.8:
        return mutate(rng, commands)
    if r < 0.9:
        return rng.randbytes(rng.randrange(1, 3000))
    tokens = [b"put ", b"0 ", b"5", b"\r\n", b"\r", b" ", b"reserve", b"stats", b"use ", b"x"]
    return b"".join(rng.choice(tokens) for _ in range(rng.randrange(1, 200)))


# The reply forms beanstalkd sends; bodies are framed by the number in the line.
_REPLY = re.compile(
    rb"(?:INSERTED|BURIED|KICKED|WATCHING) \d+|(?:RESERVED|FOUND) \d+ (\d+)|OK (\d+)"
    rb"|USING [A-Za-z0-9\-+/;.$_()]+|DELETED|RELEASED|BURIED|TOUCHED|KICKED|NOT_FOUND"
    rb"|NOT_IGNORED|TIMED_OUT|DEADLINE_SOON|PAUSED|BAD_FORMAT|UNKNOWN_COMMAND"
    rb"|EXPECTED_CRLF|JOB_TOO_BIG|OUT_OF_MEMORY|DRAINING"
)


def check_reply_stream(stream: bytes, complete: bool) -> int:
    """Every reply is a beanstalkd reply form; returns how many. ``complete``: no tail."""
    pos = count = 0
    while pos < len(stream):
        eol = stream.find(b"\r\n", pos)
        if eol < 0:
            assert not complete and len(stream) - pos < 300, f"bad tail {stream[pos:][:80]!r}"
            break
        m = _REPLY.fullmatch(stream, pos, eol)
        assert m is not None, f"not a beanstalkd reply: {stream[pos:eol][:80]!r}"
        size = m.group(1) or m.group(2)
        end = eol + 2 + (int(size) + 2 if size else 0)
        if end > len(stream):
            assert not complete, f"reply cut short: {stream[pos:][:80]!r}"
            break
        if size:
            assert stream[end - 2 : end] == b"\r\n", f"body not framed: {stream[pos:end]!r}"
        pos = end
        count += 1
    return count


def fuzz_client(srv: ServerProcess, seed: int, deadline: float, totals: dict[str, int]) -> None:
    """One fuzzing connection: streams in random chunk sizes, then a random way to leave.

    Some connections read their replies (and check their form), some never do.
    """
    rng = random.Random(seed)
    reader = rng.random() < 0.7
    sock = _raw(srv)
    sock.setblocking(False)
    received = bytearray()
    data = b"".join(fuzz_stream(rng) for _ in range(rng.randrange(1, 12)))
    pos = 0
    while pos < len(data) and time.monotonic() < deadline:
        chunk = data[pos : pos + rng.choice([1, 2, 7, 64, 500, 4096, 65536])]
        try:
            pos += sock.send(chunk)
        except BlockingIOError:
            select.select([sock] if reader else [], [sock], [], 0.05)
        except OSError:
            break  # the node closed us (quit inside the stream)
        if reader:
            with contextlib.suppress(BlockingIOError, OSError):
                while piece := sock.recv(65536):
                    received += piece
        if rng.random() < 0.05:
            time.sleep(0.001)
    ending = rng.choice(["quit", "close", "reset", "half-close"])
    complete = False
    if ending in ("quit", "half-close"):
        with contextlib.suppress(OSError):
            sock.setblocking(True)
            if ending == "quit":
                sock.sendall(b"\r\nquit\r\n")
            else:
                sock.shutdown(socket.SHUT_WR)
            # A blocked reserve can hold the quit back: wait a bit, not forever.
            sock.settimeout(1.0)
            while piece := sock.recv(65536):
                received += piece
            complete = True
    if ending == "reset":
        _reset(sock)
    else:
        sock.close()
    if reader:
        # After the node closed on its own (quit or EOF), the last reply must be whole.
        totals["replies"] += check_reply_stream(bytes(received), complete=complete)
    totals["bytes"] += pos
    totals["connections"] += 1


# -------------------------------------------------------------------------- tests
@pytest.mark.slow
def test_fuzzed_clients_never_disturb_a_healthy_one(server: ServerProcess) -> None:
    """Six threads of fuzzing connections for a few seconds while the health client works."""
    totals = {"replies": 0, "bytes": 0, "connections": 0}
    errors: list[BaseException] = []
    deadline = time.monotonic() + 6.0

    def worker(n: int) -> None:
        k = 0
        try:
            while time.monotonic() < deadline:
                fuzz_client(server, BASE_SEED + 1000 * n + k, deadline, totals)
                k += 1
        except BaseException as exc:
            errors.append(AssertionError(f"fuzz seed {BASE_SEED + 1000 * n + k}: {exc!r}"))

    with healthy_while(server, min_rounds=20) as health:
        threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a fuzz client hung"
    assert not errors, errors
    assert totals["connections"] >= 12 and totals["replies"] > 100, totals
    assert health.worst < HEALTH_TIMEOUT
    assert_node_healthy(server)


def test_one_megabyte_line_without_crlf(server: ServerProcess) -> None:
    with healthy_while(server) as health:
        c = server.connect()
        c.send(b"y" * (1 << 20))
        c.expect_silence(0.2)
        wait_rounds(health, 3)
        # The line ends at last: one BAD_FORMAT, and the connection goes on.
        c.send(b"\r\nlist-tube-used\r\n")
        c.expect(b"BAD_FORMAT\r\nUSING default\r\n")
        c.close()
        # And once more, closed before the line ever ends.
        other = _raw(server)
        other.sendall(b"z" * (1 << 20))
        other.close()
    assert_node_healthy(server)


@pytest.mark.slow
def test_endless_line_does_not_grow_node_memory(server: ServerProcess) -> None:
    """64 MB without a CRLF: beanstalkd keeps one 224-byte buffer, so must the node."""
    before = _memory_kb(server, "VmRSS")
    if before is None:
        pytest.skip("no /proc")
    with healthy_while(server):
        c = server.connect()
        block = b"q" * (1 << 20)
        for _ in range(64):
            c.send(block)
        c.send(b"\r\nlist-tube-used\r\n")
        c.expect(b"BAD_FORMAT\r\nUSING default\r\n", timeout=30)
        c.close()
    peak = _memory_kb(server, "VmHWM")
    assert peak is not None and peak - before < 32 * 1024, f"peak grew by {peak - before} kB"
    assert_node_healthy(server)


def test_put_announcing_4294967295_bytes_then_closing(server: ServerProcess) -> None:
    """The node must skip the body (JOB_TOO_BIG once all of it came), never allocate it."""
    with healthy_while(server) as health:
        c = server.connect()
        c.send(b"put 0 0 1 4294967295\r\n" + b"b" * (1 << 20))
        c.expect_silence(0.3)  # still skipping: no reply before 4 GiB have arrived
        wait_rounds(health, 3)
        c.close()
        # The same, closed right after the line.
        sock = _raw(server)
        sock.sendall(b"put 0 0 1 4294967295\r\n")
        _reset(sock)
        # And a size past 32 bits: a plain BAD_FORMAT, the connection goes on.
        with server.connect() as c2:
            c2.cmd(b"put 0 0 1 4294967296", b"BAD_FORMAT\r\n")
            c2.cmd(b"list-tube-used", b"USING default\r\n")
    stats = assert_node_healthy(server)
    assert stats["current-jobs-ready"] == "0", stats  # the health client deletes its jobs


def test_closing_in_the_middle_of_a_body_inserts_nothing(server: ServerProcess) -> None:
    cases = [
        b"put 0 0 1 100\r\n" + b"h" * 50,  # half the body
        b"put 0 0 1 5\r\nhello",  # the body, not its CRLF
        b"put 0 0 1 5\r\nhello\r",  # half the CRLF
        b"put 0 0 1 5",  # the command line, not its CRLF
        b"put 0 0 1 5\r\n",  # the line, no body at all
    ]
    with healthy_while(server):
        for i, data in enumerate(cases):
            sock = _raw(server)
            sock.sendall(data)
            time.sleep(0.02)
            if i % 2:
                _reset(sock)
            else:
                sock.close()
    stats = assert_node_healthy(server)
    assert stats["current-jobs-ready"] == "0" and stats["current-jobs-delayed"] == "0", stats
    with server.connect() as c:
        c.cmd(b"peek-ready", b"NOT_FOUND\r\n")


def test_many_half_open_connections(server: ServerProcess) -> None:
    """Hundreds of clients stuck mid-command (some half-closed) while the health one works."""
    partials = [
        b"",
        b"put 0 0 1 10\r\nabc",
        b"put 0 0 1",
        b"stats-tu",
        b"reserve\r\n",
        b"x" * 300,
        b"use abc\r\nput 0 0 1 65535\r\n",
        b"reserve-with-timeout 100\r\n",
    ]
    socks: list[socket.socket] = []
    with healthy_while(server) as health:
        for i in range(240):
            sock = _raw(server)
            sock.sendall(partials[i % len(partials)])
            if i % 5 == 4:
                sock.shutdown(socket.SHUT_WR)  # half-open: the node sees EOF
            socks.append(sock)
        wait_rounds(health, 5)
        with server.connect() as c:
            stats = c.stats()
            # beanstalkd and disq close on EOF; everything else is still connected.
            assert int(stats["current-connections"]) >= 180, stats
            assert int(stats["current-waiting"]) >= 40, stats
        for i, sock in enumerate(socks):
            if i % 2:
                _reset(sock)
            else:
                sock.close()
        wait_rounds(health, 3)
    assert_node_healthy(server)


def _push_until_stuck(sock: socket.socket, data: bytes, limit_s: float) -> int:
    """Send ``data`` over and over until the node stops reading (0.5 s stuck) or time is up."""
    sock.setblocking(False)
    sent = 0
    end = time.monotonic() + limit_s
    stuck_since = None
    while time.monotonic() < end:
        try:
            sent += sock.send(data)
            stuck_since = None
        except BlockingIOError:
            now = time.monotonic()
            stuck_since = stuck_since or now
            if now - stuck_since > 0.5:
                break
            select.select([], [sock], [], 0.05)
    return sent


def _big_job(server: ServerProcess) -> int:
    body = b"p" * 65535
    with server.connect() as c:
        return c.put(body, ttr=600)


def test_client_that_never_reads_replies_does_not_block_others(server: ServerProcess) -> None:
    job_id = _big_job(server)
    with healthy_while(server) as health:
        sock = _raw(server)
        _push_until_stuck(sock, b"peek %d\r\n" % job_id * 512, limit_s=3.0)
        wait_rounds(health, 5)
        _reset(sock)
        wait_rounds(health, 3)
    assert_node_healthy(server)


def _memory_growth(server: ServerProcess, action: Callable[[], None]) -> int:
    before = _memory_kb(server, "VmRSS")
    if before is None:
        pytest.skip("no /proc")
    action()
    peak = _memory_kb(server, "VmHWM")
    assert peak is not None
    return peak - before


MEMORY_BOUND_KB = 64 * 1024  # beanstalkd grows by well under 1 MB in both tests below


def test_client_that_never_reads_replies_does_not_grow_node_memory(
    server: ServerProcess,
) -> None:
    """Pipelined ``peek`` of a 64 KB job, replies never read.

    beanstalkd answers one command at a time and stops reading while a reply is unsent, so
    its memory stays flat. The node must bound what it queues for a client too: each 8-byte
    ``peek`` is a 64 KB reply, and a single read of commands must not become gigabytes.
    """
    job_id = _big_job(server)
    sock = _raw(server)
    # 2048 peeks in one 16 KB segment: one read for the node, 128 MB of replies.
    batch = b"peek %d\r\n" % job_id * 2048
    growth = _memory_growth(server, lambda: _push_until_stuck(sock, batch, limit_s=3.0))
    _reset(sock)
    assert growth < MEMORY_BOUND_KB, (
        f"one client that never reads its replies grew the node by {growth // 1024} MB"
    )
    assert_node_healthy(server)


def test_commands_behind_a_blocked_reserve_do_not_grow_node_memory(
    server: ServerProcess,
) -> None:
    """A reserve that blocks, then 64 KB puts pipelined behind it.

    beanstalkd stops reading a connection that waits in reserve. The node queues what comes
    after the reserve (up to a number of *commands*), so the bytes it holds must be bounded.
    """
    sock = _raw(server)
    sock.sendall(b"watch nothing-here\r\nignore default\r\nreserve\r\n")
    with server.connect() as c:
        wait_until(lambda: c.stats()["current-waiting"] == "1", what="the reserve to block")
    body = b"w" * 65535
    put = b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)
    growth = _memory_growth(server, lambda: _push_until_stuck(sock, put * 8, limit_s=5.0))
    _reset(sock)
    assert growth < MEMORY_BOUND_KB, (
        f"a client blocked in reserve made the node hold {growth // 1024} MB of commands"
    )
    assert_node_healthy(server)


@pytest.mark.slow
def test_expensive_pipelined_commands_do_not_stall_other_clients(server: ServerProcess) -> None:
    """4000 ``list-tubes-watched`` (5000 tubes each) in one 80 KB write, replies never read.

    beanstalkd runs one command per connection, then serves the others: their latency stays
    at a millisecond. The node must not spend seconds on one client's read either.
    """
    c = server.connect()
    c.send(b"".join(b"watch t%d\r\n" % i for i in range(5000)))
    for i in range(5000):
        c.expect(b"WATCHING %d\r\n" % (i + 2))
    with healthy_while(server) as health:
        wait_rounds(health, 5)
        health.worst = 0.0
        c.send(b"list-tubes-watched\r\n" * 4000)
        # Health round trips while the node works through that pipeline (each takes a
        # round trip of the health client, so these span the busy period).
        wait_rounds(health, 200)
        worst = health.worst
        _reset(c.sock)
    assert worst < 1.0, f"another client waited {worst:.2f} s for one reply"
    assert_node_healthy(server)


def test_blocked_reserve_then_disconnect_loses_no_job(server: ServerProcess) -> None:
    """Every way a waiting worker can vanish; the job always ends up with the next worker."""
    tube = b"handoff"
    producer = server.connect()
    producer.cmd(b"use " + tube, b"USING handoff\r\n")
    taker = server.connect()
    taker.cmd(b"watch " + tube, b"WATCHING 2\r\n")
    taker.cmd(b"ignore default", b"WATCHING 1\r\n")

    def blocked_worker() -> socket.socket:
        sock = _raw(server)
        sock.sendall(b"watch handoff\r\nignore default\r\nreserve\r\n")
        return sock

    def waiting() -> int:
        return int(taker.stats_tube(tube)["current-waiting"])

    with healthy_while(server):
        for round_ in range(12):
            way = round_ % 4
            worker = blocked_worker()
            if way in (0, 1):
                # (0, 1) the worker is surely waiting, then goes (closed / reset); the job
                # is put after it left.
                wait_until(lambda: waiting() == 1, what="the worker to wait")
                if way == 0:
                    worker.close()
                else:
                    _reset(worker)
                wait_until(lambda: waiting() == 0, what="the waiter to go")
                job_id = producer.put(b"job-%d" % round_, ttr=60)
            elif way == 2:
                # The job reaches the waiting worker, which vanishes without reading it.
                wait_until(lambda: waiting() == 1, what="the worker to wait")
                job_id = producer.put(b"job-%d" % round_, ttr=60)
                _reset(worker)
            else:
                # Reserve and vanish at once, racing the put.
                _reset(worker)
                job_id = producer.put(b"job-%d" % round_, ttr=60)
            taker.send(b"reserve-with-timeout 5\r\n")
            taker.read_job(b"RESERVED", job_id, b"job-%d" % round_)
            taker.cmd(b"delete %d" % job_id, b"DELETED\r\n")
    producer.close()
    taker.close()
    assert_node_healthy(server)


def test_absurd_numbers_leave_timers_working(server: ServerProcess) -> None:
    """Pauses, delays and waits of 2**32 - 1 seconds next to a delay of one second."""
    with healthy_while(server):
        c = server.connect()
        c.cmd(b"pause-tube default 4294967295", b"PAUSED\r\n")
        c.put(b"x", delay=4294967295, ttr=4294967295)
        waiter = _raw(server)
        waiter.sendall(b"reserve-with-timeout 2147483647\r\n")  # paused tube: waits
        c.cmd(b"use t", b"USING t\r\n")
        y = c.put(b"y", ttr=4294967295)
        c.cmd(b"watch t", b"WATCHING 2\r\n")
        c.cmd(b"ignore default", b"WATCHING 1\r\n")
        c.send(b"reserve-with-timeout 0\r\n")
        c.read_job(b"RESERVED", y, b"y")
        c.cmd(b"release %d 0 4294967295" % y, b"RELEASED\r\n")
        # The node's timer is now far away; a one-second delay must still fire on time.
        started = time.monotonic()
        z = c.put(b"z", delay=1)
        c.send(b"reserve-with-timeout 4\r\n")
        c.read_job(b"RESERVED", z, b"z")
        assert time.monotonic() - started < 3.0
        _reset(waiter)
        c.close()
    assert_node_healthy(server)


def test_stats_and_replies_after_garbage_on_the_same_connection(server: ServerProcess) -> None:
    """One connection, every kind of garbage, then plain commands still work on it."""
    rng = random.Random(BASE_SEED)
    with server.connect() as c:
        for _ in range(40):
            stream = mutate(rng, b"".join(valid_command(rng) for _ in range(5)))
            # No puts (a mangled size eats what follows) and no reserves (one may wait
            # forever): that is the fuzz test's business, not this one's.
            stream = stream.replace(b"put", b"pu!").replace(b"reserve", b"reser!e")
            c.send(stream + b"\r\n")
        # Whatever state the garbage left, a fresh line gets its answer.
        c.send(b"\r\nuse end-marker\r\n")
        deadline = time.monotonic() + HEALTH_TIMEOUT
        seen = b""
        while not seen.endswith(b"USING end-marker\r\n"):
            try:
                seen += c.read_line(timeout=max(0.1, deadline - time.monotonic()))
            except WireError:
                raise AssertionError(f"no answer after garbage (seed {BASE_SEED})") from None
        assert check_reply_stream(seen, complete=True) >= 40
    assert_node_healthy(server)
