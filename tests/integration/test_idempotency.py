"""Idempotent adds on real nodes: a retried add with the same key answers the first job's id,
on another node after the first one died, and on the same node after a restart from its AOF.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cluster.lab import Lab  # noqa: E402
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
        # once both peers acknowledged the key, i.e. wrote it to their AOF (IDEMKEY).
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
