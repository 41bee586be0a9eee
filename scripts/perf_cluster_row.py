#!/usr/bin/env python3
"""Where a node's CPU goes under one bench_cluster.py row: ``perf record`` on a live node.

Starts a 3-node cluster as scripts/bench_cluster.py does (disq by default, or Disque with
``--disque PATH``), drives one row's load with scripts/resp_loadgen, and records node 0 with
``perf record -g`` while it runs. Prints the top symbols (self time, ``perf report
--no-children``) and the node CPU per op of the run. mypyc's compiled functions show as C
symbols (``CPyDef_<module>___<Class>___<method>``), the interpreter's own work as
``_PyEval_EvalFrameDefault`` and friends: the split between compiled and interpreted code
that cProfile cannot see (it sees no compiled function).

    PYTHONPATH=$PWD .venv/bin/python scripts/perf_cluster_row.py addjob-r1 --pipeline 16
    .venv/bin/python scripts/perf_cluster_row.py addjob-r3 --conns 1 --pipeline 1 --top 40

Needs ``perf`` (linux-perf) and the permission to record another process.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

import bench_cluster as bc  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=[w.id for w in bc.WORKLOADS])
    p.add_argument("--conns", type=int, default=50)
    p.add_argument("--pipeline", type=int, default=16)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--node-cmd", default=f"{ROOT / '.venv' / 'bin' / 'python'} -m disq.node_main")
    p.add_argument("--disque", type=Path, help="profile Disque's node 0 instead")
    p.add_argument("--top", type=int, default=30, help="symbols to print")
    p.add_argument("--out", type=Path, help="keep perf.data here")
    p.add_argument(
        "--call-graph",
        default="dwarf,16384",
        help="perf's --call-graph (dwarf: libpython has no frame pointers); default %(default)s",
    )
    args = p.parse_args(argv)
    if shutil.which("perf") is None:
        print("error: perf not found", file=sys.stderr)
        return 2
    wl = next(w for w in bc.WORKLOADS if w.id == args.workload)
    cmd = [str(args.disque.resolve())] if args.disque else shlex.split(args.node_cmd)
    loadgen = bc.ensure_loadgen(bc.LOADGEN_BIN)
    with tempfile.TemporaryDirectory(prefix="disq-perf-row-") as tmpname:
        tmp = Path(tmpname)
        data = args.out or tmp / "perf.data"
        cluster = bc.Cluster(cmd, tmp, aof=False, admin=args.disque is None)
        try:
            cluster.start(60.0)
            if wl.loadgen == "getjob-ackjob":
                fill = bc.run_loadgen(
                    loadgen, cluster.ports, "addjob", bc.FILL_CONNS, bc.FILL_PIPELINE,
                    wl.replicate, False, 2_000_000, args.seconds * 4, 1,
                )  # fmt: skip
                bc.log(f"prefilled {fill.ops:,} jobs")
            node = cluster.nodes[0]
            assert node.proc is not None
            perf = subprocess.Popen(
                ["perf", "record", "-q", "--call-graph", args.call_graph, "-F", "499",
                 "-o", str(data),
                 "-p", str(node.proc.pid), "--", "sleep", f"{args.seconds:g}"],
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
            cpu0 = cluster.cpu()
            res = bc.run_loadgen(
                loadgen, cluster.ports, wl.loadgen, args.conns, args.pipeline,
                wl.replicate, wl.asynchronous, 0, args.seconds, 1,
            )  # fmt: skip
            perf.wait()
            cpu = [b - a for a, b in zip(cpu0, cluster.cpu(), strict=True)]
        finally:
            cluster.stop()
        per_op = 1e6 * sum(cpu) / max(res.ops, 1)
        print(
            f"{wl.label} c{args.conns} p{args.pipeline}: {res.ops_per_s:,.0f} ops/s, "
            f"errors {res.errors}, node CPU {per_op:.1f} us/op (3 nodes), "
            f"node 0 {1e6 * cpu[0] / max(res.ops, 1):.1f} us/op"
        )
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--no-children", "--stdio", "-g", "none",
             "--percent-limit", "0.3", "--sort", "dso,sym"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lines = [ln for ln in report.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
        print("\n".join(lines[: args.top]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
