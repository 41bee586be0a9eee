"""A restarted node's first answer, beside beanstalkd restarted on its binlog.

A node is stopped and started again on its data dir; the time from the spawn to the first
reply on each of its ports is what a client, or an orchestrator's probe, waits. disq runs on a
Disque config file (cluster/lab.py; a beanstalk port and an admin port of its own) and is
timed on its three ports at once, each polled by a thread: RESP PING, beanstalk ``stats``,
gRPC health Check (an answer, even NOT_SERVING, counts). beanstalkd (``-b DIR``) is timed on
its port. Two data dirs: empty, and holding --jobs jobs (100-byte bodies: ADDJOB over RESP,
put on beanstalkd) that the restart replays; each filled once, then restarted run by run,
each server in turn, so a drift of the machine hits them alike.

Each run also reads, at the first answer, the CPU the server had used (every thread, at the
scheduler's resolution: what the machine's load does not change), and once every port
answered its RSS: over the empty dir's, per job, what the replayed jobs cost. Each empty-dir
run also times the floor: the same interpreter importing asyncio and exiting.

An empty dir is a lone node by default: no peer in its view, so its RESP and beanstalk ports
serve before its bus loads. ``--with-peer`` gives the node a peer first (a second node, met
once and left running), so a restart dials the peer before it answers a client.
``--before DIR``: another checkout's build, timed in the same runs (with its own peer).

  python -m bench restart --skip-large
  python -m bench restart --skip-large --with-peer --runs 11
  python -m bench restart --runs 5 --jobs 1000000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import servers
from bench.common import (
    ADDJOB_Q,
    PUT,
    Build,
    answers,
    cpu_seconds,
    fill,
    log,
    median,
    rss_bytes,
    thread_cpu_seconds,
)
from bench.report import Report, ratio
from cluster.lab import Lab, find_base_port

HELP = "a restarted node's first answer (empty dir, 1M jobs) beside beanstalkd -b"

POLL_S = 0.001
FIRST_CPU = "cpu to first answer"  # keys of a run's figures that are not a port's time
ALL_CPU = "cpu to every answer"
RSS = "rss"


def grpc_probe(port: int) -> Callable[[], bool]:
    """A health Check on a fresh channel each time: a channel kept across attempts would wait
    out gRPC's reconnect backoff instead."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    def probe() -> bool:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            try:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
            except grpc.RpcError as exc:
                return bool(exc.code() != grpc.StatusCode.UNAVAILABLE)
            return True

    return probe


def first_answers(
    spawn: Callable[[], int], alive: Callable[[], bool], probes: dict[str, Callable[[], bool]]
) -> dict[str, float]:
    """Spawn a server (``spawn`` returns its pid) and return, per probe, the seconds until it
    first answered, plus the CPU at the first answer and, once all answered, CPU and RSS."""
    out: dict[str, float] = {}
    lock = threading.Lock()
    start = time.perf_counter()
    pid = spawn()

    def poll(name: str, probe: Callable[[], bool]) -> None:
        while alive():
            if probe():
                with lock:
                    out[name] = time.perf_counter() - start
                    out.setdefault(FIRST_CPU, thread_cpu_seconds(pid))
                return
            time.sleep(POLL_S)

    threads = [threading.Thread(target=poll, args=item) for item in probes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if not set(probes) <= set(out):
        raise RuntimeError(f"no answer on {sorted(set(probes) - set(out))}")
    out[ALL_CPU], out[RSS] = cpu_seconds(pid), rss_bytes(pid)
    return out


@dataclass
class Subject:
    """A server restarted run by run: ``restart()`` times one restart and stops it again."""

    name: str
    restart: Callable[[], dict[str, float]]
    close: Callable[[], object]


def disq_subject(name: str, build: Build, base: Path, jobs: int, with_peer: bool) -> Subject:
    """Node 0 of a lab (node 1: its peer, with --with-peer), on its own data dir."""
    bs_ports = [find_base_port(1) for _ in range(2)]  # below the ephemeral range: kept free
    lab = Lab(
        2 if with_peer else 1,
        base,
        node_timeout_ms=3000,
        extra_conf=["drain-timeout 0"],  # a stop hands nothing to the peer: the dir stays
        node_conf=lambda nd: [
            f"beanstalk-port {bs_ports[nd.index]}",
            f"metrics-port {find_base_port(1)}",
        ],
        **build.lab_kwargs(),
    )
    lab.start()
    node = lab.node(0)
    if jobs:
        log(f"{name}: adding {jobs:,} jobs")
        fill(node.port, ADDJOB_Q, b"+D-", jobs)
    lab.stop(0)
    probes = {
        "RESP PING": lambda: answers(node.port, b"PING\r\n"),
        "beanstalk stats": lambda: answers(bs_ports[0], b"stats\r\n"),
        "gRPC health": grpc_probe(node.bus_port),
    }

    def restart() -> dict[str, float]:
        def spawn() -> int:
            lab.spawn(0)
            assert node.pid is not None
            return node.pid

        try:
            return first_answers(spawn, node.is_running, probes)
        finally:
            lab.stop(0)

    return Subject(name, restart, lab.stop_all)


def beanstalkd_subject(base: Path, jobs: int) -> Subject:
    server = servers.beanstalkd(base, base / "binlog")
    if jobs:
        server.start()
        log(f"beanstalkd: putting {jobs:,} jobs")
        fill(server.port, PUT, b"INSERTED", jobs)
        server.stop(timeout=120)

    def restart() -> dict[str, float]:
        def spawn() -> int:
            server.spawn()
            assert server.pid is not None
            return server.pid

        try:
            return first_answers(spawn, server.is_running, {"beanstalk stats": server.answers})
        finally:
            server.stop()

    return Subject("beanstalkd", restart, server.stop)


def floor(python: str) -> dict[str, float]:
    """What any asyncio server in Python pays first: spawn -> exit of ``import asyncio``."""
    start = time.perf_counter()
    subprocess.run([python, "-c", "import asyncio"], check=True, cwd="/")
    return {"spawn -> exit": time.perf_counter() - start}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--jobs", type=int, default=1_000_000, help="the large dir's jobs")
    p.add_argument("--skip-large", action="store_true", help="only the empty data dir")
    p.add_argument("--with-peer", action="store_true", help="the node has a peer in its view")
    p.add_argument("--before", type=Path, help="another checkout, timed in the same runs")
    p.add_argument("--quick", action="store_true", help="3 runs, 20,000 jobs")


def run(args: argparse.Namespace, report: Report) -> None:
    servers.ensure_beanstalkd()
    runs, jobs = (3, 20_000) if args.quick else (args.runs, args.jobs)
    builds = [("disq", Build.this())]
    if args.before:
        builds.append(("disq before", Build.checkout(args.before)))
        report.note(f"disq before: {args.before} ({builds[1][1].describe()})")
    empty_rss: dict[str, float] = {}
    for size in [0] if args.skip_large else [0, jobs]:
        with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp_name:
            tmp = Path(tmp_name)
            subjects: list[Subject] = []
            try:
                for i, (name, build) in enumerate(builds):
                    peer = args.with_peer and not size
                    subjects.append(disq_subject(name, build, tmp / f"disq{i}", size, peer))
                subjects.append(beanstalkd_subject(tmp / "beanstalkd", size))
                results: dict[str, list[dict[str, float]]] = {s.name: [] for s in subjects}
                floors: list[dict[str, float]] = []
                for k in range(runs):
                    log(f"{size:,} jobs: run {k + 1}/{runs}")
                    if not size:
                        floors.append(floor(sys.executable))
                    for s in subjects:
                        results[s.name].append(s.restart())
            finally:
                for s in subjects:
                    s.close()
        what = f"{size:,} jobs" if size else "an empty data dir"
        if not size and args.with_peer:
            what += ", the disq node with a peer in its view"
        _render(report, what, size, results, floors, empty_rss)


def _render(
    report: Report,
    what: str,
    size: int,
    results: dict[str, list[dict[str, float]]],
    floors: list[dict[str, float]],
    empty_rss: dict[str, float],
) -> None:
    ports = ["RESP PING", "beanstalk stats", "gRPC health"]
    runs_n = len(next(iter(results.values())))
    table = report.table(
        f"restart on {what}: spawn -> first answer, median (fastest-slowest) of {runs_n} runs",
        [
            "server",
            *(f"{p} ms" for p in ports),
            "first answer after the floor ms",
            "CPU to first answer ms",
            "RSS MiB" if not size else "RSS over the empty dir's, B/job",
            "x beanstalkd",
        ],
    )
    floor_ms = [r["spawn -> exit"] * 1000 for r in floors]
    if floors:
        report.note(f"floor (`python -c 'import asyncio'`, spawn -> exit): {_span(floor_ms)} ms")
    bs = median(r["beanstalk stats"] for r in results["beanstalkd"])
    for name, runs in results.items():
        cells = [_span([r[p] * 1000 for r in runs]) if p in runs[0] else "-" for p in ports]
        firsts = [min(r[p] for p in ports if p in r) for r in runs]
        after = "-"
        if floors and name != "beanstalkd":
            after = _span([f * 1000 - fl for f, fl in zip(firsts, floor_ms, strict=True)])
        rss = median(r[RSS] for r in runs)
        if not size:
            empty_rss[name] = rss
            mem = f"{rss / 2**20:.1f}"
        else:
            mem = f"{(rss - empty_rss[name]) / size:,.0f}" if name in empty_rss else "-"
        cpu = median(r[FIRST_CPU] for r in runs) * 1000
        table.add(
            name,
            *cells,
            after,
            f"{cpu:.1f}",
            mem,
            ratio(median(firsts), bs),
        )
    report.raw[what] = {"runs": results, "floor": floors}


def _span(values_ms: list[float]) -> str:
    return f"{median(values_ms):,.0f} ({min(values_ms):,.0f}-{max(values_ms):,.0f})"
