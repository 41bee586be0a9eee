"""Prometheus metrics on the HTTP admin port, scraped from real nodes over real HTTP: values
move as jobs are added, delivered, requeued, acked and replicated; a killed peer shows in the
membership gauges; requirepass guards /metrics; the Grafana dashboard only names metrics a
scrape has."""

from __future__ import annotations

import base64
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServerFactory, ServerProcess, free_port
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespClient  # noqa: E402

DASHBOARD = ROOT / "k8s" / "grafana-dashboard.json"
METRICS_PORT_INCR = 2000  # config-file mode: metrics-port defaults to port + 2000


def fetch(port: int, path: str = "/metrics", auth: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if auth is not None:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, auth: str | None = None) -> Samples:
    status, text = fetch(port, auth=auth)
    assert status == 200, text
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def names_in_scrape(text: str) -> set[str]:
    """Every series name a PromQL query could use against this scrape."""
    names: set[str] = set()
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        if fam.type == "counter":
            names.add(fam.name + "_total")
        elif fam.type == "histogram":
            names.update(fam.name + s for s in ("_bucket", "_sum", "_count"))
        names.update(s.name for s in fam.samples)
    return names


def dashboard_metric_names() -> set[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("expr", "query") and isinstance(v, str):
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    assert exprs, "the dashboard has no PromQL"
    return {m for e in exprs for m in re.findall(r"\bdisq_[a-z0-9_]+", e)}


@pytest.fixture
def node(server_factory: ServerFactory) -> Iterator[tuple[ServerProcess, int, int]]:
    if server_factory.kind != "disq":
        pytest.skip("metrics are disq's")
    resp, grpc, mport = free_port(), free_port(), free_port()
    srv = server_factory.new(
        "--resp-port", str(resp), "--grpc-port", str(grpc), "--metrics-port", str(mport)
    )
    yield srv, resp, mport


def test_counters_move_with_a_job_and_the_dashboard_names_exist(
    node: tuple[ServerProcess, int, int],
) -> None:
    srv, resp, mport = node
    assert fetch(mport, "/healthz") == (200, "ok\n")
    before = scrape(mport)
    assert value(before, "disq_jobs_added_total") == 0
    with RespClient(port=resp) as c:
        job_id = c.call("ADDJOB", "mq", "body", 0, "RETRY", 1)
        assert isinstance(job_id, str | bytes)
        s = scrape(mport)
        assert value(s, "disq_jobs_added_total") == 1
        assert value(s, "disq_queue_depth", queue="mq") == 1
        assert value(s, "disq_queue_events_total", queue="mq", event="enqueued") == 1
        got = c.call("GETJOB", "NOHANG", "FROM", "mq")
        assert got and got[0][1] == (job_id.encode() if isinstance(job_id, str) else job_id)
        s = scrape(mport)
        assert value(s, "disq_jobs_delivered_total") == 1
        assert value(s, "disq_queue_depth", queue="mq") == 0
        assert value(s, "disq_queue_events_total", queue="mq", event="delivered") == 1
        assert value(s, "disq_job_delivery_latency_seconds_count") == 1
        # Not acked: RETRY 1 queues it again.
        eventually(
            lambda: value(scrape(mport), "disq_jobs_requeued_total") >= 1, "a requeue counted"
        )
        s = scrape(mport)
        assert value(s, "disq_queue_events_total", queue="mq", event="requeued") >= 1
        assert value(s, "disq_queue_depth", queue="mq") == 1
        got = c.call("GETJOB", "NOHANG", "FROM", "mq")
        assert got
        assert c.call("ACKJOB", job_id) == 1
        s = scrape(mport)
        assert value(s, "disq_jobs_acked_total") == 1
        assert value(s, "disq_queue_events_total", queue="mq", event="acked") == 1
        assert value(s, "disq_job_ack_latency_seconds_count") == 1
        assert value(s, "disq_resp_command_calls_total", command="addjob") == 1
        assert value(s, "disq_resp_connected_clients") == 1
        assert value(s, "disq_cluster_members", state="alive") == 1
    # The beanstalk door's counters.
    with srv.connect() as conn:
        conn.send(b"use bt\r\nput 0 0 60 2\r\nhi\r\n")
        assert conn.read_line() == b"USING bt\r\n"
        assert conn.read_line().startswith(b"INSERTED ")
        s = scrape(mport)
        assert value(s, "disq_beanstalk_commands_total", command="put") == 1
        assert value(s, "disq_beanstalk_tube_jobs", tube="bt", state="ready") == 1
        assert value(s, "disq_beanstalk_tube_puts_total", tube="bt") == 1
        assert value(s, "disq_beanstalk_connections") >= 1
    # Every metric the Grafana dashboard queries is in a real scrape.
    _, text = fetch(mport)
    missing = dashboard_metric_names() - names_in_scrape(text)
    assert not missing, f"dashboard names metrics the node does not export: {sorted(missing)}"


def test_requirepass_guards_metrics(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("metrics are disq's")
    resp, grpc, mport = free_port(), free_port(), free_port()
    server_factory.new(
        "--resp-port",
        str(resp),
        "--grpc-port",
        str(grpc),
        "--metrics-port",
        str(mport),
        "--requirepass",
        "s3cret",
    )
    assert fetch(mport)[0] == 401
    assert fetch(mport, auth="Bearer wrong")[0] == 401
    bad = base64.b64encode(b"any:wrong").decode()
    assert fetch(mport, auth=f"Basic {bad}")[0] == 401
    good = base64.b64encode(b"whoever:s3cret").decode()
    assert fetch(mport, auth=f"Basic {good}")[0] == 200
    assert fetch(mport, auth="Bearer s3cret")[0] == 200
    assert fetch(mport, "/healthz") == (200, "ok\n")


def test_metrics_off_by_default_in_flag_mode(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("metrics are disq's")
    srv = server_factory.new("--resp-port", str(free_port()), "--grpc-port", str(free_port()))
    assert "metrics_listening" not in srv.log_text()


def test_three_nodes_replication_and_a_killed_peer(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        ports = [lab.node(i).port + METRICS_PORT_INCR for i in range(3)]

        def whole() -> Samples | None:
            # The lab is formed when every node knows every other; node 0's own view of
            # them alive, and its links up, may follow a moment later.
            s = scrape(ports[0])
            alive = value(s, "disq_cluster_members", state="alive") == 3
            links = sum(v for (n, _), v in s.items() if n == "disq_peer_link_up") == 2
            return s if alive and links else None

        s0 = eventually(whole, "node 0's metrics to show 3 members alive and 2 links up")
        before = [value(scrape(p), "disq_job_replication_latency_seconds_count") for p in ports]
        frames = value(s0, "disq_peer_frames_sent_total")
        job_id = lab.node(0).call("ADDJOB", "rq", "x", 5000, "REPLICATE", 3)
        assert isinstance(job_id, str | bytes)
        s0 = scrape(ports[0])
        assert value(s0, "disq_peer_frames_sent_total") > frames
        assert value(s0, "disq_queue_events_total", queue="rq", event="enqueued") == 1
        for i in (1, 2):
            s = scrape(ports[i])
            assert value(s, "disq_jobs") >= 1
            assert value(s, "disq_queue_events_total", queue="rq", event="replicated") == 1
            assert value(s, "disq_job_replication_latency_seconds_count") == before[i] + 1
            # Every peer is this build, so every up link carries the batch messages.
            assert value(s, "disq_peer_links_columnar") == value(s, "disq_peer_links_up") == 2
        lab.kill9(2)

        def peer_down() -> bool:
            s = scrape(ports[0])
            return (
                value(s, "disq_cluster_members", state="suspect")
                + value(s, "disq_cluster_members", state="dead")
                >= 1
                and value(s, "disq_cluster_members", state="alive") == 2
            )

        eventually(peer_down, "the killed peer suspect or dead in node 0's metrics")
        eventually(
            lambda: value(scrape(ports[0]), "disq_peer_links_up") == 1,
            "the link to the killed peer down",
        )
