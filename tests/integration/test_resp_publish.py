"""The integrations' publish over the node's RESP port (disq.integrations.resp_calls): real
nodes, kombu and Dramatiq as an app uses them, Celery workers where the run is theirs.

What shows the path: the node's ``INFO commandstats`` counts the commands of its RESP door
only (``cmdstat_addjob``); a gRPC AddJob does not move it."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dramatiq
import kombu
import pytest
from celery import Celery
from conftest import ServerFactory, ServerProcess, free_port
from dramatiq.errors import ConnectionClosed
from kombu.exceptions import ChannelError, OperationalError
from task_apps import (
    CELERY_APP,
    DRAMATIQ_APP,
    celery_worker,
    disq_url,
    dramatiq_worker,
    runs,
    send_while_a_node_dies,
    wait_all_done,
    write_app,
)

from cluster.lab import Lab
from disq.client import AuthError, Client, NoReplError
from disq.integrations import resp_calls
from disq.integrations.dramatiq import DisqBroker, DisqBrokerError
from disq.integrations.kombu_transport import DisqChannelError, DisqConnectionError
from disq.integrations.resp_calls import RespCalls

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret"


def resp(port: int, *args: str) -> Any:
    """One command on a node's RESP port, its reply parsed."""
    import hiredis

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(resp_calls.command(*(a.encode() for a in args)))
        reader = hiredis.Reader()
        while (reply := reader.gets()) is False:
            data = s.recv(65536)
            assert data, "connection closed"
            reader.feed(data)
        return reply


def addjob_calls(port: int, password: str | None = None) -> int:
    """``cmdstat_addjob``'s calls on the node whose RESP port is ``port`` (0 before one)."""
    args = ["INFO", "commandstats"]
    if password:
        # AUTH then INFO on one connection: a raw two-command exchange.
        import hiredis

        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(
                resp_calls.command(b"AUTH", password.encode())
                + resp_calls.command(b"INFO", b"commandstats")
            )
            reader = hiredis.Reader()
            replies: list[Any] = []
            while len(replies) < 2:
                reply = reader.gets()
                if reply is False:
                    data = s.recv(65536)
                    assert data
                    reader.feed(data)
                else:
                    replies.append(reply)
            text = replies[1].decode()
    else:
        text = resp(port, *args).decode()
    for line in text.splitlines():
        if line.startswith("cmdstat_addjob:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


@dataclass
class Node:
    port: int  # RESP
    addr: str  # gRPC, host:port
    proc: ServerProcess


def start_node(factory: ServerFactory, *extra: str) -> Node:
    grpc_port, resp_port = free_port(), free_port()
    proc = factory.new("--grpc-port", str(grpc_port), "--resp-port", str(resp_port), *extra)
    return Node(resp_port, f"127.0.0.1:{grpc_port}", proc)


@pytest.fixture(scope="module")
def node(module_factory: ServerFactory) -> Node:
    return start_node(module_factory)


def _drain(conn: kombu.Connection, queue: str, n: int) -> list[Any]:
    q = conn.SimpleQueue(queue)
    try:
        out = []
        for _ in range(n):
            m = q.get(timeout=10)
            out.append(m.payload)
            m.ack()
        return out
    finally:
        q.close()


@pytest.mark.parametrize("over", ["resp", "grpc"])
def test_kombu_publishes_over_the_option_path(node: Node, over: str) -> None:
    srv, addr = node, node.addr
    queue = f"simple-{over}"
    before = addjob_calls(srv.port)
    with kombu.Connection(f"disq://{addr}?replicate=1&publish_over={over}") as conn:
        producer = conn.Producer()
        for k in range(5):
            # The default exchange, as Celery publishes a task (its "anon-exchange").
            producer.publish({"k": k}, exchange="", routing_key=queue)
        added = addjob_calls(srv.port) - before
        assert added == (5 if over == "resp" else 0)
        assert _drain(conn, queue, 5) == [{"k": k} for k in range(5)]


def test_a_paused_queue_is_the_same_channel_error_over_both_paths(
    node: Node,
) -> None:
    srv, addr = node, node.addr
    assert resp(srv.port, "PAUSE", "paused-q", "in") == b"in"
    errors = {}
    try:
        for over in ("resp", "grpc"):
            with kombu.Connection(f"disq://{addr}?replicate=1&publish_over={over}") as conn:
                producer = conn.Producer()
                with pytest.raises(ChannelError) as info:
                    producer.publish({"x": 1}, routing_key="paused-q", retry=False)
                errors[over] = info.value
    finally:
        resp(srv.port, "PAUSE", "paused-q", "none")
    assert type(errors["resp"]) is type(errors["grpc"]) is DisqChannelError
    assert "PAUSED" in str(errors["resp"]) and "PAUSED" in str(errors["grpc"])


def test_norepl_is_the_same_connection_error_over_both_paths(
    node: Node,
) -> None:
    """REPLICATE 3 on a one-node cluster: NOREPL, kombu's connection error (retried)."""
    addr = node.addr
    errors = {}
    for over in ("resp", "grpc"):
        with kombu.Connection(f"disq://{addr}?replicate=3&publish_over={over}") as conn:
            producer = conn.Producer()
            with pytest.raises(DisqConnectionError) as info:
                producer.publish({"x": 1}, routing_key="norepl-q", retry=False)
            errors[over] = info.value
            assert isinstance(info.value.__cause__, NoReplError)
    assert str(errors["resp"]) == str(errors["grpc"])


def test_dramatiq_errors_are_the_same_over_both_paths(node: Node) -> None:
    srv, addr = node, node.addr
    assert resp(srv.port, "PAUSE", "dq-paused", "in") == b"in"
    try:
        for over in ("resp", "grpc"):
            broker = DisqBroker(f"disq://{addr}", replicate=1, publish_over=over)
            try:

                @dramatiq.actor(broker=broker, queue_name="dq-paused", actor_name=f"p_{over}")
                def paused(x: int) -> None: ...

                with pytest.raises(DisqBrokerError, match="PAUSED"):
                    paused.send(1)

                @dramatiq.actor(broker=broker, queue_name="dq-ok", actor_name=f"ok_{over}")
                def ok(x: int) -> None: ...

                before = addjob_calls(srv.port)
                ok.send(1)
                assert addjob_calls(srv.port) - before == (1 if over == "resp" else 0)
            finally:
                broker.close()
            broker = DisqBroker(f"disq://{addr}", replicate=3, publish_over=over)
            try:

                @dramatiq.actor(broker=broker, queue_name="dq-norepl", actor_name=f"n_{over}")
                def norepl(x: int) -> None: ...

                with pytest.raises(ConnectionClosed):
                    norepl.send(1)
            finally:
                broker.close()
    finally:
        resp(srv.port, "PAUSE", "dq-paused", "none")


def test_passwords_on_the_resp_path(server_factory: ServerFactory) -> None:
    srv = start_node(server_factory, "--requirepass", PASSWORD)
    addr = srv.addr
    # A wrong password: the same kombu error whichever the path (the connect is gRPC's).
    kinds = set()
    for over in ("resp", "grpc"):
        with kombu.Connection(f"disq://:wrong@{addr}?publish_over={over}") as conn:
            with pytest.raises(OperationalError) as info:
                conn.ensure_connection(max_retries=1)
            kinds.add(type(info.value))
    assert len(kinds) == 1
    # The RESP path itself: AUTH on connect; a wrong or missing one is the SDK's AuthError.
    with Client(addr, password=PASSWORD) as client:
        client.hello()
        good = RespCalls(client, password=PASSWORD)
        wrong = RespCalls(client, password="wrong")
        missing = RespCalls(client)
        try:
            before = addjob_calls(srv.port, PASSWORD)
            assert good.add_job("pw-q", b"x", replicate=1).startswith("D-")
            assert addjob_calls(srv.port, PASSWORD) == before + 1
            with pytest.raises(AuthError, match="invalid password"):
                wrong.add_job("pw-q", b"x", replicate=1)
            with pytest.raises(AuthError, match="NOAUTH"):
                missing.add_job("pw-q", b"x", replicate=1)
            assert client.qlen("pw-q") == 1
        finally:
            for a in (good, wrong, missing):
                a.close()
    # And kombu with the right password in the URL publishes over RESP.
    with kombu.Connection(f"disq://:{PASSWORD}@{addr}?replicate=1") as conn:
        before = addjob_calls(srv.port, PASSWORD)
        conn.Producer().publish({"k": 1}, exchange="", routing_key="pw-kombu")
        assert addjob_calls(srv.port, PASSWORD) == before + 1


def test_an_unreachable_resp_port_falls_back_to_grpc_then_is_tried_again(
    node: Node,
) -> None:
    """The node's RESP port as if firewalled (the client's record points at a closed port):
    the add goes over gRPC; RESP is tried again only after RESP_RETRY_S."""
    srv, addr = node, node.addr
    now = [1000.0]
    with Client(addr, refresh_s=3600) as client:
        client.hello()
        [n] = client.add_candidates()
        assert n.resp_port == srv.port  # learned from HELLO
        n.resp_port = free_port()  # nothing listens there
        adds = RespCalls(client, clock=lambda: now[0])
        try:
            before = addjob_calls(srv.port)
            base = client.qlen("fallback-q")
            for _ in range(3):
                assert adds.add_job("fallback-q", b"x", replicate=1).startswith("D-")
            assert client.qlen("fallback-q") == base + 3
            assert addjob_calls(srv.port) == before  # all three over gRPC
            n.resp_port = srv.port  # the port opens; the client waits out its period first
            adds.add_job("fallback-q", b"x", replicate=1)
            assert addjob_calls(srv.port) == before
            now[0] += resp_calls.RESP_RETRY_S
            adds.add_job("fallback-q", b"x", replicate=1)
            assert addjob_calls(srv.port) == before + 1
            assert client.qlen("fallback-q") == base + 5
        finally:
            adds.close()


def test_a_node_without_a_resp_port_publishes_over_grpc(server_factory: ServerFactory) -> None:
    """A node serving no RESP port (HELLO says 0): kombu's and Dramatiq's adds go over
    gRPC, as with publish_over=grpc."""
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port))
    addr = f"127.0.0.1:{grpc_port}"
    with kombu.Connection(f"disq://{addr}?replicate=1") as conn:
        conn.Producer().publish({"k": 1}, exchange="", routing_key="no-resp")
        assert _drain(conn, "no-resp", 1) == [{"k": 1}]
    broker = DisqBroker(f"disq://{addr}", replicate=1)
    try:

        @dramatiq.actor(broker=broker, queue_name="no-resp-dq", actor_name="no_resp")
        def task(x: int) -> None: ...

        task.send(1)
        assert broker.qsize("no-resp-dq") == 1
    finally:
        broker.close()


def test_a_node_restarted_under_an_idle_connection_takes_the_next_add(
    server_factory: ServerFactory,
) -> None:
    """The node closed the connection (a restart): the next add opens a new one, and is not
    an indeterminate add on the dead socket."""
    srv = start_node(server_factory)
    addr = srv.addr
    with Client(addr) as client:
        client.hello()
        adds = RespCalls(client)
        try:
            adds.add_job("restart-q", b"1", replicate=1)
            srv.proc.restart()
            client.hello()
            assert adds.add_job("restart-q", b"2", replicate=1).startswith("D-")
            assert addjob_calls(srv.port) == 1  # the second, on the new process, over RESP
        finally:
            adds.close()


def test_celery_tasks_published_over_resp_run(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        app_dir = write_app(tmp_path / "app", "capp", CELERY_APP)
        broker = disq_url(lab)  # the README's URL: every node, no option
        resp_ports = [lab.node(i).port for i in range(lab.n)]
        before = sum(addjob_calls(p) for p in resp_ports)
        p = Celery("producer", broker=broker)
        for k in range(20):
            p.send_task("capp.rec", args=(k,), queue="over-resp")
        assert sum(addjob_calls(p) for p in resp_ports) - before == 20
        w = celery_worker(app_dir, broker, "over-resp", "w1")
        try:
            wait_all_done(app_dir, set(range(20)), timeout=60)
            # A task's retry is published by the pool process that ran it (a forked child
            # of the worker): over RESP too, through the child's own connection.
            before = sum(addjob_calls(p) for p in resp_ports)
            p.send_task("capp.rec", args=(20,), kwargs={"fail_times": 2}, queue="over-resp")
            wait_all_done(app_dir, {20}, timeout=60)
            assert sum(addjob_calls(p) for p in resp_ports) - before == 3  # sent, 2 retries
            starts = [r for r in runs(app_dir) if r.k == 20 and r.event == "start"]
            assert len(starts) == 3 and w.proc.pid not in {r.pid for r in starts}
        finally:
            w.stop()


def test_a_node_killed_while_publishing_over_resp_loses_none(tmp_path: Path) -> None:
    """SIGKILL of the node holding most of the queue while Celery publishes over RESP: every
    publish succeeds (an answer lost is kombu's retry, which may add twice, never lose)."""
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        app_dir = write_app(tmp_path / "app", "capp", CELERY_APP)
        # RETRY 5: a job queued on the killed node is queued again by a copy's holder soon.
        broker = disq_url(lab, retry_s=5)
        w = celery_worker(app_dir, broker, "flow-resp", "w1", acks_late=True)
        try:
            w.wait_for_log("ready.")
            p = Celery("producer", broker=broker)
            resp_ports = [lab.node(i).port for i in range(lab.n)]
            before = sum(addjob_calls(port) for port in resp_ports)
            slowest_s = send_while_a_node_dies(
                lab,
                "flow-resp",
                lambda k: p.send_task(
                    "capp.rec", args=(k,), kwargs={"sleep_s": 0.01}, queue="flow-resp"
                ),
            )
            counts = wait_all_done(app_dir, set(range(300)), timeout=180)
            assert set(counts) == set(range(300))  # none lost (a retried add may run twice)
            live = [port for port in resp_ports if _alive(port)]
            assert sum(addjob_calls(port) for port in live) > before  # RESP carried them
            print(f"slowest publish: {slowest_s:.2f} s")  # reported, not asserted
        finally:
            w.stop()


def test_a_node_killed_while_dramatiq_enqueues_over_resp_loses_none(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        app_dir = write_app(tmp_path / "app", "dapp", DRAMATIQ_APP)
        url = disq_url(lab, retry_s=5)
        w = dramatiq_worker(app_dir, url, "dflow-resp", "w1", threads=2)
        broker = DisqBroker(url)
        try:
            w.wait_for_log("Worker process is ready for action.")
            resp_ports = [lab.node(i).port for i in range(lab.n)]
            before = sum(addjob_calls(port) for port in resp_ports)

            def send(k: int) -> None:
                message = dramatiq.Message(
                    queue_name="dflow-resp",
                    actor_name="rec",
                    args=(k,),
                    kwargs={"sleep_s": 0.01},
                    options={},
                )
                broker.enqueue(message)

            slowest_s = send_while_a_node_dies(lab, "dflow-resp", send)
            counts = wait_all_done(app_dir, set(range(300)), timeout=180)
            assert set(counts) == set(range(300))  # none lost (a retried add may run twice)
            live = [port for port in resp_ports if _alive(port)]
            assert sum(addjob_calls(port) for port in live) > before  # RESP carried them
            print(f"slowest enqueue: {slowest_s:.2f} s")  # reported, not asserted
        finally:
            w.stop()
            broker.close()


def _alive(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
