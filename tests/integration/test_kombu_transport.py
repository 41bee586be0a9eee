"""The kombu transport against a real node, through kombu's public API only (Connection,
SimpleQueue, Consumer, Producer), as kombu's own transport tests drive theirs."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest
from conftest import ServerFactory, free_port
from eventually import eventually
from kombu.exceptions import ChannelError, OperationalError

from disq.client import Client


@pytest.fixture(scope="module")
def grpc_addr(module_factory: ServerFactory) -> str:
    port = free_port()
    module_factory.new("--grpc-port", str(port))
    return f"127.0.0.1:{port}"


@pytest.fixture
def conn(grpc_addr: str) -> Iterator[kombu.Connection]:
    # RETRY 2: an unacked message is back after 2 s (the visibility timeout).
    with kombu.Connection(f"disq://{grpc_addr}?retry_s=2&replicate=1") as c:
        yield c


def test_simple_queue_put_get_ack_and_size(conn: kombu.Connection, grpc_addr: str) -> None:
    q = conn.SimpleQueue("kq-simple")
    q.put({"n": 1, "text": "héllo"}, headers={"h": "v"})
    q.put(b"\x00\xffraw", serializer=None, content_type="application/data")
    assert q.qsize() == 2
    m = q.get(timeout=5)
    assert m.payload == {"n": 1, "text": "héllo"} and m.headers["h"] == "v"
    m.ack()
    raw = q.get(timeout=5)
    assert raw.body == b"\x00\xffraw"
    raw.ack()
    assert q.qsize() == 0
    # Acked: the jobs are gone from the node, and nothing comes back after RETRY.
    with Client(grpc_addr) as c:
        assert c.qlen("kq-simple") == 0
    with pytest.raises(q.Empty):
        q.get(timeout=3)
    q.close()


def test_an_empty_queue_times_out_with_kombus_empty(conn: kombu.Connection) -> None:
    q = conn.SimpleQueue("kq-empty")
    start = time.monotonic()
    with pytest.raises(q.Empty):
        q.get(timeout=0.5)
    assert time.monotonic() - start >= 0.5
    with pytest.raises(q.Empty):
        q.get_nowait()
    # drain_events itself raises socket.timeout, as kombu's other transports do.
    with pytest.raises(socket.timeout):
        conn.drain_events(timeout=0.2)
    q.close()


def test_unacked_message_comes_back_after_retry(conn: kombu.Connection) -> None:
    q = conn.SimpleQueue("kq-visibility")
    q.put("once")
    first = q.get(timeout=5)
    assert first.payload == "once" and not first.delivery_info.get("redelivered")
    sent_back = time.monotonic()
    again = q.get(timeout=10)  # not acked: the node queues it again after RETRY (2 s)
    assert again.payload == "once"
    assert time.monotonic() - sent_back >= 1.0
    assert again.delivery_info["disq_job_id"] == first.delivery_info["disq_job_id"]
    assert again.delivery_info["redelivered"] is True  # where Celery's request reads it
    again.ack()
    q.close()


def test_reject_with_and_without_requeue(conn: kombu.Connection, grpc_addr: str) -> None:
    q = conn.SimpleQueue("kq-reject")
    q.put("again")
    m = q.get(timeout=5)
    m.reject(requeue=True)  # NACK: back at once, not after RETRY
    back = q.get(timeout=1)
    assert back.payload == "again" and back.delivery_info["redelivered"] is True
    with Client(grpc_addr) as c:
        shown = c.show(back.delivery_info["disq_job_id"])
        assert shown is not None and shown["nacks"] == 1
    back.reject(requeue=False)  # dropped: acked
    with pytest.raises(q.Empty):
        q.get(timeout=3)  # past RETRY: it did not come back
    q.close()


def test_consumer_with_prefetch_gets_no_more_than_the_prefetch(conn: kombu.Connection) -> None:
    queue = kombu.Queue("kq-prefetch", kombu.Exchange("kq-prefetch", "direct"), "kq-prefetch")
    with conn.Producer() as producer:
        for k in range(10):
            producer.publish(
                {"k": k}, exchange=queue.exchange, routing_key="kq-prefetch", declare=[queue]
            )
    got: list[kombu.Message] = []
    with conn.Consumer(queue, callbacks=[lambda body, msg: got.append(msg)], prefetch_count=3):
        for _ in range(5):
            try:
                conn.drain_events(timeout=0.5)
            except TimeoutError:
                break
        assert len(got) == 3  # the QoS holds the rest back until acks free slots
        for m in got:
            m.ack()
        while len(got) < 10:
            conn.drain_events(timeout=5)
            for m in got[-1:]:
                if not m.acknowledged:
                    m.ack()
    assert sorted(m.payload["k"] for m in got) == list(range(10))


def test_purge_deletes_the_queued_messages(conn: kombu.Connection) -> None:
    q = conn.SimpleQueue("kq-purge")
    for k in range(25):
        q.put(k)
    assert q.qsize() == 25
    assert q.clear() == 25
    assert q.qsize() == 0
    with pytest.raises(q.Empty):
        q.get(timeout=0.3)
    q.close()


def test_countdown_headers_become_delay(conn: kombu.Connection) -> None:
    from datetime import UTC, datetime, timedelta

    q = conn.SimpleQueue("kq-eta")
    sent = time.time()
    q.put("later", headers={"eta": (datetime.now(UTC) + timedelta(seconds=2)).isoformat()})
    with pytest.raises(q.Empty):
        q.get(timeout=1)  # held by the node, not by this consumer
    m = q.get(timeout=10)
    assert m.payload == "later" and time.time() - sent >= 2.0
    m.ack()
    q.close()


def test_a_message_over_the_limit_is_a_channel_error_and_nothing_is_added(
    grpc_addr: str,
) -> None:
    with kombu.Connection(f"disq://{grpc_addr}?max_message_bytes=1000") as c:
        q = c.SimpleQueue("kq-big")
        with pytest.raises(ChannelError, match="over the limit of 1000 bytes"):
            q.put("x" * 5000)
        q.put("small")  # the connection still works
        assert q.qsize() == 1
        q.get(timeout=5).ack()
        q.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "no-such-host.invalid"])
def test_a_dead_address_fails_with_kombus_errors(host: str) -> None:
    # A port nobody listens on, and a name that does not resolve (RFC 2606's .invalid).
    dead = f"{host}:{free_port()}"
    conn = kombu.Connection(f"disq://{dead}", connect_timeout=1)
    with pytest.raises(OperationalError, match="no node answered"):
        conn.ensure_connection(max_retries=1)
    with pytest.raises(conn.connection_errors):
        conn.connect()
    conn.release()


def test_a_dead_node_in_the_url_is_skipped_for_a_live_one(grpc_addr: str) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with kombu.Connection(f"disq://{dead},{grpc_addr}?replicate=1") as c:
        q = c.SimpleQueue("kq-failover")
        q.put("via the live node")
        assert q.get(timeout=5).payload == "via the live node"
        q.close()


def test_a_bad_url_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="unknown disq option 'colour'"):
        kombu.Connection("disq://127.0.0.1:1?colour=red").transport  # noqa: B018


def test_the_password_goes_in_the_url(server_factory: ServerFactory) -> None:
    port = free_port()
    server_factory.new("--grpc-port", str(port), "--requirepass", "s3cret")
    with kombu.Connection(f"disq://:s3cret@127.0.0.1:{port}?replicate=1") as c:
        assert ":s3cret@" not in c.as_uri() and ":**@" in c.as_uri()
        q = c.SimpleQueue("kq-auth")
        q.put("let me in")
        q.get(timeout=5).ack()
        q.close()
    wrong = kombu.Connection(f"disq://:nope@127.0.0.1:{port}")
    with pytest.raises(OperationalError, match=r"NOAUTH|password|Authentication|invalid"):
        wrong.ensure_connection(max_retries=1)
    wrong.release()


def _jobs_of(grpc_addr: str, queue: str) -> list[Any]:
    with Client(grpc_addr) as c:
        return [j for j in c.scan_jobs(grpc_addr, queue=queue) if j.queue == queue]


def test_priorities_are_served_highest_first_in_amqps_order(
    conn: kombu.Connection, grpc_addr: str
) -> None:
    queue = kombu.Queue("kq-prio", routing_key="kq-prio")
    sent = [(0, 0), (1, None), (2, 9), (3, 4), (4, 6), (5, 2), (6, 9), (7, 3), (8, 7), (9, 42)]
    with conn.channel() as channel:
        producer = kombu.Producer(channel)
        for k, priority in sent:
            producer.publish({"k": k}, routing_key="kq-prio", declare=[queue], priority=priority)
    # One disq queue per step (0 is the queue itself), as kombu's Redis transport keeps them.
    with Client(grpc_addr) as c:
        lens = {s: c.qlen("kq-prio" + (f"\x06\x16{s}" if s else "")) for s in (0, 3, 6, 9)}
    assert lens == {0: 3, 3: 2, 6: 2, 9: 3}
    got: list[int] = []

    def on_message(body: Any, message: kombu.Message) -> None:
        got.append(body["k"])
        assert message.delivery_info["routing_key"] == "kq-prio"  # the queue, not its step
        message.ack()

    # One drain is one GETJOB for the whole prefetch: the steps come highest first, each in
    # the order it was published (the round-robin of Disque's GETJOB would interleave them).
    with kombu.Consumer(conn, [queue], callbacks=[on_message]):
        conn.drain_events(timeout=5)
    assert got == [2, 6, 9, 4, 8, 3, 7, 0, 1, 5]


def test_size_and_purge_cover_every_priority_step(conn: kombu.Connection) -> None:
    q = conn.SimpleQueue("kq-prio-purge")
    for k in range(12):
        q.put(k, priority=k % 10)
    assert q.qsize() == 12
    assert q.clear() == 12
    assert q.qsize() == 0
    with pytest.raises(q.Empty):
        q.get(timeout=0.3)
    q.close()


def test_a_message_with_expiration_2_is_gone_after_it(
    conn: kombu.Connection, grpc_addr: str
) -> None:
    q = conn.SimpleQueue("kq-ttl")
    q.put("short", expiration=2)
    q.put("rounded up", expiration=0.2)
    ttls = sorted(j.ttl_s for j in _jobs_of(grpc_addr, "kq-ttl"))
    assert ttls and ttls[-1] <= 2 and len(ttls) == 2
    eventually(lambda: not _jobs_of(grpc_addr, "kq-ttl"), "the expired jobs to be gone", 10)
    with pytest.raises(q.Empty):
        q.get(timeout=1)
    q.close()


def test_a_celery_tasks_expiration_is_no_ttl(conn: kombu.Connection, grpc_addr: str) -> None:
    """Celery's ``expires=1`` (its header, and ``expiration`` in the properties): the job
    stays, for the worker to receive it and revoke it, as on Redis."""
    q = conn.SimpleQueue("kq-task-ttl")
    expires = "2026-01-01T00:00:01+00:00"
    q.put("task", expiration=1, headers={"task": "capp.add", "id": "t1", "expires": expires})
    (job,) = _jobs_of(grpc_addr, "kq-task-ttl")
    assert job.ttl_s > 60  # the node's default TTL, not the second
    m = q.get(timeout=5)
    assert m.headers["expires"] == expires
    m.ack()
    q.close()


def test_a_declared_message_ttl_caps_what_is_published_to_the_queue(
    conn: kombu.Connection, grpc_addr: str
) -> None:
    queue = kombu.Queue("kq-qttl", routing_key="kq-qttl", message_ttl=2)
    with conn.channel() as channel:
        producer = kombu.Producer(channel)
        producer.publish("capped", routing_key="kq-qttl", declare=[queue])
        producer.publish("lower", routing_key="kq-qttl", declare=[queue], expiration=1)
    # The TTL left, in whole seconds (the transport's default would leave about a day).
    ttl_left = {
        base64.b64decode(json.loads(j.body)["body"]): j.ttl_s
        for j in _jobs_of(grpc_addr, "kq-qttl")
    }
    assert ttl_left.keys() == {b"capped", b"lower"}
    assert ttl_left[b"capped"] <= 2 and ttl_left[b"lower"] <= 1
    eventually(lambda: not _jobs_of(grpc_addr, "kq-qttl"), "the expired jobs to be gone", 10)


def test_a_waiting_consumer_is_woken_by_a_message_of_any_priority(grpc_addr: str) -> None:
    """The consumer's one blocking GETJOB lists every step: a message of a step other than
    0 wakes it (published from another connection while it waits on the node)."""
    url = f"disq://{grpc_addr}?replicate=1"
    got: list[Any] = []
    with kombu.Connection(url) as consumer_conn, kombu.Connection(url) as producer_conn:
        q = consumer_conn.SimpleQueue("kq-prio-wake")
        waiting = threading.Thread(target=lambda: got.append(q.get(timeout=20)))
        waiting.start()
        with Client(grpc_addr) as c:
            eventually(
                lambda: int(c.info("clients").get("blocked_clients", 0)) > 0,
                "the consumer to wait on the node",
            )
        producer_conn.SimpleQueue("kq-prio-wake").put("urgent", priority=9)
        waiting.join(20)
        assert [m.payload for m in got] == ["urgent"]
        got[0].ack()
        q.close()


def test_a_consumer_of_two_queues_is_served_from_both_while_one_has_a_backlog(
    conn: kombu.Connection,
) -> None:
    """The queues of one GETJOB take turns at the head of its list: a backlog in the first
    one does not hold back the second's message until it is drained (as a busy task queue
    held back a Celery worker's pidbox, and so its answer to ``celery inspect ping``)."""
    busy = kombu.Queue("kq-fair-busy", routing_key="kq-fair-busy")
    quiet = kombu.Queue("kq-fair-quiet", routing_key="kq-fair-quiet")
    with conn.channel() as channel:
        producer = kombu.Producer(channel)
        for k in range(10):
            producer.publish(f"busy {k}", routing_key="kq-fair-busy", declare=[busy])
        producer.publish("quiet", routing_key="kq-fair-quiet", declare=[quiet])
    got: list[str] = []

    def on_message(body: Any, message: kombu.Message) -> None:
        got.append(body)
        message.ack()

    # One message per fetch (prefetch 1): with the busy queue always first, the quiet
    # queue's message would be the 11th.
    with kombu.Consumer(conn, [busy, quiet], callbacks=[on_message], prefetch_count=1):
        while "quiet" not in got and len(got) < 11:
            conn.drain_events(timeout=5)
        assert got.index("quiet") <= 1, got
        while len(got) < 11:
            conn.drain_events(timeout=5)
    assert sorted(got) == sorted([f"busy {k}" for k in range(10)] + ["quiet"])


# -- exchanges, bindings and transient queues: the cluster's routes table ------------------


def _declare(conn: kombu.Connection, name: str, *bindings: tuple[kombu.Exchange, str]) -> None:
    queue = kombu.Queue(name, bindings=[kombu.binding(ex, routing_key=k) for ex, k in bindings])
    queue(conn.default_channel).declare()


def _publish(conn: kombu.Connection, exchange: str | kombu.Exchange, key: str, body: str) -> None:
    with conn.Producer() as producer:
        producer.publish(body, exchange=exchange, routing_key=key)


def _bodies(conn: kombu.Connection, name: str) -> list[str]:
    """Every message of the queue, taken (acked) through a kombu consumer."""
    got: list[str] = []
    with conn.Consumer(
        kombu.Queue(name), callbacks=[lambda body, m: got.append(body)], no_ack=True
    ):
        while True:
            try:
                conn.drain_events(timeout=0.5)
            except TimeoutError:
                return sorted(got)


def test_fanout_reaches_every_bound_queue(conn: kombu.Connection) -> None:
    ex = kombu.Exchange("kx-fan", "fanout")
    _declare(conn, "kq-fan-a", (ex, ""))
    _declare(conn, "kq-fan-b", (ex, "ignored-by-fanout"))
    _publish(conn, ex, "any.key", "to all")
    assert _bodies(conn, "kq-fan-a") == ["to all"]
    assert _bodies(conn, "kq-fan-b") == ["to all"]


def test_topic_follows_kombus_star_and_hash(conn: kombu.Connection) -> None:
    ex = kombu.Exchange("kx-topic", "topic")
    _declare(conn, "kq-t-star", (ex, "a.*"))
    _declare(conn, "kq-t-hash", (ex, "a.#"))
    _declare(conn, "kq-t-tail", (ex, "#.z"))
    for key in ("a.b", "a.b.c", "a", "x.z", "a.z", "b.a"):
        _publish(conn, ex, key, key)
    # kombu's TopicExchange: * is one word; # any words, the dot before it literal (so
    # "a.#" does not match "a", unlike AMQP's zero words).
    assert _bodies(conn, "kq-t-star") == ["a.b", "a.z"]
    assert _bodies(conn, "kq-t-hash") == ["a.b", "a.b.c", "a.z"]
    assert _bodies(conn, "kq-t-tail") == ["a.z", "x.z"]


def test_direct_with_two_keys_and_no_match_dropped(conn: kombu.Connection, grpc_addr: str) -> None:
    ex = kombu.Exchange("kx-direct", "direct")
    _declare(conn, "kq-d-both", (ex, "red"), (ex, "blue"))
    _declare(conn, "kq-d-red", (ex, "red"))
    for key in ("red", "blue", "green"):
        _publish(conn, ex, key, key)
    _publish(conn, "kx-never-declared", "red", "unknown exchange")
    assert _bodies(conn, "kq-d-both") == ["blue", "red"]
    assert _bodies(conn, "kq-d-red") == ["red"]
    with Client(grpc_addr) as c:  # dropped, as RabbitMQ: never a queue named by the key
        assert c.qlen("green") == 0 and c.qlen("red") == 0


def test_a_publish_repeated_with_its_idempotency_key_adds_one_job(
    conn: kombu.Connection, grpc_addr: str
) -> None:
    """The ``disq_idempotency_key`` property is the add's IDEMPOTENCY-KEY, on the default
    exchange and through a named one; messages without it are added every time."""
    with conn.Producer() as producer:
        for _ in range(3):
            producer.publish("once", routing_key="kq-idem", disq_idempotency_key="order-42")
        producer.publish("other", routing_key="kq-idem", disq_idempotency_key="order-43")
        for _ in range(2):
            producer.publish("plain", routing_key="kq-idem")
    ex = kombu.Exchange("kx-idem", "direct")
    _declare(conn, "kq-idem-ex", (ex, "k"))
    with conn.Producer() as producer:
        for _ in range(2):
            producer.publish("routed", exchange=ex, routing_key="k", disq_idempotency_key="r-1")
    with Client(grpc_addr) as c:
        [job] = c.get_jobs(["kq-idem-ex"], count=10, timeout_s=1)
        shown = c.show(job.id)
        assert shown is not None and shown["idempotency_key"] == "r-1"
        c.ack(job.id)
    assert _bodies(conn, "kq-idem") == ["once", "other", "plain", "plain"]


def test_an_unsupported_exchange_type_fails_at_declare(conn: kombu.Connection) -> None:
    with pytest.raises(ChannelError, match=r"'x-consistent-hash' is not supported.*direct"):
        kombu.Exchange("kx-hash", "x-consistent-hash")(conn.default_channel).declare()
    kombu.Exchange("kx-typed", "fanout")(conn.default_channel).declare()
    with pytest.raises(ChannelError, match="fanout"):  # redeclared as another type
        kombu.Exchange("kx-typed", "topic")(conn.default_channel).declare()
    with pytest.raises(ChannelError):  # passive: only checks, like RabbitMQ's 404
        conn.default_channel.exchange_declare("kx-nowhere", "direct", passive=True)
    conn.default_channel.exchange_declare("kx-typed", "direct", passive=True)


def test_a_bind_to_a_missing_exchange_is_refused(conn: kombu.Connection) -> None:
    with pytest.raises(ChannelError, match="kx-missing"):
        conn.default_channel.queue_bind("kq-orphan", "kx-missing", "k")
    q = conn.SimpleQueue("kq-after-refusal")  # the channel keeps serving
    q.put("fine")
    assert q.get(timeout=5).payload == "fine"
    q.close()


def test_an_exclusive_queue_goes_with_its_channel(conn: kombu.Connection, grpc_addr: str) -> None:
    ex = kombu.Exchange("kx-excl", "fanout")
    queue = kombu.Queue("kq-excl", ex, exclusive=True, auto_delete=True)
    got: list[str] = []
    channel = conn.channel()
    with kombu.Consumer(channel, queue, callbacks=[lambda body, m: got.append(body)], no_ack=True):
        _publish(conn, ex, "", "while consumed")
        conn.drain_events(timeout=5)
        with Client(grpc_addr) as c:
            assert "kq-excl" in c.list_routes().queues
        _publish(conn, ex, "", "left in the queue")
    channel.close()  # as a closing AMQP connection: deleted, with its binding and jobs
    assert got == ["while consumed"]
    with Client(grpc_addr) as c:
        routes = c.list_routes()
        assert "kq-excl" not in routes.queues
        assert all(q != "kq-excl" for _, q, _ in routes.bindings)
        assert c.qlen("kq-excl") == 0
    _publish(conn, ex, "", "nobody bound")
    with Client(grpc_addr) as c:
        assert c.qlen("kq-excl") == 0


_LEASED_CONSUMER = """
import sys

import kombu

url, name, expires_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
with kombu.Connection(url) as conn:
    ex = kombu.Exchange("kx-lease", "fanout")
    queue = kombu.Queue(name, ex, queue_arguments={"x-expires": expires_ms})
    with conn.Consumer(queue, callbacks=[lambda body, m: None], no_ack=True):
        print("consuming", flush=True)
        while True:
            try:
                conn.drain_events(timeout=1)
            except TimeoutError:
                pass
"""


def test_a_transient_queue_whose_consumer_was_killed_expires_with_its_jobs(
    conn: kombu.Connection, grpc_addr: str
) -> None:
    expires_ms = 3000
    root = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    url = f"disq://{grpc_addr}?replicate=1"
    consumer = subprocess.Popen(
        [sys.executable, "-c", _LEASED_CONSUMER, url, "kq-lease", str(expires_ms)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stdout is not None and consumer.stdout.readline() == "consuming\n"
        with Client(grpc_addr) as c:
            # Alive and draining, it renews the lease: the queue outlives two leases.
            until = time.monotonic() + 2 * expires_ms / 1000
            while time.monotonic() < until:
                assert "kq-lease" in c.list_routes().queues
                time.sleep(0.2)
            consumer.kill()  # SIGKILL: no cancel, no close
            consumer.wait(10)
            ex = kombu.Exchange("kx-lease", "fanout")
            for k in range(5):  # still bound until the lease runs out: these wait there
                _publish(conn, ex, "", f"late {k}")
            assert c.qlen("kq-lease") == 5

            def gone() -> bool:
                return "kq-lease" not in c.list_routes().queues

            eventually(gone, "the killed consumer's queue expired", timeout=30)
            assert c.qlen("kq-lease") == 0  # purged with it
            assert all(q != "kq-lease" for _, q, _ in c.list_routes().bindings)
    finally:
        consumer.kill()
        consumer.wait(10)
