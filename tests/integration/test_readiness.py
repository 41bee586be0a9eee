"""Readiness as a Kubernetes probe sees it: the standard gRPC health service says SERVING only
once the node has loaded its AOF and, when started with --join, knows a peer (or its join
attempts ran out). A pod is therefore not sent clients before it is in the cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import free_port  # noqa: E402
from eventually import eventually  # noqa: E402

pytestmark = pytest.mark.usefixtures("disq_only")


@pytest.fixture
def disq_only(server_kind: str) -> None:
    if server_kind != "disq":
        pytest.skip("disq's cluster ports")


def _status(grpc_port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return int(r.status)


def test_a_joining_node_is_not_serving_until_it_knows_a_peer(
    server_factory: Any,
) -> None:
    first_bus = free_port()  # nobody listens there yet
    joining_bus = free_port()
    server_factory(
        "--resp-port", str(free_port()), "--grpc-port", str(joining_bus),
        "--join", f"127.0.0.1:{first_bus}", "--in-memory",
    )  # fmt: skip
    eventually(
        lambda: _status(joining_bus) == health_pb2.HealthCheckResponse.NOT_SERVING,
        "the joining node's health service to answer NOT_SERVING",
    )
    server_factory("--resp-port", str(free_port()), "--grpc-port", str(first_bus), "--in-memory")
    assert _status(first_bus) == health_pb2.HealthCheckResponse.SERVING  # no --join: at once
    eventually(
        lambda: _status(joining_bus) == health_pb2.HealthCheckResponse.SERVING,
        "the joining node to serve once it met the first one",
    )
