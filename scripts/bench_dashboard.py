#!/usr/bin/env python3
"""What an open dashboard costs a node: beanstalk put and ADDJOB throughput at 50
connections x pipeline 16, with and without a dashboard open and refreshing.

One node (``python -m disq.node_main``, in memory, every port on: beanstalk, RESP, gRPC and
the admin HTTP port with the dashboard) per run. "With the dashboard" runs a viewer beside
the load that behaves like one browser tab on the Queues page: it holds the live event
stream (``/dashboard/stream``, a sample every two seconds, as the page's EventSource does)
and loads the page again every ``--refresh-s`` seconds (10; the page itself plus the
``/api/queues`` fetch its script makes). ``--harsh`` is a much busier viewer: the Queues
page, the Cluster page and the JSON API every two seconds. The load comes from the C load
generators of scripts/bench_beanstalk.py (``loadgen``, put) and scripts/bench_cluster.py
(``resp_loadgen``, ADDJOB REPLICATE 1). Runs alternate without/with, ``--repeat`` times; the
table reports the medians and the ratio with/without (the issue's bar: within 5%).

``--cpu-only`` measures the cost without any load, which a busy machine disturbs far less
than throughput: one idle node, its CPU time (utime + stime of /proc/PID/stat) over
``--cpu-window-s`` seconds without a viewer, then over the same window with one; it prints
the node's CPU seconds per minute for both and the difference as a share of one core.

Examples:
  .venv/bin/python scripts/bench_dashboard.py
  .venv/bin/python scripts/bench_dashboard.py --duration 2 --repeat 1   # a quick check
  .venv/bin/python scripts/bench_dashboard.py --cpu-only                # CPU cost, no load
  .venv/bin/python scripts/bench_dashboard.py --cpu-only --harsh
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_beanstalk as bb  # noqa: E402
import bench_cluster as bc  # noqa: E402

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class Node:
    """One node with every port on, in a temporary directory."""

    def __init__(self, tmp: Path) -> None:
        self.bs, self.resp, self.grpc, self.http = (free_port() for _ in range(4))
        self.log = open(tmp / f"node-{self.bs}.log", "wb")  # closed in stop()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [
            sys.executable, "-m", "disq.node_main", "-l", HOST, "-p", str(self.bs),
            "--in-memory", "--resp-port", str(self.resp), "--grpc-port", str(self.grpc),
            "--metrics-port", str(self.http),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            cwd=tmp,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.http}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the node did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


TAB_PAGES = ("/queues", "/api/queues")  # a load of the Queues page: the page, then its fetch
HARSH_PAGES = ("/queues", "/", "/api/queues")
HARSH_REFRESH_S = 2.0


class Viewer:
    """A browser with the dashboard open: the event stream held, pages reloaded."""

    def __init__(self, node: Node, refresh_s: float, pages: tuple[str, ...] = TAB_PAGES) -> None:
        self.base = f"http://{HOST}:{node.http}/dashboard"
        self.refresh_s = refresh_s
        self.paths = pages
        self.stop_ev = threading.Event()
        self.pages = 0
        self.events = 0
        self.threads = [
            threading.Thread(target=self._stream, daemon=True),
            threading.Thread(target=self._pages, daemon=True),
        ]

    def __enter__(self) -> Viewer:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=20)

    def _stream(self) -> None:
        while not self.stop_ev.is_set():
            try:
                with urllib.request.urlopen(self.base + "/stream", timeout=20) as r:
                    for line in r:
                        if line.startswith(b"data:"):
                            self.events += 1
                        if self.stop_ev.is_set():
                            return
            except OSError:
                time.sleep(0.5)

    def _pages(self) -> None:
        while not self.stop_ev.wait(self.refresh_s):
            for path in self.paths:
                try:
                    with urllib.request.urlopen(self.base + path, timeout=20) as r:
                        r.read()
                    self.pages += 1
                except OSError:
                    pass


def one_run(args: argparse.Namespace, tmp: Path, workload: str, dashboard: bool) -> float:
    node = Node(tmp)
    try:
        if dashboard:
            viewer = Viewer(node, args.refresh_s, args.pages)
            with viewer:
                time.sleep(args.warmup_s)  # the sampler is running before the load starts
                ops = load(args, node, workload)
            bc_log(f"  viewer: {viewer.pages} pages, {viewer.events} stream events")
            return ops
        return load(args, node, workload)
    finally:
        node.stop()


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (/proc/PID/stat fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[11]) + int(fields[12])


def cpu_per_min(pid: int, window_s: float) -> float:
    """The process's CPU seconds over ``window_s`` seconds, scaled to a minute."""
    tick = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.monotonic(), cpu_ticks(pid)
    time.sleep(window_s)
    t1, c1 = time.monotonic(), cpu_ticks(pid)
    return (c1 - c0) / tick * 60.0 / (t1 - t0)


def prefill(node: Node, jobs: int) -> None:
    """``jobs`` ADDJOBs into queue ``q`` (pipelined, RESP), as a throughput run leaves it."""
    cmd = b"*6\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$5\r\nhello\r\n$1\r\n0\r\n"
    cmd += b"$9\r\nREPLICATE\r\n$1\r\n1\r\n"
    with socket.create_connection((HOST, node.resp), timeout=30) as s:
        f = s.makefile("rb")
        for start in range(0, jobs, 1000):
            n = min(1000, jobs - start)
            s.sendall(cmd * n)
            for _ in range(n):
                line = f.readline()
                if not line.startswith(b"+"):
                    raise RuntimeError(f"ADDJOB: {line!r}")


def cpu_only(args: argparse.Namespace, tmp: Path) -> int:
    """An idle node's CPU per minute without and with one viewer (no load)."""
    node = Node(tmp)
    try:
        pid = node.proc.pid
        if args.prefill:
            prefill(node, args.prefill)
        time.sleep(args.warmup_s)
        idle = cpu_per_min(pid, args.cpu_window_s)
        bc_log(f"without a viewer: {idle:.3f} CPU s/min")
        viewer = Viewer(node, args.refresh_s, args.pages)
        with viewer:
            time.sleep(args.warmup_s)  # the first page, the sampler started
            watched = cpu_per_min(pid, args.cpu_window_s)
        bc_log(f"with a viewer: {watched:.3f} CPU s/min ({viewer.pages} pages, "
               f"{viewer.events} stream events)")  # fmt: skip
    finally:
        node.stop()
    extra = watched - idle
    kind = "harsh" if args.harsh else f"one tab: stream + page every {args.refresh_s:g} s"
    state = f", {args.prefill} jobs queued" if args.prefill else ""
    print(f"| node CPU s/min (1 node, idle{state}, {args.cpu_window_s:g} s windows) | value |")
    print("|---|---:|")
    print(f"| without a viewer | {idle:.3f} |")
    print(f"| with a viewer ({kind}) | {watched:.3f} |")
    print(f"| the viewer's cost | {extra:.3f} s/min = {extra / 60.0 * 100:.2f}% of one core |")
    return 0


def load(args: argparse.Namespace, node: Node, workload: str) -> float:
    if workload == "put":
        res = bb.run_loadgen(args.bs_loadgen, node.bs, "put", 50, 16, 1, 0, args.duration)
    else:
        res = bc.run_loadgen(
            args.resp_loadgen, [node.resp], "addjob", 50, 16, 1, False, 0, args.duration, 1
        )
    if res.errors:
        bc_log(f"  {res.errors} errors")
    return float(res.ops_per_s)


def bc_log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    p.add_argument("--repeat", type=int, default=3, help="runs per cell (medians reported)")
    p.add_argument(
        "--refresh-s", type=float, default=None, help="the viewer's page loads (10; harsh: 2)"
    )
    p.add_argument(
        "--harsh", action="store_true", help="Queues, Cluster and API every 2 s, not one tab"
    )
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--workloads", default="put,addjob", help="put, addjob or both")
    p.add_argument("--cpu-only", action="store_true", help="the node's CPU cost, no load")
    p.add_argument("--cpu-window-s", type=float, default=60.0, help="--cpu-only's windows")
    p.add_argument(
        "--prefill", type=int, default=0, help="--cpu-only: jobs queued first (ADDJOB to q)"
    )
    args = p.parse_args(argv)
    args.pages = HARSH_PAGES if args.harsh else TAB_PAGES
    if args.refresh_s is None:
        args.refresh_s = HARSH_REFRESH_S if args.harsh else 10.0
    if args.cpu_only:
        tmp = Path(tempfile.mkdtemp(prefix="disq-bench-dash-"))
        try:
            return cpu_only(args, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    args.bs_loadgen = bb.ensure_loadgen(bb.LOADGEN_BIN)
    args.resp_loadgen = bc.ensure_loadgen(bc.LOADGEN_BIN)
    tmp = Path(tempfile.mkdtemp(prefix="disq-bench-dash-"))
    rows = []
    try:
        for workload in args.workloads.split(","):
            without: list[float] = []
            with_: list[float] = []
            for i in range(args.repeat):
                for dashboard, out in ((False, without), (True, with_)):
                    ops = one_run(args, tmp, workload, dashboard)
                    out.append(ops)
                    bc_log(f"{workload} run {i + 1} dashboard={dashboard}: {ops:,.0f} ops/s")
            a, b = statistics.median(without), statistics.median(with_)
            rows.append((workload, a, b, b / a if a else 0.0))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| workload (c50 p16, 1 node, mem) | without dashboard | with dashboard open | ratio |")
    print("|---|---:|---:|---:|")
    names = {"put": "beanstalk put", "addjob": "ADDJOB REPLICATE 1"}
    for workload, a, b, r in rows:
        print(f"| {names.get(workload, workload)} | {a:,.0f}/s | {b:,.0f}/s | {r:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
