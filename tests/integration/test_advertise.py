"""The address a node gives out (``--advertise-host`` / ``advertise-host``), on real processes.

In network namespaces (cluster/netns.py; root and iproute2, else skipped): nodes bound to
0.0.0.0 tell each other, their RESP clients and the SDK their namespace address; a node
killed and restarted on its data dir in a new namespace, at a new address, is taken back
there and used for REPLICATE 3 adds within seconds, and the SDK's view drops the old
address. Without namespaces: a node bound to a wildcard with nothing advertised says what it
guessed, and a wildcard given as the advertised address is refused.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from conftest import ServerFactory, free_port  # noqa: E402
from eventually import eventually, listening  # noqa: E402

from cluster import netns  # noqa: E402
from cluster.lab import Lab  # noqa: E402
from cluster.nodeproc import resp_pong, run_node  # noqa: E402
from cluster.resp_client import RespClient, RespError  # noqa: E402
from disq.client import Client  # noqa: E402
from disq.server.advertise import route_address  # noqa: E402

needs_netns = pytest.mark.skipif(
    netns.unavailable_reason() is not None,
    reason=f"network namespaces unavailable: {netns.unavailable_reason()}",
)


def _text(x: object) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def hello_hosts(lab: Lab, i: int) -> dict[str, str]:
    """Node ``i``'s HELLO (RESP) as {node id: host}."""
    reply = lab.node(i).call("HELLO")
    assert isinstance(reply, list)
    return {_text(e[0]): _text(e[1]) for e in reply[2:]}


def cluster_nodes_hosts(lab: Lab, i: int) -> dict[str, str]:
    """Node ``i``'s CLUSTER NODES as {node id: host:port}."""
    text = _text(lab.node(i).call("CLUSTER", "NODES"))
    return {line.split()[0]: line.split()[1] for line in text.splitlines() if line.strip()}


def metric(host: str, port: int, name: str) -> float:
    """One unlabelled sample of a node's Prometheus metrics."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in the metrics of {host}:{port}")


def saved_peers(data_dir: Path) -> int:
    """How many peers a node's saved cluster view holds."""
    try:
        return len(json.loads((data_dir / "cluster.json").read_text())["members"])
    except (OSError, ValueError, KeyError):
        return 0


def add_replicated(lab: Lab, i: int, body: str) -> str | None:
    """ADDJOB ... REPLICATE 3 on node ``i`` (1 s to get the copies): the id, or None if it
    was refused (NOREPL while a copy cannot be made)."""
    try:
        reply = lab.node(i).call("ADDJOB", "moved", body, 1000, "REPLICATE", 3, timeout=5.0)
    except (OSError, RespError):
        return None
    return _text(reply)


@needs_netns
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_node_back_in_a_new_namespace_is_used_at_its_new_address(tmp_path: Path) -> None:
    lab = Lab(3, tmp_path / "lab", node_timeout_ms=2000, network="netns", bind_any=True)
    with lab:
        assert lab.partitions == "netns"
        assert "bind 0.0.0.0" in lab.node(2).conf_path.read_text()
        want = {nd.id: nd.host for nd in lab.nodes}
        assert all(h.startswith("10.213.") for h in want.values())
        # Bound to 0.0.0.0, each node gives out its namespace address: in HELLO and CLUSTER
        # NODES on every node (itself included), never 0.0.0.0 or loopback.
        for i in range(3):
            assert hello_hosts(lab, i) == want
            assert cluster_nodes_hosts(lab, i) == {
                nd.id: f"{nd.host}:{nd.port}" for nd in lab.nodes
            }
        sdk = Client(f"{lab.node(0).host}:{lab.node(0).bus_port}", refresh_s=0.2)
        try:
            addrs = {f"{nd.host}:{nd.bus_port}" for nd in lab.nodes}
            eventually(
                lambda: sdk.qlen("moved") == 0 and {n.addr for n in sdk.nodes()} == addrs,
                "the SDK lists the advertised addresses",
                15,
            )
            first = add_replicated(lab, 0, "before")
            assert first is not None and first.startswith("D-")

            moved = lab.node(2)
            old, moved_id = moved.host, moved.id
            # What a restart knows of its peers is its saved view (DIR/cluster.json, written
            # a second after a change): a node killed before that would come back knowing
            # no one, which is another test's subject.
            eventually(lambda: saved_peers(moved.data_dir) == 2, "node 2 saved its view", 15)
            new = lab.move(2)  # kill -9, new namespace and address, restart on its data dir
            back_at = time.monotonic()
            assert new != old and new.startswith("10.213.")
            assert moved.id == moved_id and not lab.stats.id_changes  # same data dir
            assert lab.stats.moves == 1

            # A surviving node replicates to it again, at its new address.
            job = eventually(lambda: add_replicated(lab, 0, "after"), "REPLICATE 3 adds again", 15)
            took = time.monotonic() - back_at
            print(f"REPLICATE 3 add answered {took:.2f} s after the moved node answered PING")
            assert job.startswith("D-")
            shown = moved.call("SHOW", job)  # on the moved node, at its new address
            assert isinstance(shown, list) and job in [_text(x) for x in shown]
            # Its peers and the node itself give out the new address, not the old one.
            for i in range(3):
                eventually(
                    lambda i=i: hello_hosts(lab, i).get(moved.id or "") == new,
                    f"node {i} gives out the new address",
                    10,
                )
                assert f"{old}:{moved.port}" not in cluster_nodes_hosts(lab, i).values()
            # The SDK's view follows: the new address in, the old one out.
            eventually(
                lambda: (
                    sdk.qlen("moved") >= 0
                    and f"{new}:{moved.bus_port}" in {n.addr for n in sdk.nodes()}
                    and f"{old}:{moved.bus_port}" not in {n.addr for n in sdk.nodes()}
                ),
                "the SDK drops the old address for the new one",
                10,
            )
            # The moved node is found by its id at the new address (acks route by id).
            by_id = {n.node_id: n.addr for n in sdk.nodes()}
            assert by_id[moved.id] == f"{new}:{moved.bus_port}"
            # Job messages to it take the job lane, dialled at the advertised address too:
            # node 0's two links are both up with a lane, and the moved node got frames on
            # its lane (its metrics port, port + 2000, on its new address).
            assert metric(lab.node(0).host, lab.node(0).port + 2000, "disq_peer_links_lane") == 2
            got = metric(new, moved.port + 2000, "disq_peer_lane_frames_received_total")
            assert got > 0
        finally:
            sdk.close()
        lab.wait_cluster(30)


@pytest.mark.timeout(60)
def test_a_wildcard_bind_with_nothing_advertised_says_what_it_guessed(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    resp, grpc_port, port = free_port(), free_port(), free_port()
    log = tmp_path / "node.log"
    args = ["-l", "0.0.0.0", "-p", str(port)]
    args += ["--resp-port", str(resp), "--grpc-port", str(grpc_port), "--in-memory"]
    server_factory.node(*args, cwd=tmp_path, log_path=log, ready=resp_pong(resp))
    nodes = _text(RespClient("127.0.0.1", resp, timeout=2.0).call("CLUSTER", "NODES"))
    guess = route_address(socket.AF_INET) or "127.0.0.1"
    myself = [line for line in nodes.splitlines() if "myself" in line]
    assert len(myself) == 1 and myself[0].split()[1] == f"{guess}:{resp}"
    warnings = [
        json.loads(line)
        for line in log.read_text().splitlines()
        if "advertise_host_guessed" in line
    ]
    assert len(warnings) == 1
    assert warnings[0]["advertised"] == guess and warnings[0]["bind"] == "0.0.0.0"
    assert "--advertise-host" in warnings[0]["hint"]


def _serving(factory: ServerFactory, args: list[str], cwd: Path, resp_port: int) -> RespClient:
    """A node started with ``args``, connected on its RESP port once it answers PING."""
    factory.node(*args, cwd=cwd, ready=resp_pong(resp_port))
    return RespClient("127.0.0.1", resp_port, timeout=2.0)


def _assert_advertises(c: RespClient, host: str) -> None:
    """HELLO gives the node out at ``host``, and CONFIG GET advertise-host says so."""
    hello = c.call("HELLO")
    assert isinstance(hello, list)
    assert _text(hello[2][1]) == host
    assert _text(c.call("CONFIG", "GET", "advertise-host")[1]) == host


@pytest.mark.timeout(60)
def test_an_advertised_address_is_given_out_as_is_and_a_wildcard_refused(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    bad = run_node("--in-memory", "--advertise-host", "0.0.0.0", timeout=30, cwd=tmp_path)
    assert bad.returncode == 1
    assert "--advertise-host 0.0.0.0 is a wildcard" in bad.stderr
    resp, grpc_port, port = free_port(), free_port(), free_port()
    args = ["-l", "127.0.0.1", "-p", str(port)]
    args += ["--resp-port", str(resp), "--grpc-port", str(grpc_port), "--in-memory"]
    args += ["--advertise-host", "disq-0.example.internal"]
    with _serving(server_factory, args, tmp_path, resp) as c:
        _assert_advertises(c, "disq-0.example.internal")
        listening(grpc_port, "the gRPC port")
        with Client(f"127.0.0.1:{grpc_port}", discover=False) as sdk:
            (me,) = sdk.hello().nodes
            assert (me.host, me.grpc_port) == ("disq-0.example.internal", grpc_port)


def test_the_flag_over_the_config_file_is_what_config_get_shows(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    # Redis treats arguments after the config file as config lines: CONFIG GET (and REWRITE)
    # see the flag's value, not the file's.
    resp = free_port()
    while resp + 10000 > 65535:
        resp = free_port()
    conf = tmp_path / "node.conf"
    conf.write_text(f"port {resp}\ndir {tmp_path}\nadvertise-host from-file.example\n")
    args = [str(conf), "--advertise-host", "from-flag.example"]
    with _serving(server_factory, args, tmp_path, resp) as c:
        _assert_advertises(c, "from-flag.example")
