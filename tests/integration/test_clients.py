"""Real beanstalk client libraries from PyPI drive a real node process, unchanged."""

from __future__ import annotations

import threading

import greenstalk
import pystalk
import pytest
from conftest import ServerFactory, ServerProcess


def test_greenstalk_producer_consumer_round_trip(server: ServerProcess) -> None:
    assert server.port is not None
    with greenstalk.Client(("127.0.0.1", server.port), use="emails", watch="emails") as c:
        ids = [c.put(f"job-{i}", priority=100 - i, ttr=30) for i in range(10)]
        assert ids == list(range(1, 11))
        seen = []
        for _ in range(10):
            job = c.reserve(timeout=1)
            seen.append(job.body)
            c.delete(job)
        assert seen == [f"job-{i}" for i in range(9, -1, -1)]
        with pytest.raises(greenstalk.TimedOutError):
            c.reserve(timeout=0)


def test_greenstalk_bury_kick_release_touch_stats(server: ServerProcess) -> None:
    assert server.port is not None
    with greenstalk.Client(("127.0.0.1", server.port)) as c:
        job_id = c.put("payload", delay=0, ttr=10)
        job = c.reserve(timeout=1)
        assert job.id == job_id
        c.touch(job)
        c.bury(job, priority=7)
        assert c.peek_buried().id == job_id
        stats = c.stats_job(job_id)
        assert stats["state"] == "buried" and stats["pri"] == 7 and stats["buries"] == 1
        assert c.kick(10) == 1
        job = c.reserve(timeout=1)
        c.release(job, priority=5, delay=0)
        tube = c.stats_tube("default")
        assert tube["current-jobs-ready"] == 1 and tube["total-jobs"] == 1
        assert c.stats()["cmd-release"] == 1
        c.kick_job(c.put("delayed", delay=60))
        assert c.stats_tube("default")["current-jobs-ready"] == 2
        assert c.tubes() == ["default"]
        c.use("other")
        assert c.using() == "other"
        assert c.watch("other") == 2
        assert c.ignore("default") == 1
        assert c.watching() == ["other"]
        c.pause_tube("other", 0)


def test_greenstalk_errors_are_protocol_errors(server_factory: ServerFactory) -> None:
    srv = server_factory.new("-z", "10")
    assert srv.port is not None
    with greenstalk.Client(("127.0.0.1", srv.port)) as c:
        with pytest.raises(greenstalk.JobTooBigError):
            c.put("x" * 11)
        assert c.put("x" * 10) == 1  # the connection goes on
        with pytest.raises(greenstalk.NotFoundError):
            c.delete(999)
        with pytest.raises(greenstalk.NotIgnoredError):
            c.ignore("default")


def test_greenstalk_blocking_reserve_wakes_on_put(server: ServerProcess) -> None:
    assert server.port is not None
    got: list[str] = []

    def consumer() -> None:
        with greenstalk.Client(("127.0.0.1", server.port)) as c:
            job = c.reserve(timeout=10)
            got.append(job.body)
            c.delete(job)

    t = threading.Thread(target=consumer)
    t.start()
    with greenstalk.Client(("127.0.0.1", server.port)) as c:
        # Wait until the consumer is really blocked, by the server's own account.
        for _ in range(500):
            if c.stats()["current-waiting"] == 1:
                break
            threading.Event().wait(0.01)
        assert c.stats()["current-waiting"] == 1
        c.put("wake up")
    t.join(10)
    assert got == ["wake up"]


def test_pystalk_client(server: ServerProcess) -> None:
    assert server.port is not None
    client = pystalk.BeanstalkClient("127.0.0.1", server.port, socket_timeout=5, auto_decode=True)
    client.use("pystalk")
    client.watch("pystalk")
    status, job_id = client.put_job("hello", pri=10)
    assert (status, job_id) == (b"INSERTED", 1)
    job = client.reserve_job(timeout=1)
    assert job.job_data == "hello" and job.job_id == job_id
    client.delete_job(job.job_id)
    assert client.stats()["current-jobs-ready"] == 0
    client.put_job("x")
    assert client.peek_ready().job_data == "x"
    assert "pystalk" in client.list_tubes()
    client.close()
