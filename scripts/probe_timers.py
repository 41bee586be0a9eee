"""How late (never early) the timers fire on fresh nodes: TTR, delay, reserve-with-timeout,
and Disque's DELAY, RETRY (with its 0..250 ms requeue jitter) and GETJOB TIMEOUT over RESP.

Runs tests/integration/test_timers.py's measurement (greenstalk-style, on the client's
time.monotonic(), starting as soon as a fresh node answers) on ``--nodes`` fresh nodes and
prints, per kind, how many runs ended early and the distribution of the lateness in ms.

Usage: ``python scripts/probe_timers.py [--nodes 4]`` (8 runs per kind per node).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import conftest  # noqa: E402
import test_timers  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    factory = conftest.ServerFactory(Path(tempfile.mkdtemp(prefix="probe-timers-")))
    runs: dict[str, list[float]] = {k: [] for k in test_timers.KINDS}
    runs.update({f"disque-{k}": [] for k in test_timers.DISQUE_KINDS})
    try:
        for _ in range(args.nodes):
            for kind, seconds in test_timers._measure_fresh_node(factory).items():
                runs[kind].extend(seconds)
            factory.close()
            for kind, seconds in test_timers._measure_disque_node(factory).items():
                runs[f"disque-{kind}"].extend(seconds)
            factory.close()
    finally:
        factory.close()
    for kind, seconds in runs.items():
        ms = sorted((s - 1) * 1000 for s in seconds)
        early = sum(1 for x in ms if x < 0)
        print(
            f"{kind:20s} n={len(ms)} early={early} min={ms[0]:.2f} "
            f"median={statistics.median(ms):.2f} p90={ms[int(len(ms) * 0.9)]:.2f} "
            f"max={ms[-1]:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
