"""How long one look of the scheduler takes while a node catches up on a long misfire.

The worst case issue 32 names: a per-second cron schedule, CATCHUP 1000, a node back after
an hour down (3,595 missed ticks to walk, 2,595 to skip, 1,000 to fire late). One node core
on a fake clock (disq.testing.mesh), so the figure is the core's own time per tick() call,
the loop time a node spends in it; the IO layer's part is not in it.

    .venv/bin/python scripts/probe_misfire.py [--down-s 3600] [--catchup 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime

from disq import _native
from disq.core.messages import ScheduleDef
from disq.testing.mesh import Mesh


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--down-s", type=int, default=3600)
    ap.add_argument("--catchup", type=int, default=1000)
    ap.add_argument("--spec", default="* * * * * *")
    args = ap.parse_args()
    t0 = int(datetime(2026, 5, 1, 12, tzinfo=UTC).timestamp())
    mesh = Mesh(1, now_ms=t0 * 1000)
    node = mesh.nodes[0]
    sched = node.scheduler
    assert sched is not None
    d = ScheduleDef("s", args.spec, "UTC", "q", b"", catchup=args.catchup, ttl_s=7200, repl=1)
    sched.add(mesh.now, d)
    mesh.now += 500
    node.tick(mesh.now)
    node.ready(mesh.now)
    node.advance()
    mesh.now += args.down_s * 1000
    looks: list[float] = []
    fired_before = sched.stats["ticks_fired"]
    while sched.stats["ticks_fired"] - fired_before < args.catchup:
        start = time.perf_counter()
        node.tick(mesh.now)
        looks.append((time.perf_counter() - start) * 1e3)
        node.ready(mesh.now)
        node.advance()
        mesh.now += 1
    print(f"{_native.describe()}; {args.spec!r} CATCHUP {args.catchup}, {args.down_s} s down")
    print(
        f"{len(looks)} looks until the {args.catchup} kept ticks fired: "
        f"max {max(looks):.2f} ms, median {statistics.median(looks):.3f} ms, "
        f"total {sum(looks):.0f} ms; skipped {sched.stats['ticks_skipped']}"
    )


if __name__ == "__main__":
    main()
