"""A node whose wall clock jumps an hour (issue 43, item 4), on real node processes.

The node runs under libfaketime (``LD_PRELOAD``, Debian's ``faketime`` package; ``make test``
installs it, scripts/ensure_faketime.sh): its wall clock reads the offset in a file the test
rewrites (``FAKETIME_TIMESTAMP_FILE``, re-read every second), and its monotonic clock is left
alone (``FAKETIME_DONT_FAKE_MONOTONIC``), as NTP or ``date -s`` would step a real machine's.
With a DELAY, a RETRY and a TTL pending and an ``@every 1s`` schedule, the wall clock jumps an
hour forwards, or back:

- every deadline stays where it was on the node clock (monotonic): SHOW's ``next-awake-within``,
  ``next-requeue-within`` and ``ttl`` after the step are what they were before it less the
  time between (bracketed by the test's own monotonic clock: no timing margin), the delayed
  job and the requeue come not before their time, the TTL job does not expire before its
  TTL, and the node's lifecycle events, read back on its node clock, say the same;
- a job added after the step is queued after one added before it (ctime never goes back);
- the schedule fires each tick once: back, it keeps its pace (no hour-long gap, its tick
  names going on from the last one); forwards, the hour it jumped over is one misfire, the
  policy's one catch-up tick (CATCHUP 1, the default) and no burst of late ticks.

The three-node test steps the schedule's owner an hour back, then an hour forwards, and reads
the peers: every tick one job, one a second, fired by the stepped owner alone, nothing skipped
or late and no error on the peers.

Tests skip, saying why, where libfaketime is missing or does not step a Python's clock
(``DISQ_LIBFAKETIME`` names the library where it is not in a Debian or /usr/local path).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerFactory, free_port
from eventually import all_know_each_other, eventually

from cluster.nodeproc import NodeProcess, grpc_api_loaded, resp_pong, start_all
from cluster.resp_client import RespClient

HOUR_S = 3600
STEPS = pytest.mark.parametrize("step_s", [HOUR_S, -HOUR_S], ids=["forwards", "backwards"])
LIB_PATTERNS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
# How late the node's own clock may say a deadline fired: a loaded CI box stalls a process for
# a second or so; a deadline on the wall clock would be an hour off.
NODE_LATE_MS = 10_000
# Event times go through the wall clock's offset, which the node reads as two clock reads (a
# preemption between them misreads it by that long): "not early" is judged strictly on the
# test's monotonic clock, and on the events within this much.
EVENT_SLACK_MS = 100
# The pending jobs' deadlines: long enough that the step is made and seen before the first of
# them comes (a second or two: libfaketime reads its file once a second), short enough for a
# fast test.
RETRY_S, DELAY_S, TTL_S = 5, 6, 7


def _find_libfaketime() -> str | None:
    explicit = os.environ.get("DISQ_LIBFAKETIME")
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for pattern in LIB_PATTERNS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    return None


@pytest.fixture(scope="module")
def libfaketime(tmp_path_factory: pytest.TempPathFactory) -> str:
    """libfaketime's path, once it was seen to step a Python's wall clock an hour and leave
    its monotonic clock alone; else the module skips, saying why."""
    lib = _find_libfaketime()
    if lib is None:
        pytest.skip(
            "libfaketime not found (apt-get install faketime; make test runs "
            "scripts/ensure_faketime.sh)"
        )
    rc = tmp_path_factory.mktemp("faketime") / "probe.rc"
    rc.write_text("+1h\n")
    probe = "import time; print(time.time(), time.monotonic(), time.perf_counter())"
    t0 = time.time()
    m0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **FakeClock(rc).env(lib)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    fields = out.stdout.split()
    if out.returncode != 0 or len(fields) != 3:
        pytest.skip(f"a Python under libfaketime ({lib}) failed: {out.stderr.strip()[-300:]}")
    wall, mono = float(fields[0]), float(fields[1])
    if abs(wall - t0 - HOUR_S) > 60 or abs(mono - m0) > 60:
        pytest.skip(f"libfaketime ({lib}) does not step the wall clock alone here")
    return lib


@dataclass
class FakeClock:
    """The offset file a node's libfaketime reads: ``+0``, ``+1h``, ``-1h``."""

    path: Path

    def set(self, offset: str) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(offset + "\n")
        os.replace(tmp, self.path)  # never a half-written file for the node to read

    def env(self, lib: str) -> dict[str, str]:
        if not self.path.exists():
            self.set("+0")
        return {
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            # Read again every second (FAKETIME_NO_CACHE, at every call, made a node's start
            # cost six times the CPU: a file read per clock read); the tests wait until the
            # node's TIME shows the step.
            "FAKETIME_CACHE_DURATION": "1",
            "NO_FAKE_STAT": "1",  # file times as they are
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "DONT_FAKE_MONOTONIC": "1",  # its spelling before libfaketime 0.9.8
        }


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _pairs(reply: Any) -> dict[str, Any]:
    assert isinstance(reply, list), reply
    return {_text(k): _text(v) for k, v in zip(reply[::2], reply[1::2], strict=True)}


def _shown_owner(node: Node, name: str) -> str | None:
    """The schedule's owner as ``node``'s SCHEDULE SHOW says; None while it knows no such
    schedule."""
    reply = node.client().call("SCHEDULE", "SHOW", name)
    return None if reply is None else str(_pairs(reply)["owner"])


@dataclass
class Node:
    process: NodeProcess
    resp: int
    grpc: int
    log: Path

    def client(self) -> RespClient:
        return RespClient("127.0.0.1", self.resp, timeout=30)

    def wall_s(self) -> float:
        sec, usec = self.client().call("TIME")
        return int(sec) + int(usec) / 1e6

    def log_problems(self) -> list[str]:
        """Log lines at error level or worse, and tracebacks."""
        bad = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                level = json.loads(line).get("level", "")
            except (ValueError, AttributeError):
                level = ""
            if level in ("error", "critical") or "Traceback" in line:
                bad.append(line)
        return bad


def _new(
    server_factory: ServerFactory,
    d: Path,
    env: dict[str, str] | None,
    join: int | None = None,
    start: bool = True,
) -> Node:
    """A node with RESP and gRPC ports and a data dir under ``d``; ``join``: a gRPC port."""
    d.mkdir(parents=True, exist_ok=True)
    port, resp, grpc_port = free_port(), free_port(), free_port()
    args = ["-l", "127.0.0.1", "-p", str(port), "--resp-port", str(resp)]
    args += ["--grpc-port", str(grpc_port), "--data-dir", str(d / "data")]
    if join is not None:
        args += ["--join", f"127.0.0.1:{join}"]
    log = d / "node.log"
    proc = server_factory.node(
        *args,
        env=env,
        log_path=log,
        ready=[resp_pong(resp), grpc_api_loaded(grpc_port)],
        start=start,
    )
    return Node(proc, resp, grpc_port, log)


@dataclass
class Ticks:
    """The schedule's jobs taken off every node's queue, acked: their tick names, in the
    order they were taken (a tick twice would show twice)."""

    nodes: list[Node]
    queue: str = "ticks"
    names: list[int] = field(default_factory=list)

    def take(self) -> int:
        for node in self.nodes:
            c = node.client()
            while True:
                jobs = c.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", self.queue)
                if not jobs:
                    break
                for _queue, job_id, _body in jobs:
                    key = str(_pairs(c.call("SHOW", job_id))["idempotency-key"])
                    self.names.append(int(key.rsplit(":", 1)[1]))
                    c.call("ACKJOB", job_id)
        return len(self.names)


@dataclass
class Shown:
    """SHOW of the pending jobs, and the test's monotonic clock around it (seconds)."""

    sent: float
    received: float
    awake_ms: int  # the delayed job's next-awake-within
    requeue_ms: int  # the delivered job's next-requeue-within
    ttl_s: int  # the TTL job's ttl


def _show(c: RespClient, delayed: str, retried: str, ttl: str) -> Shown:
    sent = time.monotonic()
    d, r, t = (_pairs(c.call("SHOW", j)) for j in (delayed, retried, ttl))
    received = time.monotonic()
    return Shown(sent, received, d["next-awake-within"], r["next-requeue-within"], t["ttl"])


def _assert_not_moved(before: Shown, after: Shown) -> None:
    """Each countdown went down by the node-clock time between the two SHOWs, which lies in
    [after.sent - before.received, after.received - before.sent] (1 ms of truncation)."""
    lo_ms = (after.sent - before.received) * 1000 - 1
    hi_ms = (after.received - before.sent) * 1000 + 1
    for what, b, a in (
        ("DELAY", before.awake_ms, after.awake_ms),
        ("RETRY", before.requeue_ms, after.requeue_ms),
    ):
        if a == 0:  # came due meanwhile (a slow machine): not later than it should have
            assert b <= hi_ms, f"{what} deadline moved: {b} -> {a} ms, {lo_ms}-{hi_ms}"
        else:
            assert lo_ms <= b - a <= hi_ms, f"{what} deadline moved: {b} -> {a} ms, {lo_ms}-{hi_ms}"
    went = before.ttl_s - after.ttl_s  # whole seconds left, rounded down
    assert int(lo_ms // 1000) - 1 <= went <= int(hi_ms // 1000) + 1, f"TTL moved: {before} {after}"


def _events(node: Node) -> list[Any]:
    from disq.client import Client

    addr = f"127.0.0.1:{node.grpc}"
    with Client(addr, discover=False) as c:
        out: list[Any] = []
        seq = 0
        while True:
            r = c.read_events(addr, seq, max_events=1000)
            out.extend(r.events)
            if not r.events:
                return out
            seq = r.next_seq


def _node_ms(ev: Any, marks: tuple[int, int], step_ms: int) -> int:
    """An event's time on the node clock. The log keeps wall-clock times: an event at or
    before seq ``marks[0]`` (logged before the step) has offset 0, one at or after
    ``marks[1]`` (logged after the node was seen stepped) the step."""
    assert not marks[0] < ev.seq < marks[1], f"event {ev} in the step's window"
    return int(ev.time_ms) - (step_ms if ev.seq >= marks[1] else 0)


def _seq(events: list[Any], job_id: str, kind: str = "enqueued") -> int:
    (seq,) = [e.seq for e in events if e.job_id == job_id and e.kind == kind]
    return int(seq)


def _wait_stepped(node: Node, step_s: int) -> None:
    eventually(
        lambda: abs(node.wall_s() - time.time() - step_s) < 60,
        f"the node's wall clock {step_s:+d} s off",
        10,
    )


@pytest.fixture
def one_node(
    server_factory: ServerFactory, tmp_path: Path, libfaketime: str
) -> Iterator[tuple[Node, FakeClock]]:
    clock = FakeClock(tmp_path / "faketime.rc")
    node = _new(server_factory, tmp_path / "n0", clock.env(libfaketime))
    yield node, clock
    node.process.stop()


@STEPS
@pytest.mark.timeout(90)
def test_a_node_whose_wall_clock_jumps_keeps_deadlines_and_fires_each_tick_once(
    one_node: tuple[Node, FakeClock], step_s: int
) -> None:
    node, clock = one_node
    c = node.client()
    assert c.call("SCHEDULE", "ADD", "beat", "@every 1s", "ticks", "x", "REPLICATE", 1) == "OK"
    ticks = Ticks([node])
    eventually(lambda: ticks.take() >= 2, "two ticks before the step", 15)

    # DELAY, TTL and RETRY (delivered, so its requeue is pending); then the step. The markers'
    # events tell the node's events logged before the step from those logged after it.
    ticks.take()
    last_before = max(ticks.names)
    t_delay = time.monotonic()
    delayed = c.call("ADDJOB", "qdelay", "d", 0, "DELAY", DELAY_S, "REPLICATE", 1)
    t_ttl = time.monotonic()
    ttl = c.call("ADDJOB", "qttl", "t", 0, "TTL", TTL_S, "REPLICATE", 1)
    first = c.call("ADDJOB", "qfifo", "a", 0, "REPLICATE", 1)
    t_retry = time.monotonic()  # the requeue counts from the job's queueing (Disque's RETRY)
    retried = c.call("ADDJOB", "qretry", "r", 0, "RETRY", RETRY_S, "REPLICATE", 1)
    assert [_text(x) for x in c.call("GETJOB", "NOHANG", "FROM", "qretry")[0]][1] == retried
    mark_before = c.call("ADDJOB", "qmark", "before", 0, "REPLICATE", 1)
    before = _show(c, delayed, retried, ttl)

    clock.set(f"{step_s:+d}")
    _wait_stepped(node, step_s)
    mark_after = c.call("ADDJOB", "qmark", "after", 0, "REPLICATE", 1)
    _assert_not_moved(before, _show(c, delayed, retried, ttl))
    # ctime never goes back: a job added after the step is queued behind the one before it.
    second = c.call("ADDJOB", "qfifo", "b", 0, "REPLICATE", 1)
    got = c.call("GETJOB", "NOHANG", "COUNT", 2, "FROM", "qfifo")
    assert [_text(j[1]) for j in got] == [first, second]

    # Each deadline comes, not before its time (the test's monotonic clock brackets the
    # node's: it started after the send), and not an hour late (the waits would time out).
    back = c.call("GETJOB", "TIMEOUT", 20_000, "FROM", "qretry")
    assert back and _text(back[0][1]) == retried and time.monotonic() - t_retry >= RETRY_S
    assert c.call("ACKJOB", retried) == 1
    got_delayed = c.call("GETJOB", "TIMEOUT", 20_000, "FROM", "qdelay")
    assert got_delayed and _text(got_delayed[0][1]) == delayed
    assert time.monotonic() - t_delay >= DELAY_S
    assert c.call("ACKJOB", delayed) == 1
    gone_at = eventually(
        lambda: c.call("SHOW", ttl) is None and time.monotonic(), "the TTL job's expiry", 20
    )
    assert gone_at - t_ttl >= TTL_S
    # Ticks after the step (forwards, past the jump: ticks before it are the old timeline's).
    lb = last_before + (1000 if step_s > 0 else 0)
    eventually(lambda: ticks.take() and _count_after(ticks, lb) >= 3, "ticks after the step", 15)

    # The node's own account: its events, on its node clock.
    events = _events(node)
    marks = (_seq(events, mark_before), _seq(events, mark_after))
    step_ms = step_s * 1000

    def at(job_id: str, kind: str) -> list[int]:
        return [
            _node_ms(e, marks, step_ms) for e in events if e.job_id == job_id and e.kind == kind
        ]

    def took(start: int, end: int, ms: int, jitter_ms: int = 0) -> bool:
        return ms - EVENT_SLACK_MS <= end - start <= ms + jitter_ms + NODE_LATE_MS

    (enq_d,), (dlv_d,) = at(delayed, "enqueued"), at(delayed, "delivered")
    assert took(enq_d, dlv_d, DELAY_S * 1000), (enq_d, dlv_d)
    (enq_r,), (req_r,) = at(retried, "enqueued"), at(retried, "requeued")
    assert len(at(retried, "delivered")) == 2 and took(enq_r, req_r, RETRY_S * 1000, 250)
    (enq_t,), (exp_t,) = at(ttl, "enqueued"), at(ttl, "expired")
    assert took(enq_t, exp_t, TTL_S * 1000), (enq_t, exp_t)

    # The schedule: every tick once, no gap beyond the policy, no burst of late ticks.
    runs = _runs(ticks.names)
    kinds = [e.kind for e in events]
    assert "tick-late" not in kinds, [e for e in events if e.kind == "tick-late"]
    skipped = [e for e in events if e.kind == "tick-skipped"]
    if step_s < 0:
        # Back: one run of ticks, the pace going on from the last one (ahead of the node's
        # wall clock now), nothing skipped.
        assert len(runs) == 1 and not skipped
    else:
        # Forwards: the hour is one misfire; CATCHUP 1 fires its newest tick, then on time.
        assert len(runs) == 2 and 3590 <= runs[1][0] - runs[0][-1] <= 3610
        assert len(skipped) == 1 and runs[1][0] - runs[0][-1] - 1 == skipped[0].attempt
    assert max(runs[-1]) - min(runs[-1]) >= 2 and runs[-1][-1] - last_before >= 3
    assert any("wall_clock_stepped" in line for line in node.log.read_text().splitlines())
    assert node.log_problems() == []


def _count_after(ticks: Ticks, last_before: int) -> int:
    return sum(1 for t in ticks.names if t > last_before)


def _runs(names: list[int]) -> list[list[int]]:
    """Tick names taken, sorted and cut where they jump: each run must be whole (no gap
    inside it), and no name may have come twice."""
    assert len(names) == len(set(names)), f"a tick got two jobs: {sorted(names)}"
    runs: list[list[int]] = []
    for t in sorted(names):
        if runs and t - runs[-1][-1] < 1000:
            assert t == runs[-1][-1] + 1, f"a gap: {runs[-1][-1]} -> {t}"
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


def _owner(name: str, node_ids: list[str]) -> str:
    """The schedule's owner when every node is up (disq/core/schedule/scheduler.py:
    the highest rendezvous hash of (name, node))."""
    return max(node_ids, key=lambda n: (zlib.crc32(f"{name}\0{n}".encode()), n))


@pytest.mark.timeout(120)
def test_three_nodes_the_stepped_owner_fires_each_tick_once_and_the_peers_see_nothing_odd(
    server_factory: ServerFactory, tmp_path: Path, libfaketime: str
) -> None:
    """The schedule's owner steps an hour back, then an hour forwards (from there: two hours
    on its wall clock, one on the schedule's, which kept its pace meanwhile)."""
    clock = FakeClock(tmp_path / "faketime.rc")
    seed = _new(server_factory, tmp_path / "n1", None, start=False)
    stepped = _new(server_factory, tmp_path / "n0", clock.env(libfaketime), seed.grpc, False)
    other = _new(server_factory, tmp_path / "n2", None, seed.grpc, start=False)
    nodes = [stepped, seed, other]
    start_all([n.process for n in nodes])
    all_know_each_other([n.resp for n in nodes])
    ids = [_text(n.client().call("CLUSTER", "MYID")) for n in nodes]
    name = next(f"beat{k}" for k in range(1000) if _owner(f"beat{k}", ids) == ids[0])
    c = seed.client()
    assert c.call("SCHEDULE", "ADD", name, "@every 1s", "ticks", "x", "REPLICATE", 2) == "OK"
    for n in nodes:
        # A node that has not heard of the schedule yet shows nothing (nil).
        eventually(lambda n=n: _shown_owner(n, name) == ids[0],
                   "every node sees the stepped node own the schedule", 15)  # fmt: skip
    ticks = Ticks(nodes)
    eventually(lambda: ticks.take() >= 2, "two ticks before the steps", 15)
    peer_seqs = [max((e.seq for e in _events(n)), default=0) for n in nodes[1:]]

    for offset, step_s in (("-1h", -HOUR_S), ("+1h", HOUR_S)):
        last_before = max(ticks.names)
        clock.set(offset)
        _wait_stepped(stepped, step_s)
        # Forwards, counted past the jump (ticks before it came on the old timeline).
        lb = last_before + (1000 if step_s > 0 else 0)
        eventually(lambda lb=lb: ticks.take() and _count_after(ticks, lb) >= 4,
                   f"ticks after the {offset} step", 20)  # fmt: skip
    runs = _runs(ticks.names)
    # Back: one run on (the owner kept its pace); forwards: the hour was one misfire, the
    # owner's catch-up tick and its skipped ticks, then on.
    assert len(runs) == 2 and 3590 <= runs[1][0] - runs[0][-1] <= 3610, runs
    assert len(runs[1]) >= 4
    own = _events(stepped)
    skipped = [e for e in own if e.kind == "tick-skipped"]
    assert len(skipped) == 1 and skipped[0].attempt == runs[1][0] - runs[0][-1] - 1
    assert "tick-late" not in {e.kind for e in own}
    # The stepped owner fired every tick; the peers covered for none, skipped none.
    fired = {e.size for e in own if e.kind == "tick-fired"}
    assert set(runs[0][2:] + runs[1]) <= fired
    for n, since in zip(nodes[1:], peer_seqs, strict=True):
        kinds = [e.kind for e in _events(n) if e.seq > since]
        assert not {"tick-fired", "tick-late", "tick-skipped"} & set(kinds), kinds
        shown = _pairs(n.client().call("SCHEDULE", "SHOW", name))
        assert shown["last-error"] == "" and shown["last-tick"] >= runs[1][-1] - 1
        assert n.log_problems() == []
    assert stepped.log_problems() == []
