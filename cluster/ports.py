"""Ports for the nodes the lab, the tests and the benchmarks start.

A port handed out here is below the kernel's ephemeral range (a port from ``bind(0)`` is one
any outgoing connection on the machine may take between the check and the node's bind, or
between a kill and a restart), free when it is handed out, and never handed out twice by one
process (a port is checked free and the check's socket closed, so two calls in a row could
otherwise get it back before either node binds it).

Under pytest-xdist the suite's workers pick at the same time: each takes ports of its own
blocks only (``BLOCK`` ports each, dealt round-robin to the workers), so two workers never
hand out the same port. A node's bus port (its port + ``BUS_PORT_OFFSET``) lands in a block
of the same worker as long as the worker count divides ``BUS_PORT_OFFSET // BLOCK`` (20:
2, 4, 5, 10 or 20 workers); for other counts :func:`pick` says so.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Sequence

HOST = "127.0.0.1"
LOWEST_PORT = 12000
BUS_PORT_OFFSET = 10000  # Disque's CLUSTER_PORT_INCR: the gRPC bus is RESP port + 10000
BLOCK = 500

_handed_out: set[int] = set()
_lock = threading.Lock()


def ephemeral_port_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def worker_share() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker; (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or "1")
    if not name.startswith("gw") or count <= 1:
        return 0, 1
    return int(name[2:]), count


def mine(port: int) -> bool:
    """Whether ``port`` is in one of this worker's blocks."""
    index, count = worker_share()
    return (port // BLOCK) % count == index


def pick(
    offsets: Sequence[int] = (0,), host: str = HOST, rng: random.Random | None = None
) -> int:
    """A port P such that P + each offset is free now, this worker's, and never handed out
    before by this process; all of them are taken."""
    r = rng or random.Random()
    high = ephemeral_port_low() - max(offsets) - 1
    if high <= LOWEST_PORT:
        high = 55535 - max(offsets) - 1
    with _lock:
        for _ in range(20_000):
            port = r.randrange(LOWEST_PORT, high)
            wanted = [port + off for off in offsets]
            if any(p in _handed_out or not mine(p) for p in wanted):
                continue
            if all(port_free(p, host) for p in wanted):
                _handed_out.update(wanted)
                return port
    index, count = worker_share()
    raise RuntimeError(
        f"no free ports at offsets {list(offsets)} below the ephemeral range for worker "
        f"{index} of {count} (a worker count must divide {BUS_PORT_OFFSET // BLOCK})"
    )
