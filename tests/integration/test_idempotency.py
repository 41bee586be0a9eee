"""Idempotent adds on real nodes: a retried add with the same key answers the first job's id,
on another node after the first one died, and on the same node after a restart from its AOF.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402
from disq.client import Client  # noqa: E402


def addr(lab: Lab, i: int) -> str:
    return f"127.0.0.1:{lab.node(i).bus_port}"


def jobs_with_body(lab: Lab, i: int, queue: str) -> int:
    cursor, ids = lab.node(i).call("JSCAN", "QUEUE", queue, "COUNT", 1000)  # type: ignore[misc]
    assert cursor == b"0"
    return len(ids)


def test_retried_add_after_failover_and_restart_answers_the_first_id(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        with Client(addr(lab, 0), discover=False) as c:
            first = c.add_job("idem", "payload", replicate=3, idempotency_key="order-42")
            # A retry on the same node: nothing added.
            assert c.add_job("idem", "payload", replicate=3, idempotency_key="order-42") == first
        lab.kill9(0)
        # The node that answered is gone; its copies on 1 and 2 know the key.
        with Client(addr(lab, 1), discover=False) as c:
            assert c.add_job("idem", "payload", replicate=2, idempotency_key="order-42") == first
        reply = lab.node(2).call(
            "ADDJOB", "idem", "payload", 5000, "REPLICATE", 2, "IDEMPOTENCY-KEY", "order-42"
        )
        assert reply == first
        assert [jobs_with_body(lab, i, "idem") for i in (1, 2)] == [1, 1]
        # Node 0 comes back from its AOF with the job, and with its key.
        lab.restart(0)
        with Client(addr(lab, 0), discover=False) as c:
            assert c.add_job("idem", "payload", replicate=1, idempotency_key="order-42") == first
            # A new key is a new job.
            assert c.add_job("idem", "payload", replicate=1, idempotency_key="order-43") != first
        assert jobs_with_body(lab, 0, "idem") == 2


def test_a_key_learned_from_a_peer_survives_the_learners_restart(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        # REPLICATE 2 on node 0: one peer holds a copy, the other none. The answer comes
        # once a majority accepted the key's job in its vote (KEYVOTE records in their AOF);
        # the learner's retry after its restart asks a majority again and finds that job.
        first = lab.node(0).call(
            "ADDJOB", "idem", "payload", 5000, "REPLICATE", 2, "IDEMPOTENCY-KEY", "order-7"
        )
        learner = next(i for i in (1, 2) if jobs_with_body(lab, i, "idem") == 0)
        lab.kill9(0)
        lab.restart(learner)  # from its AOF: no job there, only the key it learned
        reply = lab.node(learner).call(
            "ADDJOB", "idem", "payload", 5000, "REPLICATE", 1, "IDEMPOTENCY-KEY", "order-7"
        )
        assert reply == first
        assert jobs_with_body(lab, learner, "idem") == 0


def test_a_keyed_add_needs_a_majority_and_a_retry_finds_the_one_job(tmp_path: Path) -> None:
    # The key's vote (disq/core/disque/keyvote.py) on real nodes: node 0 alone (its peers
    # frozen with SIGSTOP) takes unkeyed adds, but cannot bind a key: its keyed add answers
    # NOREPL at its timeout. Once the peers are back, a retry of that key on another node and
    # on node 0 both answer one id, and the cluster ends with one job for the key.
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        lab.pause(1)
        lab.pause(2)
        try:
            plain = lab.node(0).call("ADDJOB", "idem", "plain", 2000, "REPLICATE", 1)
            assert isinstance(plain, str) and plain.startswith("D-"), plain
            with pytest.raises(RespError) as alone:
                lab.node(0).call(
                    "ADDJOB", "idem", "keyed", 1500, "REPLICATE", 1, "IDEMPOTENCY-KEY", "order-9"
                )
            assert alone.value.code == "NOREPL", alone.value.text
            assert lab.node(0).call("QLEN", "idem") == 1  # the keyed job is not queued
        finally:
            lab.resume(1)
            lab.resume(2)
        lab.wait_cluster()
        retry = lab.node(1).call(
            "ADDJOB", "idem", "keyed", 10_000, "REPLICATE", 2, "IDEMPOTENCY-KEY", "order-9"
        )
        assert isinstance(retry, str) and retry.startswith("D-"), retry
        again = lab.node(0).call(
            "ADDJOB", "idem", "keyed", 10_000, "REPLICATE", 1, "IDEMPOTENCY-KEY", "order-9"
        )
        assert again == retry

        # One job of the key queued in the whole cluster (the loser, if node 0's own job
        # lost, is deleted everywhere), beside the plain one.
        def queued() -> int:
            return sum(int(lab.node(i).call("QLEN", "idem")) for i in range(3))  # type: ignore[arg-type]

        eventually(lambda: queued() == 2, "one keyed job and the plain one queued", timeout=20)
        got = [
            j
            for i in range(3)
            for j in lab.node(i).call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "idem") or []  # type: ignore[union-attr]
        ]
        assert isinstance(got, list)
        assert sorted(j[2] for j in got) == [b"keyed", b"plain"]
        assert retry.encode() in [j[1] for j in got]
