"""Dramatiq on a real 3-node disq cluster: `dramatiq dapp` worker processes with
``DisqBroker`` set in the app module, messages sent from this process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dramatiq
import pytest
from dramatiq.errors import QueueJoinTimeout
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
from disq.integrations.dramatiq import DisqBroker, DisqMessage


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


@contextmanager
def worker_and_broker(
    app_dir: Path, url: str, queue: str, **worker_options: int
) -> Iterator[DisqBroker]:
    """A `dramatiq dapp` worker on ``queue``, ready, and a broker in this process; both
    stopped afterwards."""
    w = dramatiq_worker(app_dir, url, queue, "w1", **worker_options)
    broker = DisqBroker(url)
    try:
        w.wait_for_log("Worker process is ready for action.")
        yield broker
    finally:
        w.stop()
        broker.close()


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
    with worker_and_broker(app_dir, broker_url, "timing") as broker:
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
        with worker_and_broker(app_dir, url, "flow", threads=2) as broker:
            slowest_s = send_while_a_node_dies(
                lab, "flow", lambda k: send(broker, "flow", k, sleep_s=0.01)
            )
            counts = wait_all_done(app_dir, set(range(300)), timeout=DEFAULT_RETRY_S / 2)
            assert set(counts) == set(range(300))  # none lost (a retried add may run twice)
            print(f"slowest publish: {slowest_s:.2f} s")  # reported, not asserted


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


def test_join_waits_for_delayed_messages_until_every_one_ran(lab3: Lab, tmp_path: Path) -> None:
    """20 messages delayed 1.5 s: none is queued anywhere while join starts (QLEN 0 on every
    node), yet join returns only once the worker ran and acked all 20."""
    app_dir = write_app(tmp_path, "dapp", DRAMATIQ_APP)
    url = disq_url(lab3)
    with worker_and_broker(app_dir, url, "djoin") as broker:
        for k in range(20):
            send(broker, "djoin", k, delay_ms=1500)
        assert broker.qsize("djoin") == 0  # all delayed: nothing queued yet
        broker.join("djoin")
        assert done_counts(app_dir) == {k: 1 for k in range(20)}
        assert broker.pending("djoin") == 0


def test_join_waits_for_messages_being_worked_on(lab3: Lab, tmp_path: Path) -> None:
    """Messages delivered and still running (not acked): join waits for their ack."""
    app_dir = write_app(tmp_path, "dapp", DRAMATIQ_APP)
    url = disq_url(lab3)
    with worker_and_broker(app_dir, url, "dslow", threads=4) as broker:
        for k in range(3):
            send(broker, "dslow", k, sleep_s=1.5)
        eventually(
            lambda: {r.k for r in runs(app_dir) if r.event == "start"} == {0, 1, 2},
            "the three messages started",
        )
        assert broker.qsize("dslow") == 0  # delivered, so no longer queued
        broker.join("dslow")
        assert done_counts(app_dir) == {0: 1, 1: 1, 2: 1}


def test_join_times_out_and_flush_drops_delayed_and_unacked_messages(lab3: Lab) -> None:
    """No worker: a delayed message and a delivered one never acked keep join waiting until
    its timeout (QueueJoinTimeout); flush drops both, and join returns."""
    broker = DisqBroker(disq_url(lab3))
    try:
        send(broker, "dflush", 1, delay_ms=60_000)
        send(broker, "dflush", 2)
        consumer = broker.consume("dflush", prefetch=1, timeout=1000)
        taken = eventually(lambda: next(consumer), "the undelayed message delivered")
        assert taken.args == (2,)
        assert broker.qsize("dflush") == 0 and broker.pending("dflush") >= 2
        with pytest.raises(QueueJoinTimeout):
            broker.join("dflush", timeout=300)
        broker.flush("dflush")
        broker.join("dflush", timeout=10_000)
        assert broker.pending("dflush") == 0
        consumer.ack(taken)  # the worker's late ack of a flushed message: harmless
        consumer.close()
    finally:
        broker.close()


def test_a_delivered_message_equals_the_sent_one_and_plain_messages_ack_and_nack(
    lab3: Lab,
) -> None:
    """``enqueue`` returns the message with its job's id set, so the delivered one compares
    equal (as Redis's ``redis_message_id``); ack and nack take the plain Message; a message
    delivered again is ``redelivered`` (RabbitMQ's flag), a first delivery is not."""
    broker = DisqBroker(disq_url(lab3))
    try:
        sent = broker.enqueue(
            dramatiq.Message(
                queue_name="dequal", actor_name="rec", args=(1,), kwargs={"a": [1, 2]}, options={}
            )
        )
        assert sent.options["disq_job_id"]
        consumer = broker.consume("dequal", prefetch=2, timeout=1000)
        got = eventually(lambda: next(consumer), "the message delivered")
        assert got == sent and got._message == sent
        assert isinstance(got, DisqMessage) and got.redelivered is False
        consumer.requeue([got])  # NACK: delivered again at once, counted
        again = eventually(lambda: next(consumer), "the message delivered again")
        assert again == sent and again.redelivered is True
        consumer.nack(again._message)  # a plain Message: dead-lettered, the original acked
        eventually(lambda: broker.qsize("dequal.XQ") == 1, "the message dead-lettered")
        broker.join("dequal", timeout=10_000)
        dead = broker.consume("dequal.XQ", timeout=1000)
        corpse = eventually(lambda: next(dead), "the dead letter delivered")
        assert corpse.message_id == sent.message_id and corpse.args == (1,)
        dead.ack(corpse._message)  # a plain Message too
        broker.join("dequal.XQ", timeout=10_000)
        consumer.close()
        dead.close()
    finally:
        broker.close()
