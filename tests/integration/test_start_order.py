"""What a node serves first (issue 31): with no peer to hear from it first, its client ports
(beanstalk, RESP) serve before the bus (gRPC, the API) loads, and the bus still comes up and
still joins; with peers, the peers still hear from it first (test_restart.py).

Real node processes; behaviour and order only, never times.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, free_port  # noqa: E402
from eventually import all_know_each_other, eventually  # noqa: E402

from cluster.resp_client import RespClient  # noqa: E402
from disq.client import Client  # noqa: E402


def _events(log: str) -> list[str]:
    out = []
    for line in log.splitlines():
        try:
            out.append(json.loads(line)["event"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return r.status == health_pb2.HealthCheckResponse.SERVING


def test_a_lone_node_serves_its_client_ports_then_its_bus(server_factory: ServerFactory) -> None:
    resp_port, grpc_port = free_port(), free_port()
    node = server_factory("--resp-port", str(resp_port), "--grpc-port", str(grpc_port))
    # The fixture saw the beanstalk port answer, and waited for the gRPC port to accept.
    assert RespClient("127.0.0.1", resp_port).call("PING") == "PONG"
    eventually(lambda: _serving(grpc_port), "the gRPC health service to say SERVING")
    with Client(f"127.0.0.1:{grpc_port}", discover=False) as c:
        job_id = c.add_job("start-order", b"through the bus")
        got = c.get_jobs("start-order", count=1, timeout_s=5)
    assert [j.id for j in got] == [job_id]
    with node.connect() as conn:
        assert conn.put(b"hi", ttr=60) > 0
    events = _events(node.log_text())
    # The order the node logged: its client ports listened before the bus was built.
    assert events.index("listening") < events.index("peer_links_listening"), events


def test_lone_drop_in_nodes_meet_after_they_serve(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """Two nodes started from configs with only ``port`` and ``dir`` (no peers: each serves
    before its bus loads), then CLUSTER MEET on the client port: they form a cluster and a
    job is replicated on both."""
    ports, _ = server_factory.drop_in_nodes(2, tmp_path)
    # At once, the bus of the other possibly still loading: the MEET is resent until met.
    assert RespClient("127.0.0.1", ports[0]).call("CLUSTER", "MEET", "127.0.0.1", ports[1])
    all_know_each_other(ports)
    first = RespClient("127.0.0.1", ports[0])
    job_id = first.call("ADDJOB", "met", "x", 5000, "REPLICATE", 2)
    for port in ports:
        shown = RespClient("127.0.0.1", port).call("SHOW", job_id)
        assert shown, f"node {port} holds no copy of {job_id}"


def test_a_node_restarted_with_a_peer_greets_it_then_serves_clients_then_its_api(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """A node restarted on a view that holds a peer dials it before its client ports serve
    (peers hear first), and loads its gRPC client API after them: its log has the link up
    before it listened, the API loaded after, and the API then serves (health and a job)."""
    ports, nodes = server_factory.drop_in_nodes(2, tmp_path)
    assert RespClient("127.0.0.1", ports[0]).call("CLUSTER", "MEET", "127.0.0.1", ports[1])
    all_know_each_other(ports)
    nodes[0].terminate()  # SIGTERM: drains (nothing to hand off), saves its view, exits
    assert nodes[0].wait(30) == 0
    log = tmp_path / "restart.log"  # the restarted node's own lines only
    nodes[0].log_path = log
    nodes[0].start()  # until it answers PING
    grpc_port = ports[0] + 10000

    def api_serving() -> bool:
        try:
            return _serving(grpc_port)
        except grpc.RpcError as exc:  # UNAVAILABLE, "not run": its API is loading
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
            return False

    eventually(api_serving, "its gRPC health service to say SERVING", 60)
    with Client(f"127.0.0.1:{grpc_port}", discover=False) as c:
        job_id = c.add_job("restart-order", b"after a restart", replicate=2)
        got = c.get_jobs("restart-order", count=1, timeout_s=5)
    assert [j.id for j in got] == [job_id]
    eventually(
        lambda: "client_api_loaded" in _events(log.read_text()),
        "the node to log its client API loaded",
        timeout=30,
    )
    events = _events(log.read_text())
    assert events.index("peer_link_up") < events.index("listening"), events
    assert events.index("listening") < events.index("client_api_loaded"), events
