"""The schedule metrics: the collector reads a real node core's Scheduler (disq/testing/mesh.py,
fake clock) at scrape time: ticks fired, late and skipped, failed adds, live schedules."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from disq.core.messages import MISFIRE_SKIP, PAUSE_IN, ScheduleDef
from disq.core.node_core import NodeCore
from disq.core.schedule.scheduler import Scheduler
from disq.server.metrics import NodeCollector, NodeMetrics
from disq.testing.mesh import Mesh

T0_S = 1_777_636_800  # 2026-05-01 12:00:00 UTC


def _host(core: NodeCore) -> Any:
    """What the collector reads of a runtime, around an in-process node core: no cluster half
    (membership, links, RESP), no AOF, no beanstalk connections."""
    return SimpleNamespace(
        core=core,
        cluster=None,
        beanstalk=core.beanstalk,
        aof=SimpleNamespace(writer=None, error=None, disk_full=False, disk_free=0),
        op_counts=[],
        sessions={},
        started=time.monotonic(),
        instance_id="test",
        metrics=None,
    )


def scrape(core: NodeCore) -> dict[str, float]:
    """The exposition of one scrape, parsed: sample name -> value (unlabelled samples)."""
    reg = CollectorRegistry()
    reg.register(NodeCollector(_host(core), NodeMetrics()))
    text = generate_latest(reg).decode()
    return {
        s.name: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if not s.labels
    }


def _sched(core: NodeCore) -> Scheduler:
    assert core.scheduler is not None
    return core.scheduler


def test_no_schedule_yet_all_zero() -> None:
    mesh = Mesh(1, now_ms=T0_S * 1000)
    got = scrape(mesh.nodes[0])
    for name in (
        "disq_schedule_ticks_fired_total",
        "disq_schedule_ticks_late_total",
        "disq_schedule_ticks_skipped_total",
        "disq_schedule_fire_errors_total",
        "disq_schedules",
    ):
        assert got[name] == 0, name


def test_ticks_fired_on_one_node_of_three_and_schedules_counted_everywhere() -> None:
    mesh = Mesh(3, now_ms=T0_S * 1000 + 500)
    s0 = _sched(mesh.nodes[0])
    s0.add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"x", repl=2))
    s0.add(mesh.now, ScheduleDef("gone", "@hourly", "UTC", "q", b"x"))
    mesh.advance(100)
    s0.delete(mesh.now, "gone")  # a tombstone is not a schedule
    mesh.advance(5_000)
    scrapes = [scrape(node) for node in mesh.nodes]
    assert [g["disq_schedules"] for g in scrapes] == [1, 1, 1]
    # One job per tick in the cluster: the owner fires them all, on time.
    fired = [g["disq_schedule_ticks_fired_total"] for g in scrapes]
    assert sorted(fired) == [0, 0, 5]
    assert sum(g["disq_schedule_ticks_late_total"] for g in scrapes) == 0
    assert sum(g["disq_schedule_fire_errors_total"] for g in scrapes) == 0
    owner = mesh.ids.index(s0.owner("s"))
    assert fired[owner] == 5 and scrapes[owner]["disq_schedule_ticks_fired_total"] == sum(
        _sched(n).stats["ticks_fired"] for n in mesh.nodes
    )


def test_ticks_late_and_skipped_after_the_node_was_down() -> None:
    """Down from t0+2.5 s to t0+30.5 s (the clock jumps, no tick runs): with MISFIRE SKIP the
    23 ticks more than 5 s overdue are dropped, the 3 fired more than 2 s late count late."""
    mesh = Mesh(1, now_ms=T0_S * 1000)
    s = _sched(mesh.nodes[0])
    s.add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", misfire=MISFIRE_SKIP))
    mesh.advance(2_500)
    mesh.now += 28_000
    mesh.advance(1_000)
    got = scrape(mesh.nodes[0])
    assert got["disq_schedule_ticks_skipped_total"] == 23
    assert got["disq_schedule_ticks_late_total"] == 3
    assert got["disq_schedule_ticks_fired_total"] == s.stats["ticks_fired"] == 8


def test_refused_adds_count_as_fire_errors() -> None:
    mesh = Mesh(1, now_ms=T0_S * 1000 + 500)
    core = mesh.nodes[0]
    disque = mesh.disque(0)
    disque.inspect.pause(mesh.now, "q", PAUSE_IN, False)  # adds to q refused: PAUSED
    _sched(core).add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"x"))
    mesh.advance(2_000)
    got = scrape(core)
    assert got["disq_schedule_fire_errors_total"] >= 1
    assert got["disq_schedule_ticks_fired_total"] == 0
    assert "PAUSED" in _sched(core).last_error["s"]
