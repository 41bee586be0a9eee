"""Waiting for cluster state that travels over the network: poll with a deadline.

Used where no event can be awaited from outside the nodes (a SHOW on another node, INFO);
the poll interval is short and the deadline generous, and the failure names what was awaited.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cluster.resp_client import RespClient, RespError

T = TypeVar("T")


def eventually(fn: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """Poll ``fn`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except (OSError, RespError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def all_know_each_other(ports: Sequence[int], timeout: float = 60.0) -> None:
    """Wait until each node on 127.0.0.1:``ports`` (RESP) counts all of them in CLUSTER
    INFO's ``cluster_known_nodes``: a MEET travelled."""
    want = b"cluster_known_nodes:%d" % len(ports)
    for port in ports:
        eventually(
            lambda port=port: want in RespClient("127.0.0.1", port).call("CLUSTER", "INFO"),
            f"node {port} knows all {len(ports)}",
            timeout,
        )


def listening(port: int, what: str, timeout: float = 30.0) -> None:
    """Wait until 127.0.0.1:``port`` accepts a connection. A node with no peer serves its
    client ports before its gRPC (bus) port (issue 31): a test that talks gRPC to a node it
    just saw answer on RESP or beanstalk waits for that port first."""

    def accepts() -> bool:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return True

    eventually(accepts, what, timeout)
