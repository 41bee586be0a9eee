"""Dead letters redriven through the SDK and the CLI on three real node processes: the SDK's
``redrive`` asks every node (each holds the dead letters it moved) and sums, the jobs come
back to their source queue with fresh counters; ``queue_policies`` lists the cluster's
policies; bad arguments raise InvalidArgumentError with QREDRIVE's messages and move
nothing; ``disq redrive`` and ``disq policies`` do the same from the command line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402
from disq.client import AsyncClient, Client, InvalidArgumentError, QueuePolicy  # noqa: E402

CLI = [str(Path(sys.executable).with_name("disq"))]  # the console script, as test_cli.py


def _addr(lab: Lab, i: int) -> str:
    return f"127.0.0.1:{lab.node(i).bus_port}"


def _set_policy(c: Client, lab: Lab, queue: str, dead: str) -> None:
    c.set_queue_policy(queue, max_deliveries=1, dead_letter=dead)
    for i in range(3):
        eventually(
            lambda i=i: lab.node(i).call("QPOLICY", "GET", queue) is not None,
            f"the policy of {queue} on node {i}",
        )


def _qlens(lab: Lab, queue: str) -> list[int]:
    return [int(lab.node(i).call("QLEN", queue)) for i in range(3)]


def _make_dead_letters(lab: Lab, node: int, queue: str, dead: str, n: int) -> list[str]:
    """``n`` jobs added to ``queue`` on ``node``, each delivered there once and NACKed: with
    MAXDELIVERIES 1 each is moved to ``dead`` by that node. The originals' ids."""
    h = lab.node(node)
    before = sum(_qlens(lab, dead))
    ids = [
        h.call("ADDJOB", queue, f"{queue}-{node}-{k}", 5000, "REPLICATE", 3, "RETRY", 60)
        for k in range(n)
    ]
    got = h.call("GETJOB", "NOHANG", "COUNT", n, "FROM", queue)
    assert sorted(entry[1].decode() for entry in got) == sorted(ids)
    assert h.call("NACK", *ids) == n
    eventually(lambda: sum(_qlens(lab, dead)) == before + n, f"{n} dead letters in {dead}")
    return ids


def _take_all(lab: Lab, queue: str) -> list[list[object]]:
    """Every queued job of ``queue`` on every node, delivered (GETJOB WITHCOUNTERS)."""
    out: list[list[object]] = []
    for i in range(3):
        got = lab.node(i).call("GETJOB", "NOHANG", "COUNT", 100, "WITHCOUNTERS", "FROM", queue)
        out += got or []
    return out


@pytest.mark.timeout(240)
def test_redrive_asks_every_node_and_sums(lab3: Lab) -> None:
    with Client(_addr(lab3, 0)) as c:  # one seed: the others come from Hello
        _set_policy(c, lab3, "rd-src", "rd-dead")
        for i in range(3):
            _make_dead_letters(lab3, i, "rd-src", "rd-dead", 2)
        per_node = _qlens(lab3, "rd-dead")
        assert sum(per_node) == 6 and sum(1 for n in per_node if n) >= 2, per_node
        assert _qlens(lab3, "rd-src") == [0, 0, 0]
        assert len(c.nodes()) == 3
        assert c.redrive("rd-dead") == 6
        assert _qlens(lab3, "rd-dead") == [0, 0, 0]
        back = _take_all(lab3, "rd-src")
        assert sorted(entry[2] for entry in back) == sorted(
            f"rd-src-{i}-{k}".encode() for i in range(3) for k in range(2)
        )
        for entry in back:
            assert entry[3:] == [b"nacks", 0, b"additional-deliveries", 0]
        lab3.node(0).call("ACKJOB", *[entry[1] for entry in back])
        assert c.redrive("rd-dead") == 0  # nothing left anywhere


@pytest.mark.timeout(240)
def test_redrive_to_another_queue_and_count_per_node(lab3: Lab) -> None:
    with Client([_addr(lab3, i) for i in range(3)], discover=False) as c:
        _set_policy(c, lab3, "rdc-src", "rdc-dead")
        _make_dead_letters(lab3, 1, "rdc-src", "rdc-dead", 3)
        assert _qlens(lab3, "rdc-dead") == [0, 3, 0]  # the node that moved them holds them
        assert c.redrive("rdc-dead", to="rdc-other", count=2) == 2
        assert _qlens(lab3, "rdc-dead") == [0, 1, 0]
        assert sum(_qlens(lab3, "rdc-other")) == 2 and _qlens(lab3, "rdc-src") == [0, 0, 0]
        assert c.redrive("rdc-dead", to="rdc-other") == 1
        moved = _take_all(lab3, "rdc-other")
        assert len(moved) == 3 and _qlens(lab3, "rdc-dead") == [0, 0, 0]
        lab3.node(0).call("ACKJOB", *[entry[1] for entry in moved])


@pytest.mark.timeout(240)
def test_bad_redrive_arguments_move_nothing(lab3: Lab) -> None:
    n0 = lab3.node(0)
    with Client([_addr(lab3, i) for i in range(3)], discover=False) as c:
        _set_policy(c, lab3, "rdb-src", "rdb-dead")
        _make_dead_letters(lab3, 2, "rdb-src", "rdb-dead", 1)
        # The same messages as QREDRIVE over RESP.
        cases: list[tuple[dict[str, object], list[object]]] = [
            ({"queue": ""}, [""]),
            ({"to": "rdb-dead"}, ["TO", "rdb-dead"]),
            ({"count": 10_001}, ["COUNT", 10_001]),
        ]
        for kwargs, resp_args in cases:
            args: dict[str, object] = {"queue": "rdb-dead", **kwargs}
            with pytest.raises(InvalidArgumentError) as refused:
                c.redrive(**args)  # type: ignore[arg-type]
            queue = resp_args[0] if resp_args == [""] else "rdb-dead"
            rest = [] if resp_args == [""] else resp_args
            with pytest.raises(RespError) as resp_refused:
                n0.call("QREDRIVE", queue, *rest)
            assert refused.value.message == str(resp_refused.value), kwargs
        for count in (0, -1):
            with pytest.raises(InvalidArgumentError):
                c.redrive("rdb-dead", count=count)
        assert _qlens(lab3, "rdb-dead") == [0, 0, 1]  # nothing moved
        assert _qlens(lab3, "rdb-src") == [0, 0, 0]
        assert c.redrive("rdb-dead") == 1  # and it still can
        lab3.node(0).call("ACKJOB", *[entry[1] for entry in _take_all(lab3, "rdb-src")])


def test_queue_policies_lists_every_policy(lab3: Lab) -> None:
    with Client(_addr(lab3, 1), discover=False) as c:
        c.set_queue_policy("rdl-b", max_deliveries=3, dead_letter="rdl-dead")
        c.set_queue_policy("rdl-a", backoff=(1, 60))
        want = [
            QueuePolicy("rdl-a", backoff_base_s=1, backoff_max_s=60),
            QueuePolicy("rdl-b", 3, "rdl-dead"),
        ]
        with Client(_addr(lab3, 2), discover=False) as other:
            eventually(
                lambda: [p for p in other.queue_policies() if p.queue.startswith("rdl-")] == want,
                "both policies listed by node 2",
            )

        async def listed_async() -> list[QueuePolicy]:
            async with AsyncClient(_addr(lab3, 0), discover=False) as ac:
                return [p for p in await ac.queue_policies() if p.queue.startswith("rdl-")]

        assert asyncio.run(listed_async()) == want
        listed = c.queue_policies()
        assert [p.queue for p in listed] == sorted(p.queue for p in listed)
        assert c.delete_queue_policy("rdl-a") is True
        assert [p for p in c.queue_policies() if p.queue.startswith("rdl-")] == want[1:]
        c.delete_queue_policy("rdl-b")


def _cli(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DISQ_PASSWORD"}
    env["DISQ_ADDR"] = _addr(lab, 0)
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([*CLI, *args], capture_output=True, env=env, timeout=60)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


def _ok(lab: Lab, *args: str) -> str:
    r = _cli(lab, *args)
    assert r.returncode == 0, f"disq {' '.join(args)}: rc {r.returncode}\n{r.stderr}"
    return r.stdout


@pytest.mark.timeout(240)
def test_the_cli_redrives_on_every_node_and_lists_policies(lab3: Lab) -> None:
    with Client([_addr(lab3, i) for i in range(3)], discover=False) as c:
        _set_policy(c, lab3, "rdcli-src", "rdcli-dead")
    for i in (1, 2):
        _make_dead_letters(lab3, i, "rdcli-src", "rdcli-dead", 1)
    docs = json.loads(_ok(lab3, "policies", "--json"))
    assert {
        "queue": "rdcli-src",
        "max_deliveries": 1,
        "dead_letter": "rdcli-dead",
        "backoff_base_s": 0,
        "backoff_max_s": 0,
    } in docs
    lines = [line.split() for line in _ok(lab3, "policies").splitlines()]
    assert lines[0] == ["QUEUE", "MAXDELIVERIES", "DEADLETTER", "BACKOFF_BASE_S", "BACKOFF_MAX_S"]
    assert ["rdcli-src", "1", "rdcli-dead", "-", "-"] in lines  # "-": not set
    # Node 0 is the only address given: the CLI asks the nodes Hello lists.
    assert _ok(lab3, "redrive", "rdcli-dead", "--to", "rdcli-back", "--count", "1") == "2\n"
    assert sum(_qlens(lab3, "rdcli-back")) == 2 and _qlens(lab3, "rdcli-dead") == [0, 0, 0]
    assert json.loads(_ok(lab3, "--json", "redrive", "rdcli-dead")) == {
        "queue": "rdcli-dead",
        "redriven": 0,
    }
    bad = _cli(lab3, "redrive", "rdcli-dead", "--to", "rdcli-dead")
    assert bad.returncode == 1
    assert bad.stderr == "disq: SYNTAX: ERR QREDRIVE TO must name another queue\n"
    assert _cli(lab3, "redrive", "rdcli-dead", "--count", "0").returncode == 2  # usage
    lab3.node(0).call("ACKJOB", *[entry[1] for entry in _take_all(lab3, "rdcli-back")])
