"""Where a node's CPU goes under one ``bench cluster`` row: ``perf record`` on a live node 0.

Starts 3 nodes as ``bench cluster`` does, drives the row's load with resp_loadgen, and records
node 0 with ``perf record --call-graph`` while it runs; then the same on 3 Disque nodes (when
built) in the same run. Prints each one's top symbols (self time, ``perf report
--no-children``) and the nodes' CPU per op side by side. mypyc's compiled functions show as C
symbols (``CPyDef_<module>___<Class>___<method>``), the interpreter's own work as
``_PyEval_EvalFrameDefault`` and friends: the split between compiled and interpreted code
that cProfile cannot see. Needs ``perf`` and the permission to record another process.

  python -m bench profile addjob-r1
  python -m bench profile addjob-r3 --conns 1 --pipeline 1 --top 40
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench import servers
from bench.cluster import (
    WORKLOADS,
    Nodes,
    Row,
    RunOptions,
    disq_nodes,
    disque_nodes,
    prefill,
    run_load,
    running,
)
from bench.common import BenchError, Build, LoadResult, log
from bench.report import Report, fmt_int, ratio

HELP = "perf record of node 0 under one cluster row, disq and Disque"


def profile(
    row: Row, nodes: Nodes, args: argparse.Namespace, tmp: Path
) -> tuple[LoadResult, list[str]]:
    """The row's load on ``nodes``, node 0 recorded; (the load's result, perf's top lines)."""
    data = (args.out or tmp) / f"perf-{nodes.name}.data"
    opts = RunOptions(seconds=args.seconds, fill_factor=4.0)
    with running(nodes, False, Path(tempfile.mkdtemp(dir=tmp))) as lab:
        ops = prefill(lab, row, opts)[0] if row.workload.loadgen == "getjob-ackjob" else 0
        pid = lab.node(0).pid
        perf = subprocess.Popen(
            [
                "perf",
                "record",
                "-q",
                "--call-graph",
                args.call_graph,
                "-F",
                "499",
                "-o",
                str(data),
                "-p",
                str(pid),
                "--",
                "sleep",
                f"{args.seconds:g}",
            ],
            stdout=subprocess.DEVNULL,
        )
        res = run_load(lab, row, opts, ops)
        if perf.wait() != 0:
            raise BenchError(f"perf record failed (rc {perf.returncode})")
    report = subprocess.run(
        [
            "perf",
            "report",
            "-i",
            str(data),
            "--no-children",
            "--stdio",
            "-g",
            "none",
            "--percent-limit",
            "0.3",
            "--sort",
            "dso,sym",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [ln for ln in report.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    return res, lines[: args.top]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", choices=[w.id for w in WORKLOADS])
    p.add_argument("--conns", type=int, default=50)
    p.add_argument("--pipeline", type=int, default=16)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--top", type=int, default=30, help="symbols to print")
    p.add_argument("--out", type=Path, help="keep the perf.data files in this directory")
    p.add_argument(
        "--call-graph",
        default="dwarf,16384",
        help="perf's --call-graph (dwarf: libpython has no frame pointers); %(default)s",
    )
    servers.add_disque_options(p)
    p.add_argument("--quick", action="store_true", help="1 s, 10 symbols")


def run(args: argparse.Namespace, report: Report) -> None:
    if shutil.which("perf") is None:
        raise SystemExit("perf not found (linux-perf)")
    if args.quick:
        args.seconds, args.top = 1.0, 10
    row = Row(next(w for w in WORKLOADS if w.id == args.workload), args.conns, args.pipeline, False)
    systems = [disq_nodes(Build.this())]
    binary = servers.disque_from(args)
    if binary is not None:
        systems.append(disque_nodes(binary))
    results: dict[str, LoadResult] = {}
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        for nodes in systems:
            log(f"{row.id} on {nodes.name}, node 0 recorded")
            res, top = profile(row, nodes, args, Path(tmp))
            results[nodes.name] = res
            table = report.table(f"{nodes.name}: node 0's top symbols (self)", ["perf report"])
            for line in top:
                table.add(f"`{' '.join(line.split())}`")
    summary = report.table(
        f"{row.id}, {args.seconds:g} s",
        ["system", "ops/s", "node CPU µs/op (3 nodes)", "node 0 µs/op", "x Disque (µs/op)"],
    )
    disque_cpu = results["Disque"].server_cpu_us_per_op if "Disque" in results else None
    for name, r in results.items():
        node0 = 1e6 * r.server_cpu_s[0] / max(r.ops, 1)
        cpu = r.server_cpu_us_per_op
        summary.add(
            name, fmt_int(r.ops_per_s), f"{cpu or 0:.1f}", f"{node0:.1f}", ratio(cpu, disque_cpu)
        )
