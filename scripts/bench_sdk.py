#!/usr/bin/env python3
"""Benchmark the gRPC SDK beside RESP pipelining, on 1 and on 3 local nodes, in one run.

For each cluster size (fresh nodes from Disque-style config files, ``appendonly no``; the
gRPC API is at port + 10000), four rows, 100-byte bodies, REPLICATE 1, RETRY 60:

  * resp-addjob      scripts/resp_loadgen: 50 connections x pipeline 16 of ADDJOB, spread
                     over the nodes (the RESP figure the SDK is compared with)
  * sdk-addjobs      one Python process, AsyncClient per node (``discover=False``, so the load
                     is spread like the RESP connections), ``--tasks`` tasks per client each
                     calling ``add_jobs`` with ``--batch`` jobs: batched AddJobs calls
  * resp-getjob-ackjob  resp_loadgen getjob-ackjob (GETJOB NOHANG COUNT 1 + ACKJOB) on the
                     jobs the resp-addjob row left
  * sdk-getjobs-ack  the same process: per client ``--tasks`` tasks of ``get_jobs(count=
                     --batch, nohang)`` + ``ack_nowait`` on the jobs the sdk-addjobs row left

Each row runs ``--duration`` seconds (a consumer row also stops when its queues are empty).
Reported: ops/s, the nodes' CPU and the client's CPU (the SDK's own cost is on the client
side, the C load generator's is small), and sdk/resp ratios.

  .venv/bin/python scripts/bench_sdk.py
  .venv/bin/python scripts/bench_sdk.py --duration 3 --repeat 3 --markdown /tmp/sdk.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

from bench_cluster import (  # noqa: E402
    BUS_OFFSET,
    HOST,
    LOADGEN_BIN,
    Cluster,
    ensure_loadgen,
    machine_cpu,
    run_loadgen,
)
from bench_common import log, machine_info  # noqa: E402

BODY = b"x" * 100
RETRY_S = 60


# ------------------------------------------------------------------------------ client side
async def _client_main(mode: str, addrs: list[str], queue: str, args: argparse.Namespace) -> None:
    from disq.client import AsyncClient

    clients = [AsyncClient(a, discover=False, timeout_s=30) for a in addrs]
    stop_at = time.monotonic() + args.duration
    done = 0
    errors = 0

    async def adder(c: AsyncClient) -> None:
        nonlocal done, errors
        jobs = [{"queue": queue, "body": BODY, "replicate": 1, "retry_s": RETRY_S}] * args.batch
        while time.monotonic() < stop_at:
            out = await c.add_jobs(jobs)
            for r in out:
                if isinstance(r, str):
                    done += 1
                else:
                    errors += 1

    async def consumer(c: AsyncClient) -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            jobs = await c.get_jobs(queue, count=args.batch, nohang=True, with_counters=False)
            if not jobs:
                return
            c.ack_nowait(*(j.id for j in jobs))
            done += len(jobs)

    work = adder if mode == "add" else consumer
    t0 = time.monotonic()
    await asyncio.gather(*(work(c) for c in clients for _ in range(args.tasks)))
    for c in clients:
        await c.flush()
    seconds = time.monotonic() - t0
    for c in clients:
        await c.close()
    sys.stdout.write(json.dumps({"ops": done, "seconds": seconds, "errors": errors}) + "\n")


def run_client(mode: str, ports: list[int], queue: str, args: argparse.Namespace) -> dict[str, Any]:
    addrs = ",".join(f"{HOST}:{p + BUS_OFFSET}" for p in ports)
    cmd = [
        sys.executable,
        __file__,
        "--client",
        mode,
        "--addrs",
        addrs,
        "--queue",
        queue,
        "--duration",
        str(args.duration),
        "--batch",
        str(args.batch),
        "--tasks",
        str(args.tasks),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=args.duration + 120)
    # The client's CPU: read from the kernel's accounting of the reaped child.
    if proc.returncode != 0:
        raise RuntimeError(f"client {mode} failed: rc {proc.returncode}")
    return dict(json.loads(out.strip().splitlines()[-1]))


# ------------------------------------------------------------------------------ rows
def measure(cluster: Cluster, fn: Any) -> tuple[dict[str, Any], list[float], float, float]:
    cpu0 = cluster.cpu()
    busy0, total0 = machine_cpu()
    self0 = os.times()
    t0 = time.monotonic()
    result = fn()
    wall = time.monotonic() - t0
    self1 = os.times()
    busy1, total1 = machine_cpu()
    node_pct = [100 * (b - a) / wall for a, b in zip(cpu0, cluster.cpu(), strict=True)]
    child_pct = (
        100
        * (
            (self1.children_user + self1.children_system)
            - (self0.children_user + self0.children_system)
        )
        / wall
    )
    busy = 100 * (busy1 - busy0) / max(1.0, total1 - total0)
    return result, node_pct, child_pct, busy


def one_size(n: int, args: argparse.Namespace, loadgen: Path, tmp: Path) -> dict[str, Any]:
    node_cmd = [sys.executable, "-m", "disq.node_main"]
    cluster = Cluster(node_cmd, tmp / f"n{n}-{time.monotonic_ns()}", aof=False, n=n)
    rows: dict[str, Any] = {}
    try:
        cluster.start(60)
        ports = cluster.ports

        def resp(workload: str) -> dict[str, Any]:
            r = run_loadgen(
                loadgen, ports, workload, 50, 16, 1, False, 0, args.duration, 1, "resp-"
            )
            return {"ops": r.ops, "seconds": r.seconds, "errors": r.errors}

        for name, fn in (
            ("resp-addjob", lambda: resp("addjob")),
            ("sdk-addjobs", lambda: run_client("add", ports, "sdk-0", args)),
            ("resp-getjob-ackjob", lambda: resp("getjob-ackjob")),
            ("sdk-getjobs-ack", lambda: run_client("get", ports, "sdk-0", args)),
        ):
            result, node_pct, client_pct, busy = measure(cluster, fn)
            result["ops_per_s"] = result["ops"] / max(result["seconds"], 1e-9)
            result["node_cpu_pct"] = node_pct
            result["client_cpu_pct"] = client_pct
            result["machine_busy_pct"] = busy
            rows[name] = result
            log(
                f"{n} node(s) {name}: {result['ops_per_s']:,.0f} ops/s "
                f"(errors {result['errors']}, machine {busy:.0f}%)"
            )
            cluster.check_alive()
    finally:
        cluster.stop()
    return rows


def render(results: dict[int, list[dict[str, Any]]]) -> str:
    lines = [
        "| nodes | workload | ops/s (median) | runs | node CPU % | client CPU % | machine % "
        "| SDK / RESP |",
        "| ---: | --- | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    pairs = {"sdk-addjobs": "resp-addjob", "sdk-getjobs-ack": "resp-getjob-ackjob"}
    for n, runs in results.items():
        med: dict[str, float] = {}
        for name in ("resp-addjob", "sdk-addjobs", "resp-getjob-ackjob", "sdk-getjobs-ack"):
            vals = [r[name]["ops_per_s"] for r in runs]
            med[name] = statistics.median(vals)
            last = runs[-1][name]
            ratio = f"{med[name] / med[pairs[name]]:.2f}x" if name in pairs else "-"
            lines.append(
                f"| {n} | {name} | {med[name]:,.0f} | "
                f"{', '.join(f'{v / 1000:.1f}k' for v in vals)} | "
                f"{'/'.join(f'{c:.0f}' for c in last['node_cpu_pct'])} | "
                f"{last['client_cpu_pct']:.0f} | {last['machine_busy_pct']:.0f} | {ratio} |"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per row")
    p.add_argument("--repeat", type=int, default=1, help="runs per cluster size (median)")
    p.add_argument("--sizes", default="1,3", help="cluster sizes")
    p.add_argument("--batch", type=int, default=500, help="jobs per AddJobs / GetJobs call")
    p.add_argument("--tasks", type=int, default=4, help="concurrent calls per node")
    p.add_argument("--loadgen", type=Path, default=LOADGEN_BIN)
    p.add_argument("--markdown", type=Path, help="also write the table here")
    # internal: the client process
    p.add_argument("--client", choices=("add", "get"), help=argparse.SUPPRESS)
    p.add_argument("--addrs", help=argparse.SUPPRESS)
    p.add_argument("--queue", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.client:
        asyncio.run(_client_main(args.client, args.addrs.split(","), args.queue, args))
        return 0
    loadgen = ensure_loadgen(args.loadgen)
    results: dict[int, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="disq-bench-sdk-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            results[n] = [one_size(n, args, loadgen, Path(tmp)) for _ in range(args.repeat)]
    table = render(results)
    header = (
        f"Command: `{shlex.join([sys.executable, *sys.argv])}`\n"
        f"Machine: {machine_info()}\n"
        f"Batch {args.batch}, {args.tasks} concurrent calls per node, {args.duration:g} s per "
        "row, REPLICATE 1, 100-byte bodies, AOF off; RESP: 50 connections x pipeline 16.\n"
    )
    sys.stdout.write(header + "\n" + table + "\n")
    if args.markdown:
        args.markdown.write_text(header + "\n" + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
