"""Counters that travel with the job, and the idle-queue GC under memory pressure, through
real 3-node clusters (cluster/lab.py: node processes, RESP and gRPC over TCP).

A job's ``additional-deliveries`` must count a redelivery whichever node re-queued it, so
GETJOB WITHCOUNTERS and ``disq.Worker``'s ``max_deliveries`` see every one. State that
travels between nodes is awaited with a blocking GETJOB (an event) or ``eventually``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import Client  # noqa: E402
from disq.worker import Worker  # noqa: E402


def new_lab(tmp_path: Path) -> Lab:
    return Lab(3, tmp_path / "lab", node_timeout_ms=1500)


def counters_of(reply: Any) -> tuple[bytes, dict[str, int]]:
    """A one-job GETJOB WITHCOUNTERS reply: (id, {"nacks": n, "additional-deliveries": n})."""
    assert isinstance(reply, list) and len(reply) == 1, reply
    entry = reply[0]
    fields = entry[3:]
    named = {k.decode(): v for k, v in zip(fields[::2], fields[1::2], strict=True)}
    return entry[1], named


@pytest.mark.slow
def test_a_retry_on_another_node_counts_the_delivery(tmp_path: Path) -> None:
    with new_lab(tmp_path) as lab:
        job_id = lab.node(0).call("ADDJOB", "ctr", "once", 5000, "REPLICATE", 3, "RETRY", 1)
        assert isinstance(job_id, str)
        first = lab.node(0).call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "ctr")
        got_id, counters = counters_of(first)
        assert got_id == job_id.encode() and counters["additional-deliveries"] == 0
        # The node that delivered it dies: only the other copies can re-queue it, and
        # neither saw the delivery.
        lab.kill9(0)
        again = lab.node(1).call(
            "GETJOB", "TIMEOUT", 15000, "WITHCOUNTERS", "FROM", "ctr", timeout=20
        )
        got_id, counters = counters_of(again)
        assert got_id == job_id.encode()
        assert counters["additional-deliveries"] >= 1
        assert counters["nacks"] == 0


@pytest.mark.slow
def test_the_worker_dead_letters_after_deliveries_on_different_nodes(tmp_path: Path) -> None:
    # Four nodes, so that with one killed the dead-letter ADDJOB still finds its 3 copies.
    with Lab(4, tmp_path / "lab", node_timeout_ms=1500) as lab:
        job_id = lab.node(0).call("ADDJOB", "dl", "poison", 5000, "REPLICATE", 3, "RETRY", 1)
        assert isinstance(job_id, str)
        # Delivery 1 on node 0, never acked; then node 0 dies, so every later re-queue is
        # done by a node that never saw that delivery.
        first = lab.node(0).call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "dl")
        got_id, counters = counters_of(first)
        assert got_id == job_id.encode() and counters["additional-deliveries"] == 0
        lab.kill9(0)
        # Delivery 2 on node 1, once a holder re-queued it at its RETRY (node 1 pulls it
        # over with NEEDJOBS if it holds no copy itself).
        got_id, counters = counters_of(
            lab.node(1).call("GETJOB", "TIMEOUT", 15000, "WITHCOUNTERS", "FROM", "dl", timeout=20)
        )
        assert got_id == job_id.encode() and counters["additional-deliveries"] >= 1
        # A worker on node 2 with max_deliveries=2: the next delivery is dead-lettered,
        # the handler never runs.
        handled: list[bytes] = []

        async def handler(job: Any) -> None:
            handled.append(job.body)

        addr = f"127.0.0.1:{lab.node(2).bus_port}"
        w = Worker(
            addr,
            "dl",
            handler,
            dead_letter="dl-dead",
            max_deliveries=2,
            fetch_timeout_s=0.2,
            client_options={"discover": False},
        )
        errors: list[BaseException] = []

        def target() -> None:
            try:
                asyncio.run(w.run())
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=target)
        t.start()
        try:
            eventually(lambda: w.stats.dead_lettered == 1, "the job to be dead-lettered")
        finally:
            eventually(lambda: w.started, "the worker to start")
            w.stop()
            t.join(timeout=60)
        assert not errors and not t.is_alive()
        assert handled == []
        with Client(addr, discover=False) as c:
            dead = c.get_jobs("dl-dead", nohang=True)
            assert [j.body for j in dead] == [b"poison"]
            c.ack(dead[0].id)


def test_empty_queues_are_evicted_under_memory_pressure(tmp_path: Path) -> None:
    with new_lab(tmp_path) as lab:
        node = lab.node(0)
        names = [f"empty-{k}" for k in range(1000)]
        with node.client() as c:
            ids = c.pipeline([("ADDJOB", n, "x", 0, "REPLICATE", 1) for n in names])
            assert all(isinstance(i, str) for i in ids), ids[:3]
            assert c.call("DELJOB", *ids) == 1000  # type: ignore[arg-type]

        def registered() -> int:
            return int(lab.info(0, "queues")["registered_queues"])

        assert registered() >= 1000
        assert node.call("CONFIG", "SET", "maxmemory", 1) in ("OK", b"OK")
        eventually(lambda: registered() == 0, "the empty queues to be evicted")
        assert node.call("QSTAT", names[0]) is None
