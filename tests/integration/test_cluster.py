"""A real cluster: node processes on 127.0.0.1, the RESP port, the gRPC bus between them.

Each test starts its own lab (cluster/lab.py) unless it only reads, so a kill or a leaving
flag never leaks into another test. Cluster state changes travel over the network, so the
tests wait for them with ``eventually`` (poll with a deadline) rather than sleeping.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, free_bus_port  # noqa: E402
from eventually import all_know_each_other, eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.nodeproc import resp_pong  # noqa: E402
from cluster.resp_client import RespClient, RespError, info_fields  # noqa: E402


def show(lab: Lab, i: int, job_id: str) -> dict[str, Any] | None:
    r = lab.node(i).call("SHOW", job_id)
    if r is None:
        return None
    assert isinstance(r, list)
    return {
        (k.decode() if isinstance(k, bytes) else k): v for k, v in zip(r[::2], r[1::2], strict=True)
    }


def state(lab: Lab, i: int, job_id: str) -> str | None:
    s = show(lab, i, job_id)
    if s is None:
        return None
    v = s["state"]
    return v.decode() if isinstance(v, bytes) else str(v)


def new_lab(tmp_path: Path, n: int = 3) -> Lab:
    return Lab(n, tmp_path / "lab", node_timeout_ms=1500)


def test_sync_replication_puts_a_copy_on_three_nodes(lab3: Lab) -> None:
    job_id = lab3.node(0).call("ADDJOB", "repl", "payload", 5000, "REPLICATE", 3)
    assert isinstance(job_id, str) and job_id.startswith("D-")
    # The reply came after three copies confirmed: every node knows it now.
    states = [state(lab3, i, job_id) for i in range(3)]
    assert states[0] == "queued"
    assert states[1:] == ["active", "active"]
    s = show(lab3, 1, job_id)
    assert s is not None and len(s["nodes-delivered"]) == 3
    assert lab3.node(0).call("QLEN", "repl") == 1
    got = lab3.node(0).call("GETJOB", "NOHANG", "FROM", "repl")
    assert got == [[b"repl", job_id.encode(), b"payload"]]
    assert lab3.node(0).call("ACKJOB", job_id) == 1


def test_norepl_when_replication_exceeds_the_cluster(lab3: Lab) -> None:
    with pytest.raises(RespError) as e:
        lab3.node(0).call("ADDJOB", "q", "x", 1000, "REPLICATE", 4)
    assert str(e.value).startswith("NOREPL Not enough reachable nodes")


def test_ack_on_another_node_reaches_every_holder(lab3: Lab) -> None:
    job_id = lab3.node(1).call("ADDJOB", "acks", "a", 5000, "REPLICATE", 3, "RETRY", 1)
    got = lab3.node(1).call("GETJOB", "NOHANG", "FROM", "acks")
    assert got == [[b"acks", job_id.encode(), b"a"]]
    assert lab3.node(2).call("ACKJOB", job_id) == 1
    # Ack GC: every holder learns the ack, then all copies are deleted.
    eventually(lambda: all(show(lab3, i, job_id) is None for i in range(3)), "ack GC on all nodes")
    # And it is never delivered again, even after several retry periods.
    for i in range(3):
        assert lab3.node(i).call("GETJOB", "TIMEOUT", 300, "FROM", "acks") is None


def test_federation_blocked_consumer_gets_a_job_added_elsewhere(lab3: Lab) -> None:
    result: list[Any] = []
    client = RespClient(lab3.host, lab3.node(0).port, timeout=30)

    def consume() -> None:
        result.append(client.call("GETJOB", "TIMEOUT", 20000, "FROM", "fed"))

    t = threading.Thread(target=consume)
    t.start()
    try:
        eventually(
            lambda: _qstat(lab3, 0, "fed").get("blocked") == 1, "the consumer is blocked on node 0"
        )
        # Node 2 heard node 0's NEEDJOBS (the queue record exists there).
        eventually(lambda: _qstat(lab3, 2, "fed"), "NEEDJOBS reached node 2")
        job_id = lab3.node(2).call("ADDJOB", "fed", "far away", 5000, "REPLICATE", 1)
        t.join(25)
        assert not t.is_alive()
        assert result == [[[b"fed", job_id.encode(), b"far away"]]]
    finally:
        client.close()
        t.join(1)


def _qstat(lab: Lab, i: int, queue: str) -> dict[str, Any]:
    r = lab.node(i).call("QSTAT", queue)
    if r is None:
        return {}
    return {
        (k.decode() if isinstance(k, bytes) else k): v for k, v in zip(r[::2], r[1::2], strict=True)
    }


@pytest.mark.slow
def test_killing_the_queueing_node_requeues_elsewhere(tmp_path: Path) -> None:
    with new_lab(tmp_path) as lab:
        job_id = lab.node(0).call("ADDJOB", "kq", "survivor", 5000, "REPLICATE", 3, "RETRY", 1)
        lab.kill9(0)
        # A replica requeues after RETRY (no QUEUED/WILLQUEUE answer from the dead node).
        got = lab.node(1).call("GETJOB", "TIMEOUT", 15000, "FROM", "kq", timeout=20)
        assert got == [[b"kq", job_id.encode(), b"survivor"]]


def test_a_killed_nodes_queued_jobs_reach_a_consumer_long_before_their_retry(
    tmp_path: Path,
) -> None:
    """Jobs queued on node 0 with a copy on node 1 or 2 (REPLICATE 2), RETRY 120 s; node 0
    killed with SIGKILL. Once membership confirms it dead (the node timeout, 1.5 s here)
    the copies are queued within a second or two (dead_peers.py): a consumer on node 1 gets
    every job once, far before any RETRY could have fired."""
    retry_s = 120
    with new_lab(tmp_path) as lab:
        ids = {
            lab.node(0).call("ADDJOB", "dq", f"job {k}", 5000, "REPLICATE", 2, "RETRY", retry_s)
            for k in range(40)
        }
        assert lab.node(0).call("QLEN", "dq") == 40  # queued on node 0 only
        assert lab.node(1).call("QLEN", "dq") == lab.node(2).call("QLEN", "dq") == 0
        lab.kill9(0)
        killed = time.monotonic()
        seen: list[str] = []
        consumer = RespClient(lab.host, lab.node(1).port, timeout=10)
        try:
            # The bound is half the RETRY: a requeue by RETRY could not have served any job.
            while set(seen) != ids and time.monotonic() - killed < retry_s / 2:
                got = consumer.call("GETJOB", "TIMEOUT", 1000, "COUNT", 40, "FROM", "dq")
                for _queue, job_id, _body in got or []:
                    seen.append(job_id.decode())
                    assert consumer.call("ACKJOB", job_id) == 1
        finally:
            consumer.close()
        assert sorted(seen) == sorted(ids)  # every job, each once


@pytest.mark.slow
def test_leaving_node(tmp_path: Path) -> None:
    with new_lab(tmp_path) as lab:
        assert lab.node(2).call("CLUSTER", "LEAVING", "yes") == "OK"
        leaving_id = lab.node(2).call("CLUSTER", "MYID")
        assert isinstance(leaving_id, (bytes, str))
        lid = leaving_id.decode() if isinstance(leaving_id, bytes) else leaving_id

        def priority_seen() -> bool:
            hello = lab.node(0).call("HELLO")
            assert isinstance(hello, list)
            return any(
                (e[0].decode() if isinstance(e[0], bytes) else e[0]) == lid and int(e[3]) == 100
                for e in hello[2:]
            )

        eventually(priority_seen, "node 0 sees node 2 leaving (HELLO priority 100)")
        with pytest.raises(RespError) as e:
            lab.node(2).call("GETJOB", "FROM", "lq")
        assert str(e.value).startswith("LEAVING")
        # ADDJOB on a leaving node replicates externally: no copy stays on node 2.
        job_id = lab.node(2).call("ADDJOB", "lq", "x", 5000, "REPLICATE", 2)
        assert show(lab, 2, job_id) is None
        holders = [i for i in (0, 1) if show(lab, i, job_id) is not None]
        assert holders == [0, 1]
        eventually(
            lambda: sum(lab.node(i).call("QLEN", "lq") for i in (0, 1)) == 1,  # type: ignore[misc]
            "one holder queued the externally replicated job",
        )
        # ASYNC on a leaving node (issue 12): the id comes back only once a copy exists
        # elsewhere, so the job is already on a holder when the client reads the id.
        async_id = lab.node(2).call("ADDJOB", "aq", "y", 5000, "REPLICATE", 2, "ASYNC")
        assert isinstance(async_id, str) and show(lab, 2, async_id) is None
        assert any(show(lab, i, async_id) is not None for i in (0, 1))
        eventually(
            lambda: sum(lab.node(i).call("QLEN", "aq") for i in (0, 1)) == 1,  # type: ignore[misc]
            "a holder queued the ASYNC job added on the leaving node",
        )
        # With no peer able to take a copy the ASYNC add is refused, never answered with an
        # id nobody holds.
        lab.pause(0)
        lab.pause(1)
        try:
            with pytest.raises(RespError) as e:
                lab.node(2).call("ADDJOB", "aq", "z", 300, "REPLICATE", 1, "ASYNC", timeout=10)
            assert str(e.value).startswith("NOREPL")
        finally:
            lab.resume(0)
            lab.resume(1)


@pytest.mark.slow
def test_whole_cluster_restart_loses_no_acknowledged_job(tmp_path: Path) -> None:
    with new_lab(tmp_path) as lab:
        bodies = {f"job-{k}" for k in range(30)}
        for k, body in enumerate(sorted(bodies)):
            lab.node(k % 3).call("ADDJOB", "persist", body, 5000, "REPLICATE", 2, "RETRY", 1)
        for i in range(3):
            lab.kill9(i)
        for i in range(3):
            lab.restart(i)
        lab.wait_cluster()
        seen: set[str] = set()

        def drained() -> bool:
            for i in range(3):
                got = lab.node(i).call("GETJOB", "NOHANG", "COUNT", 100, "FROM", "persist")
                for _q, jid, body in got or []:
                    seen.add(body.decode())
                    lab.node(i).call("ACKJOB", jid)
            return seen >= bodies

        # Restored jobs are active, not queued: they come back after their RETRY.
        eventually(drained, "every job delivered after the restart", timeout=60)
        assert seen == bodies


def test_pydisque_client(lab3: Lab) -> None:
    pydisque = pytest.importorskip("pydisque.client")
    c = pydisque.Client([f"127.0.0.1:{lab3.node(1).port}"])
    c.connect()
    raw_id = c.add_job("pyq", "from pydisque", replicate=2, timeout=5000)
    job_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
    jobs = c.get_job(["pyq"], timeout=1000)
    # pydisque names the tuple (job_id, queue_name, job) but passes GETJOB's order through.
    assert [tuple(j) for j in jobs] == [(b"pyq", job_id.encode(), b"from pydisque")]
    c.ack_job(job_id)  # pydisque returns nothing here; the node's state tells
    assert state(lab3, 1, job_id) in (None, "acked")
    assert c.qlen("pyq") == 0


def test_redis_cli(lab3: Lab) -> None:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not installed (scripts/ensure_redis_cli.sh installs it)")
    port = str(lab3.node(0).port)

    def run(*args: str) -> str:
        return subprocess.run(
            [cli, "-p", port, *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout

    job_id = run("ADDJOB", "cliq", "hi there", "5000").strip()
    assert job_id.startswith("D-") and len(job_id) == 40
    assert run("QLEN", "cliq").strip() == "1"
    assert run("GETJOB", "FROM", "cliq").split("\n")[:3] == ["cliq", job_id, "hi there"]
    assert run("ACKJOB", job_id).strip() == "1"
    assert "registered_jobs:" in run("INFO", "jobs")


def test_controlled_restart_with_config_set_appendonly(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """Disque's 07-persistence flow: turn the AOF on at runtime, CONFIG REWRITE, ask for jobs
    to be queued at load, SHUTDOWN REWRITE-AOF, start again from the same config file."""
    port = free_bus_port()
    data = tmp_path / "data"
    data.mkdir()
    conf = tmp_path / "disque.conf"
    conf.write_text(f"# a Disque config\nport {port}\ndir {data}\nappendonly no\n")
    node = server_factory.node(str(conf), ready=resp_pong(port), log_path=tmp_path / "node.log")
    c = RespClient("127.0.0.1", port)
    job_id = c.call("ADDJOB", "persist", "kept", 0, "RETRY", 300)
    assert c.call("CONFIG", "SET", "appendonly", "yes") == "OK"
    assert c.call("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == "OK"
    assert c.call("CONFIG", "REWRITE") == "OK"
    text = conf.read_text()
    assert "appendonly yes" in text and "aof-enqueue-jobs-once yes" in text
    assert "# a Disque config" in text
    with pytest.raises((OSError, RespError)):
        c.call("SHUTDOWN", "REWRITE-AOF")  # no reply: the server goes away
    assert node.wait(15) == 0
    node.start()
    c = RespClient("127.0.0.1", port)
    # Queued at load (aof-enqueue-jobs-once), not after the 300 s retry.
    assert c.call("GETJOB", "NOHANG", "FROM", "persist") == [
        [b"persist", job_id.encode(), b"kept"]
    ]
    assert "aof-enqueue-jobs-once no" in conf.read_text()  # reset after the load


@pytest.mark.slow
def test_seven_nodes_from_configs_with_only_port_and_dir(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """The drop-in promise: configs that differ only in ``port`` and ``dir`` run side by
    side (the bus derives from the port), and CLUSTER MEET on client ports forms a cluster."""
    ports, _ = server_factory.drop_in_nodes(7, tmp_path)
    first = RespClient("127.0.0.1", ports[0])
    for port in ports[1:]:
        assert first.call("CLUSTER", "MEET", "127.0.0.1", port) == "OK"
    all_know_each_other(ports)
    ids = {
        RespClient("127.0.0.1", p).call("CLUSTER", "MYID") for p in ports
    }  # distinct node ids, each kept in its own dir
    assert len(ids) == 7
    assert all((tmp_path / f"d{i}" / "node.json").exists() for i in range(7))
    job_id = first.call("ADDJOB", "q7", "x", 5000, "REPLICATE", 3)
    assert sum(show_port(p, job_id) for p in ports) == 3


def show_port(port: int, job_id: str) -> int:
    return 0 if RespClient("127.0.0.1", port).call("SHOW", job_id) is None else 1


@pytest.mark.slow
def test_memory_pressure_replicates_externally_and_forget_removes_a_node(tmp_path: Path) -> None:
    """Disque's 02-jobs-replication OOM case through the front door (CONFIG SET maxmemory,
    then adds until a job has no local copy but exists elsewhere), then CLUSTER FORGET."""
    with new_lab(tmp_path) as lab:
        n0 = lab.node(0)
        assert n0.call("CONFIG", "SET", "maxmemory", "3mb") == "OK"
        body = "x" * 10_000
        external = None
        for _ in range(400):
            job_id = n0.call("ADDJOB", "mem", body, 5000, "REPLICATE", 2)
            assert isinstance(job_id, str)
            if show(lab, 0, job_id) is None:
                external = job_id
                break
        assert external is not None, "node 0 kept a local copy of every job"
        assert [i for i in (1, 2) if show(lab, i, external) is not None] == [1, 2]
        assert int(info_fields(n0.call("INFO", "memory"))["mem_warning_level"]) >= 1
        # CLUSTER FORGET: node 0 drops node 2 from its view (Redis semantics: local).
        node2 = lab.node(2).call("CLUSTER", "MYID")
        node2_id = node2.decode() if isinstance(node2, bytes) else node2
        assert n0.call("CLUSTER", "FORGET", node2_id) == "OK"
        known = info_fields(n0.call("CLUSTER", "INFO"))["cluster_known_nodes"]
        assert known == "2"
        with pytest.raises(RespError) as e:
            n0.call("CLUSTER", "FORGET", n0.call("CLUSTER", "MYID"))
        assert "can't forget myself" in str(e.value)


def test_a_sync_add_whose_ttl_runs_out_is_answered_at_its_ttl(tmp_path: Path) -> None:
    """Issue 23, part 1: with a node killed, ADDJOB REPLICATE 3 TTL 1 cannot reach three
    copies; the job expires at its TTL and the client hears NOREPL then, not a second later
    (and not at the 15 s ms-timeout). The client's monotonic clock measures it."""
    import time

    with Lab(3, tmp_path / "lab", node_timeout_ms=3000) as lab:
        lab.kill9(2)
        t0 = time.monotonic()
        with pytest.raises(RespError) as e:
            lab.node(0).call("ADDJOB", "ttlq", "myjob", 15000, "REPLICATE", 3, "TTL", 1, timeout=20)
        elapsed = time.monotonic() - t0
        assert str(e.value).startswith("NOREPL job removed (expired?)"), str(e.value)
        # At the TTL (the node counts it from its own whole-millisecond clock: at most a
        # millisecond early until timers move to the monotonic clock), within a timer tick
        # after it (the bound: 100 ms).
        assert 0.99 <= elapsed < 1.1, elapsed
