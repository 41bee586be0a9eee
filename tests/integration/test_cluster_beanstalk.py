"""The beanstalk door in a cluster: puts replicated with --beanstalk-replicate, state changes
reaching the holders, a holder taking a job over when its owner is killed.

Real node processes on 127.0.0.1 in flag mode (beanstalk door + RESP + gRPC bus each).
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerFactory, free_port

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.nodeproc import NodeProcess, resp_pong  # noqa: E402
from cluster.resp_client import RespClient, info_fields  # noqa: E402


@dataclass
class BNode:
    """A flag-mode node: beanstalk door, RESP and gRPC bus, each on its own port."""

    bport: int
    rport: int
    gport: int
    node: NodeProcess

    def kill9(self) -> None:
        self.node.kill()

    def resp(self, *args: str | int) -> Any:
        with RespClient("127.0.0.1", self.rport, timeout=5) as c:
            return c.call(*args)

    def registered_jobs(self) -> int:
        return int(info_fields(self.resp("INFO", "jobs"))["registered_jobs"])

    def beanstalk(self) -> Beanstalk:
        return Beanstalk(self.bport)


class Beanstalk:
    """Just enough of a beanstalk client to read exact replies."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def body(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(65536)
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def cmd(self, text: bytes) -> bytes:
        self.sock.sendall(text)
        return self.line()

    def job(self, text: bytes) -> tuple[bytes, bytes]:
        head = self.cmd(text)
        parts = head.split()
        if parts[0] in (b"RESERVED", b"FOUND"):
            return head, self.body(int(parts[2]))
        return head, b""


def start_bnode(factory: ServerFactory, *extra: str) -> BNode:
    """A node with its three ports and ``extra`` flags, started until it answers PING."""
    b, r, g = free_port(), free_port(), free_port()
    args = ["-l", "127.0.0.1", "-p", str(b), "--resp-port", str(r), "--grpc-port", str(g)]
    return BNode(b, r, g, factory.node(*args, *extra, ready=resp_pong(r)))


@pytest.fixture
def cluster3(server_factory: ServerFactory, tmp_path: Path) -> list[BNode]:
    nodes: list[BNode] = []
    for i in range(3):
        extra = ["-b", str(tmp_path / f"n{i}"), "--node-timeout-ms", "1500"]
        extra += ["--beanstalk-replicate", "2"]
        if nodes:
            extra += ["--join", f"127.0.0.1:{nodes[0].gport}"]
        nodes.append(start_bnode(server_factory, *extra))
    for n in nodes:
        eventually(
            lambda n=n: info_fields(n.resp("CLUSTER", "INFO"))["cluster_reachable_nodes"] == "2",
            "every node reaches the two others",
        )
    return nodes


def holders_of(nodes: list[BNode]) -> list[BNode]:
    """The nodes other than node 0 that hold a copy of node 0's single job: one (replicate
    2), or two when a slow first copy made the owner ask one more node, as Disque does."""
    holders = [n for n in nodes[1:] if n.registered_jobs() == 1]
    assert holders, "INSERTED came before any copy existed"
    return holders


def beanstalk_state(node: BNode) -> bytes | None:
    """SHOW's beanstalk-state of the node's single job (disq's field for beanstalk jobs)."""
    _, ids = node.resp("JSCAN", "COUNT", 10)
    if len(ids) != 1:
        return None
    pairs = node.resp("SHOW", ids[0])
    fields = dict(zip(pairs[::2], pairs[1::2], strict=True))
    return fields.get(b"beanstalk-state")


def first_reply(clients: list[Beanstalk], cmd: bytes, want: bytes) -> tuple[bytes, bytes, int]:
    """Ask every holder until one answers ``want`` (the takeover happens on one of them)."""

    def ask() -> tuple[bytes, bytes, int] | None:
        for i, c in enumerate(clients):
            head, body = c.job(cmd)
            if head.startswith(want):
                return head, body, i
        return None

    return eventually(ask, f"{cmd!r} answered {want!r} on a holder")


@pytest.mark.slow
def test_put_is_replicated_and_a_holder_takes_over_when_the_owner_dies(
    cluster3: list[BNode],
) -> None:
    c = cluster3[0].beanstalk()
    assert c.cmd(b"use work\r\n") == b"USING work"
    # INSERTED comes after the copy is confirmed: the holder knows the job already.
    assert c.cmd(b"put 5 0 1 5\r\nhello\r\n") == b"INSERTED 1"
    holders = holders_of(cluster3)
    cluster3[0].kill9()
    clients = [h.beanstalk() for h in holders]
    for w in clients:
        assert w.cmd(b"watch work\r\n") == b"WATCHING 2"
    head, body, k = first_reply(clients, b"reserve-with-timeout 1\r\n", b"RESERVED")
    assert body == b"hello"
    w, holder = clients[k], holders[k]
    job_id = head.split()[1]
    stats = w.cmd(b"stats-job " + job_id + b"\r\n")
    yaml = w.body(int(stats.split()[1]))
    assert b"tube: work" in yaml and b"pri: 5" in yaml and b"reserves: 1" in yaml
    assert w.cmd(b"delete " + job_id + b"\r\n") == b"DELETED"
    w.close()
    # The delete acks the cluster record (as ACKJOB): its GC waits for the dead owner, whose
    # own copy (in its AOF, with its engine's job) would come back with it otherwise.
    _, ids = holder.resp("JSCAN", "COUNT", 10)
    pairs = holder.resp("SHOW", ids[0])
    assert dict(zip(pairs[::2], pairs[1::2], strict=True))[b"state"] == b"acked"
    owner = cluster3[0]
    owner.node.start()
    eventually(
        lambda: sum(n.registered_jobs() for n in cluster3) == 0,
        "every copy goes with the job once the owner is back",
        timeout=60,
    )
    c0 = owner.beanstalk()
    assert c0.cmd(b"watch work\r\n") == b"WATCHING 2"
    assert c0.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT"
    c0.close()


@pytest.mark.slow
def test_a_buried_job_comes_back_buried_after_takeover(cluster3: list[BNode]) -> None:
    c = cluster3[0].beanstalk()
    assert c.cmd(b"put 0 0 1 4\r\nbury\r\n") == b"INSERTED 1"
    head, _ = c.job(b"reserve\r\n")
    assert head == b"RESERVED 1 4"
    assert c.cmd(b"bury 1 77\r\n") == b"BURIED"
    holders = holders_of(cluster3)
    # The bury reaches the holders after the client's BURIED (as every state change does):
    # a kill -9 in between would lose it. Wait until they know, then kill the owner.
    eventually(
        lambda: all(beanstalk_state(h) == b"buried" for h in holders), "holders see the bury"
    )
    cluster3[0].kill9()
    clients = [h.beanstalk() for h in holders]
    head, body, k = first_reply(clients, b"peek-buried\r\n", b"FOUND")
    assert body == b"bury"
    w = clients[k]
    # A buried job is never re-queued: nothing is ready.
    assert w.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT"
    stats = w.cmd(b"stats-job " + head.split()[1] + b"\r\n")
    yaml = w.body(int(stats.split()[1]))
    assert b"state: buried" in yaml and b"pri: 77" in yaml


@pytest.mark.slow
def test_delete_on_the_owner_removes_every_copy(cluster3: list[BNode]) -> None:
    c = cluster3[0].beanstalk()
    assert c.cmd(b"put 0 0 1 3\r\nbye\r\n") == b"INSERTED 1"
    assert holders_of(cluster3)  # the copy exists before the delete
    head, _ = c.job(b"reserve\r\n")
    assert head == b"RESERVED 1 3"
    assert c.cmd(b"delete 1\r\n") == b"DELETED"
    eventually(lambda: all(h.registered_jobs() == 0 for h in cluster3[1:]), "every copy is deleted")
    assert cluster3[0].registered_jobs() == 0


def test_replication_beyond_the_cluster_is_refused(server_factory: ServerFactory) -> None:
    """--beanstalk-replicate 2 on a lone node: the put cannot be copied, INTERNAL_ERROR,
    and the job is not kept (the client was never told INSERTED)."""
    n = start_bnode(server_factory, "--beanstalk-replicate", "2")
    c = n.beanstalk()
    assert c.cmd(b"put 0 0 1 1\r\nx\r\n") == b"INTERNAL_ERROR"
    assert c.cmd(b"peek-ready\r\n") == b"NOT_FOUND"
