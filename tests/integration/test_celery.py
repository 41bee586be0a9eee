"""Celery on a real 3-node disq cluster: `celery -A capp worker` processes (prefork, 2 pool
processes) with ``broker_url = "disq://..."`` and no disq import in the app."""

from __future__ import annotations

import time
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


# A job whose queued copy was on the killed node is queued again by a node holding another
# copy once the cluster confirms the node dead (1-2 s after, disq/core/disque/dead_peers.py),
# not at its RETRY (the node's default, min(TTL/10, 300 s), with no option): every task runs
# well before RETRY_S would have brought it back.
DEFAULT_RETRY_S = 300


@pytest.mark.slow
def test_a_node_killed_while_tasks_flow_loses_none_with_the_defaults(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        app_dir = write_app(tmp_path / "app", "capp", CELERY_APP)
        broker = disq_url(lab)  # the README's URL: every node, no option
        w = celery_worker(app_dir, broker, "flow", "w1", acks_late=True)
        try:
            w.wait_for_log("ready.")
            p = producer(broker)
            slowest_s = send_while_a_node_dies(
                lab,
                "flow",
                lambda k: p.send_task(
                    "capp.rec", args=(k,), kwargs={"sleep_s": 0.01}, queue="flow"
                ),
            )
            counts = wait_all_done(app_dir, set(range(300)), timeout=DEFAULT_RETRY_S / 2)
            assert set(counts) == set(range(300))  # none lost (a retried add may run twice)
            print(f"slowest publish: {slowest_s:.2f} s")  # reported, not asserted
        finally:
            w.stop()


def test_with_a_node_down_before_the_first_publish_every_send_succeeds(tmp_path: Path) -> None:
    """REPLICATE defaults to the majority of the nodes (2 of 3): the node's own default,
    min(3, cluster size), refused every add with one node of 3 down (NOREPL)."""
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        lab.kill9(2)
        app_dir = write_app(tmp_path / "app", "capp", CELERY_APP)
        broker = disq_url(lab)  # the dead node is in the URL too
        p = producer(broker)
        for k in range(20):
            p.send_task("capp.rec", args=(k,), queue="down")  # raises if a send fails
        live = [f"127.0.0.1:{lab.node(i).bus_port}" for i in (0, 1)]
        with Client(live) as c:
            assert sum(c.qlen("down", node=a) for a in live) == 20
            [job] = c.get_jobs("down", count=1, timeout_s=5)
            shown = c.show(job.id)
            # REPLICATE 2, the majority; the add asked a third node when the dead one (not
            # yet known dead) did not answer, within the add's timeout.
            assert shown is not None and shown["repl"] == 2
            c.nack(job.id)  # back at once, for the worker
        w = celery_worker(app_dir, broker, "down", "w1")
        try:
            wait_all_done(app_dir, set(range(20)), timeout=60)
        finally:
            w.stop()


def test_higher_priority_tasks_run_first(lab3: Lab, tmp_path: Path) -> None:
    """Sent with priority= while no worker runs; one worker process taking one task at a
    time (prefetch 1, -O fair) runs them highest first (AMQP's order), each step in the
    order it was sent. The producer and the worker use one node: a node's queues are
    ordered by priority; a consumer whose node holds none of them gets other nodes' jobs
    as they come (Disque's federation)."""
    app_dir = write_app(tmp_path, "capp", CELERY_APP)
    broker = f"disq://127.0.0.1:{lab3.node(0).bus_port}?discover=false"
    priorities = [0, 9, 3, None, 6, 9, 1, 7, 4, 0, 8, 5]
    p = producer(broker)
    for k, priority in enumerate(priorities):
        p.send_task("capp.rec", args=(k,), queue="prio", priority=priority)
    step = {None: 0, 0: 0, 1: 0, 3: 3, 4: 3, 5: 3, 6: 6, 7: 6, 8: 6, 9: 9}
    expected = sorted(range(len(priorities)), key=lambda k: (-step[priorities[k]], k))
    w = celery_worker(
        app_dir,
        broker,
        "prio",
        "w1",
        concurrency=1,
        prefetch_multiplier=1,
        extra_args=("-O", "fair"),
    )
    try:
        wait_all_done(app_dir, set(range(len(priorities))), timeout=60)
    finally:
        w.stop()
    started = [r.k for r in sorted(runs(app_dir), key=lambda r: r.at) if r.event == "start"]
    assert started == expected
