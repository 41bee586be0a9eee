"""The gRPC API, the SDK and the worker against real 3-node clusters (cluster/lab.py).

Nodes are real processes; the client talks to their gRPC ports (RESP port + 10000). State
that travels between nodes is awaited with ``eventually`` (a poll with a deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, free_port  # noqa: E402
from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import (  # noqa: E402
    AsyncClient,
    AuthError,
    BadIdError,
    Client,
    DisqError,
    IndeterminateError,
    InvalidArgumentError,
    LeavingError,
    MaxLenError,
    NoJobError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
    TooLateError,
    UnavailableError,
)
from disq.proto_gen import api_pb2, api_pb2_grpc  # noqa: E402
from disq.worker import Worker  # noqa: E402


def addr(lab: Lab, i: int) -> str:
    return f"127.0.0.1:{lab.node(i).bus_port}"


def all_addrs(lab: Lab) -> str:
    return ",".join(addr(lab, i) for i in range(lab.n))


# ----------------------------------------------------------------------------- the API itself
def test_health_and_reflection_on_the_grpc_port(lab3: Lab) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    with grpc.insecure_channel(addr(lab3, 0)) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "disq.v1.Queue"):
            r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert r.status == health_pb2.HealthCheckResponse.SERVING
        db = ProtoReflectionDescriptorDatabase(ch)
        services = set(db.get_services())
        assert {"disq.v1.Queue", "grpc.health.v1.Health"} <= services
        methods = {m.name for m in db.FindFileContainingSymbol("disq.v1.Queue").service[0].method}
        assert {"AddJob", "AddJobs", "GetJobs", "StreamJobs", "Ack"} <= methods


def test_errors_carry_reason_and_disque_message_in_metadata(lab3: Lab) -> None:
    with grpc.insecure_channel(addr(lab3, 0)) as ch:
        stub = api_pb2_grpc.QueueStub(ch)
        with pytest.raises(grpc.RpcError) as info:
            stub.Ack(api_pb2.JobIds(ids=["nope"]), timeout=5)
        err = info.value
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details() == "BADID Invalid Job ID format."
        meta = dict(err.trailing_metadata())
        detail = api_pb2.ErrorInfo.FromString(meta["disq-error-bin"])
        assert detail.reason == api_pb2.BADID
        # The connection and the node keep serving after the error.
        assert stub.QLen(api_pb2.QueueName(queue="nothing"), timeout=5).count == 0
        stats = stub.Info(api_pb2.InfoRequest(section="stats"), timeout=5).fields
        assert int(stats["grpc_api_errors"]) >= 1 and int(stats["grpc_api_calls"]) >= 3


def test_grpc_and_resp_doors_see_the_same_queue(lab3: Lab) -> None:
    with Client(addr(lab3, 1), discover=False) as c:
        job_id = c.add_job("same-queue-é", b"body")
    # The RESP door names the queue by its UTF-8 bytes.
    assert lab3.node(1).call("QLEN", "same-queue-é".encode()) == 1
    got = lab3.node(1).call("GETJOB", "NOHANG", "FROM", "same-queue-é".encode())
    assert isinstance(got, list) and got[0][1] == job_id.encode()
    assert lab3.node(1).call("ACKJOB", job_id) == 1


# ----------------------------------------------------------------------------- the SDK
def test_a_delay_in_milliseconds_is_never_early_and_not_rounded_to_a_second(lab3: Lab) -> None:
    """``delay_ms=300``: a consumer waiting on the node gets the job 300 ms after its add
    or later (never before), and well before the second Disque's DELAY would round it to.
    Timed by the node itself: its lifecycle events (enqueued, then delivered)."""
    with Client(addr(lab3, 0), discover=False) as c:
        start = c.read_events(addr(lab3, 0), max_events=1).next_seq
        job_id = c.add_job("delay-ms", b"soon", replicate=1, delay_ms=300)
        [job] = c.get_jobs("delay-ms", timeout_s=5)
        assert job.id == job_id
        c.ack(job_id)

        def times() -> dict[str, int] | None:
            events = c.read_events(addr(lab3, 0), start, max_events=1000).events
            mine = {e.kind: e.time_ms for e in events if e.job_id == job_id}
            return mine if {"enqueued", "delivered"} <= set(mine) else None

        mine = eventually(times, "the add's and the delivery's events in the node's log")
    waited_ms = mine["delivered"] - mine["enqueued"]
    assert 300 <= waited_ms < 1000, waited_ms


def test_qstat_of_each_node_counts_its_delayed_and_delivered_jobs(lab3: Lab) -> None:
    """QStat's jobs, active and delayed: what QLEN does not show, per node (node 0 holds
    every job, REPLICATE 1); a node holding nothing of the queue answers None."""
    with Client(all_addrs(lab3)) as c:
        here = addr(lab3, 0)
        assert c.qstat("qstat-counts", node=here) is None
        c.hello()
        with Client(here, discover=False) as one:
            one.add_job("qstat-counts", b"later", replicate=1, delay_ms=60_000)
            delivered = one.add_job("qstat-counts", b"now", replicate=1)
            one.add_job("qstat-counts", b"queued", replicate=1)
            [job] = one.get_jobs("qstat-counts", timeout_s=5)
            assert job.id == delivered
        stat = c.qstat("qstat-counts", node=here)
        assert stat is not None
        assert (stat["len"], stat["jobs"], stat["active"], stat["delayed"]) == (1, 3, 1, 1)
        assert c.qstat("qstat-counts", node=addr(lab3, 1)) is None


def test_add_get_ack_across_nodes(lab3: Lab) -> None:
    with Client(addr(lab3, 0), discover=False) as producer:
        ids = [producer.add_job("xnodes", f"job-{k}", replicate=3) for k in range(5)]
    with Client(addr(lab3, 2), discover=False) as consumer:
        # Node 2 holds copies but did not queue them: federation brings them on demand.
        got: list[str] = []

        def fetch() -> bool:
            got.extend(j.id for j in consumer.get_jobs("xnodes", count=5, timeout_s=0.5))
            return len(got) == 5

        eventually(fetch, "node 2's consumer to receive the 5 jobs added on node 0")
        assert sorted(got) == sorted(ids)
        assert consumer.ack(*got) == 5
    for i in range(3):
        eventually(
            lambda i=i: all(lab3.node(i).call("SHOW", j) is None for j in ids),
            f"the acks to reach node {i}",
        )


def test_client_learns_the_cluster_and_routes_acks_to_the_creator(lab3: Lab) -> None:
    with Client(addr(lab3, 0)) as c:
        assert c.cluster_size() == 1  # the seeds: no call yet
        c.qlen("anything")  # the first call learns the cluster
        known = {n.addr for n in c.nodes()}
        assert known == {addr(lab3, i) for i in range(3)}
        assert len({n.node_id for n in c.nodes()}) == 3
        assert c.cluster_size() == 3
    with Client(addr(lab3, 0), discover=False) as c:
        c.qlen("anything")
        assert c.cluster_size() == 1  # no discovery...
        c.hello()
        assert c.cluster_size() == 3  # ...but HELLO says how many nodes there are
        assert [n.addr for n in c.nodes()] == [addr(lab3, 0)]  # and it still uses one
    with Client(addr(lab3, 1), discover=False) as creator_client:
        job_id = creator_client.add_job("route", "x", replicate=1)
    creator = lab3.node(1).id
    assert creator is not None and job_id[2:10] == creator[:8]
    with Client(addr(lab3, 0)) as c:
        # REPLICATE 1: only node 1 has the job; an ack sent anywhere else would count 0.
        assert c.ack(job_id) == 1


def test_batched_async_adds_each_get_their_own_id(lab3: Lab) -> None:
    async def main() -> tuple[list[str], int]:
        async with AsyncClient(addr(lab3, 0)) as c:
            ids = await asyncio.gather(*(c.add_job("batch", f"{k}") for k in range(300)))
            jobs = await c.get_jobs("batch", count=300, timeout_s=1)
            bodies = {j.id: j.body for j in jobs}
            c.ack_nowait(*bodies)
            await c.flush()
            for k, job_id in enumerate(ids):
                assert bodies[job_id] == f"{k}".encode()
            return list(ids), await c.qlen("batch")

    ids, left = asyncio.run(main())
    assert len(set(ids)) == 300 and left == 0


def test_add_jobs_reports_errors_per_job(lab3: Lab) -> None:
    with Client(addr(lab3, 0)) as c:
        out = c.add_jobs(
            [
                {"queue": "per-job", "body": "a"},
                {"queue": "per-job", "body": "b", "ttl_s": 0},
                {"queue": "per-job", "body": "c", "replicate": 9},
                {"queue": "", "body": "d"},
                {"queue": "per-job-2", "body": "e"},
                {"queue": "", "body": "f"},  # a bad name is refused each time it comes
                {"queue": "per-job", "body": "g"},
            ]
        )
        assert isinstance(out[0], str)
        assert isinstance(out[1], InvalidArgumentError)
        assert isinstance(out[2], NoReplError)
        assert isinstance(out[3], InvalidArgumentError) and "empty" in out[3].message
        assert isinstance(out[4], str)
        assert isinstance(out[5], InvalidArgumentError)
        assert isinstance(out[6], str)
        assert c.qlen("per-job") == 2 and c.qlen("per-job-2") == 1


def test_replicate_0_is_refused_as_resp_refuses_it(lab3: Lab) -> None:
    """REPLICATE 0 is an error over RESP; the SDK refused nothing and stored the job at the
    default level. Now it raises before sending, and nothing is added."""
    with pytest.raises(Exception, match="REPLICATE must be between 1 and 65535"):
        lab3.node(0).call("ADDJOB", "repl-zero", "x", "0", "REPLICATE", "0")
    with Client(addr(lab3, 0), discover=False) as c:
        with pytest.raises(ValueError, match="replicate must be between 1 and 65535, not 0"):
            c.add_job("repl-zero", "x", replicate=0)
        with pytest.raises(ValueError, match="not 65536"):
            c.add_jobs([{"queue": "repl-zero", "body": "y", "replicate": 65536}])
        assert c.qlen("repl-zero") == 0
        assert isinstance(c.add_job("repl-zero", "z", replicate=1), str)  # the client works on


def test_every_error_reason_is_reachable_and_mapped(lab3: Lab) -> None:
    with Client(addr(lab3, 0), discover=False) as c:
        with pytest.raises(NoReplError):
            c.add_job("errs", "x", replicate=5)
        c.add_job("errs-max", "x")
        with pytest.raises(MaxLenError):
            c.add_job("errs-max", "y", maxlen=1)
        c.pause("errs-paused", "in")
        with pytest.raises(PausedError):
            c.add_job("errs-paused", "x")
        c.pause("errs-paused", "none")
        with pytest.raises(BadIdError):
            c.ack("bad-id")
        with pytest.raises(NoJobError):
            c.working("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001")
        with pytest.raises(InvalidArgumentError):
            c.add_job("errs", "x", ttl_s=0)
        short = c.add_job("errs-late", "x", ttl_s=2, retry_s=1, replicate=1)

        def too_late() -> bool:
            try:
                c.working(short)
            except TooLateError:
                return True
            return False

        eventually(too_late, "WORKING to be refused once half the TTL passed", timeout=10)
        lab3.node(0).call("CONFIG", "SET", "maxmemory", "1")
        try:
            # The node re-reads its memory level after each batch of commands.
            def oom() -> bool:
                try:
                    c.add_job("errs-oom", "x", replicate=1)
                except OutOfMemoryError:
                    return True
                return False

            eventually(oom, "ADDJOB to be refused with OOM over maxmemory")
        finally:
            lab3.node(0).call("CONFIG", "SET", "maxmemory", "0")
        # No limit any more: the very next add is accepted (the warning level is cleared).
        assert c.add_job("errs-after-oom", "x", replicate=1).startswith("D-")
        lab3.node(0).call("CLUSTER", "LEAVING", "yes")
        try:
            with pytest.raises(LeavingError):
                c.get_jobs("errs-leaving", timeout_s=0.2)
        finally:
            lab3.node(0).call("CLUSTER", "LEAVING", "no")
    for cls in (NoReplError, MaxLenError, PausedError, BadIdError, NoJobError, TooLateError):
        assert issubclass(cls, DisqError) and cls.reason != DisqError.reason


def test_failover_when_the_clients_node_is_killed_mid_stream(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        received: list[bytes] = []
        with Client(addr(lab, 0)) as producer:
            producer.add_job("stream", "before", replicate=3)
        consumer = Client(all_addrs(lab))
        try:
            stream = consumer.stream_jobs("stream", count=4)
            first = next(stream)
            received.extend(j.body for j in first)
            consumer.ack(*(j.id for j in first))
            # Kill the node the stream is on.
            victim = next(i for i in range(3) if addr(lab, i) == consumer.aio.last_node)
            lab.kill9(victim)
            other = (victim + 1) % 3
            with Client(addr(lab, other), discover=False) as producer:
                # RETRY 1: until the survivors declare the victim dead, federation may still
                # hand the job to it; the retry then queues it again on a live holder.
                producer.add_job("stream", "after", replicate=2, retry_s=1)
            for batch in stream:
                received.extend(j.body for j in batch)
                consumer.ack(*(j.id for j in batch))
                if b"after" in received:
                    break
            stream.close()
        finally:
            consumer.close()
        assert received.count(b"before") >= 1 and b"after" in received


def test_sync_add_whose_node_dies_is_indeterminate(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=30000) as lab:
        lab.pause(1)
        lab.pause(2)
        outcome: list[BaseException | str] = []

        def add() -> None:
            with Client(addr(lab, 0), discover=False) as c:
                try:
                    outcome.append(c.add_job("indet", "x", replicate=3, repl_timeout_ms=60000))
                except DisqError as exc:
                    outcome.append(exc)

        t = threading.Thread(target=add)
        t.start()
        # The add reached node 0 once a job waits for its copies there.
        eventually(
            lambda: lab.node(0).call("JSCAN", "STATE", "wait-repl")[1],  # type: ignore[index]
            "the add to be waiting for replication on node 0",
        )
        lab.kill9(0)
        t.join(30)
        lab.resume(1)
        lab.resume(2)
        assert len(outcome) == 1 and isinstance(outcome[0], IndeterminateError)


def test_unreachable_cluster_is_unavailable() -> None:
    with Client("127.0.0.1:1", connect_timeout_s=0.5) as c:
        with pytest.raises(UnavailableError):
            c.qlen("q")
        with pytest.raises(UnavailableError):
            c.add_job("q", "x")


# ----------------------------------------------------------------------------- the worker
# Disque's queues are per node: the tests pin the worker and their own client to node 0.
PINNED: dict[str, Any] = {"client_options": {"discover": False}}


@contextlib.contextmanager
def running(worker: Worker) -> Iterator[list[BaseException]]:
    """Run the worker in a thread; stop it and wait for it on the way out, pass or fail."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(worker.run())
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=target)
    t.start()
    try:
        yield errors
    finally:
        eventually(lambda: worker.started, "the worker to start")
        worker.stop()
        t.join(60)
        assert not t.is_alive(), "the worker did not stop"


def test_worker_acks_success_and_nacks_failure(lab3: Lab) -> None:
    seen: list[bytes] = []
    lock = threading.Lock()

    def handler(job: object) -> None:
        body = job.body  # type: ignore[attr-defined]
        with lock:
            first = body not in seen
            seen.append(body)
        if body == b"fail-once" and first:
            raise RuntimeError("first attempt fails")

    with Client(addr(lab3, 0), discover=False) as c:
        for body in ("ok-1", "ok-2", "fail-once"):
            c.add_job("work", body, replicate=1)
        w = Worker(addr(lab3, 0), "work", handler, concurrency=2, fetch_timeout_s=0.2, **PINNED)
        with running(w) as errors:
            eventually(lambda: w.stats.acked == 3, "three jobs acked")
        assert not errors
        assert w.stats.nacked == 1
        assert sorted(seen) == [b"fail-once", b"fail-once", b"ok-1", b"ok-2"]
        assert c.qlen("work") == 0


def test_worker_heartbeat_keeps_a_long_job_from_redelivery(lab3: Lab) -> None:
    release = threading.Event()
    started = threading.Event()
    calls = []

    def handler(job: object) -> None:
        calls.append(job)
        started.set()
        assert release.wait(60)

    with Client(addr(lab3, 0), discover=False) as c:
        job_id = c.add_job("long", "slow", replicate=1, retry_s=1)
        w = Worker(addr(lab3, 0), "long", handler, concurrency=1, fetch_timeout_s=0.2, **PINNED)
        with running(w) as errors:
            try:
                assert started.wait(30)
                # Three heartbeats: 1.5 s, past the 1 s retry, without a second delivery.
                eventually(lambda: w.stats.heartbeats >= 3, "three WORKING heartbeats")
                assert c.get_jobs("long", nohang=True) == []
                info = c.show(job_id)
                assert info is not None
                assert info["additional_deliveries"] == 0 and info["nacks"] == 0
            finally:
                release.set()  # a failure must not leave the handler blocking the shutdown
            eventually(lambda: w.stats.acked == 1, "the long job acked")
        assert not errors and len(calls) == 1


def test_worker_dead_letters_after_k_failures(lab3: Lab) -> None:
    attempts: list[int] = []

    async def handler(job: object) -> None:
        attempts.append(job.nacks)  # type: ignore[attr-defined]
        raise ValueError("always fails")

    with Client(addr(lab3, 0), discover=False) as c:
        c.add_job("poison", "bad", replicate=1, headers={"tenant": "acme"})
        w = Worker(
            addr(lab3, 0),
            "poison",
            handler,
            dead_letter="poison-dead",
            max_nacks=3,
            fetch_timeout_s=0.2,
            **PINNED,
        )
        with running(w) as errors:
            eventually(lambda: w.stats.dead_lettered == 1, "the job to be dead-lettered")
        assert not errors
        assert attempts == [0, 1, 2]
        dead = c.get_jobs("poison-dead", nohang=True)
        assert [j.body for j in dead] == [b"bad"]
        assert dead[0].headers == {"tenant": b"acme"}  # the dead letter keeps its headers
        c.ack(dead[0].id)
        assert c.qlen("poison") == 0


WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from disq.worker import Worker

    release = asyncio.Event()

    async def handler(job):
        sys.stdout.write(f"start {job.body.decode()}\\n"); sys.stdout.flush()
        if job.body.startswith(b"quick"):
            return
        await release.wait()  # never set: these are running at shutdown

    Worker(sys.argv[1], "graceful", handler, concurrency=3, shutdown_grace_s=0.5,
           fetch_timeout_s=0.2, client_options={"discover": False}).run_forever()
    sys.stdout.write("stopped\\n")
    """
)


def test_worker_sigterm_shutdown_loses_nothing(lab3: Lab, tmp_path: Path) -> None:
    with Client(addr(lab3, 0), discover=False) as c:
        ids = {c.add_job("graceful", f"quick-{k}", replicate=1): f"quick-{k}" for k in range(4)}
        ids |= {c.add_job("graceful", f"stuck-{k}", replicate=1): f"stuck-{k}" for k in range(3)}
        script = tmp_path / "worker.py"
        script.write_text(WORKER_SCRIPT)
        proc = subprocess.Popen(
            [sys.executable, str(script), addr(lab3, 0)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None
        started: set[str] = set()
        while sum(1 for s in started if s.startswith("stuck")) < 3:
            line = proc.stdout.readline()
            assert line, "the worker exited early"
            started.add(line.split()[1])
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "stopped" in out
        # The stuck jobs were nacked back at once; the quick ones were acked.
        back = c.get_jobs("graceful", count=10, timeout_s=0.5)
        assert sorted(j.body.decode() for j in back) == [f"stuck-{k}" for k in range(3)]
        assert all(j.nacks == 1 for j in back)
        c.ack(*(j.id for j in back))
        for job_id, body in ids.items():
            if body.startswith("quick"):
                assert c.show(job_id) is None  # acked: REPLICATE 1, so deleted at once


def test_password_is_required_over_grpc_too(server_factory: ServerFactory) -> None:
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port), "--requirepass", "s3cret")
    target = f"127.0.0.1:{grpc_port}"
    with Client(target, discover=False) as c, pytest.raises(AuthError):
        c.qlen("q")
    with Client(target, discover=False, password="wrong") as c, pytest.raises(AuthError):
        c.add_job("q", "x")
    with Client(target, password="s3cret") as c:
        assert c.add_job("q", "x", replicate=1).startswith("D-")
        assert c.qlen("q") == 1
