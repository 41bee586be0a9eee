"""Exchanges, bindings, transient queues and purge the cluster keeps (issue 29), on real
3-node clusters through the SDK.

Changes made through one node are routed by another (the push, then the digest rounds);
state that travels between nodes is awaited with ``eventually``. The restart, the joiner,
the expiry and the big purge each get a cluster of their own.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import (  # noqa: E402
    AsyncClient,
    Client,
    InvalidArgumentError,
    LimitError,
    NotFoundError,
    PreconditionFailedError,
    Routes,
)
from disq.integrations.common import ack_queued  # noqa: E402


def addr(lab: Lab, i: int) -> str:
    return f"127.0.0.1:{lab.node(i).bus_port}"


def held(lab: Lab, i: int) -> Client:
    """A client held to node ``i`` (discovery off)."""
    return Client(addr(lab, i), discover=False)


def qlens(lab: Lab, queue: str) -> list[int]:
    return [int(lab.node(i).call("QLEN", queue)) for i in range(lab.n)]


@pytest.fixture(scope="module")
def clients(lab3: Lab) -> Iterator[list[Client]]:
    cs = [held(lab3, i) for i in range(lab3.n)]
    try:
        yield cs
    finally:
        for c in cs:
            c.close()


def _bodies(c: Client, queue: str) -> list[bytes]:
    jobs = c.get_jobs(queue, count=100, timeout_s=0.5)
    c.ack(*[j.id for j in jobs]) if jobs else None
    return sorted(j.body for j in jobs)


def test_fanout_topic_and_direct_declared_on_a_route_on_b(clients: list[Client]) -> None:
    a, b, c = clients
    a.declare_exchange("fan", "fanout")
    a.declare_exchange("top", "topic")
    a.declare_exchange("dir", "direct")
    a.bind_queue("f1", "fan")
    a.bind_queue("f2", "fan", "ignored")
    a.bind_queue("t-all", "top", "#")
    a.bind_queue("t-star", "top", "stock.*")
    a.bind_queue("t-tail", "top", "*.nyse.#")
    a.bind_queue("d1", "dir", "red")
    a.bind_queue("d2", "dir", "blue")
    want = Routes(
        exchanges={"dir": "direct", "fan": "fanout", "top": "topic"},
        bindings=[
            ("dir", "d1", "red"),
            ("dir", "d2", "blue"),
            ("fan", "f1", ""),
            ("fan", "f2", "ignored"),
            ("top", "t-all", "#"),
            ("top", "t-star", "stock.*"),
            ("top", "t-tail", "*.nyse.#"),
        ],
        queues={},
    )
    assert a.list_routes() == want
    for other in (b, c):
        eventually(lambda o=other: o.list_routes() == want, "the routes reach every node")

    ids = b.publish("fan", "anything", b"to-all", replicate=2)
    assert len(ids) == 2 and all(i.startswith("D-") for i in ids)
    assert _bodies(b, "f1") == [b"to-all"] and _bodies(b, "f2") == [b"to-all"]

    assert len(c.publish("top", "stock.nyse.ibm", "t1", replicate=1)) == 2  # t-all, t-tail
    assert len(c.publish("top", "stock.usd", "t2", replicate=1)) == 2  # t-all, t-star
    assert len(c.publish("top", "bond", "t3", replicate=1)) == 1  # t-all
    assert _bodies(c, "t-all") == [b"t1", b"t2", b"t3"]
    assert _bodies(c, "t-star") == [b"t2"]
    assert _bodies(c, "t-tail") == [b"t1"]

    assert len(b.publish("dir", "red", "r", replicate=1)) == 1
    assert b.publish("dir", "green", "g", replicate=1) == []  # no match: dropped
    assert b.publish("nope", "red", "x") == []  # unknown exchange: dropped
    assert _bodies(b, "d1") == [b"r"] and _bodies(b, "d2") == []
    assert [b.qlen(q) for q in ("green", "nope", "red")] == [0, 0, 0]  # no queue of its own

    # The default exchange: the queue named by the routing key.
    (job_id,) = b.publish("", "plain", "p", replicate=1)
    assert _bodies(b, "plain") == [b"p"] and job_id.startswith("D-")

    assert a.unbind_queue("d1", "dir", "red") is True
    assert a.unbind_queue("d1", "dir", "red") is False
    eventually(lambda: b.publish("dir", "red", "r2", replicate=1) == [], "the unbind travels")
    assert a.delete_exchange("fan") is True and a.delete_exchange("fan") is False
    eventually(lambda: "fan" not in c.list_routes().exchanges, "the delete travels")
    assert c.publish("fan", "", "gone") == []
    assert all(e != "fan" for e, _, _ in c.list_routes().bindings)  # its bindings went too


def test_bad_input_gets_a_clear_error_and_the_node_keeps_serving(clients: list[Client]) -> None:
    a, b, _ = clients
    with pytest.raises(InvalidArgumentError, match=r"x-consistent-hash.*not supported.*direct"):
        a.declare_exchange("hash", "x-consistent-hash")
    with pytest.raises(NotFoundError, match="missing"):
        a.bind_queue("q", "missing", "k")
    with pytest.raises(NotFoundError):
        a.declare_exchange("missing", passive=True)
    a.declare_exchange("typed", "direct")
    a.declare_exchange("typed", "direct")  # the same declaration again: fine
    with pytest.raises(PreconditionFailedError, match="current is 'direct'"):
        a.declare_exchange("typed", "fanout")
    with pytest.raises(InvalidArgumentError, match="default exchange"):
        a.declare_exchange("", "direct")
    with pytest.raises(InvalidArgumentError, match="default exchange"):
        a.bind_queue("q", "", "k")
    with pytest.raises(InvalidArgumentError, match="longer than 1000 bytes"):
        a.declare_exchange("e" * 1001, "direct")
    with pytest.raises(InvalidArgumentError, match="longer than 1000 bytes"):
        a.bind_queue("q", "typed", "k" * 1001)
    with pytest.raises(InvalidArgumentError, match="longer than 1000 bytes"):
        a.declare_queue("q" * 1001)
    with pytest.raises(InvalidArgumentError, match="longer than 1000 bytes"):
        b.publish("e" * 1001, "k", "x")
    assert "hash" not in a.list_routes().exchanges  # nothing stored
    assert LimitError.reason == "LIMIT"  # the limit's own class (the core tests reach it)
    a.declare_exchange("typed", passive=True)  # still serving
    assert a.add_job("still", "ok", replicate=1).startswith("D-")


def test_message_ttl_caps_the_published_jobs_ttl(clients: list[Client]) -> None:
    a, b, _ = clients
    a.declare_exchange("ttl-x", "direct")
    a.declare_queue("short", message_ttl_ms=20_500)
    a.bind_queue("short", "ttl-x", "k")
    a.bind_queue("long", "ttl-x", "k")

    def b_knows_both() -> bool:
        routes = b.list_routes()
        bound = {q for (x, q, k) in routes.bindings if x == "ttl-x" and k == "k"}
        return "short" in routes.queues and bound == {"short", "long"}

    # The declaration and both bindings travel (in any order) before b publishes.
    eventually(b_knows_both, "the declaration and the bindings travel")
    assert b.list_routes().queues["short"] == (0, 20_500)
    ids = b.publish("ttl-x", "k", "x", replicate=1, ttl_s=600)
    shown = {b.show(i)["queue"]: b.show(i)["ttl_s"] for i in ids}  # type: ignore[index]
    # The short queue's copy has at most ceil(20.5 s) = 21 s; ample for a loaded machine.
    assert shown["long"] > 500 and 0 < shown["short"] <= 21


def test_the_async_client_has_the_same_methods(lab3: Lab) -> None:
    async def run() -> None:
        async with AsyncClient([addr(lab3, i) for i in range(3)]) as c:
            await c.declare_exchange("async-fan", "fanout")
            await c.declare_queue("async-q", message_ttl_ms=60_000)
            await c.bind_queue("async-q", "async-fan")
            await c.bind_queue("async-r", "async-fan", "k")
            routes = await c.list_routes()
            assert routes.exchanges["async-fan"] == "fanout"
            assert routes.queues["async-q"] == (0, 60_000)
            ids = await c.publish("async-fan", "k", b"x", replicate=2)
            assert len(ids) == 2
            assert await c.purge_queue("async-r") == 1
            assert await c.delete_queue("async-q") == 1
            assert await c.unbind_queue("async-r", "async-fan", "k") is True
            assert await c.delete_exchange("async-fan") is True
            assert await c.publish("async-fan", "k", b"x") == []
            with pytest.raises(NotFoundError):
                await c.declare_exchange("async-fan", passive=True)

    asyncio.run(run())


@pytest.mark.timeout(180)
def test_routes_survive_a_restart_and_a_node_that_joins_later_learns_them(
    tmp_path: Path,
) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        with held(lab, 0) as a:
            a.declare_exchange("ev", "topic")
            a.bind_queue("audit", "ev", "task.#")
            a.declare_queue("tmp", expires_ms=3_600_000, message_ttl_ms=5000)
            a.declare_exchange("old", "fanout")
            a.delete_exchange("old")
            want = a.list_routes()
        for i in (1, 2):
            eventually(lambda i=i: _routes(lab, i) == want, "the routes spread")
        # Node 0's AOF rewritten (a snapshot of the table), then every node killed at once
        # and back on its AOF.
        n0 = lab.node(0)
        assert n0.call("BGREWRITEAOF") == "Background append only file rewriting started"
        eventually(lambda: lab.info(0)["aof_rewrite_in_progress"] == "0", "the rewrite ends")
        for i in range(3):
            lab.kill9(i)
        lab.restart(0)  # alone: what it holds comes from its (rewritten) AOF only
        assert _routes(lab, 0) == want
        for i in (1, 2):
            lab.restart(i)
            assert _routes(lab, i) == want
        # Node 2 replaced by a new, empty node that meets node 0: it learns the table.
        node = lab.node(2)
        lab.kill9(2)
        shutil.rmtree(node.data_dir)
        node.data_dir.mkdir()
        lab.restart(2)
        assert _routes(lab, 2) == Routes()
        a0 = lab.node(0)
        assert node.call("CLUSTER", "MEET", a0.host, a0.port) == "OK"
        eventually(lambda: _routes(lab, 2) == want, "the joiner learns the table")
        with held(lab, 2) as c:
            assert len(c.publish("ev", "task.succeeded", "x", replicate=1)) == 1


def _routes(lab: Lab, i: int) -> Routes:
    with held(lab, i) as c:
        return c.list_routes()


@pytest.mark.timeout(180)
def test_a_transient_queue_not_renewed_goes_away_with_its_bindings_and_jobs(
    tmp_path: Path,
) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        clients = [held(lab, i) for i in range(3)]
        try:
            a = clients[0]
            a.declare_exchange("bc", "fanout")
            a.declare_queue("kept", expires_ms=4000)
            a.declare_queue("reply", expires_ms=4000)
            a.bind_queue("reply", "bc")
            a.bind_queue("kept", "bc")
            for c in clients:
                eventually(lambda c=c: len(c.list_routes().bindings) == 2, "routes spread")
            for c in clients:  # jobs of the queue on every node
                assert len(c.publish("bc", "", "x", replicate=1)) == 2
            assert qlens(lab, "reply") == [1, 1, 1]

            def renewed_kept_only() -> bool:
                clients[1].declare_queue("kept", expires_ms=4000)  # the lease of one only
                return all(
                    "reply" not in c.list_routes().queues
                    and ("bc", "reply", "") not in c.list_routes().bindings
                    for c in clients
                )

            eventually(renewed_kept_only, "the unrenewed queue expires", 20)
            eventually(lambda: qlens(lab, "reply") == [0, 0, 0], "its jobs go on every node")
            assert qlens(lab, "kept") == [1, 1, 1]  # the renewed one keeps its jobs
            assert all(("bc", "kept", "") in c.list_routes().bindings for c in clients)
        finally:
            for c in clients:
                c.close()


@pytest.mark.timeout(180)
def test_a_node_cut_off_does_not_expire_a_queue_renewed_on_the_majority(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        clients = [held(lab, i) for i in range(3)]
        try:
            a = clients[0]
            a.declare_exchange("bc", "fanout")
            a.declare_queue("live", expires_ms=6000)
            a.bind_queue("live", "bc")
            want = a.list_routes()
            for c in clients:
                eventually(lambda c=c: c.list_routes() == want, "the routes spread")
            lab.partition([[0, 1], [2]])
            # A consumer keeps the lease on the majority side for twice its length; node 2
            # hears none of it, and sees its own copy's lease pass.
            end = time.monotonic() + 12.0
            while time.monotonic() < end:
                a.declare_queue("live", expires_ms=6000)
                time.sleep(0.5)  # the consumer's renewal pace (the workload, not a wait)
            lab.heal_partition()

            def healed_and_kept() -> bool:
                a.declare_queue("live", expires_ms=6000)
                seen = [c.list_routes() for c in clients]
                return all(r == seen[0] for r in seen) and seen[0].bindings == want.bindings

            eventually(healed_and_kept, "the tables agree after the heal", 30)
            assert all("live" in c.list_routes().queues for c in clients)
            assert len(clients[2].publish("bc", "", "x", replicate=1)) == 1
        finally:
            for c in clients:
                c.close()


@pytest.mark.timeout(240)
def test_purge_of_10000_jobs_spread_over_3_nodes_in_one_call(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        clients = [held(lab, i) for i in range(3)]
        try:
            for i, c in enumerate(clients):
                n = 3334 if i < 2 else 3332
                jobs = [{"queue": "big", "body": f"{i}-{k}", "replicate": 1} for k in range(n)]
                results = c.add_jobs(jobs)
                assert all(isinstance(r, str) for r in results)
            assert sum(qlens(lab, "big")) == 10_000 and min(qlens(lab, "big")) > 3000
            with Client([addr(lab, i) for i in range(3)]) as whole:
                assert ack_queued(whole, "big") == 10_000  # one purge_queue call
                assert qlens(lab, "big") == [0, 0, 0]
                assert whole.purge_queue("big") == 0
                # delete_queue purges too, on every node, and counts.
                for c in clients:
                    c.add_job("gone", "x", replicate=1)
                assert whole.delete_queue("gone") == 3
                assert qlens(lab, "gone") == [0, 0, 0]
                _purge_counts_right_under_concurrent_adds(lab, clients, whole)
        finally:
            for c in clients:
                c.close()


def _purge_counts_right_under_concurrent_adds(
    lab: Lab, clients: list[Client], whole: Client
) -> None:
    """Purges while three producers add (REPLICATE 2: each job queued on one node, a copy
    on another): every added job is either counted by a purge or still queued after."""
    stop = threading.Event()
    added = [0, 0, 0]

    def produce(i: int) -> None:
        while not stop.is_set():
            jobs = [{"queue": "busy", "body": "x", "replicate": 2} for _ in range(50)]
            added[i] += sum(isinstance(r, str) for r in clients[i].add_jobs(jobs))

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    purged = 0
    try:
        for _ in range(10):
            eventually(lambda: sum(qlens(lab, "busy")) > 0, "jobs to purge")
            purged += whole.purge_queue("busy")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert purged > 0
    assert purged + sum(qlens(lab, "busy")) == sum(added)
