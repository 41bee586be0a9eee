"""A node killed and restarted in quick succession is never given up by its peers.

The sequence of Disque's own cluster tests (and of its users' failover scripts), on real
``python -m disq.node_main node.conf`` processes: every node reset (CLUSTER RESET HARD,
CLUSTER LEAVING no, CONFIG SET cluster-node-timeout 3000, CONFIG REWRITE), the cluster joined
again by a chain of CLUSTER MEETs, then nodes killed with SIGKILL and restarted on their
config files while a client adds jobs on a survivor, moving on as soon as a restarted node
answers PING. Disque 1.0-rc1 answers every add below; so must disq.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402

NODE_TIMEOUT_MS = 3000


def _reset_and_chain_meet(lab: Lab) -> None:
    for node in lab.nodes:
        lab.cluster_reset(node.index)  # CLUSTER RESET HARD: a new node id
        assert node.call("CLUSTER", "LEAVING", "no") == "OK"
        assert node.call("CONFIG", "SET", "cluster-node-timeout", NODE_TIMEOUT_MS) == "OK"
        assert node.call("CONFIG", "REWRITE") == "OK"
    for a, b in zip(lab.nodes, lab.nodes[1:], strict=False):
        assert a.call("CLUSTER", "MEET", b.host, b.port) == "OK"
    n = len(lab.nodes)

    def everyone_reaches_everyone() -> bool:
        return all(int(lab.cluster_info(i)["cluster_reachable_nodes"]) == n - 1 for i in range(n))

    eventually(everyone_reaches_everyone, "the chain of meets joins every node", 30)


def _is_job_id(reply: Any) -> bool:
    return isinstance(reply, str) and reply.startswith("D-")


def _kill_restart_kill_add_restart(lab: Lab, down_at_once: list[int]) -> None:
    n = len(lab.nodes)
    a = lab.nodes[0]
    b = down_at_once[0]
    # 1. Three times over: several nodes killed at once; the add on A finds other nodes.
    for _ in range(3):
        for i in down_at_once:
            lab.kill9(i)
        reply = a.call("ADDJOB", "q", "body", 5000, "REPLICATE", n - len(down_at_once), timeout=10)
        assert _is_job_id(reply), reply
        for i in down_at_once:
            lab.restart(i)
    # 2. B down: an add that needs every node runs out at its TTL.
    lab.kill9(b)
    with pytest.raises(RespError) as err:
        a.call("ADDJOB", "q", "body", 15000, "REPLICATE", n, "TTL", 1, timeout=10)
    assert err.value.code == "NOREPL"
    lab.restart(b)  # returns once B answers PING
    # 3. Killed again the moment it answers; at once, an add that needs every node, waiting
    # while B is down; B back 2 s later. A must still count B (its restart was heard) and
    # reach it once it is back.
    lab.kill9(b)
    result: dict[str, Any] = {}

    def add() -> None:
        try:
            result["reply"] = a.call("ADDJOB", "q", "body", 30000, "REPLICATE", n, timeout=40)
        except (RespError, OSError) as exc:
            result["reply"] = exc

    adder = threading.Thread(target=add)
    adder.start()
    try:
        # While B is down the add waits (an answer now would be a NOREPL: B not counted).
        adder.join(2.0)
        assert "reply" not in result, result
    finally:
        lab.restart(b)
        adder.join(40)
    assert _is_job_id(result.get("reply")), result
    job_id = result["reply"]
    shown = lab.nodes[b].call("SHOW", job_id)
    assert shown is not None  # B keeps a copy: all n nodes took part


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_kill_restart_kill_add_restart_on_3_nodes_is_answered_with_an_id(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=NODE_TIMEOUT_MS) as lab:
        _reset_and_chain_meet(lab)
        _kill_restart_kill_add_restart(lab, [1])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_restart_kill_add_restart_on_7_nodes_is_answered_with_an_id(tmp_path: Path) -> None:
    with Lab(7, tmp_path / "lab", node_timeout_ms=NODE_TIMEOUT_MS) as lab:
        _reset_and_chain_meet(lab)
        _kill_restart_kill_add_restart(lab, [1, 2, 3])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_peer_that_gave_a_node_up_finds_it_again_even_if_it_does_not_speak_first(
    tmp_path: Path,
) -> None:
    # B down past the node timeout: A has it as failed (HELLO priority 100). B comes back on
    # its data dir but without its cluster view (lost, or a fresh volume for it), so it
    # knows nobody and greets nobody. A's link to it redials every 100 ms and pings it as
    # soon as it listens; B refutes the failure in its answer and A takes it back at once,
    # not at A's next probe of its failed peers (every 5 probe periods: 5 s here).
    with Lab(3, tmp_path / "lab", node_timeout_ms=10_000) as lab:
        b_id = lab.nodes[1].id
        lab.kill9(1)
        eventually(lambda: lab.hello(0).get(b_id) == 100, "A gives B up", 60)
        assert int(lab.cluster_info(0)["cluster_reachable_nodes"]) == 1
        (lab.nodes[1].data_dir / "cluster.json").unlink(missing_ok=True)
        lab.restart(1)
        assert lab.nodes[1].id == b_id
        eventually(
            lambda: int(lab.cluster_info(0)["cluster_reachable_nodes"]) == 2,
            "A reaches B again",
            1.0,
        )
        reply = lab.nodes[0].call("ADDJOB", "q", "body", 5000, "REPLICATE", 3, timeout=10)
        assert _is_job_id(reply), reply


@pytest.mark.timeout(120)
def test_a_node_killed_right_after_a_meet_restarts_knowing_its_peer(tmp_path: Path) -> None:
    # The view file is written as soon as the set of peers (or an address) changes, as
    # Redis writes nodes.conf: killed the moment it learned its peer, the node reads it back.
    with Lab(2, tmp_path / "lab", node_timeout_ms=NODE_TIMEOUT_MS) as lab:
        for node in lab.nodes:
            lab.cluster_reset(node.index)
        a, b = lab.nodes
        assert a.call("CLUSTER", "MEET", b.host, b.port) == "OK"
        eventually(lambda: int(lab.cluster_info(1)["cluster_known_nodes"]) == 2, "B knows A")
        lab.kill9(1)
        view = json.loads((b.data_dir / "cluster.json").read_text())
        assert [m["node_id"] for m in view["members"]] == [a.id]
        lab.restart(1)
        assert int(lab.cluster_info(1)["cluster_known_nodes"]) == 2
