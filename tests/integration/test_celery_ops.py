"""Celery's operations on a real 3-node disq cluster, as on RabbitMQ: remote control
(``celery inspect``/``control``: a fanout exchange and reply queues that expire), broadcast
queues, events (``celery events --dump``), Flower, and a default worker that leaves nothing
behind. Real worker, CLI and Flower processes; the URL has the three nodes and no options."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest
from celery import Celery
from conftest import free_port
from eventually import eventually
from kombu.common import Broadcast
from task_apps import (
    BIN,
    CELERY_APP,
    WorkerProcess,
    celery_command,
    celery_worker,
    disq_url,
    done_counts,
    runs,
    stop_all,
    wait_all_done,
    write_app,
)

from cluster.lab import Lab
from disq.client import Client

# The app of test_celery.py with a broadcast queue beside the task queue "ops".
OPS_APP = (
    CELERY_APP
    + """
from kombu import Queue
from kombu.common import Broadcast

app.conf.task_queues = [Queue("ops"), Broadcast("ops_bcast")]
app.conf.result_backend = os.environ.get("RESULT_BACKEND") or None


@app.task
def mul(x, y):
    return x * y
"""
)
HOST = socket.gethostname()


@pytest.fixture
def client(lab3: Lab) -> Iterator[Client]:
    with Client(disq_url(lab3).removeprefix("disq://")) as c:
        yield c


def producer(broker_url: str) -> Celery:
    return Celery("producer", broker=broker_url)


def non_task_jobs(c: Client, task_queues: set[str]) -> list[tuple[str, str]]:
    """(node, queue) of every job not acked, on any node, of a queue no worker reads."""
    return [
        (node.addr, job.queue)
        for node in c.nodes()
        for job in c.scan_jobs(node.addr, states=("wait-repl", "active", "queued"))
        if job.queue not in task_queues
    ]


def control_queues(c: Client) -> list[str]:
    """The pidbox reply queues and event receiver queues the cluster still keeps."""
    routes = c.list_routes()
    names = set(routes.queues) | {queue for _, queue, _ in routes.bindings}
    return sorted(
        n for n in names if n.endswith(".reply.celery.pidbox") or n.startswith("celeryev.")
    )


def test_inspect_ping_is_answered_by_two_workers(lab3: Lab, tmp_path: Path) -> None:
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    workers = [celery_worker(app_dir, broker, "ops", n, concurrency=1) for n in ("w1", "w2")]
    try:
        for w in workers:
            w.wait_for_log("ready.")
        ping = celery_command(app_dir, broker, "inspect", "ping")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert f"w1@{HOST}: OK" in ping.stdout and f"w2@{HOST}: OK" in ping.stdout
        assert "pong" in ping.stdout and "2 nodes online" in ping.stdout
        registered = celery_command(app_dir, broker, "inspect", "registered")
        assert registered.returncode == 0 and registered.stdout.count("capp.rec") == 2
        stats = celery_command(app_dir, broker, "inspect", "stats", "--json")
        assert stats.returncode == 0, stats.stdout + stats.stderr
        by_worker = json.loads(stats.stdout.strip().splitlines()[-1])
        assert set(by_worker) == {f"w1@{HOST}", f"w2@{HOST}"}
        assert {v["pid"] for v in by_worker.values()} == {w.proc.pid for w in workers}
        active = celery_command(app_dir, broker, "inspect", "active")
        assert active.returncode == 0 and "2 nodes online" in active.stdout
    finally:
        stop_all(workers)


def test_control_commands_and_a_broadcast_queue(lab3: Lab, tmp_path: Path, client: Client) -> None:
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    workers = [
        celery_worker(app_dir, broker, "ops,ops_bcast", n, concurrency=1) for n in ("wc1", "wc2")
    ]
    try:
        for w in workers:
            w.wait_for_log("ready.")
        p = producer(broker)
        # A broadcast queue: each worker has its own queue bound to the fanout exchange.
        p.send_task("capp.rec", args=(1,), queue=Broadcast("ops_bcast"))
        eventually(
            lambda: len({r.pid for r in runs(app_dir) if r.event == "done" and r.k == 1}) == 2,
            "the broadcast task run by both workers",
        )
        rate = celery_command(app_dir, broker, "control", "rate_limit", "capp.rec", "100/m")
        assert rate.returncode == 0, rate.stdout + rate.stderr
        assert rate.stdout.count("new rate limit set successfully") == 2
        # add_consumer and cancel_consumer answer after the worker declared, bound or
        # cancelled through the cluster (several calls): a reply window of 5 s, not 1.
        added = celery_command(
            app_dir,
            broker,
            "control",
            "add_consumer",
            "ops_extra",
            "-d",
            f"wc1@{HOST}",
            "--timeout",
            "5",
        )
        assert added.returncode == 0 and "add consumer ops_extra" in added.stdout, added.stdout
        p.send_task("capp.rec", args=(2,), queue="ops_extra")
        wait_all_done(app_dir, {1, 2}, timeout=60)
        cancelled = celery_command(
            app_dir,
            broker,
            "control",
            "cancel_consumer",
            "ops_extra",
            "-d",
            f"wc1@{HOST}",
            "--timeout",
            "5",
        )
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "no longer consuming from ops_extra" in cancelled.stdout
        p.send_task("capp.rec", args=(3,), queue="ops_extra")  # nobody reads it any more
        eventually(
            lambda: sum(client.qlen("ops_extra", node=n.addr) for n in client.nodes()) == 1,
            "the task sent after cancel_consumer waiting in its queue",
        )
        assert 3 not in {r.k for r in runs(app_dir)}
        assert client.purge_queue("ops_extra") == 1
    finally:
        stop_all(workers)


def test_events_dump_shows_task_succeeded(lab3: Lab, tmp_path: Path, client: Client) -> None:
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "ops", "we1", concurrency=1, extra_args=("-E",))
    dump = WorkerProcess(
        app_dir,
        [str(BIN / "celery"), "-A", "capp", "events", "--dump"],
        {"BROKER_URL": broker},
        "dump",
    )
    try:
        w.wait_for_log("ready.")
        dump.wait_for_log("-> evdump: starting capture")
        # The receiver's queue is bound to the celeryev topic exchange once it listens.
        eventually(
            lambda: any(ex == "celeryev" for ex, _, _ in client.list_routes().bindings),
            "the event receiver's binding",
        )
        producer(broker).send_task("capp.rec", args=(7,), queue="ops")
        dump.wait_for_log("task succeeded")
        assert f"we1@{HOST}" in dump.log_text()
        os.killpg(dump.proc.pid, signal.SIGINT)  # evdump closes its connection on ^C
        dump.proc.wait(30)
        # Its auto_delete, exclusive queue went with it; the worker's events are dropped.
        eventually(lambda: not control_queues(client), "the receiver's queue deleted")
    finally:
        dump.stop()
        w.stop()


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_flower_lists_the_worker_and_ten_successful_tasks(
    lab3: Lab, tmp_path: Path, client: Client
) -> None:
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    port = free_port()
    w = celery_worker(app_dir, broker, "ops", "wf1", concurrency=1, extra_args=("-E",))
    flower = WorkerProcess(
        app_dir,
        [str(BIN / "celery"), "-A", "capp", "flower", f"--port={port}", "--address=127.0.0.1"],
        {"BROKER_URL": broker, "FLOWER_UNAUTHENTICATED_API": "true"},
        "flower",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        w.wait_for_log("ready.")
        flower.wait_for_log("Visit me at")
        name = f"wf1@{HOST}"

        def worker_listed() -> bool:
            workers = _get_json(f"{base}/api/workers?refresh=1")
            assert isinstance(workers, dict)
            return name in workers and bool(workers[name].get("stats"))

        eventually(worker_listed, "Flower's /api/workers to list the worker", timeout=60)
        p = producer(broker)
        ids = {p.send_task("capp.rec", args=(k,), queue="ops").id for k in range(10)}

        def all_succeeded() -> bool:
            tasks = _get_json(f"{base}/api/tasks")
            assert isinstance(tasks, dict)
            return all(tasks.get(i, {}).get("state") == "SUCCESS" for i in ids)

        eventually(all_succeeded, "Flower's /api/tasks to show 10 tasks SUCCESS", timeout=60)
        tasks = _get_json(f"{base}/api/tasks")
        assert isinstance(tasks, dict)
        assert {tasks[i]["worker"] for i in ids} == {name}
        with urllib.request.urlopen(f"{base}/workers", timeout=10) as r:
            assert name in r.read().decode()  # the workers page lists it
        flower.stop()  # SIGTERM: Flower exits without closing its event connection...
        # ...and its receiver's exclusive queue goes as it exits, not a lease (60 s) later.
        eventually(
            lambda: not [q for q in control_queues(client) if q.startswith("celeryev.")],
            "Flower's event queue deleted",
        )
    finally:
        flower.stop()
        w.stop()


def test_flower_shows_a_result_the_disq_backend_keeps(
    lab3: Lab, tmp_path: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    monkeypatch.setenv("RESULT_BACKEND", broker)  # the worker's (its env is this one's)
    port = free_port()
    w = celery_worker(app_dir, broker, "ops", "wr1", concurrency=1)
    flower = WorkerProcess(
        app_dir,
        [str(BIN / "celery"), "-A", "capp", "flower", f"--port={port}", "--address=127.0.0.1"],
        {"BROKER_URL": broker, "RESULT_BACKEND": broker, "FLOWER_UNAUTHENTICATED_API": "true"},
        "flower",
    )
    try:
        w.wait_for_log("ready.")
        flower.wait_for_log("Visit me at")
        app = Celery("producer", broker=broker, backend=broker)
        r = app.send_task("capp.mul", args=(6, 7), queue="ops")
        assert r.get(timeout=30) == 42
        # Flower reads it through the app's backend: disq's.
        got = _get_json(f"http://127.0.0.1:{port}/api/task/result/{r.id}")
        assert got == {"task-id": r.id, "state": "SUCCESS", "result": 42}
    finally:
        flower.stop()
        w.stop()


def test_shutdown_stops_the_worker_and_inspect_alone_times_out_leaving_nothing(
    lab3: Lab, tmp_path: Path, client: Client
) -> None:
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "ops", "ws1", concurrency=1)
    try:
        w.wait_for_log("ready.")
        # The worker stops before it replies (Celery's shutdown raises WorkerShutdown), so
        # the CLI says no node replied, as it does on RabbitMQ.
        celery_command(app_dir, broker, "control", "shutdown")
        assert w.proc.wait(60) == 0
        assert "Got shutdown from remote" in w.log_text()
        # The worker's pidbox queue (exclusive, auto_delete) is deleted as it closes.
        eventually(
            lambda: not [q for q in client.list_routes().queues if q.endswith(".celery.pidbox")],
            "the worker's pidbox queue deleted",
        )
    finally:
        w.stop()
    # No worker alive: the broadcast reaches nobody, the CLI times out as on RabbitMQ...
    alone = celery_command(app_dir, broker, "inspect", "ping")
    assert alone.returncode != 0
    assert "No nodes replied within time constraint" in alone.stdout + alone.stderr
    # ...and its reply queue does not outlive it (deleted after the wait, or expired).
    eventually(lambda: not control_queues(client), "no reply queue left")
    assert non_task_jobs(client, {"ops"}) == []


@pytest.mark.slow
def test_default_workers_with_and_without_events_leave_no_job_nobody_reads(
    lab3: Lab, tmp_path: Path, client: Client
) -> None:
    """No flags, and -E: heartbeats and task events go to the celeryev exchange, where
    nothing is bound (dropped); an inspect's reply queue goes with it. After 30 s (15
    heartbeats of each worker, three lives of a pidbox queue's x-expires) nothing but task
    jobs exist, and the workers' pidbox queues still answer."""
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    workers = [
        celery_worker(app_dir, broker, "ops", "wd1", concurrency=1),
        celery_worker(app_dir, broker, "ops", "wd2", concurrency=1, extra_args=("-E",)),
    ]
    try:
        for w in workers:
            w.wait_for_log("ready.")
        started = time.monotonic()
        p = producer(broker)
        for k in range(20):
            p.send_task("capp.rec", args=(k,), queue="ops")
        ping = celery_command(app_dir, broker, "inspect", "ping")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        wait_all_done(app_dir, set(range(20)))
        # 30 s of heartbeats (one every 2 s each) and the -E worker's task events, which
        # piled up as jobs before they were dropped.
        time.sleep(max(0.0, 30 - (time.monotonic() - started)))
        assert non_task_jobs(client, {"ops"}) == []
        assert not control_queues(client)
        # Their pidbox queues (x-expires 10 s) lived on all along: renewed while consumed.
        late = celery_command(app_dir, broker, "inspect", "ping")
        assert late.returncode == 0 and "2 nodes online" in late.stdout, late.stdout + late.stderr
        eventually(lambda: not control_queues(client), "the late ping's reply queue deleted")
        assert non_task_jobs(client, {"ops"}) == []
        for w in workers:
            assert w.proc.poll() is None and "Traceback" not in w.log_text()
    finally:
        stop_all(workers)


def _broadcast_queues(c: Client) -> set[str]:
    return {q for _, q, _ in c.list_routes().bindings if q.startswith("bcast.")}


@pytest.mark.slow
def test_a_stopped_workers_broadcast_queue_expires_with_its_messages(
    lab3: Lab, tmp_path: Path, client: Client
) -> None:
    """A Broadcast queue is auto_delete without x-expires: a lease its worker renews (60 s,
    or the option transient_lease_s: 6 s here, so the test waits seconds, not a minute;
    tests/unit/test_kombu_transient.py holds the default); stopped, the worker no longer
    renews it and the cluster deletes it, its binding and what was broadcast to it
    meanwhile."""
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3, transient_lease_s=6)
    before = _broadcast_queues(client)
    w = celery_worker(app_dir, broker, "ops,ops_bcast", "wb1", concurrency=1)
    try:
        w.wait_for_log("ready.")
        (mine,) = _broadcast_queues(client) - before
    finally:
        w.stop()
    producer(broker).send_task("capp.rec", args=(9,), queue=Broadcast("ops_bcast"))
    assert sum(client.qlen(mine, node=n.addr) for n in client.nodes()) == 1  # still bound

    def expired() -> bool:
        return mine not in _broadcast_queues(client) and mine not in client.list_routes().queues

    eventually(expired, "the stopped worker's broadcast queue expired", timeout=30)
    assert sum(client.qlen(mine, node=n.addr) for n in client.nodes()) == 0
    assert 9 not in {r.k for r in runs(app_dir)}


def test_rpc_results_come_back_when_gathered_one_by_one(
    lab3: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's rpc:// backend still works: its reply queue is auto_delete with an
    x-expires of a day, consumed and cancelled around each get(), fed through the default
    exchange."""
    monkeypatch.setenv("RESULT_BACKEND", "rpc://")  # the worker's (its env is this one's)
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "ops", "wr1", concurrency=2)
    try:
        w.wait_for_log("ready.")
        p = Celery("producer", broker=broker, backend="rpc://")
        results = [p.send_task("capp.rec", args=(k,), queue="ops") for k in range(10)]
        wait_all_done(app_dir, set(range(10)))  # every result is waiting in the queue now
        assert [r.get(timeout=30) for r in results] == [None] * 10
        assert all(r.state == "SUCCESS" for r in results)
    finally:
        w.stop()


def _ping_failure(ping: subprocess.CompletedProcess[str], broker: str, w: WorkerProcess) -> str:
    """What a failed ping leaves to explain it: the CLI's output, the pidbox exchanges'
    bindings and queue declarations as the cluster holds them, the worker's last lines."""
    with Client(broker.removeprefix("disq://")) as c:
        routes = c.list_routes()
    pidbox = [b for b in routes.bindings if "pidbox" in b[0]]
    queues = {q: d for q, d in routes.queues.items() if "pidbox" in q}
    return (
        f"stdout={ping.stdout!r} stderr={ping.stderr!r}\nbindings={pidbox}\nqueues={queues}\n"
        f"worker log tail:\n{w.log_text()[-3000:]}"
    )


def test_a_worker_whose_prefetch_is_full_still_answers_and_runs_on(
    lab3: Lab, tmp_path: Path
) -> None:
    """acks_late, one process: the task channel's prefetch slots all taken by running and
    waiting tasks; the pidbox channel is still read, and each ack lets the next task in."""
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    # A worker name of its own, as every test here: the lab is shared, and its pidbox
    # queue is this test's alone.
    w = celery_worker(app_dir, broker, "ops", "wfull", acks_late=True, concurrency=1)
    try:
        w.wait_for_log("ready.")
        p = producer(broker)
        for k in range(20):  # 10 s of work: the prefetch stays full while the CLI asks
            p.send_task("capp.rec", args=(k,), kwargs={"sleep_s": 0.5}, queue="ops")
        eventually(lambda: any(r.event == "start" for r in runs(app_dir)), "a task started")
        # Named, the CLI returns at the worker's reply instead of waiting out its window
        # (long, as a loaded machine may need it: the prefetch stays full for 10 s anyway).
        ping = celery_command(
            app_dir, broker, "inspect", "ping", "-d", f"wfull@{HOST}", "--timeout", "8"
        )
        assert ping.returncode == 0 and f"wfull@{HOST}: OK" in ping.stdout, _ping_failure(
            ping, broker, w
        )
        assert len(done_counts(app_dir)) < 20  # answered while tasks were still waiting
        wait_all_done(app_dir, set(range(20)), timeout=60)
    finally:
        w.stop()


@pytest.mark.timeout(240)
def test_celery_purge_empties_10000_queued_tasks_in_one_call(lab3: Lab, tmp_path: Path) -> None:
    """``celery purge -f`` as a user runs it: every queued message of the app's queues, on
    every node, removed by the one call, and counted (the JSCAN walk of issue 24 purged
    5,005 of 8,000 and needed two more passes). A queue of its own: the lab is shared."""
    app_dir = write_app(tmp_path, "capp", OPS_APP)
    broker = disq_url(lab3)
    for i in range(3):  # queued on every node: each node's share is its own queue
        with Client(f"127.0.0.1:{lab3.node(i).bus_port}", discover=False) as c:
            n = 3334 if i < 2 else 3332
            ids = c.add_jobs([{"queue": "purge10k", "body": b"{}", "replicate": 1}] * n)
            assert all(isinstance(x, str) for x in ids)
    with Client(broker.removeprefix("disq://")) as c:
        assert sum(c.qlen("purge10k", node=node.addr) for node in c.nodes()) == 10_000
        purged = celery_command(app_dir, broker, "purge", "-f", "-Q", "purge10k")
        assert purged.returncode == 0, purged.stderr
        assert "Purged 10000 messages" in purged.stdout, purged.stdout
        assert sum(c.qlen("purge10k", node=node.addr) for node in c.nodes()) == 0


def test_a_full_prefetch_still_takes_the_other_queues_messages_from_other_nodes(
    lab3: Lab,
) -> None:
    """One connection to node 0 alone, two channels: one whose prefetch of 1 is taken by an
    unacked message, one consuming a queue it never waited on (a worker's pidbox). A
    message for that queue published at node 1 reaches it: the looks at the other channels
    while the prefetch is full ask the other nodes, as a waiting consumer does."""
    node0, node1 = (f"127.0.0.1:{lab3.node(i).bus_port}" for i in (0, 1))
    held_q = kombu.Queue("held-tasks", routing_key="held-tasks")
    other_q = kombu.Queue("held-other", routing_key="held-other")
    with (
        kombu.Connection(f"disq://{node0}?discover=false&replicate=1") as conn,
        kombu.Connection(f"disq://{node1}?discover=false&replicate=1") as far,
    ):
        with conn.Producer() as producer:
            producer.publish("task", routing_key="held-tasks")
        held: list[kombu.Message] = []
        got: list[str] = []

        def on_other(body: Any, message: kombu.Message) -> None:
            got.append(body)
            message.ack()

        tasks = kombu.Consumer(
            conn.channel(), [held_q], callbacks=[lambda _b, m: held.append(m)], prefetch_count=1
        )
        other = kombu.Consumer(conn.channel(), [other_q], callbacks=[on_other])
        with tasks, other:
            conn.drain_events(timeout=10)  # the task, left unacked: the prefetch is full
            assert len(held) == 1 and not got
            with far.Producer() as producer:
                producer.publish("from node 1", routing_key="held-other")

            def delivered() -> bool:
                try:
                    conn.drain_events(timeout=0.5)
                except TimeoutError:
                    pass
                return got == ["from node 1"]

            eventually(delivered, "the message published at node 1 to be delivered", 20)
            held[0].ack()
