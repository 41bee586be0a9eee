"""The routes metrics: the collector reads a real node core's Routes (disq/testing/mesh.py,
fake clock) at scrape time: table sizes, tombstones, expired queues, purged jobs."""

from __future__ import annotations

from test_metrics_schedules import scrape

from disq.core.disque.api import AddOptions
from disq.testing.mesh import Mesh

T0_MS = 1_777_636_800_000


def test_route_gauges_and_counters_follow_the_table() -> None:
    mesh = Mesh(1, now_ms=T0_MS)
    node = mesh.nodes[0]
    routes = node.routes
    assert routes is not None
    got = scrape(node)
    assert [got[f"disq_route_{n}"] for n in ("exchanges", "bindings", "queues")] == [0, 0, 0]
    routes.declare_exchange(mesh.now, "ev", "topic")
    routes.declare_exchange(mesh.now, "gone", "fanout")
    routes.delete_exchange(mesh.now, "gone")
    routes.bind(mesh.now, "audit", "ev", "#")
    routes.declare_queue(mesh.now, "reply", expires_ms=1000)
    routes.bind(mesh.now, "reply", "ev", "x")
    mesh.disque(0).add_job(mesh.now, 1, "reply", b"x", AddOptions(timeout_ms=0, repl=1))
    mesh.pump()
    got = scrape(node)
    assert got["disq_route_exchanges"] == 1 and got["disq_route_bindings"] == 2
    assert got["disq_route_queues"] == 1 and got["disq_route_tombstones"] == 1
    mesh.advance(1_100)  # the lease passes: the queue, its binding and its job go
    got = scrape(node)
    assert got["disq_route_queues"] == 0 and got["disq_route_bindings"] == 1
    assert got["disq_route_queues_expired_total"] == 1
    assert got["disq_route_jobs_purged_total"] == 1
    assert got["disq_route_tombstones"] == 3  # the exchange, the queue, its binding
