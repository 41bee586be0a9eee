"""Short Jepsen runs against a real 3-node local cluster (cluster/jepsen.py).

Three ``python -m disq.node_main node.conf`` processes (each in its own network namespace
when the tests run as root, see cluster/netns.py), producers and consumers on random nodes,
a share of consumers that die holding a job, and a nemesis that kill -9s, SIGSTOPs,
partitions, one-way cuts and slows links. Then heal, drain every node and check the
history: nothing acknowledged may be lost, nothing abandoned may stay stranded, nothing may
be left on the nodes, and every kind of fault must have been seen to take effect.

The mutant test runs the same kind of run with a deliberately broken node (``python -m
tests.mutants never-requeue``) and checks that the run fails, and passes without it.

On failure, the run's history.jsonl, report.json and every node's logs stay in the pytest
tmp dir printed in the assertion message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from cluster.jepsen import JepsenConfig, RunResult, run  # noqa: E402


def _explain(result: RunResult) -> str:
    return (
        f"{result.report.summary()}\npartitions: {result.partitions}\n"
        f"faults: {result.faults}\nnemesis: {result.nemesis}\nsee {result.out_dir}"
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_short_jepsen_run_loses_nothing(tmp_path: Path) -> None:
    cfg = JepsenConfig(
        nodes=3,
        duration=18.0,
        seed=20150630,  # aphyr's Disque issue #92, for luck
        nemesis=("kill", "pause", "partition", "cut", "slow"),
        clients=4,
        rate=30.0,
        interval=1.2,  # about fifteen steps: kinds not started yet go first
        max_down=1,  # 3 nodes: one down leaves two to serve and drain
        out_dir=tmp_path / "jepsen",
        node_timeout_ms=1000,
        drain_timeout=45.0,
        abandon=0.05,
    )
    result = run(cfg, log=lambda _msg: None)
    why = _explain(result)
    report = json.loads((result.out_dir / "report.json").read_text())
    assert (result.out_dir / "history.jsonl").stat().st_size > 0
    assert report["checker"]["lost"] == result.report.lost
    assert report["partitions"] == result.partitions

    assert result.report.lost == 0, why
    assert result.report.unexpected == 0, why
    assert result.report.stranded == 0, why
    assert result.report.stranded_on_nodes == {}, why
    assert result.report.valid, why
    # The consumers did die holding jobs, and those jobs came back.
    assert result.report.abandoned > 0, why
    # Every kind of fault happened and was seen to take effect (slow links need tc).
    kinds = ["kill", "pause", "partition", "cut"]
    if result.partitions == "netns":
        kinds.append("slow")
    for kind in kinds:
        assert result.faults[kind]["started"] > 0, f"no {kind} started\n{why}"
        assert result.faults[kind]["effective"] > 0, f"no {kind} took effect\n{why}"
    assert result.nemesis.get("restart-failed", 0) == 0, why
    assert result.nemesis.get("error", 0) == 0, f"a fault could not be applied\n{why}"
    assert result.lab["crashes"] == 0, f"a node crashed by itself\n{why}"
    assert result.report.acknowledged > 0, why
    assert result.report.deliveries > 0, why
    assert result.cluster_whole_after_heal, why


def _stranding_run(tmp_path: Path, *, mutant: bool) -> RunResult:
    # REPLICATE 1: the node that delivered a job holds its only copy, so if that node does
    # not requeue it, nobody does. No faults: nothing may legitimately go missing.
    node_cmd = [sys.executable, "-m", "tests.mutants", "never-requeue"] if mutant else None
    cfg = JepsenConfig(
        nodes=3,
        duration=8.0,
        seed=7,
        nemesis=(),
        clients=4,
        rate=30.0,
        replicate=1,
        abandon=0.1,
        out_dir=tmp_path / ("mutant" if mutant else "control"),
        node_timeout_ms=1000,
        node_cmd=node_cmd,
        drain_timeout=12.0,  # the mutant's run waits this long for jobs that never come
    )
    return run(cfg, log=lambda _msg: None)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_never_requeue_mutant_fails_the_run(tmp_path: Path) -> None:
    result = _stranding_run(tmp_path, mutant=True)
    why = _explain(result)
    assert not result.report.valid, why
    assert result.exit_code == 1, why
    assert result.report.abandoned > 0, why
    # Every stranded value was delivered once, so "lost" alone would not have seen it.
    assert result.report.lost == 0, why
    assert result.report.stranded > 0, why
    assert result.report.left_on_nodes > 0, why


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_same_run_without_the_mutant_is_valid(tmp_path: Path) -> None:
    result = _stranding_run(tmp_path, mutant=False)
    why = _explain(result)
    assert result.report.abandoned > 0, why
    assert result.report.stranded == 0, why
    assert result.report.stranded_on_nodes == {}, why
    assert result.report.valid, why
