"""disq's beanstalk door beside beanstalkd 1.12: the same workloads, a fresh server per run.

Both servers start with beanstalkd's flags (``-l 127.0.0.1 -p PORT``, cluster.lab.FlagServer),
persistence off or on (disq ``-b DIR -f 1000``: the AOF fsynced every second; beanstalkd
``-b DIR``: its binlog fsynced every 50 ms), and are driven by bench/loadgen/loadgen.c with
100-byte bodies; runs alternate disq and beanstalkd, ``--repeat`` times (medians).

Rows, ``--rows`` picks them (comma-separated fnmatch patterns over the ids):
  WORKLOAD/cN/pK/PERSIST  put, reserve-delete, put-reserve-delete (4 tubes); 1 and 50
                          connections; pipeline 1 and 16; PERSIST mem or aof. reserve-delete
                          tubes are first filled with puts for as long as the run (8 conns x
                          pipeline 64), then drained.
  memory                  RSS growth per job after --jobs puts (no persistence)
  restart                 --jobs jobs in a -b dir, SIGTERM, start again: spawn -> a ``stats``
                          that shows them all ready

  python -m bench beanstalk
  python -m bench beanstalk --quick
  python -m bench beanstalk --rows 'put/c50/p16/*,memory' --repeat 3
  python -m bench beanstalk --fsync-compare --rows 'put/*/aof'   # the default beside -f 1000
"""

from __future__ import annotations

import argparse
import fnmatch
import shlex
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import servers
from bench.common import (
    HOST,
    BenchError,
    Build,
    Cell,
    beanstalk_load,
    exchange,
    log,
    measure_cell,
    measured,
    median_cell,
    rss_bytes,
)
from bench.report import Report, load_cells, ratio
from cluster.lab import FlagServer

HELP = "disq's beanstalk door beside beanstalkd: put, reserve, delete, memory, restart"

WORKLOADS = [("put", 1), ("reserve-delete", 1), ("put-reserve-delete", 4)]  # (name, tubes)
CONNS = (1, 50)
PIPELINES = (1, 16)
FILL_CONNS = 8  # the reserve-delete prefill and the memory/restart bulk loads: quick to load
FILL_PIPELINE = 64
# --fsync-compare: disq's default (fsync before every reply, group commit) beside everysec.
ALWAYS = "disq-always"
FSYNC_TARGET = 0.9


@dataclass(frozen=True)
class Row:
    workload: str
    tubes: int
    conns: int
    pipeline: int
    persist: bool

    @property
    def id(self) -> str:
        return f"{self.workload}/c{self.conns}/p{self.pipeline}/{'aof' if self.persist else 'mem'}"


ROWS = [
    Row(w, tubes, c, k, persist)
    for w, tubes in WORKLOADS
    for persist in (False, True)
    for c in CONNS
    for k in PIPELINES
]


@dataclass(frozen=True)
class System:
    """A server the rows run on: ``make(base_dir, binlog_dir or None)`` builds it."""

    name: str
    make: Callable[[Path, Path | None], FlagServer]


def disq_system(
    build: Build, persist_flags: list[str], extra_flags: Sequence[str] = (), name: str = "disq"
) -> System:
    """A standalone disq node of ``build`` (``-b DIR`` plus ``persist_flags`` when on)."""

    def make(base: Path, binlog: Path | None) -> FlagServer:
        flags = [*extra_flags, *(["-b", str(binlog), *persist_flags] if binlog else [])]
        return FlagServer(base, flags, node_cmd=build.disq_node(), env=build.env)

    return System(name, make)


def beanstalkd_system(persist_flags: list[str]) -> System:
    def make(base: Path, binlog: Path | None) -> FlagServer:
        server = servers.beanstalkd(base, binlog)
        server.flags += persist_flags if binlog else []
        return server

    return System("beanstalkd", make)


def stats(port: int) -> dict[str, str]:
    """beanstalk's ``stats``, parsed."""
    with socket.create_connection((HOST, port), timeout=10) as s:
        header, rest = exchange(s, b"stats\r\n").split(b"\r\n", 1)
        need = int(header.split()[1]) + 2
        while len(rest) < need:
            chunk = s.recv(65536)
            if not chunk:
                raise BenchError("connection closed")
            rest += chunk
    lines = rest[: need - 2].decode("utf-8", "replace").splitlines()
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines if ":" in ln)}


def throughput_run(row: Row, system: System, seconds: float, max_fill: int, tmp: Path) -> Cell:
    """One measured run of ``row`` on a fresh server of ``system``."""
    wd = Path(tempfile.mkdtemp(prefix=f"{system.name}-", dir=tmp))
    server = system.make(wd, wd / "data" if row.persist else None)

    def run() -> Cell:
        server.start()
        assert server.pid is not None
        extra: dict[str, object] = {}
        ops = 0
        if row.workload == "reserve-delete":
            fill = beanstalk_load(
                server.port,
                "put",
                FILL_CONNS,
                FILL_PIPELINE,
                tubes=row.tubes,
                ops=max_fill,
                seconds=seconds,
            )
            if fill.errors:
                raise BenchError(f"prefill had {fill.errors} errors")
            ops = extra["prefilled"] = fill.ops
        res = measured(
            [server.pid],
            lambda: beanstalk_load(
                server.port,
                row.workload,
                row.conns,
                row.pipeline,
                tubes=row.tubes,
                ops=ops,
                seconds=seconds,
            ),
        )
        if not server.is_running():
            raise BenchError(f"{system.name} died during the run:\n{server.log_tail()}")
        log(
            f"  {system.name:<10} {res.ops_per_s:>11,.0f} ops/s  p50 {res.p50_us:,} us  "
            f"p99 {res.p99_us:,} us  errors {res.errors}  server CPU {res.server_cpu_pct[0]:.0f}%"
        )
        return Cell(result=res, extra=extra)

    try:
        return measure_cell(system.name, run)
    finally:
        server.stop()
        shutil.rmtree(wd, ignore_errors=True)


def bulk_put(server: FlagServer, jobs: int) -> None:
    res = beanstalk_load(
        server.port, "put", FILL_CONNS, FILL_PIPELINE, ops=jobs, seconds=None, tube_prefix="bulk-"
    )
    ready = int(stats(server.port).get("current-jobs-ready", "-1"))
    if res.errors or ready != jobs:
        raise BenchError(f"bulk put: {ready:,} of {jobs:,} jobs ready, {res.errors} errors")


def memory_run(system: System, jobs: int, tmp: Path) -> Cell:
    """RSS growth per job after ``jobs`` puts, no persistence."""
    wd = Path(tempfile.mkdtemp(prefix=f"{system.name}-mem-", dir=tmp))
    server = system.make(wd, None)

    def run() -> Cell:
        server.start()
        assert server.pid is not None
        base = rss_bytes(server.pid)
        bulk_put(server, jobs)
        per_job = (rss_bytes(server.pid) - base) / jobs
        log(f"  {system.name:<10} {per_job:.0f} B/job ({base / 2**20:.1f} MiB before)")
        return Cell(extra={"bytes_per_job": per_job})

    try:
        return measure_cell(system.name, run)
    finally:
        server.stop()
        shutil.rmtree(wd, ignore_errors=True)


def restart_run(system: System, jobs: int, timeout_s: float, tmp: Path) -> Cell:
    """``jobs`` jobs in a -b dir, a clean stop, then spawn -> every job ready again."""
    wd = Path(tempfile.mkdtemp(prefix=f"{system.name}-restart-", dir=tmp))
    server = system.make(wd, wd / "data")

    def run() -> Cell:
        server.start()
        bulk_put(server, jobs)
        _, graceful = server.stop(timeout=60)
        if not graceful:
            raise BenchError("the server needed SIGKILL after SIGTERM")
        size = sum(f.stat().st_size for f in (wd / "data").rglob("*") if f.is_file())
        t0 = time.monotonic()
        server.spawn()
        deadline = t0 + timeout_s
        while True:
            try:
                if int(stats(server.port).get("current-jobs-ready", "-1")) >= jobs:
                    break
            except (OSError, BenchError, ValueError, IndexError):
                pass
            if not server.is_running() or time.monotonic() > deadline:
                raise BenchError(f"not back with {jobs:,} jobs:\n{server.log_tail()}")
            time.sleep(0.002)
        secs = time.monotonic() - t0
        log(
            f"  {system.name:<10} restart with {jobs:,} jobs: {secs:.3f} s ({size / 2**20:.0f} MiB)"
        )
        return Cell(extra={"restart_s": secs, "data_bytes": size})

    try:
        return measure_cell(system.name, run)
    finally:
        server.stop()
        shutil.rmtree(wd, ignore_errors=True)


def selected(patterns: str, ids: list[str]) -> list[str]:
    """The ids that one of the comma-separated fnmatch ``patterns`` matches, in order."""
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    return [i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in pats)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", default="*", help="fnmatch patterns over row ids (default: all)")
    p.add_argument("--quick", action="store_true", help="0.6 s runs, 200,000 jobs: a minute")
    p.add_argument("--seconds", type=float, help="seconds per run (default 3; quick 0.6)")
    p.add_argument("--repeat", type=int, default=1, help="runs per server and row (median)")
    p.add_argument(
        "--jobs", type=int, help="memory/restart jobs (default 1,000,000; quick 200,000)"
    )
    p.add_argument("--max-fill", type=int, default=5_000_000, help="reserve-delete prefill cap")
    p.add_argument("--restart-timeout", type=float, default=600.0, help="seconds")
    p.add_argument("--only", choices=["disq", "beanstalkd"], help="run one of the servers")
    p.add_argument("--disq-persist-flags", default="-f 1000", help="after -b DIR (%(default)s)")
    p.add_argument("--beanstalkd-persist-flags", default="", help="after -b DIR (none)")
    p.add_argument(
        "--fsync-compare",
        action="store_true",
        help="disq's default (-b DIR alone: an fsync covers every reply, group commit) beside "
        "disq with --disq-persist-flags (everysec), instead of beanstalkd: the aof rows' price",
    )


def run(args: argparse.Namespace, report: Report) -> None:
    seconds = args.seconds or (0.6 if args.quick else 3.0)
    jobs = args.jobs or (200_000 if args.quick else 1_000_000)
    versus = ("disq", "beanstalkd")
    if args.fsync_compare:
        build = Build.this()
        systems = [
            disq_system(build, shlex.split(args.disq_persist_flags)),
            disq_system(build, [], name=ALWAYS),
        ]
        versus = (ALWAYS, "disq")
        report.note(f"reference: disq with -b DIR {args.disq_persist_flags} (disq)")
    else:
        systems = [
            disq_system(Build.this(), shlex.split(args.disq_persist_flags)),
            beanstalkd_system(shlex.split(args.beanstalkd_persist_flags)),
        ]
    systems = [s for s in systems if args.only in (None, s.name)]
    if any(s.name == "beanstalkd" for s in systems):
        servers.ensure_beanstalkd()
        report.note(f"reference: {servers.beanstalkd_version()}")
    ids = selected(args.rows, [r.id for r in ROWS] + ["memory", "restart"])
    with tempfile.TemporaryDirectory(prefix="bench-beanstalk-") as tmp_name:
        tmp = Path(tmp_name)
        rows = [r for r in ROWS if r.id in ids]
        if rows:
            _throughput(rows, systems, seconds, args, report, tmp, versus)
        extras = [x for x in ("memory", "restart") if x in ids and not args.fsync_compare]
        if extras:
            _memory_and_restart(extras, systems, jobs, args.restart_timeout, report, tmp)
    report.note(
        f"disq: `disq-node -l {HOST} -p PORT`, persistence `-b DIR {args.disq_persist_flags}`; "
        f"beanstalkd: `beanstalkd -l {HOST} -p PORT`, persistence `-b DIR "
        f"{args.beanstalkd_persist_flags}`; reserve-delete prefilled for {seconds:g} s "
        f"({FILL_CONNS} conns x pipeline {FILL_PIPELINE}); latency: first command sent -> "
        "final reply; CPU µs/op: the server's utime + stime over the run / ops"
    )


def _ratio_columns(systems: list[System], versus: tuple[str, str]) -> list[str]:
    if len(systems) != 2:
        return []
    return [f"{versus[0]} / {versus[1]}", *(["target"] if versus[0] == ALWAYS else [])]


def _throughput(
    rows: list[Row],
    systems: list[System],
    seconds: float,
    args: argparse.Namespace,
    report: Report,
    tmp: Path,
    versus: tuple[str, str] = ("disq", "beanstalkd"),
) -> None:
    names = [s.name for s in systems]
    cols = [f"{n} {c}" for n in names for c in ("ops/s", "p50 / p99 µs", "CPU µs/op")]
    table = report.table(
        f"{seconds:g} s per run, 100-byte bodies, median of {args.repeat}",
        ["row", *cols, *_ratio_columns(systems, versus)],
    )
    for i, row in enumerate(rows, 1):
        log(f"row {i}/{len(rows)}: {row.id}")
        runs: dict[str, list[Cell]] = {n: [] for n in names}
        for _ in range(args.repeat):  # alternating: a drift of the machine hits both
            for s in systems:
                runs[s.name].append(throughput_run(row, s, seconds, args.max_fill, tmp))
        cells = {n: median_cell(c) for n, c in runs.items()}
        report.raw[row.id] = {n: c.result.raw if c.result else c.error for n, c in cells.items()}
        for n, c in cells.items():
            if c.error:
                report.fail(f"{row.id} on {n}: {c.error}")
        line = [row.id, *(x for n in names for x in load_cells(cells[n]))]
        if len(systems) == 2:
            ours, theirs = cells[versus[0]].ops_per_s, cells[versus[1]].ops_per_s
            line.append(ratio(ours, theirs))
            if versus[0] == ALWAYS:
                met = ours is not None and bool(theirs) and ours / theirs >= FSYNC_TARGET
                line.append(f"{'met' if met else 'not met'} ({FSYNC_TARGET:g})")
        table.add(*line)


def _memory_and_restart(
    extras: Sequence[str],
    systems: list[System],
    jobs: int,
    restart_timeout_s: float,
    report: Report,
    tmp: Path,
) -> None:
    table = report.table(
        f"{jobs:,} jobs of 100 bytes",
        ["row", *(s.name for s in systems), *(["disq / beanstalkd"] if len(systems) == 2 else [])],
    )
    for extra in extras:
        log(f"row: {extra} ({jobs:,} jobs)")
        if extra == "memory":
            cells = {s.name: memory_run(s, jobs, tmp) for s in systems}
            label, key, fmt = "memory per job, no persistence (B)", "bytes_per_job", "{:,.0f}"
        else:
            cells = {s.name: restart_run(s, jobs, restart_timeout_s, tmp) for s in systems}
            label, key, fmt = "restart: spawn -> every job ready (s)", "restart_s", "{:.2f}"
        values: dict[str, float | None] = {n: c.extra.get(key) for n, c in cells.items()}
        for n, c in cells.items():
            if c.error:
                report.fail(f"{extra} on {n}: {c.error}")
        shown = ["FAIL" if v is None else fmt.format(v) for v in values.values()]
        ratios = [ratio(values["disq"], values["beanstalkd"])] if len(systems) == 2 else []
        table.add(label, *shown, *ratios)
