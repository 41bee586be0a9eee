"""What an open dashboard costs a node: beanstalk put and ADDJOB at 50 connections x pipeline
16, with and without a dashboard open and refreshing, in one run.

One node per run (beanstalkd's flags, in memory, every port on: beanstalk, RESP, gRPC and the
admin port with the dashboard; cluster.lab.FlagServer). "With the dashboard" runs a viewer
beside the load that behaves like one browser tab on the Queues page: it holds the live event
stream (``/dashboard/stream``, a sample every two seconds, as the page's EventSource does)
and loads the page again every --refresh-s seconds (10; the page and the ``/api/queues``
fetch its script makes). ``--harsh`` is a much busier viewer: the Queues page, the Cluster
page and the JSON API every two seconds. Runs alternate without / with, --repeat times; the
table has the medians and with / without (the bar: within 5%).

``--cpu-only`` measures the cost without any load, which a busy machine disturbs far less:
one idle node's CPU time (utime + stime) over --cpu-window-s seconds without a viewer, then
over the same window with one; the node's CPU seconds a minute for both and the difference as
a share of one core.

  python -m bench dashboard
  python -m bench dashboard --cpu-only
  python -m bench dashboard --cpu-only --harsh --prefill 200000
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench.common import (
    HOST,
    Build,
    beanstalk_load,
    cpu_seconds,
    fill,
    free_port,
    http_answers,
    log,
    median,
    resp_load,
    resp_request,
    wait_until,
)
from bench.report import Report, fmt_int, ratio
from cluster.lab import FlagServer

HELP = "what an open dashboard costs a node: throughput and idle CPU, with and without"

TAB_PAGES = ("/queues", "/api/queues")  # a load of the Queues page: the page, then its fetch
HARSH_PAGES = ("/queues", "/", "/api/queues")
HARSH_REFRESH_S = 2.0
WORKLOADS = {"put": "beanstalk put", "addjob": "ADDJOB REPLICATE 1"}


class Node:
    """A node with every port on, started in ``base``."""

    def __init__(self, base: Path) -> None:
        self.resp, self.grpc, self.http = free_port(), free_port(), free_port()
        build = Build.this()
        flags = [
            "--in-memory",
            "--resp-port",
            str(self.resp),
            "--grpc-port",
            str(self.grpc),
            "--metrics-port",
            str(self.http),
        ]
        self.server = FlagServer(base, flags, node_cmd=build.disq_node(), env=build.env)
        self.server.start()
        # Its admin port's modules are imported after the door serves: wait for them.
        wait_until(lambda: http_answers(self.http), 60, "the admin port")

    @property
    def pid(self) -> int:
        assert self.server.pid is not None
        return self.server.pid

    def stop(self) -> None:
        self.server.stop()


class Viewer:
    """A browser with the dashboard open: the event stream held, pages reloaded."""

    def __init__(self, node: Node, refresh_s: float, pages: tuple[str, ...]) -> None:
        self.base = f"http://{HOST}:{node.http}/dashboard"
        self.refresh_s = refresh_s
        self.paths = pages
        self.stop = threading.Event()
        self.pages = self.events = 0
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._stream, self._load)]

    def __enter__(self) -> Viewer:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=20)

    def _stream(self) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.base + "/stream", timeout=20) as r:
                    for line in r:
                        if line.startswith(b"data:"):
                            self.events += 1
                        if self.stop.is_set():
                            return
            except OSError:
                self.stop.wait(0.5)

    def _load(self) -> None:
        while not self.stop.wait(self.refresh_s):
            for path in self.paths:
                try:
                    with urllib.request.urlopen(self.base + path, timeout=20) as r:
                        r.read()
                    self.pages += 1
                except OSError:
                    pass


def load(node: Node, workload: str, seconds: float) -> float:
    if workload == "put":
        res = beanstalk_load(node.server.port, "put", 50, 16, seconds=seconds)
    else:
        res = resp_load([node.resp], "addjob", 50, 16, replicate=1, seconds=seconds)
    if res.errors:
        log(f"  {res.errors} errors")
    return res.ops_per_s


def one_run(args: argparse.Namespace, tmp: Path, workload: str, viewer: bool) -> float:
    node = Node(Path(tempfile.mkdtemp(dir=tmp)))
    try:
        if not viewer:
            return load(node, workload, args.seconds)
        with Viewer(node, args.refresh_s, args.pages) as v:
            time.sleep(args.warmup_s)  # the page's sampler runs before the load starts
            ops = load(node, workload, args.seconds)
        log(f"  viewer: {v.pages} pages, {v.events} stream events")
        return ops
    finally:
        node.stop()


def cpu_per_min(pid: int, window_s: float) -> float:
    """The process's CPU seconds over a window of ``window_s`` seconds, scaled to a minute."""
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    time.sleep(window_s)
    return (cpu_seconds(pid) - c0) * 60.0 / (time.monotonic() - t0)


def cpu_only(args: argparse.Namespace, tmp: Path, report: Report) -> None:
    node = Node(tmp)
    try:
        if args.prefill:
            addjob = resp_request("ADDJOB", "q", "hello", "0", "REPLICATE", "1")
            fill(node.resp, addjob, b"+D-", args.prefill)
        time.sleep(args.warmup_s)
        idle = cpu_per_min(node.pid, args.cpu_window_s)
        log(f"without a viewer: {idle:.3f} CPU s/min")
        with Viewer(node, args.refresh_s, args.pages) as v:
            time.sleep(args.warmup_s)  # the first page, the sampler started
            watched = cpu_per_min(node.pid, args.cpu_window_s)
        log(f"with a viewer: {watched:.3f} CPU s/min ({v.pages} pages, {v.events} events)")
    finally:
        node.stop()
    kind = "harsh" if args.harsh else f"one tab: the stream, a page every {args.refresh_s:g} s"
    state = f", {args.prefill:,} jobs queued" if args.prefill else ""
    table = report.table(
        f"an idle node's CPU{state}, {args.cpu_window_s:g} s windows", ["viewer", "CPU s/min"]
    )
    table.add("none", f"{idle:.3f}")
    table.add(kind, f"{watched:.3f}")
    extra = watched - idle
    table.add("the viewer's cost", f"{extra:.3f} = {extra / 60.0 * 100:.2f}% of one core")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=10.0, help="per measured run")
    p.add_argument("--repeat", type=int, default=3, help="runs per cell (medians)")
    p.add_argument("--refresh-s", type=float, help="the viewer's page loads (10; harsh: 2)")
    p.add_argument("--harsh", action="store_true", help="Queues, Cluster and API every 2 s")
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--workloads", default="put,addjob", help="put, addjob or both")
    p.add_argument("--cpu-only", action="store_true", help="the node's CPU cost, no load")
    p.add_argument("--cpu-window-s", type=float, default=60.0, help="--cpu-only's windows")
    p.add_argument("--prefill", type=int, default=0, help="--cpu-only: jobs queued first")
    p.add_argument("--quick", action="store_true", help="2 s runs once; --cpu-only: 5 s windows")


def run(args: argparse.Namespace, report: Report) -> None:
    args.pages = HARSH_PAGES if args.harsh else TAB_PAGES
    args.refresh_s = args.refresh_s or (HARSH_REFRESH_S if args.harsh else 10.0)
    if args.quick:
        args.seconds, args.repeat, args.warmup_s, args.cpu_window_s = 2.0, 1, 1.0, 5.0
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp_name:
        tmp = Path(tmp_name)
        if args.cpu_only:
            cpu_only(args, tmp, report)
            return
        table = report.table(
            f"1 node, in memory, 50 conns x pipeline 16, {args.seconds:g} s runs, median of "
            f"{args.repeat}",
            [
                "workload",
                "without a viewer ops/s",
                "with the dashboard open ops/s",
                "with / without",
            ],
        )
        for workload in args.workloads.split(","):
            runs: dict[bool, list[float]] = {False: [], True: []}
            for i in range(args.repeat):
                for viewer in (False, True):
                    runs[viewer].append(one_run(args, tmp, workload, viewer))
                    log(f"{workload} run {i + 1}, viewer {viewer}: {runs[viewer][-1]:,.0f} ops/s")
            a, b = median(runs[False]), median(runs[True])
            table.add(WORKLOADS.get(workload, workload), fmt_int(a), fmt_int(b), ratio(b, a))
