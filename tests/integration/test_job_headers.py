"""Job headers on a real 3-node cluster (cluster/lab.py): ADDJOB HEADERS and GETJOB
WITHHEADERS over RESP, ``headers=`` and ``Job.headers`` through the SDK's gRPC API (one add
and a batched AddJobs), a copy read back after its node was killed with -9 and restarted, and
a job a node takes from another by federation."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402
from test_sdk import addr  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402
from disq.client import AsyncClient, Client, InvalidArgumentError  # noqa: E402

TRACE = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
FLAT = [b"traceparent", TRACE, b"tenant", b"acme", b"raw", b"\x00\xff\r\n"]


def _add(lab: Lab, i: int, queue: str, *opts: str | int | bytes) -> str:
    job_id = lab.node(i).call("ADDJOB", queue, "body", 5000, *opts, "HEADERS", 3, *FLAT)
    assert isinstance(job_id, str | bytes), job_id
    return job_id.decode() if isinstance(job_id, bytes) else job_id


def _show_headers(lab: Lab, i: int, job_id: str) -> list[bytes] | None:
    shown = lab.node(i).call("SHOW", job_id)
    if shown is None:
        return None
    pairs = dict(zip(shown[::2], shown[1::2], strict=True))
    return pairs.get(b"headers")


def test_headers_round_trip_over_resp_and_bad_ones_are_refused(lab3: Lab) -> None:
    job_id = _add(lab3, 0, "h-resp", "REPLICATE", 3)
    assert _show_headers(lab3, 0, job_id) == FLAT
    got = lab3.node(0).call("GETJOB", "NOHANG", "WITHCOUNTERS", "WITHHEADERS", "FROM", "h-resp")
    assert got[0][1].decode() == job_id
    assert got[0][3:] == [b"nacks", 0, b"additional-deliveries", 0, FLAT]
    with lab3.node(0).client() as c:
        with pytest.raises(RespError, match="HEADERS needs 2"):
            c.call("ADDJOB", "h-resp", "b", 0, "HEADERS", 2, "k", "v")
        assert c.call("QLEN", "h-resp") == 0  # nothing added, the connection serves
    lab3.node(0).call("ACKJOB", job_id)


def test_headers_round_trip_through_the_sdk(lab3: Lab) -> None:
    headers = {"traceparent": TRACE.decode(), "content-type": b"application/json"}
    with Client(addr(lab3, 1), discover=False) as c:
        job_id = c.add_job("h-sdk", "x", replicate=2, headers=headers)
        [job] = c.get_jobs("h-sdk", nohang=True)
        assert job.id == job_id
        assert job.headers == {"traceparent": TRACE, "content-type": b"application/json"}
        shown = c.show(job_id)
        assert shown is not None and shown["headers"] == job.headers
        c.ack(job_id)
        with pytest.raises(InvalidArgumentError, match="HEADERS count"):
            c.add_job("h-sdk", "x", headers={f"k{i}": "v" for i in range(65)})
        plain = c.add_job("h-sdk", "plain")
        [job] = c.get_jobs("h-sdk", nohang=True)
        assert job.id == plain and job.headers == {}
        c.ack(plain)
        # A job added over RESP, binary values included, reads the same over gRPC.
        resp_id = _add(lab3, 1, "h-sdk")
        [job] = c.get_jobs("h-sdk", nohang=True)
        as_dict = {k.decode(): v for k, v in zip(FLAT[::2], FLAT[1::2], strict=True)}
        assert job.id == resp_id and job.headers == as_dict
        c.ack(resp_id)


def test_a_batched_addjobs_keeps_each_jobs_headers(lab3: Lab) -> None:
    async def run() -> None:
        async with AsyncClient(addr(lab3, 2), discover=False) as c:
            # One loop iteration's adds go as one AddJobs call.
            ids = await asyncio.gather(
                *(c.add_job("h-batch", f"b{i}", headers={"n": str(i)}) for i in range(5))
            )
            jobs = await c.get_jobs("h-batch", count=5, nohang=True)
            assert {j.id: j.headers for j in jobs} == {
                job_id: {"n": str(i).encode()} for i, job_id in enumerate(ids)
            }
            await c.ack(*ids)

    asyncio.run(run())


def test_a_copy_keeps_its_headers_through_a_kill_9_and_restart(lab3: Lab) -> None:
    job_id = _add(lab3, 0, "h-restart", "REPLICATE", 3, "RETRY", 300)
    eventually(lambda: _show_headers(lab3, 1, job_id) == FLAT, "node 1 to hold the copy")
    lab3.kill9(1)
    lab3.restart(1)
    assert _show_headers(lab3, 1, job_id) == FLAT  # read back from its AOF
    assert lab3.node(1).call("ENQUEUE", job_id) == 1  # queued there, to take it there
    got = lab3.node(1).call("GETJOB", "NOHANG", "WITHHEADERS", "FROM", "h-restart")
    assert got[0][1].decode() == job_id and got[0][3] == FLAT
    lab3.node(1).call("ACKJOB", job_id)


def test_a_job_taken_by_federation_keeps_its_headers(lab3: Lab) -> None:
    job_id = _add(lab3, 2, "h-fed", "REPLICATE", 1)
    got = lab3.node(0).call("GETJOB", "TIMEOUT", 10_000, "WITHHEADERS", "FROM", "h-fed", timeout=15)
    assert got is not None and got[0][1].decode() == job_id  # made on node 2, served by 0
    assert got[0][3] == FLAT
    lab3.node(0).call("ACKJOB", job_id)
