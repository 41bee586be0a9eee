"""Celery on a real 3-node disq cluster: `celery -A capp worker` processes (prefork, 2 pool
processes) with ``broker_url = "disq://..."`` and no disq import in the app."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from eventually import eventually
from task_apps import (
    CELERY_APP,
    celery_worker,
    disq_url,
    done_counts,
    runs,
    send_while_a_node_dies,
    wait_all_done,
    write_app,
)

from cluster.lab import Lab
from disq.client import Client


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with Lab(3, tmp_path_factory.mktemp("celery3"), node_timeout_ms=1500) as lab:
        yield lab


def producer(broker_url: str) -> Celery:
    return Celery("producer", broker=broker_url)


def test_a_thousand_tasks_run_exactly_once(lab3: Lab, tmp_path: Path) -> None:
    app_dir = write_app(tmp_path, "capp", CELERY_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "thousand", "w1")
    try:
        w.wait_for_log("ready.")
        # Started cleanly: remote control on (the cluster keeps its fanout exchange and
        # queues), mingle and gossip skipped (Celery lists the transports it runs them on).
        assert "Traceback" not in w.log_text()
        p = producer(broker)
        for k in range(1000):
            p.send_task("capp.rec", args=(k,), queue="thousand")
        counts = wait_all_done(app_dir, set(range(1000)))
        assert counts == {k: 1 for k in range(1000)}
        with Client(disq_url(lab3).removeprefix("disq://")) as c:
            assert sum(c.qlen("thousand", node=n.addr) for n in c.nodes()) == 0
        assert len({r.pid for r in runs(app_dir)}) == 2  # both pool processes worked
    finally:
        w.stop()
    assert done_counts(app_dir) == {k: 1 for k in range(1000)}  # and no late second run


def test_countdown_runs_no_sooner_and_retry_runs_again(lab3: Lab, tmp_path: Path) -> None:
    app_dir = write_app(tmp_path, "capp", CELERY_APP)
    broker = disq_url(lab3)
    w = celery_worker(app_dir, broker, "timing", "w1")
    try:
        w.wait_for_log("ready.")
        p = producer(broker)
        sent_at = time.time()
        p.send_task("capp.rec", args=(1,), queue="timing", countdown=3)
        p.send_task("capp.rec", args=(2,), kwargs={"fail_times": 2}, queue="timing")
        wait_all_done(app_dir, {1, 2})
        done = {r.k: r for r in runs(app_dir) if r.event == "done"}
        assert done[1].at - sent_at >= 3.0  # the node held it (DELAY), no worker did
        starts = sorted(r.attempt for r in runs(app_dir) if r.event == "start" and r.k == 2)
        assert starts == [0, 1, 2] and done[2].attempt == 2  # retry() twice, then done
    finally:
        w.stop()


@pytest.mark.slow
def test_acks_late_tasks_of_a_killed_worker_are_redelivered(lab3: Lab, tmp_path: Path) -> None:
    app_dir = write_app(tmp_path, "capp", CELERY_APP)
    broker = disq_url(lab3, retry_s=3)  # the visibility timeout
    a = celery_worker(app_dir, broker, "late", "wa", acks_late=True)
    b = None
    try:
        a.wait_for_log("ready.")
        p = producer(broker)
        for k in range(20):
            p.send_task("capp.rec", args=(k,), kwargs={"sleep_s": 0.5}, queue="late")
        # Kill it mid-task: tasks started and not done, more prefetched.
        eventually(
            lambda: len({r.k for r in runs(app_dir) if r.event == "start"}) >= 4,
            "four tasks started",
        )
        a.kill9()
        killed_pids = {r.pid for r in runs(app_dir)}
        unfinished = {r.k for r in runs(app_dir) if r.event == "start"} - set(done_counts(app_dir))
        assert unfinished, "the kill came after every started task was done"
        b = celery_worker(app_dir, broker, "late", "wb", acks_late=True)
        counts = wait_all_done(app_dir, set(range(20)), timeout=60)
        assert set(counts) == set(range(20))  # none lost
        by_b = {r.k for r in runs(app_dir) if r.event == "done" and r.pid not in killed_pids}
        assert unfinished <= by_b  # what the killed worker was running, b ran
    finally:
        a.stop()
        if b is not None:
            b.stop()


@pytest.mark.slow
def test_a_node_killed_while_tasks_flow_loses_none(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        app_dir = write_app(tmp_path / "app", "capp", CELERY_APP)
        broker = disq_url(lab, replicate=2, retry_s=3)
        w = celery_worker(app_dir, broker, "flow", "w1", acks_late=True)
        try:
            w.wait_for_log("ready.")
            p = producer(broker)
            send_while_a_node_dies(
                lab,
                "flow",
                lambda k: p.send_task(
                    "capp.rec", args=(k,), kwargs={"sleep_s": 0.01}, queue="flow"
                ),
            )
            counts = wait_all_done(app_dir, set(range(300)), timeout=120)
            assert set(counts) == set(range(300))  # none lost (a retried add may run twice)
        finally:
            w.stop()
