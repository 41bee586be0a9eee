"""The SDK's one failover loop (disq/client/failover.py) against real nodes: a call whose
first node is still starting (its gRPC client API not loaded, every call answered UNAVAILABLE
"not run") or down moves on to the next node and succeeds, on each path that must never send
a call twice: a Publish (routes.py), the async client's AddJobs, the blocking add.

The Publish once raised IndeterminateError there, where AddJobs moved on: its loop lacked
"not run" in its list of calls that never left. The starting node is a real restarted node
held in that state by ``disq.testing.faults api-held`` until the test opens its gate.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, free_port  # noqa: E402
from eventually import all_know_each_other, eventually  # noqa: E402

from cluster.resp_client import RespClient  # noqa: E402
from disq.client import AsyncClient, Client, UnavailableError, starting  # noqa: E402
from disq.client.starting import STARTING_DETAILS  # noqa: E402


class _SeedOrder(random.Random):
    """Candidates in the order of the addresses given (no shuffle among equals): the held
    or dead node is always tried first."""

    def shuffle(self, x: Any) -> None:
        return None


def _add_every_way(first: str, second: str, queue: str) -> list[str]:
    """A Publish and an add_job on a fresh AsyncClient each (AddJobs), then the blocking
    add and a Publish on a fresh Client: each starts from ``first``. Their job ids."""

    async def aio() -> list[str]:
        ids = []
        async with AsyncClient([first, second], discover=False, rng=_SeedOrder()) as c:
            ids += await c.publish("", queue, b"published", replicate=1)
            assert c.last_node == second
        async with AsyncClient([first, second], discover=False, rng=_SeedOrder()) as c:
            ids.append(await c.add_job(queue, b"added", replicate=1))
            assert c.last_node == second
        return ids

    ids = asyncio.run(aio())
    with Client([first, second], discover=False, rng=_SeedOrder()) as c:
        ids.append(c.add_job(queue, b"added on the caller's thread", replicate=1))
        assert c.last_node == second
    with Client([first, second], discover=False, rng=_SeedOrder()) as c:
        ids += c.publish("", queue, b"published, blocking", replicate=1)
    return ids


def _starting_answer(grpc_addr: str) -> str:
    """The details of the health check's failure (its API is held), or "" if it serves."""
    with grpc.insecure_channel(grpc_addr) as ch:
        try:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        except grpc.RpcError as exc:
            call: Any = exc  # also a grpc.Call
            return str(call.details())
    return ""


def test_publish_and_adds_move_past_a_starting_node_and_a_dead_one(
    server_factory: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports, nodes = server_factory.drop_in_nodes(2, tmp_path)
    assert RespClient("127.0.0.1", ports[0]).call("CLUSTER", "MEET", "127.0.0.1", ports[1])
    all_know_each_other(ports)
    held, live = (f"127.0.0.1:{p + 10000}" for p in ports)
    # Restart node 0 on its view (a peer: it greets it, serves, then loads its client API),
    # its API held until the gate file exists.
    nodes[0].terminate()
    assert nodes[0].wait(30) == 0
    gate = tmp_path / "api-gate"
    faults = ["-m", "disq.testing.faults", "api-held", "--gate", str(gate), "--"]
    nodes[0].cmd = [sys.executable, *faults]
    nodes[0].start()  # until its RESP port answers PING
    assert STARTING_DETAILS in _starting_answer(held)
    # The SDK asks a starting node again for up to WAIT_S before it moves on; a shorter
    # wait keeps the test short (what it then does is the same).
    monkeypatch.setattr(starting, "WAIT_S", 0.2)

    ids = _add_every_way(held, live, "starting-first")
    assert len(ids) == 4 and all(i.startswith("D-") for i in ids)
    with Client(live, discover=False) as c:
        assert c.qlen("starting-first") == 4  # all on the live node

    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    ids = _add_every_way(dead, live, "dead-first")
    assert len(ids) == 4
    with Client(live, discover=False) as c:
        assert c.qlen("dead-first") == 4

    # The held node was only starting: with its gate open, it takes calls itself.
    gate.touch()

    def adds_there() -> bool:
        with Client(held, discover=False) as c:
            try:
                c.add_job("after-start", b"x", replicate=1)
            except UnavailableError:
                return False
            return c.last_node == held

    eventually(adds_there, "the held node to load its client API and take an add")
