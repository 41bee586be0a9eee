"""Queue policies on three real node processes: a QPOLICY SET on one node is known by every
node, survives an AOF rewrite and a kill -9 of every node, and a DEL on another node reaches
all; its BACKOFF holds a NACKed job off every node's queue for base, then 2 * base seconds,
never less, with the nacks counted once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import Client, InvalidArgumentError, QueuePolicy  # noqa: E402

POLICY = [b"maxdeliveries", 5, b"deadletter", b"bq-dead", b"backoff-base", 2, b"backoff-max", 8]


def _policy(lab: Lab, i: int) -> object:
    return lab.node(i).call("QPOLICY", "GET", "bq")


def _held_then_back(lab: Lab, job_id: str, hold_s: float) -> float:
    """After a NACK: no node's queue holds the job for ``hold_s`` (sampled), then it comes
    back to a GETJOB; seconds from the NACK to its return."""
    n0 = lab.node(0)
    assert n0.call("NACK", job_id) == 1
    nacked = time.monotonic()
    while time.monotonic() - nacked < hold_s - 0.2:
        assert [lab.node(i).call("QLEN", "bq") for i in range(3)] == [0, 0, 0]
        time.sleep(0.1)  # a sampling period of the invariant, not a wait for an event
    back = eventually(
        lambda: n0.call("GETJOB", "TIMEOUT", 100, "WITHCOUNTERS", "FROM", "bq"),
        "the job to come back after its backoff",
        timeout=15,
    )
    took = time.monotonic() - nacked
    assert isinstance(back, list) and back[0][1] == job_id.encode()
    return took


@pytest.mark.timeout(240)
def test_a_queue_policy_on_three_nodes(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        n1 = lab.node(1)
        assert n1.call("QPOLICY", "SET", "bq", "MAXDELIVERIES", 5, "DEADLETTER", "bq-dead",
                       "BACKOFF", 2, 8) == "OK"  # fmt: skip
        for i in (0, 2):
            eventually(lambda i=i: _policy(lab, i) == POLICY, "the policy spreads")
        # BACKOFF 2 8: the first NACK holds the job 2 s, the second 4 s, on every node
        # (RETRY is a minute: only the backoff brings it back).
        n0 = lab.node(0)
        job_id = n0.call("ADDJOB", "bq", "work", 5000, "REPLICATE", 3, "RETRY", 60)
        assert n0.call("GETJOB", "TIMEOUT", 1000, "FROM", "bq")[0][1] == job_id.encode()
        assert _held_then_back(lab, job_id, 2.0) >= 2.0
        assert _held_then_back(lab, job_id, 4.0) >= 4.0
        shown = dict(zip(*[iter(n0.call("SHOW", job_id))] * 2, strict=True))
        assert shown[b"nacks"] == 2 and shown[b"additional-deliveries"] == 0
        stat = n0.call("QSTAT", "bq")
        assert isinstance(stat, list) and stat[-len(POLICY) :] == POLICY
        # A rewrite of node 0's AOF, every node killed, each back on its AOF alone.
        assert n0.call("BGREWRITEAOF") == "Background append only file rewriting started"
        eventually(lambda: lab.info(0)["aof_rewrite_in_progress"] == "0", "the rewrite ends")
        for i in range(3):
            lab.kill9(i)
        for i in range(3):
            lab.restart(i)
            assert _policy(lab, i) == POLICY
        # A DEL on another node reaches every node.
        lab.wait_cluster()
        assert lab.node(2).call("QPOLICY", "DEL", "bq") == 1
        for i in range(3):
            eventually(lambda i=i: _policy(lab, i) is None, "the delete spreads")


def test_the_sdk_sets_gets_and_deletes_queue_policies(lab3: Lab) -> None:
    c0 = Client(f"127.0.0.1:{lab3.node(0).bus_port}", discover=False)
    c1 = Client(f"127.0.0.1:{lab3.node(1).bus_port}", discover=False)
    with c0, c1:
        c0.set_queue_policy("sdk-pq", max_deliveries=4, dead_letter="sdk-dead", backoff=(1, 30))
        want = QueuePolicy("sdk-pq", 4, "sdk-dead", 1, 30)
        eventually(lambda: c1.queue_policy("sdk-pq") == want, "the policy reaches node 1")
        assert lab3.node(1).call("QPOLICY", "GET", "sdk-pq") == [
            b"maxdeliveries", 4, b"deadletter", b"sdk-dead", b"backoff-base", 1,
            b"backoff-max", 30,
        ]  # fmt: skip
        for bad in (
            {"max_deliveries": 1_000_001},
            {"backoff": (5, 4)},
            {"backoff": (0, 30 * 86400 + 1)},
            {"dead_letter": "sdk-pq"},
            {},
        ):
            with pytest.raises(InvalidArgumentError):
                c0.set_queue_policy("sdk-pq", **bad)  # type: ignore[arg-type]
        assert c0.queue_policy("sdk-pq") == want  # nothing changed
        assert c1.delete_queue_policy("sdk-pq") is True
        assert c1.delete_queue_policy("sdk-pq") is False
        eventually(lambda: c0.queue_policy("sdk-pq") is None, "the delete reaches node 0")
