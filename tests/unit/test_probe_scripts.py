"""The in-process probes docs/benchmarks.md quotes still run and print what it cites."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_probe_replica_cost_prints_each_part_and_the_saving() -> None:
    out = _run("probe_replica_cost.py", "--jobs", "3000", "--repeat", "1")
    parts = dict(re.findall(r"^(\w[\w +]*?)\s+([\d.]+) us per copy", out, re.M))
    assert set(parts) == {"decode", "core", "core + AOF", "record", "loadjob", "bytes floor"}
    # Each part was timed (what they compare is a figure for docs/benchmarks.md, not a test:
    # under load their order can swap).
    assert all(float(us) > 0 for us in parts.values()), parts
    saved = re.search(r"at most saved by bytes replicas: (-?[\d.]+) us per copy", out)
    assert saved is not None, out


def test_probe_add_job_prints_the_cost_of_an_add() -> None:
    out = _run("probe_add_job.py", "--adds", "5000")
    found = re.search(r"core.add_job REPLICATE 1: ([\d.]+) us per add \(5,000 adds\)", out)
    assert found is not None and float(found.group(1)) > 0


def test_probe_job_memory_prints_the_bytes_a_queued_job_holds() -> None:
    out = _run("probe_job_memory.py", "--jobs", "3000")
    found = re.search(r"3,000 queued jobs: (\d+) B per job \(tracemalloc\)", out)
    assert found is not None and int(found.group(1)) > 0
    parts = dict(re.findall(r"^ +(\S.*?)\s+(\d+) B$", out, re.M))
    # The body is a 100-byte bytes object: at least its 100 bytes.
    assert int(parts["body bytes"]) >= 100
    # A queue holds the job itself: no skiplist entry of its own (queue.py).
    assert parts["skiplist entry: the DJob itself"] == "0"
    assert int(parts["sum"]) == sum(int(v) for k, v in parts.items() if k != "sum")
