"""Timers never fire early, and not late either (issue 23, part 3), on real node processes.

greenstalk's own suite (a fresh server per test) saw a TTR of 1 s end after 999.8 ms, and a
1 s delay or reserve timeout end 55-90 ms late in a fresh node's first seconds. These tests
measure the same way, on the client's ``time.monotonic()`` around greenstalk's calls, many
runs on fresh nodes from their first second on:

- never early: every run, strictly (a deadline is due once the node clock has passed it,
  disq/core/timers.py, so no scheduling noise can make a run early);
- not late: the median run at most 20 ms late, and most runs too. A loaded 2-core CI box can
  hold any process for tens of ms now and then, so single runs are not asserted on.

Disque's DELAY, RETRY and GETJOB TIMEOUT are measured the same way over RESP: never early
either (RETRY's requeue jitter is 0..+250 ms, not Disque's -250..+250).

The runs of one node are staggered (a few tens of ms apart) so that their timers do not fire
in the same millisecond: replies arriving together would be read one after the other by the
client's threads, and a run's end is what such a queue would delay.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import greenstalk
import pytest
from conftest import ServerFactory, free_port

from cluster.resp_client import RespClient

pytestmark = pytest.mark.slow  # about 10 s: three fresh nodes, a second or two each

NODES = 3  # fresh nodes, each measured from its first second
RUNS = 8  # runs of each kind per node
STAGGER_S = 0.037  # between run starts: runs never share a millisecond of timer firing
# How late a timer may be, in its median and in 3 runs of 4: a timer armed for its deadline is
# late only by the loop's scheduling, a few ms on a quiet box and 21 ms in the median under
# make test's load on 2 cores (2026-12-07); one left to a 100 ms cron or a 1 s tick would be
# 50 ms or 500 ms late in its median. The bound sits between the two.
LATE_MS = 50.0


def _ttr(c: greenstalk.Client, other: greenstalk.Client) -> float:
    """A job reserved with TTR 1 comes back to the next reserve, another connection's (the
    reserving one would be told DEADLINE_SOON): how long after the first reserve was sent.

    greenstalk's test_ttr starts its clock when the first reserve returns. Here 48 client
    threads share one GIL on a loaded 2-core box, and the thread that read the reply can wait
    a millisecond or more before it reads the clock (a CI run measured 0.28 ms "early" that
    way), so the start is taken before the request instead, as for the other two kinds: the
    node's TTR starts after that instant, and "never early" stays strict."""
    c.put(b"ttr", ttr=1)
    t0 = time.monotonic()
    first = c.reserve()
    again = other.reserve()
    t1 = time.monotonic()
    assert again.id == first.id
    other.delete(again)
    return t1 - t0


def _delay(c: greenstalk.Client, _: greenstalk.Client) -> float:
    """put with delay 1 then reserve (greenstalk's test_delays)."""
    t0 = time.monotonic()
    c.put(b"delayed", delay=1)
    job = c.reserve()
    t1 = time.monotonic()
    c.delete(job)
    return t1 - t0


def _reserve_timeout(c: greenstalk.Client, _: greenstalk.Client) -> float:
    """reserve-with-timeout 1 on an empty tube (greenstalk's test_reserve_raises_on_timeout)."""
    t0 = time.monotonic()
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=1)
    return time.monotonic() - t0


KINDS: dict[str, Callable[[greenstalk.Client, greenstalk.Client], float]] = {
    "ttr": _ttr,
    "delay": _delay,
    "reserve-timeout": _reserve_timeout,
}


def _staggered(
    plan: list[tuple[str, int]], run_one: Callable[[int], float]
) -> dict[str, list[float]]:
    """Run ``run_one(k)`` for every run of ``plan`` (kind, index) concurrently, each on its
    own thread, the starts STAGGER_S apart. Seconds per run, by kind."""
    out: dict[str, list[float]] = {kind: [] for kind, _ in plan}
    errors: list[BaseException] = []
    start = time.monotonic()

    def run(k: int) -> None:
        try:
            # Not waiting for an event: spacing the runs so that no two fire together.
            time.sleep(max(0.0, start + k * STAGGER_S - time.monotonic()))
            out[plan[k][0]].append(run_one(k))
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(plan))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return out


def _measure_fresh_node(server_factory: ServerFactory) -> dict[str, list[float]]:
    """Start a node and, from the moment it accepts connections, run every kind RUNS times
    concurrently, each run on its own connection and tube, staggered. Seconds per run."""
    srv = server_factory()
    plan = [(kind, i) for i in range(RUNS) for kind in KINDS]
    clients = [
        tuple(
            greenstalk.Client(("127.0.0.1", srv.port), use=f"{kind}{i}", watch=f"{kind}{i}")
            for _ in range(2)
        )
        for kind, i in plan
    ]
    try:
        return _staggered(plan, lambda k: KINDS[plan[k][0]](*clients[k]))
    finally:
        for pair in clients:
            for c in pair:
                c.close()


def test_ttr_delay_and_reserve_timeout_are_never_early_and_not_late(
    server_factory: ServerFactory,
) -> None:
    runs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(NODES):
        for kind, got in _measure_fresh_node(server_factory).items():
            runs[kind].extend(got)
    late_ms = {kind: sorted((s - 1.0) * 1000 for s in got) for kind, got in runs.items()}
    report = {
        kind: f"min {v[0]:.3f} median {statistics.median(v):.3f} max {v[-1]:.3f} ms"
        for kind, v in late_ms.items()
    }
    for kind, v in late_ms.items():
        assert len(v) == NODES * RUNS, kind
        # Never early, on the client's clock: every run.
        assert v[0] >= 0.0, f"{kind} fired early: {report}"
        # Not late: the median and most runs within LATE_MS (robust to a loaded box).
        assert statistics.median(v) <= LATE_MS, f"{kind} late: {report}"
        within = sum(1 for x in v if x <= LATE_MS)
        assert within >= 0.75 * len(v), f"{kind} late: {report}"


# ------------------------------------------------------------------ Disque's timers (RESP)
# DELAY and GETJOB TIMEOUT are due at their time; RETRY at its time plus 0..250 ms of jitter
# (so that the copies on several nodes do not requeue together; Disque's is -250..+250 ms,
# which could hand a job back to the queue before its RETRY while a worker is still on it).
RETRY_JITTER_MS = 250.0


def _disque_delay(c: RespClient, q: str) -> float:
    t0 = time.monotonic()
    c.call("ADDJOB", q, "delayed", 0, "DELAY", 1)
    got = c.call("GETJOB", "TIMEOUT", 5000, "FROM", q)
    t1 = time.monotonic()
    assert got, "the delayed job never came"
    c.call("ACKJOB", got[0][1])
    return t1 - t0


def _disque_retry(c: RespClient, q: str) -> float:
    """RETRY counts from the moment the job is queued (Disque's queueFetchJob leaves the
    requeue time running): the clock starts before the add is sent."""
    t0 = time.monotonic()
    c.call("ADDJOB", q, "retried", 0, "RETRY", 1)
    first = c.call("GETJOB", "FROM", q)
    again = c.call("GETJOB", "TIMEOUT", 5000, "FROM", q)
    t1 = time.monotonic()
    assert again and again[0][1] == first[0][1], "the unacked job did not come back"
    c.call("ACKJOB", again[0][1])
    return t1 - t0


def _disque_getjob_timeout(c: RespClient, q: str) -> float:
    t0 = time.monotonic()
    assert c.call("GETJOB", "TIMEOUT", 1000, "FROM", q) is None
    return time.monotonic() - t0


DISQUE_KINDS: dict[str, Callable[[RespClient, str], float]] = {
    "delay": _disque_delay,
    "retry": _disque_retry,
    "getjob-timeout": _disque_getjob_timeout,
}


def _measure_disque_node(server_factory: ServerFactory) -> dict[str, list[float]]:
    """A fresh node with its RESP port: every Disque kind RUNS times, concurrently, each run
    on its own connection and queue, staggered. Seconds per run."""
    port = free_port()
    server_factory.new("--resp-port", str(port))
    plan = [(kind, i) for i in range(RUNS) for kind in DISQUE_KINDS]
    clients = [RespClient("127.0.0.1", port, timeout=10) for _ in plan]
    queues = [f"{kind}{i}" for kind, i in plan]
    try:
        return _staggered(plan, lambda k: DISQUE_KINDS[plan[k][0]](clients[k], queues[k]))
    finally:
        for c in clients:
            c.close()


def test_disque_delay_retry_and_getjob_timeout_are_never_early(
    server_factory: ServerFactory,
) -> None:
    if server_factory.kind != "disq":
        pytest.skip("Disque's commands are disq's")
    out = _measure_disque_node(server_factory)
    late_ms = {kind: sorted((s - 1.0) * 1000 for s in got) for kind, got in out.items()}
    report = {kind: " ".join(f"{x:.1f}" for x in v) for kind, v in late_ms.items()}
    for kind, v in late_ms.items():
        assert len(v) == RUNS, kind
        assert v[0] >= 0.0, f"{kind} fired early: {report}"
        allowed = LATE_MS + (RETRY_JITTER_MS if kind == "retry" else 0.0)
        assert statistics.median(v) <= allowed, f"{kind} late: {report}"
