"""The gRPC SDK's batched calls beside RESP pipelining, on 1 and on 3 local nodes, in one run.

For each cluster size, fresh nodes (cluster/lab.py: Disque config files, ``appendonly no``;
the gRPC API at port + 10000), 100-byte bodies, REPLICATE 1, RETRY 60, rows in this order:

  resp-addjob         resp_loadgen: 50 connections x pipeline 16 of ADDJOB, over the nodes
  sdk-addjobs         one Python process, an AsyncClient per node (``discover=False``, the
                      load spread as the RESP connections'), --tasks calls in flight per
                      client, each ``add_jobs`` of --batch jobs
  resp-getjob-ackjob  resp_loadgen getjob-ackjob on what resp-addjob left
  sdk-getjobs-ack     per client --tasks calls of ``get_jobs(count=--batch, nohang)`` +
                      ``ack_nowait`` on what sdk-addjobs left

Each row runs --seconds (a consumer row also ends when its queues are empty). Reported: ops/s,
the nodes' CPU and the client's (the SDK's own cost is on the client side, the C generator's
is small), and SDK / RESP. Then, on the last cluster, one add at a time from this process
(--calls each, 600-byte bodies): the SDK's ``add_job`` (a unary gRPC call), the same add over
the node's RESP port with the SDK's node view (what the Celery and Dramatiq integrations
send), and a bare ADDJOB on a socket: wall time, this process's CPU and node 0's per call.

  python -m bench sdk
  python -m bench sdk --seconds 3 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster import disq_nodes, pids, ports, running
from bench.common import (
    BODY_BYTES,
    HOST,
    Build,
    cpu_seconds,
    cpu_window,
    log,
    median,
    resp_load,
    resp_request,
)
from bench.report import Report, fmt_int, ratio
from cluster.lab import BUS_PORT_OFFSET, Lab

HELP = "the gRPC SDK's batched calls beside RESP pipelining, on 1 and 3 nodes"

RETRY_S = 60
ROWS = ["resp-addjob", "sdk-addjobs", "resp-getjob-ackjob", "sdk-getjobs-ack"]
SDK_OVER_RESP = {"sdk-addjobs": "resp-addjob", "sdk-getjobs-ack": "resp-getjob-ackjob"}


async def _client(mode: str, addrs: list[str], queue: str, args: argparse.Namespace) -> None:
    """The SDK side, in a process of its own: prints one JSON line (ops, seconds, errors)."""
    from disq.client import AsyncClient

    clients = [AsyncClient(a, discover=False, timeout_s=30) for a in addrs]
    stop_at = time.monotonic() + args.seconds
    done = errors = 0
    body = b"x" * BODY_BYTES

    async def adder(c: AsyncClient) -> None:
        nonlocal done, errors
        jobs = [{"queue": queue, "body": body, "replicate": 1, "retry_s": RETRY_S}] * args.batch
        while time.monotonic() < stop_at:
            for r in await c.add_jobs(jobs):
                done, errors = (done + 1, errors) if isinstance(r, str) else (done, errors + 1)

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


def sdk_row(mode: str, lab: Lab, args: argparse.Namespace) -> dict[str, Any]:
    addrs = ",".join(f"{HOST}:{p + BUS_PORT_OFFSET}" for p in ports(lab))
    cmd = [
        sys.executable,
        "-m",
        "bench.sdk",
        mode,
        addrs,
        "sdk-0",
        str(args.seconds),
        str(args.batch),
        str(args.tasks),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120)
    if out.returncode != 0:
        raise RuntimeError(f"the SDK client ({mode}) failed:\n{out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def resp_row(workload: str, lab: Lab, seconds: float) -> dict[str, Any]:
    r = resp_load(ports(lab), workload, 50, 16, replicate=1, seconds=seconds, queue_prefix="resp-")
    return {"ops": r.ops, "seconds": r.seconds, "errors": r.errors}


def one_at_a_time(lab: Lab, calls: int) -> dict[str, tuple[float, float, float]]:
    """One add at a time on node 0, as a producer publishing a task at a time makes them
    (600-byte bodies, about a Celery message): the SDK's add (one unary gRPC call), the same
    add over the node's RESP port with the SDK's node view (what the Celery and Dramatiq
    integrations send), and a bare ADDJOB on a socket. Per call: wall µs, this process's CPU
    µs, node 0's CPU µs."""
    from disq.client import Client
    from disq.integrations.resp_calls import RespCalls

    body = b"x" * 600
    node = lab.node(0)
    assert node.pid is not None
    sock = socket.create_connection((HOST, node.port))
    request = resp_request("ADDJOB", "one-raw", body, "5000", "REPLICATE", "1")

    def raw() -> None:
        sock.sendall(request)
        if not sock.recv(4096).startswith(b"+D-"):
            raise RuntimeError("ADDJOB failed")

    out = {}
    with sock, Client(f"{HOST}:{node.bus_port}", discover=False) as client:
        adds = RespCalls(client)
        for name, call in (
            ("SDK add_job (unary gRPC)", lambda: client.add_job("one-sdk", body, replicate=1)),
            (
                "SDK's RESP add (the integrations')",
                lambda: adds.add_job("one-resp", body, replicate=1),
            ),
            ("bare ADDJOB on a socket", raw),
        ):
            for _ in range(min(200, calls)):  # warm-up: connections made, code loaded
                call()
            node0, cpu0, t0 = cpu_seconds(node.pid), time.process_time(), time.perf_counter()
            for _ in range(calls):
                call()
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            out[name] = (
                wall / calls * 1e6,
                cpu / calls * 1e6,
                (cpu_seconds(node.pid) - node0) / calls * 1e6,
            )
    return out


def one_size(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    with running(disq_nodes(Build.this(), n=n), False, Path(tempfile.mkdtemp(dir=tmp))) as lab:
        for name in ROWS:
            self0 = os.times()
            with cpu_window(pids(lab)) as window:
                if name.startswith("resp-"):
                    res = resp_row(name.removeprefix("resp-"), lab, args.seconds)
                else:
                    res = sdk_row("add" if name == "sdk-addjobs" else "get", lab, args)
            self1 = os.times()
            client_s = (self1.children_user + self1.children_system) - (
                self0.children_user + self0.children_system
            )
            res["ops_per_s"] = res["ops"] / max(res["seconds"], 1e-9)
            res["node_cpu_pct"] = [100 * c / window.wall_s for c in window.server_cpu_s]
            res["client_cpu_pct"] = 100 * client_s / window.wall_s
            res["machine_busy_pct"] = window.machine_busy_pct
            rows[name] = res
            log(f"{n} node(s) {name}: {res['ops_per_s']:,.0f} ops/s, errors {res['errors']}")
            if lab.check_crashes():
                raise RuntimeError(f"a node exited:\n{lab.node(0).log_tail(5)}")
        if n == args.one_at_a_time_nodes:
            rows["one at a time"] = one_at_a_time(lab, args.calls)
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, help="per row (default 3; quick 1)")
    p.add_argument("--quick", action="store_true", help="1 s rows, the 1-node cluster only")
    p.add_argument("--repeat", type=int, default=1, help="runs per cluster size (median)")
    p.add_argument("--sizes", default="1,3", help="cluster sizes (default %(default)s)")
    p.add_argument("--batch", type=int, default=500, help="jobs per AddJobs / GetJobs call")
    p.add_argument("--tasks", type=int, default=4, help="calls in flight per node")
    p.add_argument("--calls", type=int, default=2000, help="one-at-a-time adds per path")


def run(args: argparse.Namespace, report: Report) -> None:
    args.seconds = args.seconds or (1.0 if args.quick else 3.0)
    sizes = [1] if args.quick else [int(s) for s in args.sizes.split(",")]
    args.calls = 200 if args.quick else args.calls
    args.one_at_a_time_nodes = sizes[-1]
    table = report.table(
        f"batch {args.batch}, {args.tasks} calls in flight per node, {args.seconds:g} s rows, "
        f"REPLICATE 1, AOF off; RESP: 50 connections x pipeline 16; median of {args.repeat}",
        [
            "nodes / row",
            "ops/s",
            "runs",
            "node CPU %",
            "client CPU %",
            "machine busy %",
            "SDK / RESP",
        ],
    )
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        for n in sizes:
            runs = [one_size(n, args, Path(tmp)) for _ in range(args.repeat)]
            med = {name: median(r[name]["ops_per_s"] for r in runs) for name in ROWS}
            report.raw[f"{n} nodes"] = runs
            for name in ROWS:
                last = runs[-1][name]
                table.add(
                    f"{n} / {name}",
                    fmt_int(med[name]),
                    ", ".join(f"{r[name]['ops_per_s'] / 1000:.1f}k" for r in runs),
                    "/".join(f"{c:.0f}" for c in last["node_cpu_pct"]),
                    f"{last['client_cpu_pct']:.0f}",
                    f"{last['machine_busy_pct']:.0f}",
                    ratio(med[name], med[SDK_OVER_RESP[name]]) if name in SDK_OVER_RESP else "-",
                )
    report.note("CPU columns from the last run; client: the load generator or the SDK process")
    single = report.table(
        f"one add at a time on node 0 of {sizes[-1]}, REPLICATE 1, 600-byte bodies, "
        f"{args.calls:,} calls each (last run)",
        [
            "path",
            "wall µs/call",
            "client CPU µs/call",
            "node 0 CPU µs/call",
            "client CPU x the RESP add",
        ],
    )
    paths = runs[-1]["one at a time"]
    resp_cpu = paths["SDK's RESP add (the integrations')"][1]
    for name, (wall, cpu, node_cpu) in paths.items():
        single.add(name, f"{wall:,.0f}", f"{cpu:,.0f}", f"{node_cpu:,.0f}", ratio(cpu, resp_cpu))


if __name__ == "__main__":
    # The SDK side: python -m bench.sdk MODE ADDRS QUEUE SECONDS BATCH TASKS
    mode, addrs, queue, seconds, batch, tasks = sys.argv[1:7]
    ns = argparse.Namespace(seconds=float(seconds), batch=int(batch), tasks=int(tasks))
    asyncio.run(_client(mode, addrs.split(","), queue, ns))
