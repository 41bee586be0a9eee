"""Dramatiq on a real 3-node disq cluster: `dramatiq dapp` worker processes with
``DisqBroker`` set in the app module, messages sent from this process."""

from __future__ import annotations

import time
from pathlib import Path

import dramatiq
import pytest
from eventually import eventually
from task_apps import (
    DRAMATIQ_APP,
    disq_url,
    done_counts,
    dramatiq_worker,
    runs,
    send_while_a_node_dies,
    wait_all_done,
    write_app,
)

from cluster.lab import Lab
from disq.integrations.dramatiq import DisqBroker


def send(
    broker: DisqBroker,
    queue: str,
    k: int,
    *,
    delay_ms: int | None = None,
    options: dict[str, object] | None = None,
    **kw: object,
) -> None:
    message = dramatiq.Message(
        queue_name=queue, actor_name="rec", args=(k,), kwargs=dict(kw), options=options or {}
    )
    broker.enqueue(message, delay=delay_ms)


def test_a_thousand_messages_run_exactly_once(lab3: Lab, tmp_path: Path) -> None:
    app_dir = write_app(tmp_path, "dapp", DRAMATIQ_APP)
    broker_url = disq_url(lab3)
    # Two worker processes, forked by dramatiq's main process, as users run it (gRPC's fork
    # support on, its default): the main process never opens the broker, so no fork copies
    # gRPC's threads (gRPC would log "skipping fork() handlers").
    w = dramatiq_worker(app_dir, broker_url, "thousand", "w1", processes=2)
    broker = DisqBroker(broker_url)
    try:
        eventually(
            lambda: w.log_text().count("Worker process is ready for action.") == 2,
            "both worker processes ready",
        )
        for k in range(1000):
            send(broker, "thousand", k)
        counts = wait_all_done(app_dir, set(range(1000)))
        assert counts == {k: 1 for k in range(1000)}
        assert broker.qsize("thousand") == 0
    finally:
        w.stop()
        broker.close()
    assert done_counts(app_dir) == {k: 1 for k in range(1000)}
    assert "skipping fork() handlers" not in w.log_text()


def test_delayed_messages_wait_on_the_node_and_failures_go_to_the_dead_letter_queue(
    lab3: Lab, tmp_path: Path
) -> None:
    app_dir = write_app(tmp_path, "dapp", DRAMATIQ_APP)
    broker_url = disq_url(lab3)
    w = dramatiq_worker(app_dir, broker_url, "timing", "w1")
    broker = DisqBroker(broker_url)
    try:
        w.wait_for_log("Worker process is ready for action.")
        sent_at = time.time()
        send(broker, "timing", 1, delay_ms=3000)
        send(broker, "timing", 2, fail=True)  # max_retries=1: two attempts, then dead
        wait_all_done(app_dir, {1})
        done = {r.k: r for r in runs(app_dir) if r.event == "done"}
        assert done[1].at - sent_at >= 3.0
        eventually(lambda: broker.qsize("timing.XQ") == 1, "the failed message dead-lettered")
        starts = [r for r in runs(app_dir) if r.k == 2 and r.event == "start"]
        assert len(starts) == 2  # the first run and Dramatiq's one retry
        assert broker.qsize("timing") == 0
        broker.flush("timing")
        assert broker.qsize("timing.XQ") == 0
    finally:
        w.stop()
        broker.close()


@pytest.mark.slow
def test_a_killed_workers_messages_are_redelivered(lab3: Lab, tmp_path: Path) -> None:
    app_dir = write_app(tmp_path, "dapp", DRAMATIQ_APP)
    broker_url = disq_url(lab3, retry_s=3)  # the visibility timeout
    a = dramatiq_worker(app_dir, broker_url, "killed", "wa", threads=2)
    b = None
    broker = DisqBroker(broker_url)
    try:
        a.wait_for_log("Worker process is ready for action.")
        for k in range(20):
            send(broker, "killed", k, sleep_s=0.5)
        eventually(
            lambda: len({r.k for r in runs(app_dir) if r.event == "start"}) >= 4,
            "four messages started",
        )
        a.kill9()
        killed_pids = {r.pid for r in runs(app_dir)}
        unfinished = {r.k for r in runs(app_dir) if r.event == "start"} - set(done_counts(app_dir))
        assert unfinished, "the kill came after every started message was done"
        b = dramatiq_worker(app_dir, broker_url, "killed", "wb", threads=2)
        counts = wait_all_done(app_dir, set(range(20)), timeout=60)
        assert set(counts) == set(range(20))  # none lost
        by_b = {r.k for r in runs(app_dir) if r.event == "done" and r.pid not in killed_pids}
        assert unfinished <= by_b
    finally:
        a.stop()
        if b is not None:
            b.stop()
        broker.close()


# A job whose queued copy was on the killed node is queued again by a node holding another
# copy once the cluster confirms the node dead (1-2 s after, disq/core/disque/dead_peers.py),
# not at its RETRY (the node's default, min(TTL/10, 300 s), with no option): every task runs
# well before RETRY_S would have brought it back.
DEFAULT_RETRY_S = 300


@pytest.mark.slow
def test_a_node_killed_while_messages_flow_loses_none_with_the_defaults(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        app_dir = write_app(tmp_path / "app", "dapp", DRAMATIQ_APP)
        url = disq_url(lab)  # the README's URL: every node, no option
        w = dramatiq_worker(app_dir, url, "flow", "w1", threads=2)
        broker = DisqBroker(url)
        try:
            w.wait_for_log("Worker process is ready for action.")
            slowest_s = send_while_a_node_dies(
                lab, "flow", lambda k: send(broker, "flow", k, sleep_s=0.01)
            )
            counts = wait_all_done(app_dir, set(range(300)), timeout=DEFAULT_RETRY_S / 2)
            assert set(counts) == set(range(300))  # none lost (a retried add may run twice)
            print(f"slowest publish: {slowest_s:.2f} s")  # reported, not asserted
        finally:
            w.stop()
            broker.close()


def test_higher_broker_priority_messages_run_first(lab3: Lab, tmp_path: Path) -> None:
    """``broker_priority`` (Dramatiq's RabbitMQ broker's option: higher first), sent while no
    worker runs; one worker thread runs them highest step first, each step in the order it
    was sent; qsize and flush cover the steps. One node for the producer and the worker: a
    node's queues are ordered, other nodes' jobs come as they come (Disque's federation)."""
    app_dir = write_app(tmp_path, "dapp", DRAMATIQ_APP)
    url = f"disq://127.0.0.1:{lab3.node(0).bus_port}?discover=false"
    broker = DisqBroker(url)
    broker.declare_queue("dprio")
    priorities = [0, 9, 3, None, 6, 9, 1, 7, 4, 0, 8, 5]
    try:
        for k, priority in enumerate(priorities):
            opts = {} if priority is None else {"broker_priority": priority}
            send(broker, "dprio", k, options=opts)
        assert broker.qsize("dprio") == len(priorities)
        broker.flush("dprio")
        assert broker.qsize("dprio") == 0
        for k, priority in enumerate(priorities):
            opts = {} if priority is None else {"broker_priority": priority}
            send(broker, "dprio", k, options=opts)
    finally:
        broker.close()
    step = {None: 0, 0: 0, 1: 0, 3: 3, 4: 3, 5: 3, 6: 6, 7: 6, 8: 6, 9: 9}
    expected = sorted(range(len(priorities)), key=lambda k: (-step[priorities[k]], k))
    w = dramatiq_worker(app_dir, url, "dprio", "w1", threads=1)
    try:
        wait_all_done(app_dir, set(range(len(priorities))), timeout=60)
    finally:
        w.stop()
    started = [r.k for r in sorted(runs(app_dir), key=lambda r: r.at) if r.event == "start"]
    assert started == expected
