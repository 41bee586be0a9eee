"""Celery's delivery contract on a real 3-node disq cluster, as on Redis/RabbitMQ: a
rejected task comes back marked ``redelivered`` within a second, an expired task is
revoked (not lost), a worker whose prefetch is full of running tasks still answers its
remote control within Celery's 1 s window, and a revoked countdown task (held by the node)
never runs. Real ``celery worker`` processes; the README's ``disq://`` URL."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import kombu
import pytest
from celery import Celery
from celery.exceptions import TaskRevokedError
from eventually import eventually
from task_apps import CELERY_APP, celery_worker, disq_url, runs, write_app

from cluster.lab import Lab

HOST = socket.gethostname()

DELIVERY_APP = (
    CELERY_APP
    + """
from celery.exceptions import Reject

app.conf.result_backend = os.environ.get("RESULT_BACKEND") or None


@app.task(bind=True)
def reject_once(self, k):
    # The pattern of Celery's docs: reject the first delivery, run the redelivered one.
    if not self.request.delivery_info.get("redelivered"):
        record("first", k)
        raise Reject("not yet", requeue=True)
    record("done", k)


@app.task
def add(x, y):
    return x + y


@app.task
def snooze(k, sleep_s):
    record("start", k)
    time.sleep(sleep_s)
    record("done", k)
"""
)


def producer(broker_url: str, backend: str | None = None) -> Celery:
    return Celery("producer", broker=broker_url, backend=backend)


def backend_url(tmp_path: Path) -> str:
    """Celery's filesystem result backend: no service of its own to start."""
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    return f"file://{results}"


def test_a_rejected_task_comes_back_redelivered_within_a_second(lab3: Lab, tmp_path: Path) -> None:
    app_dir = write_app(tmp_path, "capp", DELIVERY_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "rej", "wrej", acks_late=True, concurrency=1)
    try:
        w.wait_for_log("ready.")
        producer(broker).send_task("capp.reject_once", args=(1,), queue="rej")
        eventually(lambda: any(r.event == "done" for r in runs(app_dir)), "the redelivered run", 30)
    finally:
        w.stop()
    # Exactly two deliveries (the first rejected, the second ran), none after the ack.
    events = sorted(runs(app_dir), key=lambda r: r.at)
    assert [r.event for r in events] == ["first", "done"], events
    assert events[1].at - events[0].at < 1.0  # NACK: back in the queue at once


def test_a_message_rejected_at_another_node_comes_back_within_a_second(lab3: Lab) -> None:
    """Published at node 1, consumed from node 0 (the node brought it over), rejected with
    requeue: the NACK goes to the node that created the job, which queues it at once, and
    the consumer's next GETJOB at node 0 gets it from there within a second."""
    node0, node1 = (f"127.0.0.1:{lab3.node(i).bus_port}" for i in (0, 1))
    with (
        kombu.Connection(f"disq://{node0},{node1}") as near,
        kombu.Connection(f"disq://{node1}?discover=false&replicate=1") as far,
    ):
        with far.Producer() as producer:
            producer.publish("again", routing_key="rej-far")
        q = near.SimpleQueue("rej-far")
        first = q.get(timeout=10)
        assert not first.delivery_info["redelivered"]
        rejected_at = time.monotonic()
        first.reject(requeue=True)
        back = q.get(timeout=5)
        took_s = time.monotonic() - rejected_at
        assert back.payload == "again" and back.delivery_info["redelivered"] is True
        assert took_s < 1.0, took_s
        back.ack()
        q.close()


def test_an_expired_task_is_revoked_not_lost(
    lab3: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = backend_url(tmp_path)
    monkeypatch.setenv("RESULT_BACKEND", backend)  # the worker's (its env is this one's)
    app_dir = write_app(tmp_path, "capp", DELIVERY_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "exp", "wexp", concurrency=1)
    try:
        w.wait_for_log("ready.")
        p = producer(broker, backend)
        for k in range(4):  # 8 s of work before the one process is free
            p.send_task("capp.snooze", args=(k, 2.0), queue="exp")
        result = p.send_task("capp.add", args=(1, 1), queue="exp", expires=1)
        with pytest.raises(TaskRevokedError):
            result.get(timeout=60)
        assert result.state == "REVOKED"
    finally:
        w.stop()


def test_a_full_prefetch_answers_inspect_and_revoke_within_a_second(
    lab3: Lab, tmp_path: Path
) -> None:
    """One process, four 2-second tasks prefetched: the pidbox is served beside them (the
    worker runs Celery's event loop, kombu_loop.py), not after them (~8 s)."""
    app_dir = write_app(tmp_path, "capp", DELIVERY_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "busy", "wbusy", concurrency=1)
    name = f"wbusy@{HOST}"
    try:
        w.wait_for_log("ready.")
        p = producer(broker)
        results = [p.send_task("capp.snooze", args=(k, 2.0), queue="busy") for k in range(4)]
        eventually(lambda: any(r.event == "start" for r in runs(app_dir)), "a task started")
        # Celery's default window (1 s): None if the worker did not answer within it.
        active = p.control.inspect(timeout=1, destination=[name]).active()
        assert active is not None and len(active[name]) == 1, active
        last = results[-1]
        last.revoke()
        revoked = p.control.inspect(timeout=1, destination=[name]).revoked()
        assert revoked is not None and last.id in revoked[name], revoked
        assert len({r.k for r in runs(app_dir) if r.event == "done"}) < 3  # still busy
        w.wait_for_log(f"Discarding revoked task: capp.snooze[{last.id}]", timeout=30)
        eventually(
            lambda: {r.k for r in runs(app_dir) if r.event == "done"} == {0, 1, 2},
            "the three others done",
            30,
        )
    finally:
        w.stop()
    assert 3 not in {r.k for r in runs(app_dir)}


def test_a_revoked_countdown_task_never_runs(lab3: Lab, tmp_path: Path) -> None:
    """The node holds the countdown (DELAY): ``inspect scheduled`` has nothing, but the
    worker's revoked set is consulted when the task is delivered at its time."""
    app_dir = write_app(tmp_path, "capp", DELIVERY_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "later", "wlater", concurrency=1)
    try:
        w.wait_for_log("ready.")
        p = producer(broker)
        sent_at = time.time()
        later = p.send_task("capp.snooze", args=(7, 0.0), queue="later", countdown=3)
        p.send_task("capp.snooze", args=(8, 0.0), queue="later", countdown=3)  # a witness
        later.revoke()
        w.wait_for_log(f"Tasks flagged as revoked: {later.id}", timeout=10)
        w.wait_for_log(f"Discarding revoked task: capp.snooze[{later.id}]", timeout=30)
        eventually(lambda: any(r.k == 8 for r in runs(app_dir) if r.event == "done"), "witness")
        assert time.time() - sent_at >= 3.0
    finally:
        w.stop()
    assert 7 not in {r.k for r in runs(app_dir)}


@pytest.mark.parametrize("pool", ["threads", "solo"])
def test_the_threads_and_solo_pools_run_on_the_event_loop(
    lab3: Lab, tmp_path: Path, pool: str
) -> None:
    """The transport is asynchronous, so every pool runs on Celery's event loop, not only
    prefork: tasks run once each, and an idle worker answers within 1 s."""
    app_dir = write_app(tmp_path, "capp", DELIVERY_APP)
    broker = disq_url(lab3)
    name = f"w{pool}"
    w = celery_worker(app_dir, broker, f"q{pool}", name, extra_args=("-P", pool))
    try:
        w.wait_for_log("ready.")
        assert {"threads": "(thread)", "solo": "(solo)"}[pool] in w.log_text()  # the banner
        p = producer(broker)
        for k in range(20):
            p.send_task("capp.snooze", args=(k, 0.0), queue=f"q{pool}")
        eventually(
            lambda: sorted(r.k for r in runs(app_dir) if r.event == "done") == list(range(20)),
            "the 20 tasks done once each",
            30,
        )
        ping = p.control.inspect(timeout=1, destination=[f"{name}@{HOST}"]).ping()
        assert ping == {f"{name}@{HOST}": {"ok": "pong"}}, ping
        assert "Traceback" not in w.log_text()
    finally:
        w.stop()
