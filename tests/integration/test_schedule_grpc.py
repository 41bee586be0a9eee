"""Schedules over the gRPC API, the SDK and the CLI, against a real 2-node cluster.

A schedule added through one node is listed and shown by the other (every node holds every
schedule); an ``@every 1s`` schedule's tick adds one job whose SHOW carries the key
``schedule:<name>:<tick>``. Nodes and the CLI are real processes; state that travels between
nodes is awaited with ``eventually``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import PROJECT_ROOT  # noqa: E402
from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import Client, InvalidArgumentError, Job, Schedule  # noqa: E402
from disq.proto_gen import api_pb2, api_pb2_grpc  # noqa: E402

CLI = [str(Path(sys.executable).with_name("disq"))]  # the console script of the venv


@pytest.fixture(scope="module")
def lab2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with Lab(2, tmp_path_factory.mktemp("sched2"), node_timeout_ms=1500) as lab:
        yield lab


def addr(lab: Lab, i: int) -> str:
    return f"127.0.0.1:{lab.node(i).bus_port}"


@pytest.fixture(scope="module")
def clients(lab2: Lab) -> Iterator[list[Client]]:
    """One client per node, each held to its node (discovery off)."""
    cs = [Client(addr(lab2, i), discover=False) for i in range(lab2.n)]
    try:
        yield cs
    finally:
        for c in cs:
            c.close()


def disq(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DISQ_PASSWORD"}
    env["DISQ_ADDR"] = addr
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    r = subprocess.run([*CLI, *args], capture_output=True, env=env, timeout=30)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


def ok(addr: str, *args: str) -> str:
    r = disq(addr, *args)
    assert r.returncode == 0, f"disq {' '.join(args)}: rc {r.returncode}\n{r.stderr}"
    return r.stdout


def fields(text: str) -> dict[str, str]:
    return dict(line.split(None, 1) for line in text.splitlines())


# ----------------------------------------------------------------------------- the SDK
def test_a_schedule_added_on_one_node_fires_and_is_seen_on_the_other(
    lab2: Lab, clients: list[Client]
) -> None:
    c0, c1 = clients
    name = "every-second"
    assert c0.add_schedule(name, "@every 1s", "sched-q", b"tick-body", replicate=2) is False

    def shown_on_node_1() -> Schedule | None:
        return c1.show_schedule(name) if name in c1.list_schedules() else None

    s = eventually(shown_on_node_1, "node 1 to hold the schedule added on node 0")
    assert (s.name, s.spec, s.tz, s.queue, s.body) == (
        name,
        "@every 1s",
        "UTC",
        "sched-q",
        b"tick-body",
    )
    assert s.replicate == 2 and s.retry_s is None and s.ttl_s is None and not s.async_
    assert (s.misfire, s.catchup, s.paused) == ("catchup", 1, False)
    ticks = s.next_fire_times
    assert ticks and all(b - a == 1 for a, b in itertools.pairwise(ticks))
    assert abs(ticks[0] - time.time()) < 30
    assert s.owner in (lab2.node(0).id, lab2.node(1).id)

    # A tick's job is queued on the node that added it (the owner): ask both.
    got: list[tuple[Client, Job]] = []

    def a_tick_job() -> bool:
        for c in clients:
            got.extend((c, j) for j in c.get_jobs("sched-q", count=10, nohang=True))
        return bool(got)

    eventually(a_tick_job, "the first tick's job", timeout=15)
    c, job = got[0]
    assert job.body == b"tick-body"
    info = c.show(job.id)
    assert info is not None and info["queue"] == "sched-q"
    key = info["idempotency_key"]
    assert job.idempotency_key == key  # the SDK's job carries it, no SHOW needed
    m = re.fullmatch(rf"schedule:{name}:(\d+)", key or "")
    assert m is not None, key
    tick = int(m.group(1))
    assert abs(tick - time.time()) < 30  # a Unix second
    # The other node holds the copy (REPLICATE 2), with the same key.
    other = clients[1 - clients.index(c)]
    copy = eventually(lambda: other.show(job.id), "the tick job's copy on the other node")
    assert copy["idempotency_key"] == key
    # The node that answers a plain job's SHOW gives no key.
    plain = c0.add_job("sched-plain", "x", replicate=1)
    plain_info = c0.show(plain)
    assert plain_info is not None and plain_info["idempotency_key"] is None

    # The CLI shows the key too.
    shown = fields(ok(addr(lab2, clients.index(c)), "show", job.id))
    assert shown["idempotency_key"] == key
    assert "idempotency_key" not in fields(ok(addr(lab2, 0), "show", plain))

    assert c0.delete_schedule(name) is True
    eventually(lambda: name not in c1.list_schedules(), "the delete to reach node 1")
    for c, j in got:
        c.ack(j.id)
    c0.ack(plain)


def test_pause_resume_delete_answer_whether_the_schedule_exists(clients: list[Client]) -> None:
    c0, c1 = clients
    name = "nightly"
    assert c1.add_schedule(name, "30 2 * * *", "nightly-q", "n", tz="Europe/Berlin") is False
    assert c1.add_schedule(name, "0 3 * * *", "nightly-q", "n", tz="Europe/Berlin") is True
    s = eventually(lambda: c0.show_schedule(name), "node 0 to hold the schedule")
    assert s.tz == "Europe/Berlin" and len(s.next_fire_times) == 5

    assert c0.pause_schedule(name) is True
    s = eventually(
        lambda: (x := c1.show_schedule(name)) is not None and x.paused and x,
        "the pause to reach node 1",
    )
    assert s.next_fire_times == ()  # a paused schedule fires nothing
    assert c1.resume_schedule(name) is True
    s = c1.show_schedule(name)
    assert s is not None and not s.paused and s.next_fire_times

    assert c1.delete_schedule(name) is True
    assert c1.delete_schedule(name) is False
    assert c1.pause_schedule(name) is False
    assert c1.resume_schedule(name) is False
    assert c1.show_schedule(name) is None
    assert name not in c1.list_schedules()
    for op in (c0.delete_schedule, c0.pause_schedule, c0.resume_schedule):
        assert op("no-such-schedule") is False


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"spec": "61 * * * *"}, "61"),
        ({"spec": "@every 5 parsecs"}, "@every 5 parsecs"),
        ({"tz": "Mars/Olympus_Mons"}, "Mars/Olympus_Mons"),
        ({"misfire": "sometimes"}, "MISFIRE"),
        ({"ttl_s": 0}, "TTL"),
        ({"replicate": 5}, "REPLICATE"),
        ({"retry_s": 0}, "RETRY"),
        ({"catchup": 1001}, "CATCHUP"),
        ({"queue": ""}, "queue"),
    ],
)
def test_bad_input_is_invalid_argument_and_stores_nothing(
    clients: list[Client], options: dict[str, Any], named: str
) -> None:
    c0, c1 = clients
    args: dict[str, Any] = {"spec": "@every 1h", "queue": "bad-q", **options}
    spec, queue = args.pop("spec"), args.pop("queue")
    with pytest.raises(InvalidArgumentError) as info:
        c0.add_schedule("bad", spec, queue, b"x", **args)
    assert named in info.value.message, info.value.message
    assert "bad" not in c0.list_schedules() and c0.show_schedule("bad") is None
    assert "bad" not in c1.list_schedules()


def test_the_raw_api_reports_syntax_in_error_info(lab2: Lab) -> None:
    with grpc.insecure_channel(addr(lab2, 0)) as ch:
        stub = api_pb2_grpc.QueueStub(ch)
        req = api_pb2.AddScheduleRequest(name="raw", spec="nope", queue="q", body=b"")
        with pytest.raises(grpc.RpcError) as info:
            stub.AddSchedule(req, timeout=5)
        err = info.value
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details().startswith("ERR ") and "nope" in err.details()
        detail = api_pb2.ErrorInfo.FromString(dict(err.trailing_metadata())["disq-error-bin"])
        assert detail.reason == api_pb2.SYNTAX
        r = stub.ShowSchedule(api_pb2.ScheduleName(name="raw"), timeout=5)
        assert not r.found


# ----------------------------------------------------------------------------- the CLI
def test_cli_schedule_round_trip(lab2: Lab) -> None:
    a0, a1 = addr(lab2, 0), addr(lab2, 1)
    add = ("schedule", "add", "cli-sched", "*/5 * * * *", "cli-q", "hello")
    opts = ("--tz", "Europe/Berlin", "--replicate", "2", "--retry", "30", "--ttl", "3600")
    assert ok(a0, *add, *opts, "--async", "--misfire", "skip") == "added\n"
    assert ok(a0, *add, *opts, "--catchup", "3", "--json") == (
        json.dumps({"name": "cli-sched", "replaced": True}) + "\n"
    )

    def listed() -> bool:
        return "cli-sched" in ok(a1, "schedule", "list").splitlines()

    eventually(listed, "node 1 to list the schedule added on node 0")
    doc = json.loads(ok(a1, "--json", "schedule", "show", "cli-sched"))
    assert doc["spec"] == "*/5 * * * *" and doc["tz"] == "Europe/Berlin"
    assert (doc["queue"], doc["body"], doc["replicate"]) == ("cli-q", "hello", 2)
    assert (doc["retry_s"], doc["ttl_s"], doc["async"]) == (30, 3600, False)
    assert (doc["misfire"], doc["catchup"], doc["paused"]) == ("catchup", 3, False)
    assert len(doc["next_fire_times"]) == 5 and all(t % 300 == 0 for t in doc["next_fire_times"])
    human = fields(ok(a1, "schedule", "show", "cli-sched"))
    assert human["misfire"] == "catchup 3" and human["tz"] == "Europe/Berlin"
    assert human["next"].count(",") == 4 and human["next"].endswith("Z")

    assert ok(a1, "schedule", "pause", "cli-sched") == "1\n"
    assert ok(a1, "schedule", "resume", "cli-sched") == "1\n"
    assert ok(a1, "schedule", "del", "cli-sched") == "1\n"
    assert ok(a1, "schedule", "del", "cli-sched") == "0\n"
    r = disq(a1, "schedule", "show", "cli-sched")
    assert r.returncode == 1 and r.stderr.startswith("disq: NOSCHEDULE: ")
    r = disq(a0, "schedule", "add", "cli-bad", "* * *", "cli-q", "x")
    assert r.returncode == 1 and r.stderr.startswith("disq: SYNTAX: "), r.stderr
    usage = disq(a0, "schedule", "add", "x", "@hourly", "q", "b", "--misfire", "often")
    assert usage.returncode == 2
