#!/usr/bin/env python3
"""Rows/s of the Spark sink (``df.write.format("disq")``) into 1 and 3 local nodes, beside
the SDK's own batched adds into the same nodes in the same run.

Fresh nodes per cluster size (Disque config files, ``appendonly no``), one local Spark session
(``local[*]``) for the whole run, timed as it starts. Each row writes ``--rows`` rows (bodies
``row-<n>``, 10-15 bytes) in ``--partitions`` partitions to a fresh queue, REPLICATE 1 and 2,
with idempotency keys on (exactly-once) and off (at-least-once); the figure is rows / wall
time of ``save()``, checked against the queues' lengths afterwards. The SDK figure is the same
jobs (same bodies, options and keys) from this process with ``AsyncClient.add_jobs``, 1000 a
call, 4 calls in flight, as the sink's tasks send them; "sink / SDK" is their ratio. Both are
warmed first (a 2,000-row write and 2,000 SDK adds per cluster, untimed), so the first timed
write does not pay for Spark's Python workers starting and importing the sink. The machine's
2 cores run Spark's Python workers, the JVM and the nodes together.

  .venv/bin/python scripts/bench_spark_sink.py
  .venv/bin/python scripts/bench_spark_sink.py --rows 500000 --repeat 3
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

from bench_cluster import BUS_OFFSET, HOST, Cluster  # noqa: E402
from bench_common import log, machine_info  # noqa: E402

from disq.client import Client  # noqa: E402


def qlen_total(ports: list[int], queue: str) -> int:
    total = 0
    for p in ports:
        with Client(f"{HOST}:{p + BUS_OFFSET}", discover=False) as c:
            total += c.qlen(queue)
    return total


def sdk_rate(nodes: str, queue: str, rows: int, repl: int, keys: bool) -> float:
    """Rows/s of the SDK's batched adds of the same jobs the sink sends."""
    import asyncio

    from disq.client import AsyncClient

    async def main() -> float:
        async with AsyncClient(nodes, timeout_s=30) as c:
            sem = asyncio.Semaphore(4)
            t0 = time.monotonic()

            async def send(first: int) -> None:
                jobs = [
                    {"queue": queue, "body": f"row-{i}", "replicate": repl,
                     **({"idempotency_key": f"sdk/{i}"} if keys else {})}
                    for i in range(first, min(first + 1000, rows))
                ]  # fmt: skip
                async with sem:
                    out = await c.add_jobs(jobs)
                bad = [r for r in out if not isinstance(r, str)]
                if bad:
                    raise RuntimeError(f"{queue}: {bad[0]}")

            await asyncio.gather(*(send(k) for k in range(0, rows, 1000)))
            return rows / (time.monotonic() - t0)

    return asyncio.run(main())


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from disq.spark import session

    t0 = time.monotonic()
    spark = session("bench-spark-sink")
    log(f"session() took {time.monotonic() - t0:.1f} s")
    out: list[dict[str, Any]] = [{"session_s": time.monotonic() - t0}]
    df = spark.range(0, args.rows, numPartitions=args.partitions).selectExpr(
        "concat('row-', id) AS body"
    )
    df.cache().count()  # the rows exist before the clock starts
    node_cmd = [sys.executable, "-m", "disq.node_main"]
    with tempfile.TemporaryDirectory(prefix="disq-bench-spark-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            cluster = Cluster(node_cmd, Path(tmp) / f"n{n}", aof=False, n=n)
            try:
                cluster.start(60)
                nodes = ",".join(f"{HOST}:{p + BUS_OFFSET}" for p in cluster.ports)
                # Before any clock: Spark's Python workers exist and have imported the sink
                # (as this process has the SDK), and the nodes have taken keyed adds.
                df.limit(2000).write.format("disq").mode("append").option("nodes", nodes).option(
                    "queue", "warm-up"
                ).option("replicate", "1").save()
                sdk_rate(nodes, "warm-up-sdk", 2000, 1, True)
                for repl in (1, 2):
                    if repl > n:
                        continue
                    for keys in ("on", "off"):
                        rates, sdk = [], []
                        for k in range(args.repeat):
                            queue = f"sdk-r{repl}-{keys}-{k}"
                            sdk.append(sdk_rate(nodes, queue, args.rows, repl, keys == "on"))
                            if qlen_total(cluster.ports, queue) != args.rows:
                                raise RuntimeError(f"{queue}: not {args.rows} jobs")
                            queue = f"bench-r{repl}-{keys}-{k}"
                            t0 = time.monotonic()
                            (
                                df.write.format("disq")
                                .mode("append")
                                .option("nodes", nodes)
                                .option("queue", queue)
                                .option("replicate", str(repl))
                                .option("idempotency", keys)
                                .save()
                            )
                            wall = time.monotonic() - t0
                            got = qlen_total(cluster.ports, queue)
                            if got != args.rows:
                                raise RuntimeError(f"{queue}: {got} jobs for {args.rows} rows")
                            rates.append(args.rows / wall)
                        row = {"nodes": n, "replicate": repl, "keys": keys, "rates": rates}
                        row["sdk"] = sdk
                        log(f"{row}")
                        out.append(row)
            finally:
                cluster.stop()
    spark.stop()
    return out


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | REPLICATE | idempotency keys | sink rows/s (median) | runs "
        "| SDK add_jobs rows/s (median) | sink / SDK |",
        "| ---: | ---: | --- | ---: | --- | ---: | ---: |",
    ]
    for r in rows:
        if "session_s" in r:
            continue
        rates, sdk = r["rates"], r["sdk"]
        sink_m, sdk_m = statistics.median(rates), statistics.median(sdk)
        lines.append(
            f"| {r['nodes']} | {r['replicate']} | {r['keys']} | {sink_m:,.0f} "
            f"| {', '.join(f'{x / 1000:.1f}k' for x in rates)} | {sdk_m:,.0f} "
            f"| {sink_m / sdk_m:.2f}x |"
        )
    session_s = next(r["session_s"] for r in rows if "session_s" in r)
    return "\n".join(lines) + f"\n\nsession() started in {session_s:.1f} s."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--sizes", default="1,3")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--markdown", type=Path)
    args = p.parse_args(argv)
    rows = run(args)
    text = (
        f"Command: `{shlex.join([sys.executable, *sys.argv])}`\n"
        f"Machine: {machine_info()}\n"
        f"{args.rows:,} rows in {args.partitions} partitions per write, local[*], AOF off.\n\n"
        + render(rows)
        + "\n"
    )
    sys.stdout.write(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
