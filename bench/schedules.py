"""How soon after its second a schedule's tick job exists, on 3 local nodes; and how long one
look of the scheduler takes while a node catches up on a long misfire (``--misfire``).

An ``@every 1s`` schedule (REPLICATE 2) runs on three real nodes (cluster/lab.py, node
timeout 3 s). Each tick's job is taken out (GETJOB NOHANG on every node), its creation time
read with SHOW (ctime: the creating node's wall clock) and its tick from its idempotency key.
Two phases: healthy (the owner fires each tick at its second), then the owner killed with
SIGKILL and left down (the others fire each tick one grace period, 1 s, after it until their
views agree it is gone; the key vote picks one job). Reported per phase: ticks seen, the most
jobs seen for one tick (1, or a bug), and the lateness (creation time minus the tick): median,
90th percentile, max. No rival keeps schedules in the cluster (Disque and beanstalkd have
none; Celery beat and its kind are one process), so nothing runs beside it.

``--misfire``: the worst case of a catch-up, a per-second cron schedule with CATCHUP 1000 on
a node back after an hour down (3,595 missed ticks to walk, 2,595 to skip, 1,000 to fire
late), on one node core with a fake clock: the core's own time per look (tick() call), which
is loop time a node spends in it.

  python -m bench schedules --seconds 20
  python -m bench schedules --misfire
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import log
from bench.report import Report
from cluster.lab import Lab
from cluster.resp_client import RespError

HELP = "how late a schedule's tick job is, healthy and with its owner killed; --misfire"


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _pairs(reply: Any) -> dict[str, Any]:
    return {_text(k): _text(v) for k, v in zip(reply[::2], reply[1::2], strict=True)}


def collect(lab: Lab, seconds: float, skip: set[int]) -> dict[int, list[float]]:
    """tick -> lateness (ms) of every distinct job seen for it, over ``seconds``."""
    out: dict[int, list[float]] = {}
    seen: set[str] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, node in enumerate(lab.nodes):
            if i in skip:
                continue
            try:
                jobs = node.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", "ticks")
            except (OSError, RespError):
                continue
            for _, job_id, _ in jobs or []:
                shown = _pairs(node.call("SHOW", job_id))
                node.call("ACKJOB", job_id)
                if _text(job_id) in seen:
                    continue
                seen.add(_text(job_id))
                tick = int(str(shown["idempotency-key"]).rsplit(":", 1)[1])
                out.setdefault(tick, []).append(shown["ctime"] / 1e6 - tick * 1000)
        time.sleep(0.05)  # a tick comes once a second: NOHANG polls, not a blocked GETJOB
    return out


def phases(seconds: float, report: Report) -> None:
    table = report.table(
        "an @every 1s schedule, REPLICATE 2, 3 nodes: its tick jobs' lateness, ms",
        ["phase", "ticks", "jobs per tick (max)", "median", "p90", "max"],
    )
    with tempfile.TemporaryDirectory(prefix="bench-schedules-") as tmp:
        with Lab(3, Path(tmp), node_timeout_ms=3000) as lab:
            a = lab.nodes[0]
            a.call("SCHEDULE", "ADD", "beat", "@every 1s", "ticks", "x", "REPLICATE", 2, "RETRY", 2)
            time.sleep(2.5)  # the table reaches every node; the first ticks fire
            collect(lab, 1.0, set())  # what fired while starting: not measured
            log(f"healthy: {seconds:g} s")
            _row(table, "healthy (the owner fires at the tick)", collect(lab, seconds, set()))
            owner = _text(_pairs(a.call("SCHEDULE", "SHOW", "beat"))["owner"])
            k = next(i for i, n in enumerate(lab.nodes) if n.id == owner)
            lab.kill9(k)
            collect(lab, 2.0, {k})  # the ticks around the kill: not measured
            log(f"owner (node {k}) killed: {seconds:g} s")
            _row(table, "owner killed with SIGKILL, left down", collect(lab, seconds, {k}))


def _row(table: Any, phase: str, ticks: dict[int, list[float]]) -> None:
    late = sorted(x for v in ticks.values() for x in v)
    if not late:
        table.add(phase, "0", "-", "-", "-", "-")
        return
    table.add(
        phase,
        str(len(ticks)),
        str(max(len(v) for v in ticks.values())),
        f"{statistics.median(late):.1f}",
        f"{late[int(0.9 * (len(late) - 1))]:.1f}",
        f"{late[-1]:.1f}",
    )


def misfire(down_s: int, catchup: int, report: Report) -> None:
    from disq import _native
    from disq.core.messages import ScheduleDef
    from disq.testing.mesh import Mesh

    t0 = int(datetime(2026, 5, 1, 12, tzinfo=UTC).timestamp())
    mesh = Mesh(1, now_ms=t0 * 1000)
    node = mesh.nodes[0]
    sched = node.scheduler
    assert sched is not None
    d = ScheduleDef("s", "* * * * * *", "UTC", "q", b"", catchup=catchup, ttl_s=7200, repl=1)
    sched.add(mesh.now, d)
    mesh.now += 500
    node.tick(mesh.now)
    node.ready(mesh.now)
    node.advance()
    mesh.now += down_s * 1000
    looks: list[float] = []
    fired_before = sched.stats["ticks_fired"]
    while sched.stats["ticks_fired"] - fired_before < catchup:
        start = time.perf_counter()
        node.tick(mesh.now)
        looks.append((time.perf_counter() - start) * 1e3)
        node.ready(mesh.now)
        node.advance()
        mesh.now += 1
    table = report.table(
        f"'* * * * * *' CATCHUP {catchup}, {down_s:,} s down: the scheduler's looks until the "
        f"kept ticks fired ({_native.describe()})",
        ["looks", "max ms", "median ms", "total ms", "ticks skipped"],
    )
    table.add(
        str(len(looks)),
        f"{max(looks):.2f}",
        f"{statistics.median(looks):.3f}",
        f"{sum(looks):.0f}",
        str(sched.stats["ticks_skipped"]),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=20.0, help="per phase")
    p.add_argument("--misfire", action="store_true", help="the scheduler's catch-up, in process")
    p.add_argument("--down-s", type=int, default=3600, help="--misfire: the node's time down")
    p.add_argument("--catchup", type=int, default=1000, help="--misfire: CATCHUP")
    p.add_argument(
        "--quick", action="store_true", help="4 s phases; --misfire: 10 minutes down, CATCHUP 100"
    )


def run(args: argparse.Namespace, report: Report) -> None:
    if args.misfire:
        down_s, catchup = (600, 100) if args.quick else (args.down_s, args.catchup)
        misfire(down_s, catchup, report)
    else:
        phases(4.0 if args.quick else args.seconds, report)
