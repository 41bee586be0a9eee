"""The job lane port against a flood, and the node's open-files limit, on real node processes.

A node started with a low RLIMIT_NOFILE (systemd's default soft 1024) raises its soft limit
toward the hard limit and logs what it got. One whose hard limit is 1024 as well (it cannot
raise past it) keeps serving RESP clients while thousands of connections to its lane port
never say hello: those are capped (the oldest closed for each new one past the cap), the
rest are closed by the hello timer, and the metric shows the cap at work. A node that joins
it meanwhile forms the cluster with it and replicates to it.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ServerFactory, ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402
from test_metrics import scrape, value  # noqa: E402

from cluster.resp_client import RespClient, info_fields  # noqa: E402

FLOOD = 3000


@pytest.fixture(autouse=True)
def _disq_only(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the job lane is disq's")


def soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def log_events(srv: ServerProcess, event: str) -> list[dict[str, object]]:
    out = []
    for line in srv.log_text().splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            rec = json.loads(line)
            if rec.get("event") == event:
                out.append(rec)
    return out


def test_the_node_raises_its_soft_fd_limit_and_logs_what_it_got(
    server_factory: ServerFactory,
) -> None:
    # Room above: the soft limit goes to maxclients (10000) + 1024 reserved.
    roomy = server_factory.new("--resp-port", str(free_port()), nofile=(256, 16384))
    assert roomy.proc is not None
    assert soft_nofile(roomy.proc.pid) == 11024
    [got] = eventually(lambda: log_events(roomy, "open_files_limit"), "the limit logged")
    assert (got["was"], got["soft"], got["hard"], got["wanted"]) == (256, 11024, 16384, 11024)

    # A hard limit below that: as far as it goes, and a warning that says so.
    capped = server_factory.new("--resp-port", str(free_port()), nofile=(256, 4096))
    assert capped.proc is not None
    assert soft_nofile(capped.proc.pid) == 4096
    [low] = eventually(lambda: log_events(capped, "open_files_limit_low"), "the warning")
    assert (low["was"], low["soft"], low["hard"]) == (256, 4096, 4096)


class Flood:
    """Connections to a port that never send a byte, kept at ``size`` open: each one the
    node closes is replaced, as an attacker would, until ``stop``."""

    def __init__(self, port: int, size: int) -> None:
        self.port = port
        self.size = size
        self.socks: dict[int, socket.socket] = {}
        self.opened = 0
        self.closed_by_node = 0
        self.full = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        for s in self.socks.values():
            s.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _open(self) -> None:
        # One connect at a time, each to its end: a burst of thousands of non-blocking
        # connects would overflow the port's accept queue, and a connection the kernel
        # completed on our side but dropped on the node's looks open here for ever.
        s = socket.socket()
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()  # the node's accept queue is full: not accepting
            return
        s.setblocking(False)
        self.socks[s.fileno()] = s
        self.opened += 1

    def poke(self) -> None:
        """One byte (no hello: that takes 64) on each connection still open. A connection
        the kernel completed for us but never queued for the node (its accept queue was
        full) looks open here until we send: the byte gets it accepted, or a reset."""
        for s in self.socks.values():
            try:
                s.send(b"\0")
            except OSError:
                pass  # reset already: reap sees it

    def reap(self, wait_s: float) -> None:
        """Forget (and count) the connections the node closed: readable with EOF or reset."""
        socks = list(self.socks.values())
        poller = select.poll()
        for s in socks:
            poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
        for fd, _ in poller.poll(int(wait_s * 1000)):
            s = self.socks.pop(fd)
            try:
                data = s.recv(1)
            except OSError:
                data = b""
            assert data == b"", "the lane port wrote to a connection without a hello"
            s.close()
            self.closed_by_node += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            while len(self.socks) < self.size and not self._stop.is_set():
                self._open()
            self.full.set()
            self.reap(0.05)


def test_a_lane_flood_leaves_resp_clients_served_and_is_closed(
    server_factory: ServerFactory,
) -> None:
    resp, lane, mport = free_port(), free_port(), free_port()
    srv = server_factory.new(
        "--resp-port", str(resp),
        "--grpc-port", str(free_port()),
        "--job-lane-port", str(lane),
        "--metrics-port", str(mport),
        nofile=(1024, 1024),  # systemd's soft limit, and no room to raise it
    )  # fmt: skip
    assert srv.proc is not None and soft_nofile(srv.proc.pid) == 1024
    eventually(lambda: scrape(mport), "the admin port")
    with Flood(lane, FLOOD) as flood:
        assert flood.full.wait(60), "the flood never had its connections open"
        # During the flood (each connection the node closes is opened again), new RESP
        # clients connect and get answers, and the node's descriptors stay far from its
        # limit: the lane port may hold 64 connections without a hello (plus one accept
        # batch being closed), where it held all 1024 without the cap.
        fds = [open_fds(srv.proc.pid)]
        for _ in range(5):
            with RespClient(port=resp, timeout=10) as c:
                assert c.call("PING") == "PONG"
            fds.append(open_fds(srv.proc.pid))
        assert max(fds) <= 256, fds  # 88 here with the cap; 580 to 1024 without
        s = scrape(mport)
        # The cap at work: an eighth of 1024 descriptors per process, half of it per port.
        assert value(s, "disq_peer_lane_pending") <= 64
        assert value(s, "disq_peer_lane_pending_closed_total", reason="cap") >= 1
        flood.stop()
        flood.poke()
        # What is still open is closed: by the node (at the cap, or by the hello timer) or,
        # for what the node never accepted, by the kernel's reset.
        eventually(lambda: (flood.reap(0.5), not flood.socks)[1], "every flood socket closed")
    assert flood.closed_by_node == flood.opened >= FLOOD
    s = scrape(mport)
    assert value(s, "disq_peer_lane_pending") == 0
    assert value(s, "disq_peer_lane_pending_closed_total", reason="timeout") >= 1
    with RespClient(port=resp, timeout=10) as c:
        assert c.call("PING") == "PONG"


def reachable(resp_port: int) -> str:
    with RespClient(port=resp_port, timeout=10) as c:
        return str(info_fields(c.call("CLUSTER", "INFO"))["cluster_reachable_nodes"])


def test_a_node_joining_a_flooded_lane_port_keeps_its_link_and_replicates(
    server_factory: ServerFactory,
) -> None:
    """B joins A while A's lane port is flooded: the flood starves neither A's bus nor its
    client port. B's lane to A opens, or does not, or is closed unread at A's cap; in every
    case B's link stays up (on its gRPC stream alone if need be: it does not go down and
    up), and a job added on B with two copies gets its copy on A."""
    a_resp, a_bus, a_lane = free_port(), free_port(), free_port()
    a = server_factory.new(
        "--resp-port", str(a_resp), "--grpc-port", str(a_bus), "--job-lane-port", str(a_lane),
        "--node-timeout-ms", "3000",
        nofile=(1024, 1024),
    )  # fmt: skip
    assert a.proc is not None and soft_nofile(a.proc.pid) == 1024
    with Flood(a_lane, FLOOD) as flood:
        assert flood.full.wait(60), "the flood never had its connections open"
        b_resp = free_port()
        b = server_factory.new(
            "--resp-port", str(b_resp), "--grpc-port", str(free_port()),
            "--node-timeout-ms", "3000", "--join", f"127.0.0.1:{a_bus}",
        )  # fmt: skip
        # Polled until the cluster forms, but every call must be answered: a connection the
        # flooded node drops (out of descriptors) fails the test, as in the test above.
        for port in (a_resp, b_resp):
            deadline = time.monotonic() + 30
            while reachable(port) != "1":
                assert time.monotonic() < deadline, "the nodes never reached each other"
                time.sleep(0.05)
        with RespClient(port=b_resp, timeout=30) as c:
            job_id = c.call("ADDJOB", "flooded", "body", 20000, "REPLICATE", 2)
        assert isinstance(job_id, str) and job_id.startswith("D-")
        with RespClient(port=a_resp, timeout=10) as c:
            assert c.call("SHOW", job_id) is not None  # A holds its copy
    assert log_events(b, "peer_link_down") == []
