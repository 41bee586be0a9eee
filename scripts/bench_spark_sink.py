#!/usr/bin/env python3
"""Rows/s of the Spark sink (``df.write.format("disq")``) into 1 and 3 local nodes.

Fresh nodes per cluster size (Disque config files, ``appendonly no``), one local Spark session
(``local[*]``) for the whole run. Each row writes ``--rows`` rows (bodies ``row-<n>``, 10-15
bytes) in ``--partitions`` partitions to a fresh queue, REPLICATE 1 and 2, with idempotency
keys on (exactly-once) and off (at-least-once); the figure is rows / wall time of ``save()``,
checked against the queues' lengths afterwards. The machine's 2 cores run Spark's Python
workers, the JVM and the nodes together.

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


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from disq.spark import session

    spark = session("bench-spark-sink")
    out: list[dict[str, Any]] = []
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
                for repl in (1, 2):
                    if repl > n:
                        continue
                    for keys in ("on", "off"):
                        rates = []
                        for k in range(args.repeat):
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
                        log(f"{row}")
                        out.append(row)
            finally:
                cluster.stop()
    spark.stop()
    return out


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | REPLICATE | idempotency keys | rows/s (median) | runs |",
        "| ---: | ---: | --- | ---: | --- |",
    ]
    for r in rows:
        rates = r["rates"]
        lines.append(
            f"| {r['nodes']} | {r['replicate']} | {r['keys']} | {statistics.median(rates):,.0f} "
            f"| {', '.join(f'{x / 1000:.1f}k' for x in rates)} |"
        )
    return "\n".join(lines)


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
