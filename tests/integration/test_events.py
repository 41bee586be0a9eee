"""Lifecycle events through a real node: recorded as jobs move, read by sequence over gRPC,
kept across a restart, exported by the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ServerFactory, free_port

from disq.client import Client


def kinds(resp: object) -> list[tuple[str, str]]:
    return [(e.kind, e.job_id) for e in resp.events]  # type: ignore[attr-defined]


def test_events_follow_a_job_and_survive_a_restart(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the event log is disq's")
    grpc_port = free_port()
    data = tmp_path / "data"
    srv = server_factory.new("--grpc-port", str(grpc_port), "--data-dir", str(data))
    addr = f"127.0.0.1:{grpc_port}"
    with Client(addr, discover=False) as c:
        job = c.add_job("ev", b"12345", replicate=1)
        [got] = c.get_jobs("ev")
        assert c.nack(got.id) == 1
        [again] = c.get_jobs("ev")
        assert c.ack(again.id) == 1
        r = c.read_events(addr, 0)
        assert kinds(r) == [
            ("enqueued", job),
            ("delivered", job),
            ("nacked", job),
            ("delivered", job),
            ("acked", job),
        ]
        seqs = [e.seq for e in r.events]
        assert seqs == list(range(seqs[0], seqs[0] + 5))
        assert r.next_seq == seqs[-1] + 1
        assert [e.attempt for e in r.events if e.kind == "delivered"] == [1, 2]
        assert {e.size for e in r.events} == {5} and {e.queue for e in r.events} == {"ev"}
        # From a sequence number on, and by time.
        assert [e.seq for e in c.read_events(addr, seqs[3]).events] == seqs[3:]
        assert c.read_events(addr, 0, since_ms=r.events[-1].time_ms + 60_000).events == []
    srv.restart()
    with Client(addr, discover=False) as c:
        c.add_job("ev", b"x", replicate=1)
        r2 = c.read_events(addr, 0)
        assert [e.seq for e in r2.events] == [*seqs, seqs[-1] + 1]
        assert r2.events[-1].kind == "enqueued"


def test_cli_exports_events_as_json_lines(server_factory: ServerFactory, tmp_path: Path) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the event log is disq's")
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port))
    addr = f"127.0.0.1:{grpc_port}"
    with Client(addr, discover=False) as c:
        ids = [c.add_job("exp", f"{k}", replicate=1) for k in range(3)]
    out = tmp_path / "out"
    disq = Path(sys.executable).with_name("disq")
    cmd = [str(disq), "--addr", addr, "events", "export", "--since", "0", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    [f] = list(out.iterdir())
    rows = [json.loads(line) for line in f.read_text().splitlines()]
    assert [(r["kind"], r["job_id"]) for r in rows] == [("enqueued", i) for i in ids]
    assert all(r["node"] and r["queue"] == "exp" and r["size"] == 1 for r in rows)


def test_beanstalk_jobs_have_events_too(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the event log is disq's")
    grpc_port = free_port()
    srv = server_factory.new("--grpc-port", str(grpc_port))
    addr = f"127.0.0.1:{grpc_port}"
    with srv.connect() as conn:
        conn.send(b"use bt\r\nwatch bt\r\nput 0 0 60 3\r\nabc\r\nreserve\r\n")
        conn.expect(b"USING bt\r\nWATCHING 2\r\nINSERTED 1\r\nRESERVED 1 3\r\nabc\r\n")
        conn.send(b"bury 1 0\r\nkick 1\r\nreserve\r\ndelete 1\r\n")
        conn.expect(b"BURIED\r\nKICKED 1\r\nRESERVED 1 3\r\nabc\r\nDELETED\r\n")
    with Client(addr, discover=False) as c:
        r = c.read_events(addr, 0)
    want = ("enqueued", "delivered", "buried", "kicked", "delivered", "deleted")
    assert [(e.kind, e.job_id, e.queue) for e in r.events] == [(k, "1", "bt") for k in want]
    assert [e.attempt for e in r.events if e.kind == "delivered"] == [1, 2]


def test_cli_exports_parquet(server_factory: ServerFactory, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    if server_factory.kind != "disq":
        pytest.skip("the event log is disq's")
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port))
    addr = f"127.0.0.1:{grpc_port}"
    with Client(addr, discover=False) as c:
        ids = [c.add_job("pq", f"{k}", replicate=1) for k in range(4)]
    out = tmp_path / "out"
    disq = Path(sys.executable).with_name("disq")
    cmd = [str(disq), "--addr", addr, "events", "export", "--out", str(out), "--format", "parquet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [f] = list(out.iterdir())
    table = pq.read_table(f).to_pylist()
    assert [(r["kind"], r["job_id"]) for r in table] == [("enqueued", i) for i in ids]
    assert set(table[0]) == {"node", "seq", "time_ms", "kind", "queue", "job_id", "attempt", "size"}
