"""CLUSTER RESET forgets the cluster, its jobs and queues, and hears nothing of it until a MEET.

Disque's own cluster suite, units 07 then 08, on real ``disq-node node.conf`` processes: jobs
at RETRY 1 replicated to every node, every node killed and restarted, one job fetched again
(active: its RETRY requeues it a second later), then a hard reset of each node in turn, as
the units' init does. Disque's clusterReset forgets every node and flushes every job and
queue, and a node ignores what an unknown node sends until a MEET. Before issue 31 a reset
forgot only the peers: the jobs stayed, the peers were back at their next ping, and unit 08
found one queue more than it made.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab, NodeHandle  # noqa: E402

NODE_TIMEOUT_MS = 3000
RETRY_S = 1
# A requeue is due RETRY after the fetch, plus up to 250 ms of jitter (disq/core/disque),
# then its QUEUED travels: watching for twice RETRY covers a whole retry of every copy.
WATCH_S = 2 * RETRY_S + 0.5


def _text(reply: Any) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def _scan(node: NodeHandle, command: str) -> list[str]:
    """Every queue (QSCAN) or job (JSCAN) the node has, in one BUSYLOOP call."""
    reply = node.call(command, "BUSYLOOP")
    assert isinstance(reply, list) and len(reply) == 2, reply
    return [_text(x) for x in reply[1]]


def _contents(lab: Lab, i: int) -> dict[str, Any]:
    node = lab.nodes[i]
    return {
        "queues": _scan(node, "QSCAN"),
        "jobs": _scan(node, "JSCAN"),
        "registered_jobs": int(lab.info(i)["registered_jobs"]),
    }


EMPTY = {"queues": [], "jobs": [], "registered_jobs": 0}


def _watch_empty(lab: Lab, nodes: list[int], alone: bool) -> int:
    """Nothing appears on ``nodes`` for WATCH_S (an absence needs a window to be seen: each
    node is asked again and again until it ends); ``alone``: each knows only itself. The
    number of looks, so a caller can tell the window was watched."""
    deadline = time.monotonic() + WATCH_S
    looks = 0
    while time.monotonic() < deadline:
        for i in nodes:
            assert _contents(lab, i) == EMPTY, f"node {i} after the reset"
            if alone:
                known = int(lab.cluster_info(i)["cluster_known_nodes"])
                assert known == 1, f"node {i} knows {known} nodes before any MEET"
        looks += 1
    return looks


def _reset_like_disques_init(lab: Lab, i: int) -> None:
    # tests/cluster/tests/includes/init-tests.tcl, "Cluster nodes hard reset".
    node = lab.nodes[i]
    old_id = node.id
    lab.cluster_reset(i)  # CLUSTER RESET HARD
    assert node.id != old_id  # Disque's hard reset: a new node id
    assert node.call("CLUSTER", "LEAVING", "no") == "OK"
    assert node.call("CONFIG", "SET", "cluster-node-timeout", NODE_TIMEOUT_MS) == "OK"
    assert node.call("CONFIG", "REWRITE") == "OK"


def _active_jobs_at_retry_1_after_a_mass_restart(lab: Lab) -> list[str]:
    """Unit 07: jobs replicated to every node with RETRY 1, every node killed and restarted,
    each job waited for until it is queued again and then fetched (active)."""
    n = len(lab.nodes)
    jobs: list[tuple[str, str]] = []
    for k in range(3):
        queue = f"q{k}"
        reply = lab.nodes[k % n].call(
            "ADDJOB", queue, f"body{k}", 5000, "REPLICATE", n, "RETRY", RETRY_S
        )
        jobs.append((queue, _text(reply)))
    for i in range(n):
        lab.kill9(i)
    for i in range(n):
        lab.restart(i)
    for queue, job_id in jobs:

        def fetched(queue: str = queue, job_id: str = job_id) -> bool:
            for node in lab.nodes:
                got = node.call("GETJOB", "NOHANG", "FROM", queue)
                if got:
                    assert _text(got[0][1]) == job_id
                    return True
            return False

        eventually(fetched, f"job {job_id} requeued after the restart and fetched", 30)
    return [job_id for _, job_id in jobs]


@pytest.mark.timeout(240)
def test_a_hard_reset_of_each_node_in_turn_leaves_nothing_that_comes_back(
    tmp_path: Path,
) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=NODE_TIMEOUT_MS) as lab:
        job_ids = _active_jobs_at_retry_1_after_a_mass_restart(lab)
        for i in range(len(lab.nodes)):
            # Each node's jobs were in every node; the ones not reset yet still hold them,
            # requeue them at their RETRY and tell the holders, the reset node among them.
            assert any(lab.nodes[j].call("SHOW", job_ids[0]) for j in range(i, 3))
            _reset_like_disques_init(lab, i)
            assert _watch_empty(lab, list(range(i + 1)), alone=True) > 0
        # Unit 08's init goes on: a chain of MEETs joins the nodes again, and nothing of
        # the old cluster comes back with it.
        for a, b in zip(lab.nodes, lab.nodes[1:], strict=False):
            assert a.call("CLUSTER", "MEET", b.host, b.port) == "OK"
        eventually(
            lambda: all(int(lab.cluster_info(i)["cluster_reachable_nodes"]) == 2 for i in range(3)),
            "the chain of MEETs joins every node",
            30,
        )
        assert _watch_empty(lab, [0, 1, 2], alone=False) > 0
        # Unit 08's first check, on node 0: 8 queues made, 8 found.
        made = {f"after-reset-{k}" for k in range(8)}
        for q in made:
            lab.nodes[0].call("ADDJOB", q, "x", 5000, "REPLICATE", 1, "RETRY", 0)
        assert set(_scan(lab.nodes[0], "QSCAN")) == made
        # The AOF was on all along: a restart loads none of the flushed jobs again.
        lab.kill9(1)
        lab.restart(1)
        assert _contents(lab, 1) == EMPTY
