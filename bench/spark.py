"""Rows/s of the Spark sink (``df.write.format("disq")``) into 1 and 3 local nodes, beside the
SDK's own batched adds of the same jobs into the same nodes, in the same run.

Fresh nodes per cluster size (cluster/lab.py, ``appendonly no``), one local Spark session
(``local[*]``) for the whole run, timed as it starts. Each row writes --rows rows (bodies
``row-<n>``, 10-15 bytes) in --partitions partitions to a fresh queue, REPLICATE 1 and 2,
idempotency keys on (exactly once) and off (at least once); the figure is rows / wall time of
``save()``, checked against the queues' lengths afterwards. The SDK's figure is the same jobs
(bodies, options, keys) from this process with ``AsyncClient.add_jobs``, 1000 a call, 4 calls
in flight, as the sink's tasks send them; "sink / SDK" is their ratio. Both are warmed first
(a 2,000-row write, 2,000 SDK adds per cluster, untimed), so no timed write pays for Spark's
Python workers starting. The machine's cores run Spark's workers, the JVM and the nodes.

  python -m bench spark
  python -m bench spark --sizes 3 --rows 200000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster import disq_nodes, running
from bench.common import HOST, Build, log, median
from bench.report import Report, fmt_int, ratio
from cluster.lab import Lab

HELP = "the Spark sink beside the SDK's batched adds, 1 and 3 nodes, keys on and off"


def bus_addrs(lab: Lab) -> str:
    return ",".join(f"{HOST}:{nd.bus_port}" for nd in lab.nodes)


def qlen_total(lab: Lab, queue: str) -> int:
    return sum(int(nd.call("QLEN", queue)) for nd in lab.nodes)


def sdk_rate(nodes: str, queue: str, rows: int, repl: int, keys: bool) -> float:
    """Rows/s of the SDK's batched adds of the jobs the sink sends."""
    from disq.client import AsyncClient

    async def main() -> float:
        async with AsyncClient(nodes, timeout_s=30) as c:
            sem = asyncio.Semaphore(4)
            t0 = time.monotonic()

            async def send(first: int) -> None:
                jobs = [
                    {
                        "queue": queue,
                        "body": f"row-{i}",
                        "replicate": repl,
                        **({"idempotency_key": f"sdk/{i}"} if keys else {}),
                    }
                    for i in range(first, min(first + 1000, rows))
                ]
                async with sem:
                    out = await c.add_jobs(jobs)
                bad = [r for r in out if not isinstance(r, str)]
                if bad:
                    raise RuntimeError(f"{queue}: {bad[0]}")

            await asyncio.gather(*(send(k) for k in range(0, rows, 1000)))
            return rows / (time.monotonic() - t0)

    return asyncio.run(main())


def sink_rate(df: Any, rows: int, nodes: str, queue: str, repl: int, keys: str) -> float:
    """Rows/s of one ``save()`` of ``df`` (``rows`` rows, cached) into ``queue``."""
    t0 = time.monotonic()
    writer = df.write.format("disq").mode("append").option("nodes", nodes)
    writer.option("queue", queue).option("replicate", str(repl)).option("idempotency", keys).save()
    return rows / (time.monotonic() - t0)


def one_size(n: int, df: Any, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    out = []
    with running(disq_nodes(Build.this(), n=n), False, Path(tempfile.mkdtemp(dir=tmp))) as lab:
        nodes = bus_addrs(lab)
        # Before any clock: Spark's Python workers exist and have imported the sink (as this
        # process has the SDK), and the nodes have taken keyed adds.
        df.limit(2000).write.format("disq").mode("append").option("nodes", nodes).option(
            "queue", "warm-up"
        ).option("replicate", "1").save()
        sdk_rate(nodes, "warm-up-sdk", 2000, 1, True)
        for repl in (r for r in (1, 2) if r <= n):
            for keys in ("on", "off"):
                sink, sdk = [], []
                for k in range(args.repeat):
                    queue = f"sdk-r{repl}-{keys}-{k}"
                    sdk.append(sdk_rate(nodes, queue, args.rows, repl, keys == "on"))
                    if qlen_total(lab, queue) != args.rows:
                        raise RuntimeError(f"{queue}: not {args.rows} jobs")
                    queue = f"sink-r{repl}-{keys}-{k}"
                    sink.append(sink_rate(df, args.rows, nodes, queue, repl, keys))
                    if (got := qlen_total(lab, queue)) != args.rows:
                        raise RuntimeError(f"{queue}: {got} jobs for {args.rows} rows")
                row = {"nodes": n, "replicate": repl, "keys": keys, "sink": sink, "sdk": sdk}
                log(f"{row}")
                out.append(row)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=200_000, help="per write")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--sizes", default="1,3", help="cluster sizes")
    p.add_argument("--repeat", type=int, default=1, help="writes per row (median)")
    p.add_argument("--quick", action="store_true", help="10,000 rows, one node")


def run(args: argparse.Namespace, report: Report) -> None:
    from disq.spark import session

    if args.quick:
        args.rows, args.sizes = 10_000, "1"
    t0 = time.monotonic()
    spark = session("bench-spark")
    session_s = time.monotonic() - t0
    df = spark.range(0, args.rows, numPartitions=args.partitions).selectExpr(
        "concat('row-', id) AS body"
    )
    df.cache().count()  # the rows exist before any clock starts
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
            for n in (int(s) for s in args.sizes.split(",")):
                rows += one_size(n, df, args, Path(tmp))
    finally:
        spark.stop()
    table = report.table(
        f"{args.rows:,} rows in {args.partitions} partitions a write, local[*], AOF off, "
        f"median of {args.repeat}",
        ["nodes / REPLICATE / keys", "sink rows/s", "runs", "SDK add_jobs rows/s", "sink / SDK"],
    )
    for r in rows:
        sink, sdk = median(r["sink"]), median(r["sdk"])
        runs = ", ".join(f"{x / 1000:.1f}k" for x in r["sink"])
        label = f"{r['nodes']} / {r['replicate']} / {r['keys']}"
        table.add(label, fmt_int(sink), runs, fmt_int(sdk), ratio(sink, sdk))
    report.note(f"session() started in {session_s:.1f} s")
    report.raw["rows"] = rows
