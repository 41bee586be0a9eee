"""The analytics job (disq/spark/analytics.py) on a seeded set of about 1M events.

The events come from disq.testing.events.seeded_events (two queues, three nodes, a tenth of
them duplicated, as an at-least-once export gives them), written as Parquet. The figure is the
wall time of ``analytics.run`` in one local[*] session already started: read, deduplicate,
rebuild every job's story, the per-(queue, hour) summary with exact percentiles, the
Parquet/JSON/text outputs and the chart; every run is checked against the counts the
generator expects. No rival runs this job (Disque and beanstalkd keep no event history), so
the reference is the first run, which pays for the JVM's warm-up.

  python -m bench analytics
  python -m bench analytics --jobs-per-queue 50000 --repeat 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import log, median
from bench.report import Report, fmt_int, ratio

HELP = "the Spark analytics job on ~1M seeded events"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs-per-queue", type=int, default=107_000, help="~1M events at 107k")
    p.add_argument("--repeat", type=int, default=2, help="runs in the one session")
    p.add_argument("--quick", action="store_true", help="5,000 jobs per queue, one run")


def run(args: argparse.Namespace, report: Report) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from disq.spark import analytics, session
    from disq.testing.events import seeded_events

    per_queue, repeat = (5_000, 1) if args.quick else (args.jobs_per_queue, args.repeat)
    events, expect = seeded_events(11, per_queue)
    log(f"{len(events):,} events for {2 * per_queue:,} jobs")
    spark = session("bench-analytics")
    times = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-analytics-") as tmp:
            src = Path(tmp) / "events"
            src.mkdir()
            pq.write_table(pa.Table.from_pylist(events), src / "events.parquet")
            for k in range(repeat):
                t0 = time.monotonic()
                rows = analytics.run(spark, str(src), Path(tmp) / f"out{k}", 3600)
                times.append(time.monotonic() - t0)
                # A window of acks alone has a row too (enqueued 0): the generator's has not.
                got = {
                    (r["queue"], r["window_start_ms"]): r["enqueued"] for r in rows if r["enqueued"]
                }
                want = {key: e["enqueued"] for key, e in expect.items()}
                if got != want:
                    raise RuntimeError(f"the summary {got} is not the generator's {want}")
                log(f"run {k + 1}: {times[-1]:.1f} s")
    finally:
        spark.stop()
    table = report.table(
        f"analytics.run on {len(events):,} events ({2 * per_queue:,} jobs), local[*]",
        ["run", "seconds", "events/s", "x the first run"],
    )
    for k, t in enumerate(times, 1):
        table.add(str(k), f"{t:.1f}", fmt_int(len(events) / t), ratio(t, times[0]))
    table.add("median", f"{median(times):.1f}", fmt_int(len(events) / median(times)), "-")
