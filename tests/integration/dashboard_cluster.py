"""A real 3-node cluster (node processes in flag mode) with the dashboard on each admin port,
for the dashboard's tests (test_dashboard_browser.py, test_dashboard_http.py)."""

from __future__ import annotations

import json
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from conftest import ServerFactory, ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402


@dataclass
class DashNode:
    srv: ServerProcess
    resp: int
    grpc: int
    http: int

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http}/dashboard"


def start_cluster(
    factory: ServerFactory, n: int, *extra: str, password: str | None = None
) -> list[DashNode]:
    """``n`` nodes joined to the first, each with the admin port on; waits until the first
    node's dashboard lists every node as ok."""
    nodes: list[DashNode] = []
    for _ in range(n):
        resp, grpc, http = free_port(), free_port(), free_port()
        args = [
            "--in-memory", "--resp-port", str(resp), "--grpc-port", str(grpc),
            "--metrics-port", str(http), "--node-timeout-ms", "1500", *extra,
        ]  # fmt: skip
        if password:
            args += ["--requirepass", password]
        if nodes:
            args += ["--join", nodes[0].grpc_addr]
        nodes.append(DashNode(factory.new(*args), resp, grpc, http))

    def healthy() -> bool:
        req = urllib.request.Request(f"http://127.0.0.1:{nodes[0].http}/metrics")
        if password:
            req.add_header("Authorization", f"Bearer {password}")
        with urllib.request.urlopen(req, timeout=5) as r:
            text = r.read().decode()
        return f'disq_cluster_members{{state="alive"}} {float(n)}' in text

    eventually(healthy, f"{n} nodes alive", timeout=30)
    return nodes


def api_queues(node: DashNode, cookie: str | None = None) -> dict[str, object]:
    req = urllib.request.Request(node.url + "/api/queues")
    if cookie:
        req.add_header("Cookie", cookie)
    with urllib.request.urlopen(req, timeout=10) as r:
        data: dict[str, object] = json.loads(r.read())
        return data
