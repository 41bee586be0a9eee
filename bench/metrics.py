"""What the Prometheus admin port costs the hot paths: the same rows with metrics off and on,
alternating, with a scraper fetching every open ``/metrics`` once a second throughout.

Rows: put/c50/p16/mem on a standalone node (beanstalkd's flags; on: ``--metrics-port``) and
addjob-r1/c50/p16/mem on 3 nodes (config files; off: ``metrics-port 0``, on: a port each),
each run on fresh servers as in ``bench beanstalk`` and ``bench cluster``. The scraper runs in
both settings, so both share its load (an "off" run's scrapes fail at once). Reported per
setting: ops/s of each run and their median, and the servers' CPU per op (steadier on shared
cores); on / off of the medians.

  python -m bench metrics --repeat 5
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import urllib.request
from pathlib import Path

from bench import beanstalk, cluster
from bench.common import HOST, Build, Cell, free_port, median
from bench.report import Report, fmt_int, ratio
from cluster.lab import Lab

HELP = "what the metrics port and a scraper cost: put and ADDJOB R1, metrics off and on"


class Scraper:
    """Fetches ``/metrics`` from every port in ``ports`` once a second until stopped."""

    def __init__(self) -> None:
        self.ports: set[int] = set()
        self.scrapes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            for port in list(self.ports):
                try:
                    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=1) as r:
                        r.read()
                    self.scrapes += 1
                except OSError:
                    pass

    def __enter__(self) -> Scraper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def put_system(on: bool, scraper: Scraper) -> beanstalk.System:
    build = Build.this()
    if not on:
        return beanstalk.disq_system(build, [], name="off")
    port = free_port()
    scraper.ports.add(port)
    return beanstalk.disq_system(build, [], ["--metrics-port", str(port)], name="on")


def addjob_nodes(on: bool, scraper: Scraper) -> cluster.Nodes:
    build = Build.this()

    def conf(_node: object) -> list[str]:
        if not on:
            return ["metrics-port 0"]
        port = free_port()
        scraper.ports.add(port)
        return [f"metrics-port {port}"]

    def lab(base: Path, aof: bool) -> Lab:
        lines = ["drain-timeout 0", *([] if aof else ["appendonly no"])]
        return Lab(
            cluster.NODES,
            base,
            node_timeout_ms=cluster.NODE_TIMEOUT_MS,
            extra_conf=lines,
            node_conf=conf,
            **build.lab_kwargs(),
        )

    return cluster.Nodes("on" if on else "off", lab, admin=on)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeat", type=int, default=3, help="rounds of off, on")
    p.add_argument("--seconds", type=float, help="per run (default 3 put, 5 ADDJOB; quick 1)")
    p.add_argument("--quick", action="store_true", help="1 s runs, one round")


def run(args: argparse.Namespace, report: Report) -> None:
    repeat = 1 if args.quick else args.repeat
    table = report.table(
        f"metrics off / on, a scraper once a second throughout, {repeat} rounds",
        ["row / metrics", "ops/s per run", "median ops/s", "server CPU µs/op (median)", "on / off"],
    )
    put_row = next(r for r in beanstalk.ROWS if r.id == "put/c50/p16/mem")
    add_row = cluster.row_by_id("addjob-r1/c50/p16/mem")
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp_name, Scraper() as scraper:
        tmp = Path(tmp_name)
        for row_id in ("put/c50/p16/mem", "addjob-r1/c50/p16/mem"):
            cells: dict[bool, list[Cell]] = {False: [], True: []}
            for _ in range(repeat):
                for on in (False, True):
                    scraper.ports.clear()
                    if row_id.startswith("put"):
                        seconds = args.seconds or (1.0 if args.quick else 3.0)
                        system = put_system(on, scraper)
                        cell = beanstalk.throughput_run(put_row, system, seconds, 0, tmp)
                    else:
                        seconds = args.seconds or (1.0 if args.quick else 5.0)
                        opts = cluster.RunOptions(seconds=seconds)
                        cell = cluster.run_row(add_row, addjob_nodes(on, scraper), opts, tmp)
                    if cell.error:
                        report.fail(f"{row_id}, metrics {'on' if on else 'off'}: {cell.error}")
                    cells[on].append(cell)
            ops = {on: [c.ops_per_s or 0.0 for c in v] for on, v in cells.items()}
            for on in (False, True):
                cpu = [c.result.server_cpu_us_per_op or 0.0 for c in cells[on] if c.result]
                table.add(
                    f"{row_id} / {'on + scraper' if on else 'off'}",
                    " / ".join(fmt_int(v) for v in ops[on]),
                    fmt_int(median(ops[on])),
                    f"{median(cpu):.1f}" if cpu else "-",
                    ratio(median(ops[True]), median(ops[False])) if on else "-",
                )
        report.note(f"the scraper fetched /metrics {scraper.scrapes} times")
