"""How soon after its second a schedule's tick job exists, on a local 3-node cluster.

A `@every 1s` schedule (REPLICATE 2) runs on three real nodes (cluster/lab.py). Each tick's
job is taken out (GETJOB NOHANG on every node), its creation time read with SHOW (ctime: the
wall clock when the node created it) and its tick from its idempotency key. Two phases:

- healthy: the owner fires each tick at its second;
- owner killed (SIGKILL, left down): the other nodes fire each tick one grace period
  (1 s) after it, and the key vote picks one job.

Prints, per phase: ticks seen, the most jobs seen for one tick (1, or a bug), and the lateness
(creation time minus the tick) in ms: median, 90th percentile, max. No rival keeps
schedules in the cluster, so nothing runs beside it.

Usage: ``python scripts/probe_schedules.py [--seconds 20]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _pairs(reply: Any) -> dict[str, Any]:
    return {_text(k): _text(v) for k, v in zip(reply[::2], reply[1::2], strict=True)}


def _collect(lab: Lab, seconds: float, skip: set[int]) -> dict[int, list[float]]:
    """tick -> lateness (ms) of every distinct job seen for it, for ``seconds``."""
    out: dict[int, list[float]] = {}
    seen: set[str] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, node in enumerate(lab.nodes):
            if i in skip:
                continue
            try:
                jobs = node.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", "ticks")
            except (OSError, RespError):
                continue
            for _, job_id, _ in jobs or []:
                shown = _pairs(node.call("SHOW", job_id))
                node.call("ACKJOB", job_id)
                if _text(job_id) in seen:
                    continue
                seen.add(_text(job_id))
                tick = int(str(shown["idempotency-key"]).rsplit(":", 1)[1])
                late_ms = shown["ctime"] / 1e6 - tick * 1000
                out.setdefault(tick, []).append(late_ms)
        time.sleep(0.05)
    return out


def _report(phase: str, ticks: dict[int, list[float]]) -> None:
    late = sorted(x for v in ticks.values() for x in v)
    if not late:
        print(f"{phase}: no ticks")
        return
    p90 = late[int(0.9 * (len(late) - 1))]
    print(
        f"{phase}: {len(ticks)} ticks, at most {max(len(v) for v in ticks.values())} job(s) "
        f"per tick, lateness ms median {statistics.median(late):.1f} p90 {p90:.1f} "
        f"max {late[-1]:.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with Lab(3, Path(tempfile.mkdtemp(prefix="probe-schedules-")), node_timeout_ms=3000) as lab:
        a = lab.nodes[0]
        a.call("SCHEDULE", "ADD", "beat", "@every 1s", "ticks", "x", "REPLICATE", 2, "RETRY", 2)
        time.sleep(2.5)  # the table reaches every node; the first ticks fire
        _collect(lab, 1.0, set())  # what fired while starting: not measured
        _report("healthy", _collect(lab, args.seconds, set()))
        owner = _text(_pairs(a.call("SCHEDULE", "SHOW", "beat"))["owner"])
        k = next(i for i, n in enumerate(lab.nodes) if n.id == owner)
        lab.kill9(k)
        _collect(lab, 2.0, {k})  # the ticks around the kill: not measured
        _report("owner killed", _collect(lab, args.seconds, {k}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
