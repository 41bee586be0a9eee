"""A short Jepsen run against a real 3-node local cluster (cluster/jepsen.py).

Three ``python -m disq.node_main node.conf`` processes, producers and consumers on random
nodes, and a nemesis that kill -9s / restarts nodes and partitions the cluster for ~15 s.
Then heal, drain every node and check the history: nothing acknowledged may be lost.

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

from cluster.jepsen import JepsenConfig, run  # noqa: E402


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_short_jepsen_run_loses_nothing(tmp_path: Path) -> None:
    cfg = JepsenConfig(
        nodes=3,
        duration=16.0,
        seed=20150630,  # aphyr's Disque issue #92, for luck
        nemesis=("kill", "partition"),
        clients=4,
        rate=30.0,
        interval=1.5,  # about ten nemesis steps: both kinds start at least once
        max_down=1,  # 3 nodes: one down leaves two to serve and drain
        out_dir=tmp_path / "jepsen",
        node_timeout_ms=1000,
        drain_timeout=45.0,
    )
    result = run(cfg, log=lambda _msg: None)
    where = f"see {result.out_dir}"
    report = json.loads((result.out_dir / "report.json").read_text())
    assert (result.out_dir / "history.jsonl").stat().st_size > 0
    assert report["checker"]["lost"] == result.report.lost

    assert result.report.lost == 0, f"{result.report.summary()}\n{where}"
    assert result.report.unexpected == 0, f"{result.report.summary()}\n{where}"
    # The nemesis really hurt the cluster, and the cluster still did work.
    assert result.nemesis.get("kill", 0) > 0, f"no kill happened: {result.nemesis}; {where}"
    assert result.nemesis.get("partition", 0) > 0, f"no partition: {result.nemesis}; {where}"
    assert result.nemesis.get("restart-failed", 0) == 0, f"{result.nemesis}; {where}"
    assert result.nemesis.get("error", 0) == 0, f"a fault could not be applied; {where}"
    assert result.lab["crashes"] == 0, f"a node crashed by itself; {where}"
    assert result.report.acknowledged > 0, f"{result.report.summary()}\n{where}"
    assert result.report.deliveries > 0, f"{result.report.summary()}\n{where}"
    assert result.cluster_whole_after_heal, where
