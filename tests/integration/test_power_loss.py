"""Power lost everywhere at once: no acknowledged job is lost (issue 43).

Three nodes, each with its data directory on its own LazyFS mount (tests/integration/lazyfs.py):
what a node writes stays in LazyFS's cache until it is fsynced. Clients add jobs through every
door (RESP ADDJOB REPLICATE 3, the gRPC SDK with replicate=3, beanstalk puts with
``--beanstalk-replicate 3``) on every node; at a random moment every node is SIGKILLed, then
every mount drops its unsynced writes (``lazyfs::clear-cache``), then the nodes start again on
what is left. Every add that was answered must be found after the restart: a RESP or gRPC id
on some node (SHOW), a beanstalk id on the node that answered INSERTED (peek). Repeated for a
few rounds, the acknowledged jobs of earlier rounds checked again each time; the second
round's cut comes right after every node started rewriting its AOF.

Then every job is consumed (GETJOB + ACKJOB, beanstalk reserve + delete): each acknowledged
job is delivered, none twice (the adds' RETRY is longer than the drain, so at-least-once
allows no second delivery here: a job queued on two nodes after the restart would be one).
Then a last power cut: no job that was acked or deleted comes back.

A second test tears one write of node 0's AOF (LazyFS's ``torn-op``: two of its three parts
persisted, then LazyFS crashes), then cuts the others' power: node 0 cuts the torn tail.

The node's default fsync policy is what is tested; ``DISQ_POWER_LOSS_FSYNC=everysec`` runs the
same tests with ``--fsync everysec`` (they lose acknowledged jobs: how they were checked to
catch the loss). Skipped, with the reason, where FUSE or LazyFS is unusable.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import SERVER_KIND, ServerFactory, free_port  # noqa: E402
from eventually import eventually  # noqa: E402
from lazyfs import LazyMount, lazyfs_binary  # noqa: E402

from cluster.nodeproc import NodeProcess, resp_pong, start_all  # noqa: E402
from cluster.resp_client import RespClient, encode_command, info_fields  # noqa: E402
from disq.client import Client  # noqa: E402

pytestmark = pytest.mark.skipif(SERVER_KIND != "disq", reason="disq's own persistence")

ROUNDS = 3
REWRITE_ROUND = 1  # the round whose cut comes right after a BGREWRITEAOF on every node
QUEUE = "pl"
# The adds' RETRY: a whole-cluster restart brings every copy back active and the retry rules
# queue it again (ARCHITECTURE.md, "Guarantees"), so the drain waits about this long; and the
# drain takes less than this, so no job is delivered twice by its RETRY while it runs.
RETRY_S = 8
# The beanstalk puts' TTR: the holders of a replicated put ask its owner every max(TTR, 5 s)
# and take it over when the owner lost it (ARCHITECTURE.md, "The beanstalk door in a
# cluster"); short, so the last check's wait for every copy to go stays short.
TTR_S = 5
FSYNC = os.environ.get("DISQ_POWER_LOSS_FSYNC", "")


@dataclass
class Node:
    index: int
    bport: int
    rport: int
    gport: int
    mount: LazyMount
    proc: NodeProcess

    def resp(self, timeout: float = 5.0) -> RespClient:
        return RespClient("127.0.0.1", self.rport, timeout=timeout)


@dataclass
class Acked:
    """The adds that were answered: (door, node index, id, body)."""

    jobs: list[tuple[str, int, str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, door: str, node: int, job_id: str, body: bytes) -> None:
        with self.lock:
            self.jobs.append((door, node, job_id, body))


@pytest.fixture
def lazy_cluster(server_factory: ServerFactory, short_tmp: Path) -> Iterator[list[Node]]:
    binary = lazyfs_binary()
    mounts: list[LazyMount] = []
    try:
        for i in range(3):
            mounts.append(LazyMount(binary, short_tmp / f"lazy{i}"))
        nodes: list[Node] = []
        for i, mount in enumerate(mounts):
            b, r, g = free_port(), free_port(), free_port()
            args = ["-l", "127.0.0.1", "-p", str(b), "--resp-port", str(r)]
            args += ["--grpc-port", str(g), "-b", str(mount.mnt), "--node-timeout-ms", "1500"]
            args += ["--beanstalk-replicate", "3"]
            if FSYNC:
                args += ["--fsync", FSYNC]
            if nodes:
                args += ["--join", f"127.0.0.1:{nodes[0].gport}"]
            proc = server_factory.node(*args, ready=resp_pong(r), start=False)
            nodes.append(Node(i, b, r, g, mount, proc))
        start_all([n.proc for n in nodes])
        yield nodes
    finally:
        for n in server_factory.servers:
            n.kill()
        for m in mounts:
            m.close()


def wait_formed(nodes: list[Node]) -> None:
    for n in nodes:

        def reaches_both(n: Node = n) -> bool:
            with n.resp() as c:
                return info_fields(c.call("CLUSTER", "INFO"))["cluster_reachable_nodes"] == "2"

        eventually(reaches_both, f"node {n.index} reaches the two others", timeout=60)


def text(reply: object) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def resp_adds(node: Node, tag: str, acked: Acked, stop: threading.Event) -> None:
    with node.resp() as c:
        for k in range(1_000_000):
            if stop.is_set():
                return
            body = f"{tag}-{k}".encode()
            reply = c.call("ADDJOB", QUEUE, body, 5000, "REPLICATE", 3, "RETRY", RETRY_S)
            acked.add("resp", node.index, text(reply), body)


def grpc_adds(node: Node, tag: str, acked: Acked, stop: threading.Event) -> None:
    with Client(f"127.0.0.1:{node.gport}", discover=False, timeout_s=5.0) as c:
        for k in range(1_000_000):
            if stop.is_set():
                return
            body = f"{tag}-{k}".encode()
            job_id = c.add_job(QUEUE, body, replicate=3, retry_s=RETRY_S)
            acked.add("grpc", node.index, job_id, body)


def beanstalk_adds(node: Node, tag: str, acked: Acked, stop: threading.Event) -> None:
    with socket.create_connection(("127.0.0.1", node.bport), timeout=5.0) as s:
        f = s.makefile("rb")
        s.sendall(f"use {QUEUE}\r\n".encode())
        assert f.readline() == f"USING {QUEUE}\r\n".encode()
        for k in range(1_000_000):
            if stop.is_set():
                return
            body = f"{tag}-{k}".encode()
            s.sendall(b"put 0 0 %d %d\r\n%s\r\n" % (TTR_S, len(body), body))
            line = f.readline()
            assert line.startswith(b"INSERTED "), line
            acked.add("beanstalk", node.index, line.split()[1].decode(), body)


def run_client(fn: Callable[[Node, str, Acked, threading.Event], None], *args: object) -> None:
    """A client adds until it is stopped or its node dies under it (an add whose answer
    never came is not counted)."""
    try:
        fn(*args)  # type: ignore[arg-type]
    except Exception:  # the power cut breaks every client in its own way
        return


def start_clients(
    nodes: list[Node], tag: str, acked: Acked, stop: threading.Event
) -> list[threading.Thread]:
    """One client per door on every node, adding until stopped or cut off."""
    threads = [
        threading.Thread(target=run_client, args=(fn, n, f"{tag}-{door}-{n.index}", acked, stop))
        for n in nodes
        for door, fn in (("resp", resp_adds), ("grpc", grpc_adds), ("bs", beanstalk_adds))
    ]
    for t in threads:
        t.start()
    return threads


def power_cut(nodes: list[Node]) -> None:
    """Every node SIGKILLed (each reaped before the next), then every disk's unsynced writes
    dropped: no node runs while any disk loses its cache."""
    for n in nodes:
        n.proc.kill()
    for n in nodes:
        n.mount.clear_cache()


def missing_jobs(nodes: list[Node], jobs: list[tuple[str, int, str, bytes]]) -> list[str]:
    """The acknowledged jobs no node has after the restart."""
    clients = [n.resp(timeout=10.0) for n in nodes]
    conns = [socket.create_connection(("127.0.0.1", n.bport), timeout=10.0) for n in nodes]
    files = [s.makefile("rb") for s in conns]
    lost: list[str] = []
    try:
        for door, i, job_id, body in jobs:
            if door == "beanstalk":
                conns[i].sendall(f"peek {job_id}\r\n".encode())
                head = files[i].readline()
                got = files[i].readline()[:-2] if head.startswith(b"FOUND ") else None
                if got != body:
                    lost.append(f"beanstalk job {job_id} on node {i} ({body!r}): {head!r}")
            elif not any(c.call("SHOW", job_id) for c in clients):
                lost.append(f"{door} job {job_id} added on node {i} ({body!r})")
    finally:
        for c in clients:
            c.close()
        for s in conns:
            s.close()
    return lost


def take_queued(nodes: list[Node], delivered: Counter[bytes]) -> int:
    """One pass over every node: the jobs queued there fetched and acked (RESP), the ready
    beanstalk jobs reserved and deleted; each delivery counted by body. Returns how many."""
    taken = 0
    for n in nodes:
        with n.resp(timeout=10.0) as c:
            while jobs := c.call("GETJOB", "NOHANG", "COUNT", 500, "FROM", QUEUE):
                assert isinstance(jobs, list)
                delivered.update(bytes(job[2]) for job in jobs)
                assert c.call("ACKJOB", *[job[1] for job in jobs]) == len(jobs)
                taken += len(jobs)
        with socket.create_connection(("127.0.0.1", n.bport), timeout=10.0) as s:
            f = s.makefile("rb")
            s.sendall(f"watch {QUEUE}\r\n".encode())
            assert f.readline() == b"WATCHING 2\r\n"
            while True:
                s.sendall(b"reserve-with-timeout 0\r\n")
                head = f.readline()
                if head == b"TIMED_OUT\r\n":
                    break
                assert head.startswith(b"RESERVED "), head
                delivered[f.readline()[:-2]] += 1
                s.sendall(b"delete %s\r\n" % head.split()[1])
                assert f.readline() == b"DELETED\r\n"
                taken += 1
    return taken


def held_jobs(nodes: list[Node]) -> int:
    """The Disque jobs the nodes hold, every state (acked ones until their GC ends)."""
    total = 0
    for n in nodes:
        with n.resp() as c:
            total += int(info_fields(c.call("INFO", "jobs"))["registered_jobs"])
    return total


def drain_then_cut_again(nodes: list[Node], jobs: list[tuple[str, int, str, bytes]]) -> str:
    """Every job consumed once, then a last power cut: nothing consumed comes back."""
    delivered: Counter[bytes] = Counter()
    want = {body for _, _, _, body in jobs}

    def all_delivered() -> bool:
        take_queued(nodes, delivered)
        return want <= delivered.keys()

    eventually(all_delivered, "every acknowledged job delivered", timeout=6 * RETRY_S)
    twice = sorted(b for b, k in delivered.items() if k > 1)
    assert not twice, f"{len(twice)} jobs delivered twice: {twice[:20]}"
    power_cut(nodes)
    start_all([n.proc for n in nodes])
    wait_formed(nodes)
    back: Counter[bytes] = Counter()

    def none_left() -> bool:
        take_queued(nodes, back)
        return held_jobs(nodes) == 0

    eventually(none_left, "every acked copy collected on every node", timeout=10 * RETRY_S)
    # An add whose answer the first cuts lost may surface only now (its copies' RETRY, or a
    # holder taking over a beanstalk put its owner lost): not consumed before, not back.
    again = sorted(back.keys() & delivered.keys())
    assert not again, f"{len(again)} consumed jobs came back after the cut: {again[:20]}"
    return f"{len(delivered)} delivered once each, none of them back after a last cut"


@pytest.mark.slow
def test_power_cut_on_every_node_loses_no_acknowledged_job(lazy_cluster: list[Node]) -> None:
    nodes = lazy_cluster
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    acked = Acked()
    checked = 0
    for rnd in range(ROUNDS):
        wait_formed(nodes)
        stop = threading.Event()
        threads = start_clients(nodes, f"r{rnd}", acked, stop)
        # The cut at a random moment once every door has answered some adds.
        want = checked + 200
        eventually(lambda: len(acked.jobs) > want, "adds answered on the doors")  # noqa: B023
        time.sleep(rng.uniform(0.5, 2.5))
        if rnd == REWRITE_ROUND:
            # The cut lands while (or just after) every node rewrites its AOF: the new file
            # is fsynced before it replaces the old one, and the adds go on into both.
            for n in nodes:
                with n.resp() as c:
                    assert c.call("BGREWRITEAOF") == "Background append only file rewriting started"
        power_cut(nodes)
        stop.set()
        for t in threads:
            t.join(30)
        start_all([n.proc for n in nodes])
        with acked.lock:
            jobs = list(acked.jobs)
        doors = {d for d, *_ in jobs[checked:]}
        assert doors == {"resp", "grpc", "beanstalk"}, f"round {rnd}: only {doors} answered"
        lost = missing_jobs(nodes, jobs)
        by_door = {d: sum(x.startswith(d) for x in lost) for d in ("resp", "grpc", "beanstalk")}
        assert not lost, (
            f"seed {seed}, round {rnd}: {len(lost)} of {len(jobs)} acknowledged jobs lost "
            f"(fsync {FSYNC or 'default'}; {by_door}): " + "; ".join(lost[:20])
        )
        checked = len(jobs)
    consumed = drain_then_cut_again(nodes, jobs)
    print(f"power loss: {ROUNDS} cuts, {checked} acknowledged jobs, none lost; {consumed}")
    print(f"power loss seed: {seed}")


@pytest.mark.slow
def test_a_torn_write_on_one_node_then_a_power_cut_loses_no_acknowledged_job(
    lazy_cluster: list[Node],
) -> None:
    """LazyFS's torn-op on node 0's AOF: its next write (one add's record, once the clients
    stopped) is cut in three parts of which the first and the third reach the disk, and
    LazyFS crashes (node 0's disk is gone: a power loss for it). Then the other two lose
    power too. Node 0 cuts the torn tail at its start, and every acknowledged job is found."""
    nodes = lazy_cluster
    acked = Acked()
    wait_formed(nodes)
    stop = threading.Event()
    threads = start_clients(nodes, "torn", acked, stop)
    eventually(lambda: len(acked.jobs) > 200, "adds answered on the doors")
    stop.set()
    for t in threads:
        t.join(30)
    torn = nodes[0].mount
    torn.tear_next_write("disq.aof")
    # One more add: its record is the torn write; it is never answered.
    last = socket.create_connection(("127.0.0.1", nodes[0].rport), timeout=5.0)
    last.sendall(encode_command(["ADDJOB", QUEUE, "last", 5000, "REPLICATE", 1]))
    eventually(lambda: torn.proc.poll() is not None, "LazyFS tore a write and crashed")
    for n in nodes:
        n.proc.kill()
    for n in nodes[1:]:
        n.mount.clear_cache()
    last.close()
    torn.remount()
    start_all([n.proc for n in nodes])
    with acked.lock:
        jobs = list(acked.jobs)
    lost = missing_jobs(nodes, jobs)
    assert not lost, f"{len(lost)} of {len(jobs)} acknowledged jobs lost: " + "; ".join(lost[:20])
    assert '"event": "aof_torn_tail_cut"' in nodes[0].proc.log_text()
