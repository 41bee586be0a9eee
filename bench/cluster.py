"""Three disq nodes beside three Disque 1.0-rc1 nodes on Disque's protocol: ADDJOB and
GETJOB+ACKJOB, run by run, in one run.

Each run starts a fresh cluster under cluster/lab.py: 3 nodes from Disque config files (the
lab's lines, ``cluster-node-timeout 5000``, ``appendonly no`` for ``mem`` rows, AOF fsynced
every second for ``aof`` rows), joined with CLUSTER MEET; disq nodes also get an admin port of
their own and are loaded once it answers (its modules are imported after the ports serve).
Disque's nodes read the same lines. The load comes from bench/loadgen/resp_loadgen.c, its
connections round-robin over the nodes, 100-byte bodies, RETRY 60, ADDJOB timeout 5000 ms.
disq and Disque alternate run by run (disq first on odd runs, Disque first on even ones);
each row reports each system's median, their ratio and the target for that ratio.

Rows ``WORKLOAD/cN/pK/PERSIST`` (``--rows``: comma-separated fnmatch patterns):
  addjob-r1        ADDJOB ... REPLICATE 1
  addjob-r3        ADDJOB ... REPLICATE 3 (synchronous: the reply waits for 3 copies)
  addjob-r3-async  ADDJOB ... REPLICATE 3 ASYNC
  getjob-ackjob    GETJOB NOHANG COUNT 1 FROM q, then ACKJOB, on jobs prefilled with
                   REPLICATE 3 for --fill-factor times the run; ops = jobs consumed; a
                   connection stops when its node's queue is empty
at (1 conn, pipeline 1), (50, 1), (50, 16); PERSIST mem or aof. Default: every mem row and
the aof rows at 50 x 16.

Disque is /tmp/disque/src/disque-server (``--disque PATH``; ``--build-disque`` builds it
there from the pinned commit); without it disq runs alone and the log says how to get it.

  python -m bench cluster
  python -m bench cluster --quick --rows 'addjob-r1/c50/p16/mem'
  python -m bench cluster --repeat 3 --seconds 3 \\
      --rows 'addjob-r[13]/c50/p16/mem,getjob-ackjob/c50/p16/mem,addjob-r3/c1/p1/mem'
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench import servers
from bench.beanstalk import selected
from bench.common import (
    Build,
    Cell,
    LoadResult,
    free_port,
    http_answers,
    log,
    measure_cell,
    measured,
    median_cell,
    resp_load,
    wait_until,
)
from bench.report import Report, load_cells
from cluster.lab import Lab

HELP = "3 disq nodes beside 3 Disque nodes: ADDJOB R1/R3/R3 ASYNC, GETJOB+ACKJOB"

NODES = 3
NODE_TIMEOUT_MS = 5000
SHAPES = [(1, 1), (50, 1), (50, 16)]  # (conns, pipeline)
# The getjob-ackjob prefill: a multiple of NODES so every node gets jobs, and few commands in
# flight per node (deeper pipelines made peers flap to SUSPECT: -NOREPL).
FILL_CONNS = 48
FILL_PIPELINE = 2
DEFAULT_ROWS = "*/mem,*/c50/p16/aof"


@dataclass(frozen=True)
class Workload:
    id: str
    label: str
    loadgen: str  # resp_loadgen --workload
    replicate: int
    asynchronous: bool = False


WORKLOADS = [
    Workload("addjob-r1", "ADDJOB REPLICATE 1", "addjob", 1),
    Workload("addjob-r3", "ADDJOB REPLICATE 3 (sync)", "addjob", 3),
    Workload("addjob-r3-async", "ADDJOB REPLICATE 3 ASYNC", "addjob", 3, asynchronous=True),
    Workload("getjob-ackjob", "GETJOB+ACKJOB (REPLICATE 3 jobs)", "getjob-ackjob", 3),
]

# The project's targets for disq / Disque, measured side by side in one run.
TARGETS = {
    "addjob-r3/c50/p16/mem": 0.9,
    "addjob-r1/c50/p16/mem": 0.6,
    "getjob-ackjob/c50/p16/mem": 0.9,
    "addjob-r3/c1/p1/mem": 0.5,
}


# --fsync-compare: the default (always, group commit) beside everysec, and its target.
ALWAYS = "disq-always"
FSYNC_TARGET = 0.9


@dataclass(frozen=True)
class Row:
    workload: Workload
    conns: int
    pipeline: int
    aof: bool

    @property
    def id(self) -> str:
        return f"{self.workload.id}/c{self.conns}/p{self.pipeline}/{'aof' if self.aof else 'mem'}"


ROWS = [Row(w, c, k, aof) for w in WORKLOADS for aof in (False, True) for c, k in SHAPES]


def row_by_id(row_id: str) -> Row:
    return next(r for r in ROWS if r.id == row_id)


@dataclass(frozen=True)
class Nodes:
    """What a row's cluster runs: ``lab(base_dir, aof)`` makes it (not started)."""

    name: str
    lab: Callable[[Path, bool], Lab]
    admin: bool  # disq: an admin port per node, answering before the load starts


def disq_nodes(
    build: Build, name: str = "disq", extra_conf: tuple[str, ...] = (), n: int = NODES
) -> Nodes:
    def lab(base: Path, aof: bool) -> Lab:
        # drain-timeout 0: a stop hands no job to a peer (the rows do not time stops).
        conf = ["drain-timeout 0", *([] if aof else ["appendonly no"]), *extra_conf]
        return Lab(
            n,
            base,
            node_timeout_ms=NODE_TIMEOUT_MS,
            extra_conf=conf,
            node_conf=lambda nd: [f"metrics-port {free_port()}"],
            **build.lab_kwargs(),
        )

    return Nodes(name, lab, admin=True)


def disque_nodes(binary: Path) -> Nodes:
    def lab(base: Path, aof: bool) -> Lab:
        conf = [] if aof else ["appendonly no"]
        return Lab(
            NODES, base, node_timeout_ms=NODE_TIMEOUT_MS, node_cmd=[str(binary)], extra_conf=conf
        )

    return Nodes("Disque", lab, admin=False)


def admin_port(lab: Lab, i: int) -> int:
    for line in lab.node(i).conf_path.read_text().splitlines():
        if line.startswith("metrics-port "):
            return int(line.split()[1])
    raise ValueError(f"node {i} has no metrics-port line")


@contextmanager
def running(nodes: Nodes, aof: bool, base: Path) -> Iterator[Lab]:
    """A formed cluster of ``nodes``, stopped on the way out."""
    lab = nodes.lab(base, aof)
    try:
        lab.start()
        for i in range(lab.n) if nodes.admin else ():
            wait_until(partial(http_answers, admin_port(lab, i)), 60, f"node {i}'s admin port")
        yield lab
    finally:
        lab.stop_all()


def ports(lab: Lab) -> list[int]:
    return [nd.port for nd in lab.nodes]


def pids(lab: Lab) -> list[int]:
    return [nd.pid for nd in lab.nodes if nd.pid is not None]


@dataclass(frozen=True)
class RunOptions:
    seconds: float
    fill_factor: float = 6.0
    max_fill: int = 2_000_000
    queues: int = 1
    keep_dirs: bool = False


def prefill(lab: Lab, row: Row, opts: RunOptions) -> tuple[int, list[str]]:
    """getjob-ackjob rows: REPLICATE 3 jobs added for ``fill_factor`` times the run. Returns
    how many and what a report should say about it."""
    fill = resp_load(
        ports(lab),
        "addjob",
        FILL_CONNS,
        FILL_PIPELINE,
        replicate=row.workload.replicate,
        ops=opts.max_fill,
        seconds=opts.seconds * opts.fill_factor,
        queues=opts.queues,
    )
    if fill.ops == 0:
        raise RuntimeError(f"the prefill added no job ({fill.errors} errors)")
    log(f"  prefilled {fill.ops:,} jobs ({fill.ops_per_s:,.0f}/s, {fill.errors} errors)")
    notes = [f"prefill {fill.ops:,} jobs, {fill.errors:,} errors"] if fill.errors else []
    return fill.ops, notes


def run_load(lab: Lab, row: Row, opts: RunOptions, ops: int = 0) -> LoadResult:
    """The row's measured load on a formed cluster, with the nodes' CPU."""
    wl = row.workload
    return measured(
        pids(lab),
        lambda: resp_load(
            ports(lab),
            wl.loadgen,
            row.conns,
            row.pipeline,
            replicate=wl.replicate,
            asynchronous=wl.asynchronous,
            ops=ops,
            seconds=opts.seconds,
            queues=opts.queues,
        ),
    )


def run_row(row: Row, nodes: Nodes, opts: RunOptions, tmp: Path) -> Cell:
    """One measured run of ``row`` on a fresh cluster of ``nodes``."""
    base = Path(tempfile.mkdtemp(prefix=f"{nodes.name}-{row.id.replace('/', '_')}-", dir=tmp))

    def run() -> Cell:
        with running(nodes, row.aof, base) as lab:
            ops, notes = 0, list[str]()
            if row.workload.loadgen == "getjob-ackjob":
                ops, notes = prefill(lab, row, opts)
            res = run_load(lab, row, opts, ops)
            if lab.check_crashes():
                raise RuntimeError(f"a node exited during the run:\n{lab.node(0).log_tail(5)}")
        if res.raw.get("gave_up"):
            notes.append("stalled")
        if ops and (res.seconds < 0.8 * opts.seconds or res.ops >= ops):
            # Every queue ran dry: the figure includes the drain's tail (raise --fill-factor).
            notes.append(f"all {res.ops:,} jobs consumed in {res.seconds:.2f} s: a lower bound")
        cpus = "/".join(f"{p:.0f}" for p in res.server_cpu_pct)
        log(
            f"  {nodes.name}: {res.ops_per_s:,.0f} ops/s, p50 {res.p50_us:,} us, errors "
            f"{res.errors}, node CPU % {cpus}, machine {res.machine_busy_pct:.0f}% busy"
        )
        return Cell(result=res, extra={"notes": notes})

    try:
        return measure_cell(f"{row.id} on {nodes.name}", run)
    finally:
        if opts.keep_dirs:
            log(f"  kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", default=DEFAULT_ROWS, help="fnmatch patterns (%(default)r; '*': all)")
    p.add_argument("--quick", action="store_true", help="1 s runs")
    p.add_argument("--seconds", type=float, help="seconds per measured run (default 5; quick 1)")
    p.add_argument("--repeat", type=int, default=1, help="runs per system and row (median)")
    p.add_argument("--queues", type=int, default=1, help="connection c uses queue-<c %% queues>")
    p.add_argument("--fill-factor", type=float, default=6.0, help="getjob-ackjob prefill, x run")
    p.add_argument("--max-fill", type=int, default=2_000_000, help="cap on jobs prefilled")
    p.add_argument("--keep-dirs", action="store_true", help="keep the nodes' dirs and logs")
    p.add_argument(
        "--fsync-compare",
        action="store_true",
        help="disq with appendfsync always (group commit) beside disq with everysec, "
        "instead of Disque: the aof rows' price of the default",
    )
    servers.add_disque_options(p)


def run(args: argparse.Namespace, report: Report) -> None:
    opts = RunOptions(
        seconds=args.seconds or (1.0 if args.quick else 5.0),
        fill_factor=args.fill_factor,
        max_fill=args.max_fill,
        queues=args.queues,
        keep_dirs=args.keep_dirs,
    )
    versus = ("disq", "Disque")
    if args.fsync_compare:
        build = Build.this()
        systems = [
            disq_nodes(build, extra_conf=("appendfsync everysec",)),
            disq_nodes(build, ALWAYS, extra_conf=("appendfsync always",)),
        ]
        versus = (ALWAYS, "disq")
        report.note("reference: disq with appendfsync everysec (disq), the same config lines")
    else:
        systems = [disq_nodes(Build.this())]
        disque = servers.disque_from(args)
        if disque is not None:
            systems.append(disque_nodes(disque))
            report.note(f"reference: Disque at {disque}, the same config lines")
    rows = [row_by_id(i) for i in selected(args.rows, [r.id for r in ROWS])]
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        cells = side_by_side(rows, systems, opts, args.repeat, Path(tmp))
    render(report, rows, cells, [s.name for s in systems], opts, args.repeat, versus)


def side_by_side(
    rows: list[Row], systems: list[Nodes], opts: RunOptions, repeat: int, tmp: Path
) -> dict[str, dict[str, Cell]]:
    """row id -> system -> the median run; systems alternate run by run, first one first on
    odd runs and last on even ones, so a drift of the shared machine falls on both."""
    out: dict[str, dict[str, Cell]] = {}
    for i, row in enumerate(rows, 1):
        runs: dict[str, list[Cell]] = {s.name: [] for s in systems}
        for rep in range(repeat):
            for nodes in systems if rep % 2 == 0 else systems[::-1]:
                log(f"row {i}/{len(rows)}: {row.id} on {nodes.name} (run {rep + 1}/{repeat})")
                runs[nodes.name].append(run_row(row, nodes, opts, tmp))
        out[row.id] = {name: median_cell(c) for name, c in runs.items()}
    return out


def render(
    report: Report,
    rows: list[Row],
    cells: dict[str, dict[str, Cell]],
    names: list[str],
    opts: RunOptions,
    repeat: int,
    versus: tuple[str, str] = ("disq", "Disque"),
) -> None:
    per_system = [f"{n} {c}" for n in names for c in ("ops/s", "p50 / p99 µs", "node CPU µs/op")]
    ratio_cols = [f"{versus[0]} / {versus[1]}", "target"] if len(names) > 1 else []
    table = report.table(
        f"{NODES} nodes each, {opts.seconds:g} s runs, median of {repeat}, 100-byte bodies",
        ["row", *per_system, "disq node CPU % (machine busy %)", *ratio_cols],
    )
    for row in rows:
        by = cells[row.id]
        for name, c in by.items():
            if c.error:
                report.fail(f"{row.id} on {name}: {c.error}")
            report.raw.setdefault(row.id, {})[name] = c.result.raw if c.result else c.error
        disq = by["disq"].result
        busy = "-"
        if disq is not None:
            busy = "/".join(f"{p:.0f}" for p in disq.server_cpu_pct)
            busy += f" ({disq.machine_busy_pct:.0f}%)"
        line = [row.id, *(x for n in names for x in load_cells(by[n])), busy]
        if len(names) > 1:
            line += _versus(row, by[versus[0]], by[versus[1]], versus != ("disq", "Disque"))
        table.add(*line)
    report.note(
        "node CPU: utime + stime of each node process over the run (µs/op: all three nodes' "
        "CPU / ops; %: of one core); machine busy: every core, every process (/proc/stat)"
    )


def _versus(row: Row, disq: Cell, disque: Cell, fsync: bool = False) -> list[str]:
    """disq / Disque (or always / everysec) and whether the row's target is met (never with
    errors)."""
    target = FSYNC_TARGET if fsync else TARGETS.get(row.id)
    if disq.ops_per_s is None or not disque.ops_per_s:
        return ["-", "-" if target is None else "FAIL"]
    value = disq.ops_per_s / disque.ops_per_s
    if target is None:
        met = "-"
    elif disq.result is not None and disq.result.errors:
        met = f"no: errors (target {target:g})"
    else:
        met = f"{'met' if value >= target else 'not met'} ({target:g})"
    return [f"{value:.2f}", met]
