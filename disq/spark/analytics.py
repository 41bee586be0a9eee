"""The analytics job: per queue and time window, what happened to the jobs.

    spark-submit disq/spark/analytics.py --events DIR --out DIR [--window 1h]
    python -m disq.spark.analytics --events DIR --out DIR        (local[*])

Input: the files of ``disq events export`` (JSON lines or Parquet; every node's events).
Exports are at-least-once, so events are deduplicated on (node, seq) first.

A job's story is put together from all nodes' events by job id: its queue and enqueue time
come from its ``enqueued`` event, then the first ``delivered`` and the first ``acked`` anywhere.
The window is the one its enqueue time falls in (its ack time for the ack rate). Per (queue,
window):

- enqueued (jobs whose enqueue time is in the window), acked (of those, acked by now)
- acks_in_window: acks that happened in the window (of jobs enqueued in it or before), and
  ack_rate_per_s: those per second of the window the export covers (a window the events
  cover only in part, as the first, the last, or the only window of a short run, is divided
  by that part: a 20 s burst in a 1 h window reads as its own rate, not a 180th of it)
- delivery_ms_p50/p95/p99: enqueue -> first delivery; ack_ms_p50/p95/p99: enqueue -> ack
  (exact percentiles, Spark's ``percentile``: linear interpolation between the closest ranks)
- retry_rate: of the jobs delivered, the share delivered more than once
- dead_lettered, dead_lettered_ratio: jobs the cluster moved to their queue policy's
  DEADLETTER queue (or dropped) after MAXDELIVERIES, and their share of the enqueued. The
  ``deadlettered`` event is the authoritative count: the deciding node logs it once for the
  original job, in its queue (a job story's ``dead_lettered`` is 1 if any node logged one, so
  a repeated export or a second decider counts once). The move acks the original without an
  ``acked`` event, so such a job is never counted acked.
- dead: jobs never acked that expired, that were dead-lettered, or that sit in a dead-letter
  queue named by ``--dead-letter-queues`` (where disq.Worker moves jobs after too many
  failures: those logs have no ``deadlettered`` event; a dead letter QREDRIVE moved back, its
  ``redriven`` event, is not dead), with their ids (``dead_ids``). Do not name a policy's
  DEADLETTER queue there: its jobs are already counted, at their source queue, by the event.

Output in DIR: ``summary.parquet/``, ``summary.json/`` (one JSON object per line), a readable
``summary.txt`` (also printed, with a legend of its columns) and ``chart.png`` (ack latency
percentiles and the ack rate per window).
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
    """One row per job enqueued in the export: its queue, enqueue, first delivery and first
    ack times, deliveries, and 0/1 flags ``expired``, ``dead_lettered``, ``redriven``."""
    from pyspark.sql import functions as F

    def first_time(kind: str) -> Any:
        return F.min(F.when(F.col("kind") == kind, F.col("time_ms")))

    def flag(kind: str) -> Any:  # 1 if any node logged the event for the job
        return F.max(F.when(F.col("kind") == kind, 1).otherwise(0))

    return (
        events.groupBy("job_id")
        .agg(
            F.max(F.when(F.col("kind") == "enqueued", F.col("queue"))).alias("queue"),
            first_time("enqueued").alias("enqueued_ms"),
            first_time("delivered").alias("delivered_ms"),
            first_time("acked").alias("acked_ms"),
            F.sum(F.when(F.col("kind") == "delivered", 1).otherwise(0)).alias("deliveries"),
            flag("expired").alias("expired"),
            flag("deadlettered").alias("dead_lettered"),
            flag("redriven").alias("redriven"),
        )
        .where(F.col("enqueued_ms").isNotNull())  # jobs enqueued before the export window
    )


def acks_by_window(events: Any, window_s: int) -> Any:
    """Per (queue, window of the ack): how many jobs were acked then (a job's first ack)."""
    from pyspark.sql import functions as F

    window_ms = window_s * 1000
    acks = (
        events.where(F.col("kind") == "acked")
        .groupBy("job_id")
        .agg(F.max("queue").alias("queue"), F.min("time_ms").alias("acked_ms"))
    )
    return acks.groupBy(
        "queue", (F.floor(F.col("acked_ms") / window_ms) * window_ms).alias("window_start_ms")
    ).agg(F.count("*").alias("acks_in_window"))


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
        F.sum("dead_lettered").alias("dead_lettered"),
        F.sort_array(
            F.collect_list(
                F.when(
                    (
                        (F.col("expired") == 1)
                        | (F.col("dead_lettered") == 1)
                        | (F.col("queue").isin(*dead_letter_queues) & (F.col("redriven") == 0))
                    )
                    & F.col("acked_ms").isNull(),
                    F.col("job_id"),
                )
            )
        ).alias("dead_ids"),
    )
    # Windows with acks but no enqueue (a backlog drained later) get a row too.
    out = out.join(acks_by_window(events, window_s), ["queue", "window_start_ms"], "full")
    span = events.agg(F.min("time_ms").alias("t0"), F.max("time_ms").alias("t1"))
    out = out.crossJoin(span)
    # The part of the window the export covers, in seconds (at least 1).
    covered_s = F.greatest(
        F.lit(1.0),
        (
            F.least(F.col("window_start_ms") + window_ms, F.col("t1") + 1)
            - F.greatest(F.col("window_start_ms"), F.col("t0"))
        )
        / 1000.0,
    )
    cols = [
        "queue",
        "window_start_ms",
        F.coalesce("enqueued", F.lit(0)).alias("enqueued"),
        F.coalesce("acked", F.lit(0)).alias("acked"),
        F.coalesce("acks_in_window", F.lit(0)).alias("acks_in_window"),
        (F.coalesce("acks_in_window", F.lit(0)) / covered_s).alias("ack_rate_per_s"),
    ]
    for name in ("delivery", "ack"):
        for i, p in enumerate(("p50", "p95", "p99")):
            cols.append(F.col(f"{name}_pct")[i].alias(f"{name}_ms_{p}"))
    cols += [
        F.when(F.col("delivered") > 0, F.col("retried") / F.col("delivered"))
        .otherwise(F.lit(0.0))
        .alias("retry_rate"),
        F.coalesce("dead_lettered", F.lit(0)).alias("dead_lettered"),
        F.when(F.col("enqueued") > 0, F.col("dead_lettered") / F.col("enqueued"))
        .otherwise(F.lit(0.0))
        .alias("dead_lettered_ratio"),
        F.coalesce(F.size("dead_ids"), F.lit(0)).alias("dead"),
        F.coalesce("dead_ids", F.array().cast("array<string>")).alias("dead_ids"),
    ]
    return out.select(*cols).orderBy("queue", "window_start_ms")


LEGEND = """\
QUEUE        the queue
WINDOW(UTC)  the window's start
ENQ          jobs enqueued in the window
ACKED        of those, acked by the end of the export
ACKS         acks that happened in the window (of jobs enqueued in it or before)
ACK/S        ACKS per second of the window the export covers (all of it, or the part a
             first, last or only window has)
DELIV        enqueue -> first delivery, ms (p50/p95/p99 of the window's jobs)
ACK          enqueue -> ack, ms (p50/p95/p99 of the window's acked jobs)
RETRY        of the window's delivered jobs, the share delivered more than once
DLQ'D        of the window's jobs, those moved to a dead-letter queue after MAXDELIVERIES
             (the deadlettered event), and their share of ENQ
DEAD         of the window's jobs, never acked and expired, dead-lettered, or in a
             dead-letter queue of --dead-letter-queues
"""


def render(rows: list[Any]) -> str:
    head = (
        "QUEUE", "WINDOW(UTC)", "ENQ", "ACKED", "ACKS", "ACK/S", "DELIV p50/p95/p99 ms",
        "ACK p50/p95/p99 ms", "RETRY", "DLQ'D", "DEAD",
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
            str(r["acks_in_window"]),
            f"{r['ack_rate_per_s']:.2f}",
            ms3(r, "delivery"),
            ms3(r, "ack"),
            f"{r['retry_rate']:.1%}",
            f"{r['dead_lettered']} ({r['dead_lettered_ratio']:.1%})",
            str(r["dead"]),
        )
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body]
    ]
    return "\n".join(lines) + "\n\n" + LEGEND


def chart(rows: list[Any], path: Path, window_s: int) -> dict[str, Any]:
    """Ack latency percentiles and the ack rate per window, one line per queue, a marker on
    every point (a single window is a point, not an invisible line); the x-axis spans the
    windows, half a window either side; the legends sit right of the plots. Returns what
    was drawn: ``span`` (the x-axis, matplotlib date numbers) and ``plots_px``, each plot's
    box in the PNG's pixels (left, top, right, bottom), for a test to look inside."""
    import datetime as dt

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    def at(ms: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    fig, (lat, thr) = plt.subplots(2, 1, figsize=(12, 7), sharex=True, dpi=100)
    for queue in sorted({r["queue"] for r in rows}):
        qr = [r for r in rows if r["queue"] == queue]
        x = [at(r["window_start_ms"]) for r in qr]
        for p, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
            y = [r[f"ack_ms_{p}"] for r in qr]
            lat.plot(x, [float("nan") if v is None else v for v in y], style,
                     label=f"{queue} ack {p}")  # fmt: skip
        thr.plot(x, [r["ack_rate_per_s"] for r in qr], "o-", label=queue)
    starts = [r["window_start_ms"] for r in rows]
    half_ms = window_s * 500
    span = (0.0, 1.0)
    if starts:
        lo, hi = at(min(starts) - half_ms), at(max(starts) + half_ms)
        thr.set_xlim(lo, hi)  # shared: both panels
        span = (float(mdates.date2num(lo)), float(mdates.date2num(hi)))  # type: ignore[no-untyped-call]
        locator = mdates.AutoDateLocator(minticks=3, maxticks=8)  # type: ignore[no-untyped-call]
        thr.xaxis.set_major_locator(locator)
        thr.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    # From 0 to a margin over the highest point: a lone point is not drawn on the frame.
    for ax, names in (
        (lat, ("ack_ms_p50", "ack_ms_p95", "ack_ms_p99")),
        (thr, ("ack_rate_per_s",)),
    ):
        top = max((float(r[n]) for r in rows for n in names if r[n] is not None), default=0.0)
        ax.set_ylim(0, top * 1.15 or 1.0)
    lat.set_ylabel("enqueue -> ack (ms)")
    thr.set_ylabel("acks / s (in the window)")
    thr.set_xlabel(f"window start (UTC), windows of {window_s} s")
    for ax in (lat, thr):
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.subplots_adjust(left=0.08, right=0.78, top=0.96, bottom=0.1, hspace=0.12)
    fig.savefig(path)
    height = fig.get_size_inches()[1] * fig.dpi
    plots = []
    for ax in (lat, thr):
        box = ax.get_window_extent()
        plots.append((int(box.x0), int(height - box.y1), int(box.x1), int(height - box.y0)))
    plt.close(fig)
    return {"span": span, "plots_px": plots}


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
    chart(rows, out / "chart.png", window_s)
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
        help="comma-separated queues whose unacked jobs count as dead (disq.Worker's "
        "dead_letter; not a queue policy's DEADLETTER: the deadlettered event counts those)",
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
