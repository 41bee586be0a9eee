"""Ports named with their role: a node whose port is taken says which one it is, and an
address given as a gRPC port that answers as another of the node's ports is called that.

Real node processes; the taken port is held by a socket of the test.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, free_port  # noqa: E402

from cluster.nodeproc import run_node  # noqa: E402
from disq.client.probe import describe_address  # noqa: E402


@pytest.mark.parametrize(
    ("flag", "role"),
    [
        ("-p", "beanstalk"),
        ("--resp-port", "RESP"),
        ("--grpc-port", "gRPC"),
        ("--job-lane-port", "job lane"),
        ("--metrics-port", "admin (HTTP)"),
    ],
)
def test_a_port_that_cannot_be_bound_is_named_with_its_role(flag: str, role: str) -> None:
    """It said ``cannot listen on 127.0.0.1: [Errno 98] Address already in use`` for the
    beanstalk and RESP ports, and died with a traceback for the others."""
    ports = {"-p": free_port(), "--resp-port": free_port(), "--grpc-port": free_port()}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        taken = held.getsockname()[1]
        ports[flag] = taken
        args = ["--in-memory", "-l", "127.0.0.1"]
        for f, p in ports.items():
            args += [f, str(p)]
        done = run_node(*args, env={"DISQ_PURE": "1"})
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"disq-node: cannot listen on the {role} port 127.0.0.1:{taken}: ")
    assert "Traceback" not in done.stderr


def test_an_address_that_answers_as_another_port_is_named(server_factory: ServerFactory) -> None:
    grpc_port, resp_port = free_port(), free_port()
    node = server_factory.new("--grpc-port", str(grpc_port), "--resp-port", str(resp_port))
    resp = describe_address(f"127.0.0.1:{resp_port}")
    assert resp == (
        f"127.0.0.1:{resp_port}: answers, but is a RESP (Disque/Redis) port, not disq's gRPC "
        "port (the nodes' --grpc-port)"
    )
    assert "is a beanstalk port, not disq's gRPC port" in describe_address(f"127.0.0.1:{node.port}")
    assert "nothing answers" in describe_address(f"127.0.0.1:{free_port()}")
