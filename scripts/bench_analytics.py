#!/usr/bin/env python3
"""Time the analytics job (disq/spark/analytics.py) on a seeded set of ~1M events.

The events come from disq.testing.events.seeded_events (two queues, three nodes, a tenth of
the events duplicated as an at-least-once export gives them), written as Parquet. The figure
is the wall time of ``analytics.run`` in one local[*] session already started: read,
deduplicate, rebuild every job's story, the per-(queue, hour) summary with exact percentiles,
the Parquet/JSON/text outputs and the chart.

  .venv/bin/python scripts/bench_analytics.py
  .venv/bin/python scripts/bench_analytics.py --jobs-per-queue 50000 --repeat 3
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

from bench_common import log, machine_info  # noqa: E402

from disq.testing.events import seeded_events  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs-per-queue", type=int, default=107_000, help="~1M events at 107k")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    from disq.spark import analytics, session

    events, expect = seeded_events(11, args.jobs_per_queue)
    log(f"{len(events):,} events for {2 * args.jobs_per_queue:,} jobs")
    spark = session("bench-analytics")
    times = []
    with tempfile.TemporaryDirectory(prefix="disq-bench-analytics-") as tmp:
        src = Path(tmp) / "events"
        src.mkdir()
        pq.write_table(pa.Table.from_pylist(events), src / "events.parquet")
        for k in range(args.repeat):
            t0 = time.monotonic()
            rows = analytics.run(spark, str(src), Path(tmp) / f"out{k}", 3600)
            times.append(time.monotonic() - t0)
            got = {(r["queue"], r["window_start_ms"]): r["enqueued"] for r in rows}
            want = {key: e["enqueued"] for key, e in expect.items()}
            if got != want:
                raise RuntimeError(f"summary differs from the expected counts: {got} != {want}")
            log(f"run {k}: {times[-1]:.1f} s")
    spark.stop()
    sys.stdout.write(
        f"Command: `{shlex.join([sys.executable, *sys.argv])}`\n"
        f"Machine: {machine_info()}\n"
        f"{len(events):,} events ({2 * args.jobs_per_queue:,} jobs), local[*]: analytics.run "
        f"{statistics.median(times):.1f} s median of {len(times)} "
        f"({', '.join(f'{t:.1f}' for t in times)} s), "
        f"{len(events) / statistics.median(times):,.0f} events/s\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
