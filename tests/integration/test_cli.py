"""The ``disq`` command-line tool, run as a person runs it: a real node process, the console
script as a subprocess (and once through a bash pipeline), its stdout, stderr and exit code."""

from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT_ROOT, STOP_TIMEOUT, ServerProcess, free_port

from disq.client import Client

CLI = [str(Path(sys.executable).with_name("disq"))]  # the console script make test installs
JOB_ID = r"D-[0-9a-f]{8}-"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One in-memory node for the module (tests use their own queues); its gRPC address."""
    grpc_port = free_port()
    srv = ServerProcess(
        "disq", tmp_path_factory.mktemp("cli-node"), ("--grpc-port", str(grpc_port))
    )
    srv.start()  # returns once the node serves commands
    try:
        yield f"127.0.0.1:{grpc_port}"
    finally:
        srv.stop()


def _env(addr: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DISQ_PASSWORD"}
    env["DISQ_ADDR"] = addr
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


def disq(addr: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*CLI, *args], input=stdin, capture_output=True, env=_env(addr), timeout=30)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


def ok(addr: str, *args: str) -> str:
    r = disq(addr, *args)
    assert r.returncode == 0, f"disq {' '.join(args)}: rc {r.returncode}\n{r.stderr}"
    return r.stdout


def ok_json(addr: str, *args: str) -> Any:
    return json.loads(ok(addr, "--json", *args))


def rows(table: str) -> list[list[str]]:
    """A table's lines split into cells (cells hold no spaces in these tests)."""
    return [line.split() for line in table.splitlines()]


def test_put_get_ack_round_trip(node: str) -> None:
    job_id = ok(node, "put", "rt", "hello world").strip()
    assert job_id.startswith("D-") and len(job_id.splitlines()) == 1
    assert ok(node, "qlen", "rt") == "1\n"
    got = ok(node, "get", "rt")
    header, line = got.splitlines()
    assert header.split() == ["ID", "QUEUE", "NACKS", "ADD_DELIVERIES", "BODY"]
    assert line.split() == [job_id, "rt", "0", "0", "hello", "world"]
    assert ok(node, "ack", job_id) == "1\n"
    assert ok(node, "qlen", "rt") == "0\n"
    assert ok_json(node, "qlen", "rt") == {"queue": "rt", "len": 0}


def test_purge_empties_a_queue_and_prints_the_count(node: str) -> None:
    for body in ("a", "b", "c"):
        ok(node, "put", "pq", body)
    assert ok(node, "purge", "pq") == "3\n"
    assert ok(node, "qlen", "pq") == "0\n"
    assert ok_json(node, "purge", "pq") == {"queue": "pq", "purged": 0}


def test_routes_lists_the_table(node: str) -> None:
    with Client(node, discover=False) as c:
        c.declare_exchange("cli-ev", "topic")
        c.bind_queue("cli-audit", "cli-ev", "task.#")
        c.declare_queue("cli-audit", message_ttl_ms=60_000)
    data = ok_json(node, "routes")
    assert data["exchanges"]["cli-ev"] == "topic"
    assert {"exchange": "cli-ev", "queue": "cli-audit", "routing_key": "task.#"} in data["bindings"]
    assert data["queues"]["cli-audit"] == {"expires_ms": 0, "message_ttl_ms": 60_000}
    human = rows(ok(node, "routes"))
    assert ["cli-ev", "topic"] in human and ["cli-ev", "cli-audit", "task.#"] in human
    assert ["cli-audit", "0", "60000"] in human


def test_nack_brings_the_job_back_with_one_nack(node: str) -> None:
    job_id = ok_json(node, "put", "nq", "work")["id"]
    first = ok_json(node, "get", "nq")
    assert [(j["id"], j["body"], j["nacks"]) for j in first] == [(job_id, "work", 0)]
    assert ok(node, "nack", job_id) == "1\n"
    again = ok(node, "get", "nq", "--json")  # --json also after the command
    assert [(j["id"], j["nacks"]) for j in json.loads(again)] == [(job_id, 1)]


def test_get_without_jobs_prints_nothing(node: str) -> None:
    r = disq(node, "get", "empty-q", "--timeout", "0.1")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert ok_json(node, "get", "empty-q", "--nohang") == []


def test_get_count_and_several_queues(node: str) -> None:
    ids = {ok(node, "put", q, f"b-{q}").strip() for q in ("mq1", "mq2")}
    jobs = ok_json(node, "get", "mq1", "mq2", "--count", "5")
    assert {j["id"] for j in jobs} == ids
    assert {(j["queue"], j["body"]) for j in jobs} == {("mq1", "b-mq1"), ("mq2", "b-mq2")}


def test_show_and_peek(node: str) -> None:
    job_id = ok(node, "put", "sp", "peekme", "--retry", "7", "--ttl", "100").strip()
    shown = dict(line.split(None, 1) for line in ok(node, "show", job_id).splitlines())
    assert shown["id"] == job_id and shown["queue"] == "sp" and shown["state"] == "queued"
    assert shown["retry_s"] == "7" and shown["body"] == "peekme"
    doc = ok_json(node, "show", job_id)
    assert doc["id"] == job_id and doc["body"] == "peekme" and doc["retry_s"] == 7
    table = rows(ok(node, "peek", "sp"))
    assert table[0] == ["ID", "QUEUE", "NACKS", "ADD_DELIVERIES", "BODY"]
    assert table[1:] == [[job_id, "sp", "0", "0", "peekme"]]
    assert [j["id"] for j in ok_json(node, "peek", "sp", "--count", "5")] == [job_id]
    assert ok(node, "qlen", "sp") == "1\n"  # peek and show took nothing


def test_show_lists_a_jobs_headers(node: str) -> None:
    with Client(node, discover=False) as c:
        job_id = c.add_job("sh", "x", headers={"tenant": "acme", "raw": b"\xff"})
    shown = dict(line.split(None, 1) for line in ok(node, "show", job_id).splitlines())
    assert shown["headers"] in ("tenant=acme,raw=b'\\xff'", "raw=b'\\xff',tenant=acme")
    doc = ok_json(node, "show", job_id)
    assert doc["headers"] == {"tenant": "acme"} and doc["headers_b64"] == {"raw": "/w=="}


def test_put_sets_headers(node: str) -> None:
    args = ("put", "hq", "x", "--header", "tenant=acme", "--header", "expr=a=b")
    job_id = ok_json(node, *args)["id"]
    assert ok_json(node, "show", job_id)["headers"] == {"tenant": "acme", "expr": "a=b"}
    [job] = ok_json(node, "get", "hq")
    assert job["id"] == job_id
    for bad in (
        ("--header", "novalue"),
        ("--header", "=v"),
        ("--header", "k=1", "--header", "k=2"),
    ):
        r = disq(node, "put", "hq", "x", *bad)
        assert r.returncode == 2 and r.stdout == "" and "--header" in r.stderr, bad
    assert ok(node, "qlen", "hq") == "0\n"  # the refused ones added nothing
    ok(node, "ack", job_id)


def test_show_of_an_unknown_job_is_an_error(node: str) -> None:
    job_id = ok(node, "put", "gone", "x").strip()
    assert ok(node, "ack", job_id) == "1\n"
    r = disq(node, "show", job_id)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("disq: NOJOB: ")


def test_binary_bodies_from_stdin(node: str) -> None:
    body = b"\xff\x00bin\n"
    r = disq(node, "put", "binq", "-", stdin=body)
    assert r.returncode == 0, r.stderr
    [job] = ok_json(node, "peek", "binq")
    assert "body" not in job and base64.b64decode(job["body_b64"]) == body
    table = rows(ok(node, "peek", "binq"))
    assert table[1][-1] == repr(body).replace(" ", "")


def test_queues_lists_each_queue_with_its_length(node: str) -> None:
    for q in ("qa", "qa", "qb"):
        ok(node, "put", q, "x")
    table = rows(ok(node, "queues"))
    assert table[0] == ["QUEUE", "LEN", "BLOCKED", "PAUSE"]
    assert ["qa", "2", "0", "none"] in table and ["qb", "1", "0", "none"] in table
    doc = {q["name"]: q for q in ok_json(node, "queues")}
    assert doc["qa"] == {"name": "qa", "len": 2, "blocked": 0, "pause": "none"}


def test_pause_set_and_read(node: str) -> None:
    assert ok(node, "pause", "pz") == "none\n"
    assert ok(node, "pause", "pz", "in") == "in\n"
    assert ok(node, "pause", "pz") == "in\n"
    r = disq(node, "put", "pz", "x")
    assert r.returncode == 1 and r.stderr.startswith("disq: PAUSED: ")
    assert ok_json(node, "pause", "pz", "none", "--bcast") == {"queue": "pz", "state": "none"}
    assert ok(node, "put", "pz", "x").startswith("D-")


def test_nodes(node: str) -> None:
    port = node.rsplit(":", 1)[1]
    table = rows(ok(node, "nodes"))
    assert table[0] == ["ID", "ADDRESS", "GRPC", "PRIO", "STATE", "SELF"]
    [line] = table[1:]
    assert len(line[0]) == 40 and line[2:] == [port, "1", "ok", "*"]
    doc = ok_json(node, "nodes")
    [n] = doc["nodes"]
    assert n["id"] == doc["my_id"] and n["grpc_port"] == int(port) and n["state"] == "ok"


def test_stats(node: str) -> None:
    ok(node, "put", "st", "x")
    table = rows(ok(node, "stats"))
    assert table[0][:5] == ["NODE", "ADDRESS", "STATE", "UPTIME_S", "JOBS"]
    [line] = table[1:]
    assert len(line[0]) == 8 and line[1:3] == [node, "ok"]
    assert int(line[4]) >= 1  # at least the job put above
    [doc] = ok_json(node, "stats")
    assert doc["addr"] == node and doc["id"].startswith(line[0])
    assert doc["info"]["node_id"] == doc["id"] and int(doc["info"]["registered_jobs"]) >= 1


def test_refusal_exits_1_with_the_reason(node: str) -> None:
    r = disq(node, "ack", "not-an-id")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.startswith("disq: BADID: ") and len(r.stderr.splitlines()) == 1


def test_unreachable_address_exits_1_with_unavailable(node: str) -> None:
    r = disq(node, "--addr", f"127.0.0.1:{free_port()}", "qlen", "x")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.startswith("disq: UNAVAILABLE: ")


def test_usage_errors_exit_2(node: str) -> None:
    assert disq(node, "pause", "q", "sideways").returncode == 2
    assert disq(node, "get").returncode == 2
    assert disq(node, "frobnicate").returncode == 2


def test_pipeline_through_bash(node: str) -> None:
    cli = shlex.join(CLI)
    script = (
        f"echo hello | {cli} put pipeq - >/dev/null && "
        f"{cli} get pipeq --json | {shlex.quote(sys.executable)} -c "
        '\'import json, sys; [j] = json.load(sys.stdin); print(repr(j["body"]), j["queue"])\''
    )
    r = subprocess.run(
        ["bash", "-o", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env=_env(node),
        timeout=30,
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, "'hello\\n' pipeq\n", "")


def test_top_renders_frames(node: str) -> None:
    for q in ("top-a", "top-b", "top-b"):
        ok(node, "put", q, "x")
    out = ok(node, "top", "--iterations", "2", "--interval", "0.2")
    assert "\x1b[" not in out  # not a terminal: no screen clearing
    frames = out.split("\n\ndisq top - ")
    assert len(frames) == 2
    node_id = ok_json(node, "nodes")["my_id"]
    for fr in frames:
        table = rows(fr)
        assert ["QUEUE", "LEN", "IN/S", "OUT/S", "BLOCKED", "PAUSE"] in table
        assert ["top-a", "1", "0.0", "0.0", "0", "none"] in table
        assert ["top-b", "2", "0.0", "0.0", "0", "none"] in table
        assert ["NODE", "ADDRESS", "PRIO", "STATE", "JOBS", "QUEUES", "CLIENTS", "CMD/S"] in table
        [node_line] = [r for r in table if r and r[0] == node_id[:8]]
        assert node_line[1:4] == [node, "1", "ok"]


def test_top_json_frames_have_rates_as_numbers(node: str) -> None:
    ok(node, "put", "top-j", "x")
    out = ok(node, "--json", "top", "--iterations", "2", "--interval", "0.2")
    frames = [json.loads(line) for line in out.splitlines()]
    assert len(frames) == 2
    for fr in frames:
        queues = {q["name"]: q for q in fr["queues"]}
        q = queues["top-j"]
        assert q["len"] == 1 and q["pause"] == "none"
        for key in ("jobs_in_per_s", "jobs_out_per_s"):
            assert isinstance(q[key], int | float) and q[key] == 0
        [n] = fr["nodes"]
        assert n["addr"] == node and n["state"] == "ok" and n["jobs"] >= 1
        assert isinstance(n["commands_per_s"], int | float)
        assert fr["interval_s"] > 0


def test_top_rates_add_up_to_the_jobs_put_and_ctrl_c_ends_it(node: str) -> None:
    """Jobs put after a frame was printed are counted by the frames that follow: summed
    over them, rate x interval gives the count, whatever the timing. Then ^C exits 0."""
    args = [*CLI, "--json", "top", "--interval", "0.2"]
    # As from a terminal: a suite run in the background (`make test &`) starts with SIGINT
    # ignored, which children inherit, and Python then never turns ^C into
    # KeyboardInterrupt (the first cause of this test timing out).
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        env=_env(node),
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert "top-rate" not in {q["name"] for q in first["queues"]}
        with Client(node) as client:
            for i in range(5):
                client.add_job("top-rate", f"job-{i}")
        counted = 0.0
        for _ in range(100):  # each frame is about 0.2 s
            fr = json.loads(proc.stdout.readline())
            q = {q["name"]: q for q in fr["queues"]}.get("top-rate")
            if q is not None:
                counted += q["jobs_in_per_s"] * fr["interval_s"]
                if q["len"] == 5:
                    break
        assert counted == pytest.approx(5, abs=0.1)
        proc.send_signal(signal.SIGINT)
        # Keep reading: frames printed meanwhile must not fill the pipe and block the exit's
        # final flush (a terminal always reads; this pipe is read only if we do).
        proc.communicate(timeout=STOP_TIMEOUT)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
