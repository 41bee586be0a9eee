"""The analytics job: per queue and time window, what happened to the jobs.

    spark-submit disq/spark/analytics.py --events DIR --out DIR [--window 1h]
    python -m disq.spark.analytics --events DIR --out DIR        (local[*])

Input: the files of ``disq events export`` (JSON lines or Parquet; every node's events).
Exports are at-least-once, so events are deduplicated on (node, seq) first.

A job's story is put together from all nodes' events by job id: its queue and enqueue time
come from its ``enqueued`` event, then the first ``delivered`` and the first ``acked`` anywhere.
The window is the one its enqueue time falls in. Per (queue, window):

- enqueued, acked, throughput_per_s (acked / window length)
- delivery_ms_p50/p95/p99: enqueue -> first delivery; ack_ms_p50/p95/p99: enqueue -> ack
  (exact percentiles, Spark's ``percentile``: linear interpolation between the closest ranks)
- retry_rate: of the jobs delivered, the share delivered more than once
- dead: jobs never acked that expired, or that sit in a dead-letter queue
  (``--dead-letter-queues``, where disq.Worker moves jobs after too many failures), with
  their ids (``dead_ids``)

Output in DIR: ``summary.parquet/``, ``summary.json/`` (one JSON object per line), a readable
``summary.txt`` (also printed) and ``chart.png`` (latency percentiles and throughput over time).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

WINDOWS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(text: str) -> int:
    """``90s``, ``5m``, ``1h``, ``1d`` -> seconds."""
    unit = text[-1:]
    if unit not in WINDOWS or not text[:-1].isdigit() or int(text[:-1]) <= 0:
        raise argparse.ArgumentTypeError(f"a window like 30s, 5m, 1h or 1d, not {text!r}")
    return int(text[:-1]) * WINDOWS[unit]


def load_events(spark: Any, path: str) -> Any:
    """Every exported event under ``path`` (JSON lines or Parquet), deduplicated."""
    p = Path(path)
    files = list(p.rglob("*.parquet")) if p.is_dir() else []
    df = spark.read.parquet(path) if files else spark.read.json(path)
    return df.dropDuplicates(["node", "seq"])


def job_stories(events: Any) -> Any:
    from pyspark.sql import functions as F

    def first_time(kind: str) -> Any:
        return F.min(F.when(F.col("kind") == kind, F.col("time_ms")))

    return (
        events.groupBy("job_id")
        .agg(
            F.max(F.when(F.col("kind") == "enqueued", F.col("queue"))).alias("queue"),
            first_time("enqueued").alias("enqueued_ms"),
            first_time("delivered").alias("delivered_ms"),
            first_time("acked").alias("acked_ms"),
            F.sum(F.when(F.col("kind") == "delivered", 1).otherwise(0)).alias("deliveries"),
            F.max(F.when(F.col("kind") == "expired", 1).otherwise(0)).alias("expired"),
        )
        .where(F.col("enqueued_ms").isNotNull())  # jobs enqueued before the export window
    )


def summarize(events: Any, window_s: int, dead_letter_queues: tuple[str, ...] = ()) -> Any:
    from pyspark.sql import functions as F

    jobs = job_stories(events)
    window_ms = window_s * 1000
    jobs = jobs.withColumn(
        "window_start_ms", F.floor(F.col("enqueued_ms") / window_ms) * window_ms
    ).withColumn("delivery_ms", F.col("delivered_ms") - F.col("enqueued_ms"))
    jobs = jobs.withColumn("ack_ms", F.col("acked_ms") - F.col("enqueued_ms"))
    pct = F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))
    out = jobs.groupBy("queue", "window_start_ms").agg(
        F.count("*").alias("enqueued"),
        F.count("acked_ms").alias("acked"),
        F.percentile(F.col("delivery_ms"), pct).alias("delivery_pct"),
        F.percentile(F.col("ack_ms"), pct).alias("ack_pct"),
        F.count("delivered_ms").alias("delivered"),
        F.sum(F.when(F.col("deliveries") > 1, 1).otherwise(0)).alias("retried"),
        F.sort_array(
            F.collect_list(
                F.when(
                    ((F.col("expired") == 1) | F.col("queue").isin(*dead_letter_queues))
                    & F.col("acked_ms").isNull(),
                    F.col("job_id"),
                )
            )
        ).alias("dead_ids"),
    )
    cols = [
        "queue",
        "window_start_ms",
        "enqueued",
        "acked",
        (F.col("acked") / F.lit(window_s)).alias("throughput_per_s"),
    ]
    for name in ("delivery", "ack"):
        for i, p in enumerate(("p50", "p95", "p99")):
            cols.append(F.col(f"{name}_pct")[i].alias(f"{name}_ms_{p}"))
    cols += [
        F.when(F.col("delivered") > 0, F.col("retried") / F.col("delivered"))
        .otherwise(F.lit(0.0))
        .alias("retry_rate"),
        F.size("dead_ids").alias("dead"),
        "dead_ids",
    ]
    return out.select(*cols).orderBy("queue", "window_start_ms")


def render(rows: list[Any]) -> str:
    head = (
        "QUEUE", "WINDOW(UTC)", "ENQ", "ACKED", "ACK/S", "DELIV p50/p95/p99 ms",
        "ACK p50/p95/p99 ms", "RETRY", "DEAD",
    )  # fmt: skip
    import datetime as dt

    def ms3(r: Any, name: str) -> str:
        vals = [r[f"{name}_ms_{p}"] for p in ("p50", "p95", "p99")]
        return "/".join("-" if v is None else f"{v:.0f}" for v in vals)

    body = [
        (
            r["queue"],
            dt.datetime.fromtimestamp(r["window_start_ms"] / 1000, dt.UTC).strftime(
                "%Y-%m-%d %H:%M:%S"
            ),
            str(r["enqueued"]),
            str(r["acked"]),
            f"{r['throughput_per_s']:.2f}",
            ms3(r, "delivery"),
            ms3(r, "ack"),
            f"{r['retry_rate']:.1%}",
            str(r["dead"]),
        )
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body]
    ]
    return "\n".join(lines) + "\n"


def chart(rows: list[Any], path: Path) -> None:
    """Latency percentiles and throughput per window, one line per queue."""
    import datetime as dt

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, thr) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for queue in sorted({r["queue"] for r in rows}):
        qr = [r for r in rows if r["queue"] == queue]
        x = [dt.datetime.fromtimestamp(r["window_start_ms"] / 1000, dt.UTC) for r in qr]
        for p, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            lat.plot(x, [r[f"ack_ms_{p}"] for r in qr], style, label=f"{queue} ack {p}")
        thr.plot(x, [r["throughput_per_s"] for r in qr], label=queue)
    lat.set_ylabel("enqueue -> ack (ms)")
    lat.legend(fontsize="small")
    thr.set_ylabel("acked jobs / s")
    thr.set_xlabel("window start (UTC)")
    fig.autofmt_xdate()
    thr.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(
    spark: Any,
    events_path: str,
    out: Path,
    window_s: int,
    dead_letter_queues: tuple[str, ...] = (),
) -> list[Any]:
    # Cached: written twice and collected once, computed once.
    events = load_events(spark, events_path)
    summary = summarize(events, window_s, dead_letter_queues).cache()
    out.mkdir(parents=True, exist_ok=True)
    summary.write.mode("overwrite").parquet(str(out / "summary.parquet"))
    summary.write.mode("overwrite").json(str(out / "summary.json"))
    rows: list[Any] = summary.collect()
    text = render(rows)
    (out / "summary.txt").write_text(text)
    chart(rows, out / "chart.png")
    summary.unpersist()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="disq job analytics over exported events")
    p.add_argument("--events", required=True, help="directory of `disq events export` files")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--window", type=parse_window, default=3600, help="e.g. 5m, 1h (default)")
    p.add_argument(
        "--dead-letter-queues",
        default="",
        help="comma-separated queues whose unacked jobs count as dead (disq.Worker's dead_letter)",
    )
    args = p.parse_args(argv)
    from disq.spark import session

    spark = session("disq-analytics")
    dlq = tuple(q for q in args.dead_letter_queues.split(",") if q)
    rows = run(spark, args.events, args.out, args.window, dlq)
    sys.stdout.write(render(rows))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
