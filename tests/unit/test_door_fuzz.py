"""Bad input for the beanstalk door: random, mutated and valid command streams, cut anywhere.

The door and the engine are sans-IO, so the whole server path (codec -> door -> engine ->
reply bytes) runs here in-process with a fake clock. Hypothesis generates *worlds*: a few
connections, a list of steps (bytes sent on one connection, or the clock moving on), and
engine limits small enough to hit JOB_TOO_BIG, OUT_OF_MEMORY and the tube limit. Each world
is played more than once, the bytes of every step cut differently (whole, at random points,
byte by byte), and the checks are:

* no exception escapes the codec, the door or the engine, whatever the bytes;
* the replies are the same bytes whatever the cuts (same engine state and a fixed clock
  give the same answers; wake-ups of blocked reserves are routed at the end of a step, so
  the cuts cannot reorder work between connections);
* the reply stream of every connection is a sequence of beanstalkd reply forms (a grammar
  over the whole stream, bodies included), and each reply is one the command it answers
  may get (``delete`` gets DELETED or NOT_FOUND, a codec error gets that error, ...); the
  body of a RESERVED or FOUND job is the body its put sent;
* the engine's indexes and counters agree after every step, after ``tick()`` at advancing
  times and after every connection is closed (then no job is reserved and nobody waits).

A failure prints the world; the tests at the end pin the shapes the fuzzer is aimed at.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from disq.core.beanstalk.core import BeanstalkCore, Limits
from disq.core.beanstalk.model import (
    BURIED,
    DELAYED,
    ID_MASK,
    KEY_SHIFT,
    READY,
    RESERVED,
    URGENT_THRESHOLD,
    Job,
    Session,
)
from disq.core.constants import JOB_OVERHEAD_BYTES
from disq.doors.beanstalk_door import BeanstalkDoor
from disq.persistence.framing import count_records
from disq.protocol import beanstalk as bp

T0 = 1_700_000_000_000  # a realistic wall clock, in ms
N_CONNS = 3
MAX_TIME_S = 4294967295  # the largest delay / pause a command can carry


# ---------------------------------------------------------------------------- the harness
class FakeInfo:
    """The node's part of ``stats``: command counters and no process facts (deterministic)."""

    def __init__(self) -> None:
        self.op_counts = [0] * bp.OP_COUNT

    def stats_tail(self, now_ms: int) -> list[tuple[str, object]]:
        return []


@dataclass
class Conn:
    door: BeanstalkDoor
    out: list[bytes] = field(default_factory=list)  # every reply chunk, in order
    sent: bytearray = field(default_factory=bytearray)  # every byte the door was given
    open: bool = True


class World:
    """One engine, ``N_CONNS`` doors on it, one clock: what a node does, minus the sockets.

    ``deliver_each`` routes wake-ups after every ``receive`` (as the node does after every
    read); otherwise only at the end of a step, which keeps the replies independent of cuts.
    """

    def __init__(self, limits: Limits, draining: bool, deliver_each: bool = False) -> None:
        self.now = T0
        # With the AOF records on, as a node with -b: encoding them must never fail either.
        self.engine = BeanstalkCore(limits, persist=True)
        self.aof_records = 0
        self.engine.draining = draining
        self.info = FakeInfo()
        self.deliver_each = deliver_each
        self.conns = [Conn(BeanstalkDoor(self.engine, self.info)) for _ in range(N_CONNS)]
        self.by_session: dict[Session, Conn] = {c.door.session: c for c in self.conns}

    def send(self, i: int, data: bytes, cuts: list[int]) -> None:
        """Give ``data`` to connection ``i`` in pieces cut at ``cuts`` (sorted offsets)."""
        conn = self.conns[i]
        if not conn.open:
            return
        prev = 0
        for cut in [*cuts, len(data)]:
            piece = data[prev:cut]
            prev = cut
            if not piece:
                continue
            conn.door.receive(piece, self.now, conn.out)
            conn.sent += piece
            if conn.door.closing:  # quit: the node closes the socket after the flush
                self.close(conn)
                break
            if self.deliver_each:
                self.deliver()
        self.deliver()

    def deliver(self) -> None:
        """Route the engine's wake-ups to their doors, as ``Node._deliver_wakeups`` does."""
        engine = self.engine
        while engine.wakeups:
            wakeups, engine.wakeups = engine.wakeups, []
            for session, result in wakeups:
                conn = self.by_session.get(session)
                if conn is None:
                    continue  # closed meanwhile: the node drops it too
                conn.door.resume(result, self.now, conn.out)
                if conn.door.closing:
                    self.close(conn)
        # The node writes these out once per loop iteration; here they only must be framed.
        if engine.aof_out:
            self.aof_records += count_records(b"".join(engine.aof_out))
            engine.aof_out.clear()

    def advance(self, delta_ms: int) -> None:
        self.now += delta_ms
        self.engine.tick(self.now)
        self.deliver()
        nd = self.engine.next_deadline_ms()
        assert nd == -1 or nd > self.now, f"tick({self.now}) left work due at {nd}"

    def close(self, conn: Conn) -> None:
        if conn.open:
            conn.open = False
            self.by_session.pop(conn.door.session, None)
            conn.door.close(self.now)

    def close_all(self) -> None:
        for conn in self.conns:
            self.close(conn)
            self.deliver()
            check_engine(self)

    def replies(self) -> list[bytes]:
        return [b"".join(c.out) for c in self.conns]


# ---------------------------------------------------------------------- reply grammar
_NAME = rb"[A-Za-z0-9\-+/;.$_()]+"
# Every reply line beanstalkd 1.12 can send; ``n`` is the length of a body that follows.
_REPLY_LINE = re.compile(
    rb"(?P<word>INSERTED|BURIED|KICKED|WATCHING) (?P<num>\d+)"
    rb"|(?P<jword>RESERVED|FOUND) (?P<id>\d+) (?P<n>\d+)"
    rb"|OK (?P<yaml>\d+)"
    rb"|USING (?P<name>" + _NAME + rb")"
    rb"|(?P<bare>DELETED|RELEASED|BURIED|TOUCHED|KICKED|NOT_FOUND|NOT_IGNORED|TIMED_OUT"
    rb"|DEADLINE_SOON|PAUSED|BAD_FORMAT|UNKNOWN_COMMAND|EXPECTED_CRLF|JOB_TOO_BIG"
    rb"|OUT_OF_MEMORY|DRAINING|INTERNAL_ERROR)"
)


@dataclass
class Reply:
    word: str  # first word of the line
    num: int | None = None  # INSERTED/KICKED/WATCHING/BURIED n, or the job id
    name: str | None = None  # USING name
    body: bytes | None = None  # job body, or YAML


def parse_replies(stream: bytes) -> list[Reply]:
    """Split a whole reply stream into replies, or fail naming the offset that is wrong."""
    out: list[Reply] = []
    pos = 0
    while pos < len(stream):
        eol = stream.find(b"\r\n", pos)
        assert eol >= 0, f"reply without CRLF at {pos}: {stream[pos : pos + 80]!r}"
        line = stream[pos:eol]
        m = _REPLY_LINE.fullmatch(line)
        assert m is not None, f"not a beanstalkd reply at {pos}: {line[:80]!r}"
        pos = eol + 2
        g = m.groupdict()
        size = None
        if g["word"]:
            reply = Reply(g["word"].decode(), int(g["num"]))
        elif g["jword"]:
            reply = Reply(g["jword"].decode(), int(g["id"]))
            size = int(g["n"])
        elif g["yaml"]:
            reply = Reply("OK")
            size = int(g["yaml"])
        elif g["name"]:
            reply = Reply("USING", name=g["name"].decode())
        else:
            reply = Reply(g["bare"].decode())
        if size is not None:
            assert stream[pos + size : pos + size + 2] == b"\r\n", (
                f"body of {size} bytes at {pos} not followed by CRLF: {stream[pos:][:80]!r}"
            )
            reply.body = stream[pos : pos + size]
            pos += size + 2
        out.append(reply)
    return out


def parse_yaml(body: bytes) -> dict[str, str] | list[str]:
    """beanstalkd's flat YAML: ``---\\n`` then ``key: value\\n`` or ``- item\\n`` lines."""
    assert body.startswith(b"---\n") and body.endswith(b"\n"), body
    lines = body[4:-1].split(b"\n") if len(body) > 4 else []
    if lines and all(x.startswith(b"- ") for x in lines):
        return [x[2:].decode() for x in lines]
    pairs = [x.split(b": ", 1) for x in lines]
    assert all(len(p) == 2 for p in pairs), body
    return {k.decode(): v.decode() for k, v in pairs}


# What each command may be answered (besides its own reply body checks below).
_ALLOWED: dict[int, set[str]] = {
    bp.OP_PUT: {"INSERTED", "OUT_OF_MEMORY", "DRAINING"},
    bp.OP_BAD_BODY: {"EXPECTED_CRLF"},
    bp.OP_PEEK: {"FOUND", "NOT_FOUND"},
    bp.OP_PEEK_READY: {"FOUND", "NOT_FOUND"},
    bp.OP_PEEK_DELAYED: {"FOUND", "NOT_FOUND"},
    bp.OP_PEEK_BURIED: {"FOUND", "NOT_FOUND"},
    bp.OP_RESERVE: {"RESERVED", "DEADLINE_SOON", "TIMED_OUT"},
    bp.OP_RESERVE_TIMEOUT: {"RESERVED", "DEADLINE_SOON", "TIMED_OUT"},
    bp.OP_RESERVE_JOB: {"RESERVED", "NOT_FOUND"},
    bp.OP_DELETE: {"DELETED", "NOT_FOUND"},
    bp.OP_RELEASE: {"RELEASED", "NOT_FOUND"},
    bp.OP_BURY: {"BURIED", "NOT_FOUND"},
    bp.OP_KICK: {"KICKED"},
    bp.OP_KICK_JOB: {"KICKED", "NOT_FOUND"},
    bp.OP_TOUCH: {"TOUCHED", "NOT_FOUND"},
    bp.OP_STATS: {"OK"},
    bp.OP_STATS_JOB: {"OK", "NOT_FOUND"},
    bp.OP_STATS_TUBE: {"OK", "NOT_FOUND"},
    bp.OP_USE: {"USING", "OUT_OF_MEMORY"},  # OUT_OF_MEMORY: the tube limit
    bp.OP_WATCH: {"WATCHING", "OUT_OF_MEMORY"},
    bp.OP_IGNORE: {"WATCHING", "NOT_IGNORED"},
    bp.OP_LIST_TUBES: {"OK"},
    bp.OP_LIST_TUBE_USED: {"USING"},
    bp.OP_LIST_TUBES_WATCHED: {"OK"},
    bp.OP_PAUSE_TUBE: {"PAUSED", "NOT_FOUND"},
}
# Replies that carry a number; the others must come bare (KICKED vs KICKED n, BURIED vs n).
_NUMBERED = {"INSERTED", "WATCHING", "RESERVED", "FOUND"}


def check_conversation(world: World) -> None:
    """Pair every command a door ran with its reply and check the pair.

    Commands of one connection are answered strictly in order, one reply each, except
    ``quit`` (none) and a reserve still blocked (none yet); commands still queued behind a
    blocked reserve (or after ``quit``) have not run.
    """
    pairs: list[list[tuple[bp.Command, Reply]]] = []
    for i, conn in enumerate(world.conns):
        door = conn.door
        commands = bp.BeanstalkParser(world.engine.limits.max_job_size).feed(bytes(conn.sent))
        run = commands[: len(commands) - len(door.pending)]
        assert list(door.pending) == commands[len(run) :], f"conn {i}: queue is not the tail"
        if door.closing:
            assert run and run[-1][0] == bp.OP_QUIT, f"conn {i} closing without quit"
            run = run[:-1]
        if door.blocked:
            assert run and run[-1][0] in (bp.OP_RESERVE, bp.OP_RESERVE_TIMEOUT)
            run = run[:-1]
        assert all(c[0] != bp.OP_QUIT for c in run), f"conn {i}: a command ran after quit"
        replies = parse_replies(b"".join(conn.out))
        assert len(replies) == len(run), (
            f"conn {i}: {len(run)} commands answered by {len(replies)} replies\n"
            f"commands: {run}\nreplies: {replies}"
        )
        pairs.append(list(zip(run, replies, strict=True)))
    # Every inserted id and its body, from every connection, before checking RESERVED/FOUND.
    bodies: dict[int, bytes] = {}
    for conn_pairs in pairs:
        last = 0
        for cmd, reply in conn_pairs:
            if reply.word == "INSERTED" and cmd[0] == bp.OP_PUT:
                assert reply.num is not None and reply.num not in bodies, (cmd, reply)
                assert reply.num > last, f"ids must grow: {reply}"
                last = reply.num
                bodies[reply.num] = cmd[4]
    for conn_pairs in pairs:
        for cmd, reply in conn_pairs:
            check_reply(cmd, reply, bodies)
            if currently_in_test_context():
                # ``pytest --hypothesis-show-statistics`` shows what the fuzzer reached.
                event(f"reply {reply.word}")


def check_reply(cmd: bp.Command, reply: Reply, bodies: dict[int, bytes]) -> None:
    op = cmd[0]
    what = f"{cmd!r} -> {reply!r}"
    assert reply.word != "INTERNAL_ERROR", what
    if op == bp.OP_ERROR:
        assert (reply.word + "\r\n").encode() == cmd[1], what
        return
    assert reply.word in _ALLOWED[op], what
    numbered = reply.word in _NUMBERED or (reply.word == "KICKED" and op == bp.OP_KICK)
    assert (reply.num is not None) == numbered, what
    if reply.word in ("RESERVED", "FOUND"):
        assert reply.num in bodies and bodies[reply.num] == reply.body, what
        if op in (bp.OP_PEEK, bp.OP_RESERVE_JOB):
            assert reply.num == cmd[1], what
    elif reply.word == "USING":
        if op == bp.OP_USE:
            assert reply.name == cmd[1], what
    elif reply.word == "KICKED" and op == bp.OP_KICK:
        assert reply.num is not None and reply.num <= cmd[1], what
    elif reply.word == "WATCHING":
        assert reply.num is not None and 1 <= reply.num, what
    elif reply.word == "OK":
        assert reply.body is not None
        doc = parse_yaml(reply.body)
        if op in (bp.OP_LIST_TUBES, bp.OP_LIST_TUBES_WATCHED):
            assert isinstance(doc, list) and len(set(doc)) == len(doc) >= 1, what
        else:
            assert isinstance(doc, dict), what
        if op == bp.OP_STATS_JOB:
            assert isinstance(doc, dict) and doc["id"] == str(cmd[1]), what
            assert doc["state"] in ("ready", "reserved", "delayed", "buried"), what
        elif op == bp.OP_STATS_TUBE:
            assert isinstance(doc, dict) and doc["name"] == cmd[1], what
        if isinstance(doc, dict):
            for key, value in doc.items():
                if key not in ("name", "tube", "state"):
                    assert int(value) >= 0, f"{key}: {value} in {what}"


# -------------------------------------------------------------------- engine invariants
def _ready_key(job: Job) -> int:
    """The job's entry in its tube's ready index, as the core builds it."""
    return (job.pri << KEY_SHIFT) | job.id


def _timer_key(job: Job) -> int:
    """The job's entry in the timer heap and the delayed index."""
    return (job.deadline_ms << KEY_SHIFT) | job.id


def check_engine(world: World) -> None:
    """Every index of the engine agrees with every other one and with the sessions."""
    e = world.engine
    open_sessions = [c.door.session for c in world.conns if c.open]
    for c in world.conns:
        s = c.door.session
        if c.open:
            assert not s.closed
            assert c.door.blocked == s.waiting, f"{s}: door blocked != session waiting"
        else:
            assert s.closed and not s.reserved and not s.waiting, s

    by_tube: dict[str, Counter[int]] = {name: Counter() for name in e.tubes}
    used = 0
    for job_id, job in e.jobs.items():
        assert job.id == job_id and 0 < job_id < e.next_id
        tube = job.tube
        assert e.tubes.get(tube.name) is tube, f"{job} lives in a dropped tube"
        by_tube[tube.name][job.state] += 1
        used += len(job.body) + JOB_OVERHEAD_BYTES
        if job.state == READY:
            assert _ready_key(job) in tube.ready and job.reserver is None, job
        elif job.state == RESERVED:
            s = job.reserver
            assert s is not None and not s.closed and s.reserved.get(job_id) is job, job
            assert _timer_key(job) in e.timers, f"{job}: no TTR timer"
        elif job.state == DELAYED:
            assert _timer_key(job) in tube.delayed and _timer_key(job) in e.timers, job
            assert job.reserver is None
        elif job.state == BURIED:
            assert tube.buried.get(job_id) is job and job.reserver is None, job
        else:
            raise AssertionError(f"{job} in state {job.state}")
    assert e.used_bytes == used

    totals: Counter[str] = Counter()
    assert len(e.tube_order) == len(e.tubes)
    assert {id(t) for t in e.tube_order} == {id(t) for t in e.tubes.values()}
    assert e.default_tube is e.tubes["default"]
    for name, tube in e.tubes.items():
        assert tube.name == name
        for key in tube.ready:
            job = e.jobs[key & ID_MASK]
            assert job.tube is tube and job.state == READY and _ready_key(job) == key, job
        for key in tube.delayed:
            job = e.jobs[key & ID_MASK]
            assert job.tube is tube and job.state == DELAYED and _timer_key(job) == key, job
        for job_id, job in tube.buried.items():
            assert e.jobs.get(job_id) is job and job.state == BURIED
        counts = by_tube[name]
        assert len(tube.ready) == counts[READY]
        assert len(tube.delayed) == counts[DELAYED]
        assert len(tube.buried) == counts[BURIED]
        assert tube.reserved_count == counts[RESERVED], name
        urgent = sum(1 for key in tube.ready if key >> KEY_SHIFT < URGENT_THRESHOLD)
        assert tube.urgent_count == urgent, name
        assert tube.using_count == sum(s.use is tube for s in open_sessions), name
        assert tube.watching_count == sum(tube in s.watch for s in open_sessions), name
        waiters = {s for s in open_sessions if s.waiting and tube in s.watch}
        assert set(tube.waiting) == waiters, name
        if name != "default":
            assert not tube.is_unused(), f"unused tube {name!r} was not dropped"
        totals["ready"] += len(tube.ready)
        totals["urgent"] += urgent
        totals["delayed"] += len(tube.delayed)
        totals["buried"] += len(tube.buried)
        totals["reserved"] += tube.reserved_count
    assert e.ready_count == totals["ready"]
    assert e.urgent_count == totals["urgent"]
    assert e.delayed_count == totals["delayed"]
    assert e.buried_count == totals["buried"]
    assert e.reserved_count == totals["reserved"]
    # The timer heap may hold stale entries (lazy deletion), but it is a heap and every
    # live deadline is in it (checked per job above).
    timers = list(e.timers)
    assert all(timers[(i - 1) // 2] <= timers[i] for i in range(1, len(timers))), "not a heap"
    assert set(e.tubes_with_waiters) == {t for t in e.tubes.values() if t.waiting}

    if hasattr(e, "sessions"):
        assert set(e.sessions) == set(open_sessions)
    for s in open_sessions:
        # The cached soonest deadline (-2: unknown) must be the true one when known.
        cached = getattr(s, "soonest_ms", -2)
        if cached != -2:
            true = min((j.deadline_ms for j in s.reserved.values()), default=-1)
            assert cached == true, f"{s}: cached soonest deadline {cached}, really {true}"
        assert e.tubes.get(s.use.name) is s.use
        assert s.watch and len({id(t) for t in s.watch}) == len(s.watch)
        assert all(e.tubes.get(t.name) is t for t in s.watch)
        for job_id, job in s.reserved.items():
            assert e.jobs.get(job_id) is job and job.state == RESERVED and job.reserver is s
    assert len(e.sessions) == len(open_sessions)
    assert e.producer_count == sum(s.is_producer for s in open_sessions)
    assert e.worker_count == sum(s.is_worker for s in open_sessions)
    assert e.waiting_count == sum(s.waiting for s in open_sessions)
    for counter in (
        "ready_count",
        "urgent_count",
        "reserved_count",
        "delayed_count",
        "buried_count",
        "producer_count",
        "worker_count",
        "waiting_count",
        "used_bytes",
        "job_timeouts",
        "total_jobs",
    ):
        assert getattr(e, counter) >= 0, counter
    assert all(n >= 0 for n in world.info.op_counts)


# ------------------------------------------------------------------------- strategies
_NAME_ALPHABET = bytes(sorted(bp.NAME_CHARS)).decode()
_common_names = st.sampled_from(["default", "a", "b"])
tube_names = st.one_of(
    _common_names,
    _common_names,
    _common_names,
    st.sampled_from(["c-1", "x" * 200, "x" * 201, "-a", "(x)"]),
    st.text(alphabet=_NAME_ALPHABET, min_size=1, max_size=6),
)
# Mostly ids that exist (ids start at 1 and every world is small), sometimes absurd ones.
_small_ids = st.integers(1, 6)
job_ids = st.one_of(
    _small_ids,
    _small_ids,
    _small_ids,
    st.integers(0, 12),
    st.sampled_from([2**64 - 1, 2**64, 10**30]),
    st.integers(0, 2**64),
)
_small = st.integers(0, 3)
u32s = st.one_of(
    _small,
    _small,
    _small,
    st.sampled_from([1023, 1024, 2**31 - 1, 2**31, 2**32 - 1, 2**32]),
    st.integers(0, 2**33),
)
delays = st.sampled_from([0, 0, 0, 1, 2, MAX_TIME_S])
ttrs = st.sampled_from([0, 1, 2, 3, 120, MAX_TIME_S])
bodies = st.one_of(
    st.binary(max_size=12),
    st.sampled_from([b"", b"\r\n", b"\r", b"\n", b"a\r\nput 0 0 1 1\r\nx\r\n", b"\x00\xff"]),
    st.binary(min_size=20, max_size=40),  # over the small max_job_size of some worlds
)


@st.composite
def put_command(draw: st.DrawFn) -> bytes:
    body = draw(bodies)
    # Mostly the right size; else the body misses its CRLF, or the next line is eaten.
    size = len(body) + draw(st.sampled_from([0] * 12 + [-1, 1, 2]))
    pri = draw(st.one_of(_small, _small, st.sampled_from([1024, 2**32 - 1]), u32s))
    head = b"put %d %d %d %d\r\n" % (pri, draw(delays), draw(ttrs), max(size, 0))
    return head + body + b"\r\n"


def _line(fmt: bytes, *parts: st.SearchStrategy[object]) -> st.SearchStrategy[bytes]:
    def render(*values: object) -> bytes:
        args = tuple(v.encode() if isinstance(v, str) else v for v in values)
        return fmt % args + b"\r\n"

    return st.tuples(*parts).map(lambda values: render(*values))


valid_command = st.one_of(
    put_command(),
    put_command(),
    put_command(),
    put_command(),
    _line(b"reserve-with-timeout 0"),
    _line(b"reserve-with-timeout 0"),
    _line(b"reserve-with-timeout 0"),
    _line(b"reserve-with-timeout %d", st.sampled_from([1, 2, -1, 2**31])),  # these block
    _line(b"reserve"),
    _line(b"reserve-job %d", job_ids),
    _line(b"delete %d", job_ids),
    _line(b"delete %d", job_ids),
    _line(b"release %d %d %d", job_ids, u32s, delays),
    _line(b"release %d %d %d", job_ids, u32s, delays),
    _line(b"bury %d %d", job_ids, u32s),
    _line(b"touch %d", job_ids),
    _line(b"kick %d", u32s),
    _line(b"kick-job %d", job_ids),
    _line(b"peek %d", job_ids),
    _line(b"peek-ready"),
    _line(b"peek-delayed"),
    _line(b"peek-buried"),
    _line(b"stats"),
    _line(b"stats-job %d", job_ids),
    _line(b"stats-tube %s", tube_names),
    _line(b"use %s", tube_names),
    _line(b"watch %s", tube_names),
    _line(b"ignore %s", tube_names),
    _line(b"list-tubes"),
    _line(b"list-tube-used"),
    _line(b"list-tubes-watched"),
    _line(b"pause-tube %s %d", tube_names, st.sampled_from([0, 1, 2, 60, MAX_TIME_S])),
)
# A job's life: a few puts, then commands on those ids (the usual, well-formed traffic).
_job_op = st.one_of(
    _line(b"reserve-with-timeout 0"),
    _line(b"reserve-with-timeout 0"),
    _line(b"reserve-job %d", _small_ids),
    _line(b"delete %d", _small_ids),
    _line(b"release %d %d %d", _small_ids, _small, st.sampled_from([0, 0, 1])),
    _line(b"bury %d %d", _small_ids, _small),
    _line(b"touch %d", _small_ids),
    _line(b"kick %d", _small),
    _line(b"kick-job %d", _small_ids),
    _line(b"peek %d", _small_ids),
    _line(b"stats-job %d", _small_ids),
    _line(b"use %s", _common_names),
    _line(b"watch %s", _common_names),
    _line(b"ignore %s", _common_names),
)
workflow = st.tuples(
    st.lists(put_command(), min_size=1, max_size=4).map(b"".join),
    st.lists(_job_op, min_size=1, max_size=12).map(b"".join),
).map(b"".join)
# Commands, sometimes ended by quit (the connection closes, with what it had reserved).
valid_stream = st.tuples(
    st.lists(valid_command, min_size=1, max_size=25).map(b"".join),
    st.sampled_from([b""] * 9 + [b"quit\r\n"]),
).map(b"".join)

_HUGE_NUMBERS = [
    b"4294967295",
    b"4294967296",
    b"18446744073709551615",
    b"18446744073709551616",
    b"9" * 40,
    b"-1",
    b"0" * 250,
    b"+1",
]
_INSERTS = [b"\x00", b"\r", b"\n", b"\r\n", b" ", b"  ", b"\t", b"\xff", b"put ", b"0"]


@st.composite
def mutated_stream(draw: st.DrawFn) -> bytes:
    """A valid stream with 1-4 mutations: flips, cuts, insertions, overlong lines, huge numbers."""
    data = bytearray(draw(valid_stream))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ["flip", "byte", "truncate", "delete", "insert", "special", "long", "number", "dup"]
            )
        )
        pos = draw(st.integers(0, len(data)))
        if kind == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 6))]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "special":
            data[pos:pos] = draw(st.sampled_from(_INSERTS))
        elif kind == "long":
            # Around beanstalkd's 224-byte line buffer, and far past it.
            n = draw(st.sampled_from([221, 222, 223, 224, 225, 226, 448, 3000]))
            data[pos:pos] = b"x" * n + draw(st.sampled_from([b"", b"\r\n", b"\r"]))
        elif kind == "number":
            runs = list(re.finditer(rb"\d+", bytes(data)))
            if runs:
                m = runs[draw(st.integers(0, len(runs) - 1))]
                data[m.start() : m.end()] = draw(st.sampled_from(_HUGE_NUMBERS))
        elif kind == "dup" and pos < len(data):
            end = draw(st.integers(pos, len(data)))
            data[end:end] = data[pos:end]
    return bytes(data)


_TOKENS = [
    b"put ",
    b"0 ",
    b"1 ",
    b"4294967295 ",
    b"5",
    b"\r\n",
    b"\r",
    b"\n",
    b" ",
    b"\x00",
    b"abcde",
    b"reserve",
    b"-with-timeout ",
    b"delete ",
    b"kick ",
    b"stats",
    b"-job ",
    b"-tube ",
    b"use ",
    b"watch ",
    b"ignore ",
    b"default",
    b"pause-tube ",
    b"peek",
    b"-ready",
    b"quit",
    b"x" * 100,
]
token_soup = st.lists(st.sampled_from(_TOKENS), max_size=40).map(b"".join)

streams = st.one_of(
    workflow,
    workflow,
    valid_stream,
    valid_stream,
    mutated_stream(),
    mutated_stream(),
    st.binary(max_size=300),
    token_soup,
)

# A step: bytes on one connection, or the clock moving on (and tick()).
send_steps = st.tuples(st.just("send"), st.integers(0, N_CONNS - 1), streams)
tick_steps = st.tuples(
    st.just("tick"),
    st.just(0),
    st.sampled_from([0, 1, 999, 1000, 1001, 2000, 120_000, MAX_TIME_S * 1000]),
)
steps = st.lists(st.one_of(send_steps, send_steps, send_steps, tick_steps), min_size=1, max_size=8)
limits = st.builds(
    Limits,
    max_job_size=st.sampled_from([65535, 65535, 16]),
    max_memory_bytes=st.sampled_from([0, 0, 0, 3 * JOB_OVERHEAD_BYTES]),
    max_tubes=st.sampled_from([100_000, 100_000, 3]),
)
drainings = st.sampled_from([False, False, False, False, True])
# Extra clock moves after the last step, to expire TTRs, delays, pauses and waits.
final_ticks = st.lists(st.sampled_from([0, 999, 1000, 1001, 60_000, MAX_TIME_S * 1000]), max_size=4)

Step = tuple[str, int, object]


# ------------------------------------------------------------------------------- play
def play(
    steps: list[Step],
    lim: Limits,
    draining: bool,
    ticks: list[int],
    cuts_for: Callable[[int, bytes], list[int]],
    deliver_each: bool = False,
) -> World:
    """Run ``steps`` in a new world, cutting the bytes of step ``k`` at ``cuts_for(k, data)``.

    Checks the conversation and the engine after every step, every final tick and every
    close; returns the world (its replies are compared between plays by the caller).
    """
    # Limits is mutable (the node lowers max_memory_bytes on AOF errors): one copy per play.
    copy = Limits(lim.max_job_size, lim.max_memory_bytes, lim.max_tubes, lim.max_sessions)
    world = World(copy, draining, deliver_each)
    for k, (kind, conn, arg) in enumerate(steps):
        if kind == "send":
            assert isinstance(arg, bytes)
            world.send(conn, arg, cuts_for(k, arg))
        else:
            assert isinstance(arg, int)
            world.advance(arg)
        check_engine(world)
    check_conversation(world)
    for delta in ticks:
        world.advance(delta)
        check_engine(world)
    world.close_all()
    check_conversation(world)
    e = world.engine
    assert e.reserved_count == 0 and e.waiting_count == 0 and not e.sessions
    assert all(job.state in (READY, DELAYED, BURIED) for job in e.jobs.values())
    return world


def whole(k: int, data: bytes) -> list[int]:
    return []


def bytewise(k: int, data: bytes) -> list[int]:
    return list(range(1, len(data)))


_settings = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@settings(_settings, max_examples=600)
@given(steps=steps, lim=limits, draining=drainings, ticks=final_ticks, data=st.data())
def test_door_replies_do_not_depend_on_the_cuts(
    steps: list[Step], lim: Limits, draining: bool, ticks: list[int], data: st.DataObject
) -> None:
    reference = play(steps, lim, draining, ticks, whole)
    drawn: dict[int, list[int]] = {}

    def random_cuts(k: int, chunk: bytes) -> list[int]:
        if k not in drawn:
            drawn[k] = sorted(
                set(data.draw(st.lists(st.integers(1, max(1, len(chunk))), max_size=10)))
            )
        return drawn[k]

    cut = play(steps, lim, draining, ticks, random_cuts)
    assert cut.replies() == reference.replies()
    assert cut.info.op_counts == reference.info.op_counts
    assert cut.aof_records == reference.aof_records
    assert sorted(cut.engine.jobs) == sorted(reference.engine.jobs)


@settings(_settings, max_examples=150)
@given(steps=steps, lim=limits, draining=drainings, ticks=final_ticks)
def test_door_replies_byte_by_byte(
    steps: list[Step], lim: Limits, draining: bool, ticks: list[int]
) -> None:
    reference = play(steps, lim, draining, ticks, whole)
    one_byte = play(steps, lim, draining, ticks, bytewise)
    assert one_byte.replies() == reference.replies()
    assert one_byte.info.op_counts == reference.info.op_counts
    assert one_byte.aof_records == reference.aof_records


@settings(_settings, max_examples=300)
@given(steps=steps, lim=limits, draining=drainings, ticks=final_ticks, data=st.data())
def test_door_with_wakeups_after_every_read(
    steps: list[Step], lim: Limits, draining: bool, ticks: list[int], data: st.DataObject
) -> None:
    """Like the node: wake-ups are routed after every piece, so only the checks apply."""

    def random_cuts(k: int, chunk: bytes) -> list[int]:
        return sorted(set(data.draw(st.lists(st.integers(1, max(1, len(chunk))), max_size=6))))

    play(steps, lim, draining, ticks, random_cuts, deliver_each=True)


# ------------------------------------------------------------------------------ codec
def _check_command(cmd: bp.Command, max_job_size: int) -> None:
    """A command the codec emits is well formed, whatever bytes it came from."""
    op = cmd[0]
    assert 0 <= op < bp.OP_COUNT, cmd
    if op == bp.OP_ERROR:
        assert cmd[1] in (bp.BAD_FORMAT, bp.UNKNOWN_COMMAND, bp.EXPECTED_CRLF, bp.JOB_TOO_BIG)
        return
    if op == bp.OP_PUT:
        _, pri, delay, ttr, body = cmd
        assert 0 <= pri <= bp.U32_MAX and 0 <= delay <= bp.U32_MAX and 0 <= ttr <= bp.U32_MAX
        assert isinstance(body, bytes) and len(body) <= max_job_size
    for arg in cmd[1:]:
        if isinstance(arg, str):
            assert 0 < len(arg) <= bp.MAX_TUBE_NAME and bp.NAME_CHARS.issuperset(arg.encode())
        elif isinstance(arg, int) and op != bp.OP_RESERVE_TIMEOUT:
            assert 0 <= arg <= bp.U64_MAX, cmd


@settings(max_examples=300, deadline=None)
@given(data=streams, max_job_size=st.sampled_from([65535, 16, 0]), cuts=st.data())
def test_codec_any_split_same_commands(data: bytes, max_job_size: int, cuts: st.DataObject) -> None:
    whole_cmds = bp.BeanstalkParser(max_job_size).feed(data)
    for cmd in whole_cmds:
        _check_command(cmd, max_job_size)
    parser = bp.BeanstalkParser(max_job_size)
    one_byte: list[bp.Command] = []
    bound = max(bp.LINE_MAX, max_job_size + 2)
    for i in range(len(data)):
        one_byte.extend(parser.feed(data[i : i + 1]))
        assert parser.buffered < bound, "the codec buffers more than one unit"
    assert one_byte == whole_cmds
    points = sorted(cuts.draw(st.lists(st.integers(0, len(data)), max_size=8)))
    parser = bp.BeanstalkParser(max_job_size)
    got: list[bp.Command] = []
    prev = 0
    for c in [*points, len(data)]:
        got.extend(parser.feed(data[prev:c]))
        prev = c
    assert got == whole_cmds


# ------------------------------------------------------------------ pinned nasty shapes
NASTY = [
    pytest.param(b"put 0 0 1 4294967295\r\n" + b"x" * 1000, id="put-u32max-then-eof"),
    pytest.param(b"put 0 0 1 4294967296\r\nstats\r\n", id="put-size-over-u32"),
    pytest.param(b"put 0 0 1 5\r\nab", id="eof-in-body"),
    pytest.param(b"put 0 0 1 1\r\nxy\r\nlist-tube-used\r\n", id="body-without-crlf"),
    pytest.param(b"x" * 5000 + b"\r\nlist-tube-used\r\n", id="long-line"),
    pytest.param(b"\x00" * 300 + b"\r\nstats\r\n", id="nul-line"),
    pytest.param(b"reserve\r\nstats\r\nput 0 0 1 1\r\nx\r\n", id="commands-behind-reserve"),
    pytest.param(b"put 0 0 0 1\r\nx\r\nreserve\r\nreserve\r\n", id="deadline-soon-wait"),
    pytest.param(
        b"pause-tube default 4294967295\r\nput 0 0 1 1\r\nx\r\nreserve\r\n", id="paused-forever"
    ),
    pytest.param(
        b"put 0 4294967295 4294967295 0\r\n\r\nkick 4294967295\r\nreserve\r\n",
        id="max-delay-max-ttr",
    ),
    pytest.param(b"quit\r\nput 0 0 1 1\r\nx\r\n", id="after-quit"),
    pytest.param(
        b"use a\r\nwatch a\r\nignore default\r\nput 0 0 1 0\r\n\r\nreserve\r\n"
        b"bury 1 0\r\nkick 1\r\nreserve-job 1\r\nrelease 1 0 1\r\ndelete 1\r\n",
        id="job-round-trip",
    ),
]


@pytest.mark.parametrize("data", NASTY)
def test_nasty_stream_every_cut(data: bytes) -> None:
    """Each pinned stream, cut at every single offset (two pieces), against the whole feed."""
    steps: list[Step] = [("send", 0, data), ("tick", 0, 1000), ("send", 1, b"put 0 0 1 1\r\nz\r\n")]
    lim = Limits()
    reference = play(steps, lim, False, [MAX_TIME_S * 1000], whole)
    for cut in range(1, len(data)):
        world = play(
            steps,
            lim,
            False,
            [MAX_TIME_S * 1000],
            lambda k, chunk, cut=cut: [cut] if k == 0 else [],
        )
        assert world.replies() == reference.replies(), cut


def test_blocked_reserve_then_close_gives_the_job_back() -> None:
    """A client blocked in reserve gets a job and disconnects before reading it: no loss."""
    world = World(Limits(), draining=False)
    world.send(0, b"reserve\r\n", [])
    assert world.conns[0].door.blocked
    world.send(1, b"put 0 0 100 3\r\nabc\r\n", [])
    assert world.conns[0].out == [b"RESERVED 1 3\r\n", b"abc", b"\r\n"]
    world.close(world.conns[0])
    world.deliver()
    check_engine(world)
    world.send(2, b"reserve-with-timeout 0\r\n", [])
    assert b"".join(world.conns[2].out) == b"RESERVED 1 3\r\nabc\r\n"
    check_engine(world)
