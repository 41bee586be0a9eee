#!/usr/bin/env python3
"""Benchmark disq against real beanstalkd, side by side, with the same workloads.

Both servers are started as subprocesses on free ports on 127.0.0.1 with beanstalkd-style flags
(a fresh server and a fresh data directory per row), and driven by ``scripts/loadgen`` (a small
epoll-based C load generator, compiled on demand from ``scripts/loadgen.c``).

Rows:
  * put / reserve-delete / put-reserve-delete (4 tubes), conns 1 and 50, pipeline 1 and 16,
    100-byte bodies, each with persistence off and on (disq ``-b DIR -f 1000``, i.e. AOF with
    fsync every second, vs beanstalkd ``-b DIR``);
  * memory: RSS growth per job after putting 1,000,000 100-byte jobs (no persistence);
  * restart: with 1,000,000 jobs in a ``-b`` dir, SIGTERM the server, start it again and time
    spawn -> first ``stats`` reply showing all jobs ready.

Examples:
  .venv/bin/python scripts/bench_beanstalk.py
  .venv/bin/python scripts/bench_beanstalk.py --quick --markdown /tmp/bench.md
  .venv/bin/python scripts/bench_beanstalk.py --rows 'put/*,memory' --disq-cmd beanstalkd

Row ids for --rows (comma-separated fnmatch patterns): ``WORKLOAD/cN/pK/PERSIST`` with PERSIST
``mem`` or ``aof`` (e.g. ``put/c50/p16/mem``, ``reserve-delete/*/p1/*``), ``memory``,
``restart``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fnmatch
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

from bench_common import (  # noqa: E402
    BenchError,
    Cell,
    cpu_seconds,
    ensure_binary,
    fmt_int,
    load_fields,
    log,
    machine_info,
    median_cell,
    proc_tree,
    rss_bytes,
    run_json_tool,
    short_error,
)
from bench_common import LoadResult as BaseLoadResult  # noqa: E402

LOADGEN_SRC = ROOT / "bench" / "loadgen" / "loadgen.c"
LOADGEN_BIN = ROOT / "scripts" / "loadgen"
HOST = "127.0.0.1"

WORKLOADS: list[tuple[str, int]] = [  # (workload, tubes)
    ("put", 1),
    ("reserve-delete", 1),
    ("put-reserve-delete", 4),
]
CONNS = [1, 50]
PIPELINES = [1, 16]
BODY = 100
# prefill / bulk-load shape (high concurrency so loading is quick)
FILL_CONNS = 8
FILL_PIPELINE = 64


# --------------------------------------------------------------------------------------------
# setup helpers


def ensure_beanstalkd(cmd: list[str]) -> None:
    """Install beanstalkd with apt-get if the default command is not on PATH."""
    if shutil.which(cmd[0]) is not None:
        return
    if cmd[0] != "beanstalkd":
        raise BenchError(f"beanstalkd command not found: {cmd[0]}")
    log("beanstalkd not found; installing it with apt-get")
    prefix: list[str] = []
    if os.geteuid() != 0 and shutil.which("sudo"):
        prefix = ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [*prefix, "apt-get", "install", "-y", "beanstalkd"]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run([*prefix, "apt-get", "update"], env=env, check=False)
        subprocess.run(install, env=env, check=True)
    if shutil.which("beanstalkd") is None:
        raise BenchError("beanstalkd still not found after apt-get install")


def ensure_loadgen(path: Path) -> Path:
    """Compile loadgen if the binary is missing or older than its source."""
    return ensure_binary(path, LOADGEN_BIN, LOADGEN_SRC)
    if path.exists() and path.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime:
        return path
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise BenchError("gcc not found (needed to build scripts/loadgen)")
    cmd = [cc, "-O2", "-o", str(path), str(LOADGEN_SRC)]
    log("compiling loadgen: " + shlex.join(cmd))
    subprocess.run(cmd, check=True)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def dir_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).stat().st_size
    return total


# --------------------------------------------------------------------------------------------
# beanstalk protocol bits used by the harness itself


def read_stats(sock: socket.socket, deadline: float) -> dict[str, str]:
    """Send `stats` on a connected socket and parse the YAML reply."""
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    sock.sendall(b"stats\r\n")
    buf = b""
    while b"\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    header, rest = buf.split(b"\r\n", 1)
    parts = header.split()
    if len(parts) != 2 or parts[0] != b"OK":
        raise BenchError(f"unexpected stats reply: {header!r}")
    need = int(parts[1]) + 2
    while len(rest) < need:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        rest += chunk
    stats: dict[str, str] = {}
    for line in rest[: need - 2].decode("utf-8", "replace").splitlines():
        if ":" in line and not line.startswith("---"):
            key, _, value = line.partition(":")
            stats[key.strip()] = value.strip()
    return stats


# --------------------------------------------------------------------------------------------
# servers


@dataclass
class ServerSpec:
    name: str
    cmd: list[str]
    persist_args: list[str]  # appended after `-b DIR` when persistence is on


@dataclass
class Server:
    spec: ServerSpec
    workdir: Path
    persist: bool
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    logfile: Path | None = None
    base_rss: int = 0
    spawn_count: int = 0

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    def argv(self) -> list[str]:
        argv = [*self.spec.cmd, "-l", HOST, "-p", str(self.port)]
        if self.persist:
            argv += ["-b", str(self.datadir), *self.spec.persist_args]
        return argv

    def spawn(self) -> None:
        """Start the process (without waiting for readiness)."""
        if not self.port:
            self.port = free_port()
        if self.persist:
            self.datadir.mkdir(parents=True, exist_ok=True)
        self.spawn_count += 1
        self.logfile = self.workdir / f"server-{self.spawn_count}.log"
        with open(self.logfile, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )

    def log_tail(self, n: int = 15) -> str:
        if self.logfile is None or not self.logfile.exists():
            return ""
        lines = self.logfile.read_text("utf-8", "replace").splitlines()[-n:]
        return "\n".join("    " + line for line in lines)

    def wait_stats(self, timeout: float, want_ready: int | None = None) -> dict[str, str]:
        """Poll `stats` until the server answers OK (and, if want_ready is given, until
        current-jobs-ready reaches it). Never sleeps a fixed time before the first attempt."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        sock: socket.socket | None = None
        last_err = ""
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise BenchError(
                        f"{self.spec.name} exited with code {self.proc.returncode} before "
                        f"becoming ready:\n{self.log_tail()}"
                    )
                try:
                    if sock is None:
                        sock = socket.create_connection((HOST, self.port), timeout=1.0)
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    stats = read_stats(sock, deadline)
                    if want_ready is None:
                        return stats
                    ready = int(stats.get("current-jobs-ready", "-1"))
                    if ready >= want_ready:
                        return stats
                    last_err = f"current-jobs-ready={ready}"
                except (OSError, BenchError, ValueError) as exc:
                    last_err = repr(exc)
                    if sock is not None:
                        sock.close()
                        sock = None
                time.sleep(0.002)
        finally:
            if sock is not None:
                sock.close()
        raise BenchError(
            f"{self.spec.name} not ready after {timeout:.0f} s ({last_err})\n{self.log_tail()}"
        )

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        self.wait_stats(timeout)
        assert self.proc is not None
        self.base_rss = rss_bytes(self.proc.pid)

    def stats(self) -> dict[str, str]:
        return self.wait_stats(10.0)

    def stop(self, timeout: float = 60.0) -> tuple[float, bool]:
        """SIGTERM and wait; SIGKILL on timeout. Returns (seconds to exit, graceful)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return 0.0, True
        pids = proc_tree(proc.pid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        graceful = True
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            graceful = False
            log(f"{self.spec.name} did not exit {timeout:.0f} s after SIGTERM; killing it")
            proc.kill()
            proc.wait()
        # leftover children the server started (if any)
        for p in pids[1:]:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        return time.monotonic() - t0, graceful


# --------------------------------------------------------------------------------------------
# loadgen


@dataclass
class LoadResult(BaseLoadResult):
    server_cpu_s: float = 0.0


def run_loadgen(
    loadgen: Path,
    port: int,
    workload: str,
    conns: int,
    pipeline: int,
    tubes: int,
    ops: int,
    seconds: float | None,
    tube_prefix: str = "tube-",
) -> LoadResult:
    cmd = [
        str(loadgen),
        "--host",
        HOST,
        "--port",
        str(port),
        "--conns",
        str(conns),
        "--pipeline",
        str(pipeline),
        "--ops",
        str(ops),
        "--workload",
        workload,
        "--tubes",
        str(tubes),
        "--body",
        str(BODY),
        "--tube-prefix",
        tube_prefix,
    ]
    if seconds is not None:
        cmd += ["--seconds", f"{seconds:g}"]
    raw, cpu = run_json_tool(cmd, seconds)
    return LoadResult(**load_fields(raw), loadgen_cpu_s=cpu)


# --------------------------------------------------------------------------------------------
# rows


@dataclass
class ThroughputRow:
    workload: str
    tubes: int
    conns: int
    pipeline: int
    persist: bool
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.workload}/c{self.conns}/p{self.pipeline}/{'aof' if self.persist else 'mem'}"


@dataclass
class ExtraRow:
    id: str  # "memory" / "restart"
    cells: dict[str, Cell] = field(default_factory=dict)


class Bench:
    def __init__(
        self, args: argparse.Namespace, specs: list[ServerSpec], loadgen: Path, tmp: Path
    ) -> None:
        self.args = args
        self.specs = specs
        self.loadgen = loadgen
        self.tmp = tmp
        self.duration: float = args.duration
        self.jobs: int = args.jobs
        self.counter = 0
        self.max_loadgen_cpu: tuple[float, str] = (0.0, "")

    def workdir(self, label: str) -> Path:
        self.counter += 1
        d = self.tmp / f"{self.counter:03d}-{label.replace('/', '_')}"
        d.mkdir(parents=True)
        return d

    def note_loadgen(self, res: LoadResult, label: str) -> None:
        pct = 100.0 * res.loadgen_cpu_s / max(res.seconds, 1e-9)
        if pct > self.max_loadgen_cpu[0]:
            self.max_loadgen_cpu = (pct, label)

    def run_throughput(self, row: ThroughputRow, spec: ServerSpec) -> Cell:
        wd = self.workdir(f"{spec.name}-{row.id}")
        server = Server(spec, wd, row.persist)
        try:
            server.start()
            assert server.proc is not None
            ops = 0
            if row.workload == "reserve-delete":
                fill = run_loadgen(
                    self.loadgen,
                    server.port,
                    "put",
                    FILL_CONNS,
                    FILL_PIPELINE,
                    row.tubes,
                    self.args.max_fill,
                    self.duration,
                )
                if fill.errors:
                    raise BenchError(f"prefill had {fill.errors} errors")
                ops = fill.ops
                log(f"  {spec.name}: prefilled {fill.ops:,} jobs in {fill.seconds:.2f} s")
            cpu0 = cpu_seconds(server.proc.pid)
            res = run_loadgen(
                self.loadgen,
                server.port,
                row.workload,
                row.conns,
                row.pipeline,
                row.tubes,
                ops,
                self.duration,
            )
            res.server_cpu_s = cpu_seconds(server.proc.pid) - cpu0
            if server.proc.poll() is not None:
                raise BenchError(f"{spec.name} died during the run:\n{server.log_tail()}")
            self.note_loadgen(res, f"{row.id} vs {spec.name}")
            log(
                f"  {spec.name:<10} {res.ops_per_s:>11,.0f} ops/s  p50 {res.p50_us:,} us  "
                f"p99 {res.p99_us:,} us  ops {res.ops:,} in {res.seconds:.2f} s  "
                f"errors {res.errors}  cpu: server {res.server_cpu_s / res.seconds:.0%} "
                f"loadgen {res.loadgen_cpu_s / res.seconds:.0%}"
            )
            return Cell(result=res)
        except (BenchError, OSError, subprocess.SubprocessError, ValueError) as exc:
            log(f"  {spec.name}: FAILED: {exc}")
            return Cell(error=short_error(exc))
        finally:
            server.stop()
            shutil.rmtree(wd, ignore_errors=True)

    def bulk_put(self, server: Server) -> LoadResult:
        res = run_loadgen(
            self.loadgen,
            server.port,
            "put",
            FILL_CONNS,
            FILL_PIPELINE,
            1,
            self.jobs,
            None,
            tube_prefix="bulk-",
        )
        if res.errors or res.ops != self.jobs:
            raise BenchError(f"bulk put: {res.ops:,} of {self.jobs:,} jobs, {res.errors} errors")
        stats = server.stats()
        ready = int(stats.get("current-jobs-ready", "-1"))
        if ready != self.jobs:
            raise BenchError(f"after bulk put, current-jobs-ready={ready}, want {self.jobs}")
        return res

    def run_memory(self, spec: ServerSpec) -> Cell:
        wd = self.workdir(f"{spec.name}-memory")
        server = Server(spec, wd, persist=False)
        try:
            server.start()
            assert server.proc is not None
            res = self.bulk_put(server)
            rss = rss_bytes(server.proc.pid)
            per_job = (rss - server.base_rss) / self.jobs
            log(
                f"  {spec.name:<10} RSS {server.base_rss / 2**20:.1f} MiB -> "
                f"{rss / 2**20:.1f} MiB: {per_job:.0f} B/job (put {res.ops_per_s:,.0f} ops/s)"
            )
            return Cell(
                extra={
                    "bytes_per_job": per_job,
                    "rss_base": server.base_rss,
                    "rss_after": rss,
                    "put_ops_per_s": res.ops_per_s,
                }
            )
        except (BenchError, OSError, subprocess.SubprocessError, ValueError) as exc:
            log(f"  {spec.name}: FAILED: {exc}")
            return Cell(error=short_error(exc))
        finally:
            server.stop()
            shutil.rmtree(wd, ignore_errors=True)

    def run_restart(self, spec: ServerSpec) -> Cell:
        wd = self.workdir(f"{spec.name}-restart")
        server = Server(spec, wd, persist=True)
        try:
            server.start()
            assert server.proc is not None
            self.bulk_put(server)
            stop_s, graceful = server.stop()
            if not graceful:
                raise BenchError("server needed SIGKILL after SIGTERM")
            size = dir_size(server.datadir)
            t0 = time.monotonic()
            server.spawn()
            server.wait_stats(self.args.restart_timeout, want_ready=self.jobs)
            secs = time.monotonic() - t0
            log(
                f"  {spec.name:<10} restart with {self.jobs:,} jobs: {secs:.3f} s "
                f"(data dir {size / 2**20:.1f} MiB, shutdown took {stop_s:.2f} s)"
            )
            return Cell(extra={"restart_s": secs, "data_bytes": size, "stop_s": stop_s})
        except (BenchError, OSError, subprocess.SubprocessError, ValueError) as exc:
            log(f"  {spec.name}: FAILED: {exc}")
            return Cell(error=short_error(exc))
        finally:
            server.stop()
            shutil.rmtree(wd, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# output


def fmt_cell_ops(cell: Cell | None) -> tuple[str, str]:
    if cell is None:
        return "-", "-"
    if cell.error is not None or cell.result is None:
        return "FAIL", "-"
    r = cell.result
    ops = fmt_int(r.ops_per_s)
    if r.errors:
        ops += f" ({r.errors:,} errors)"
    return ops, f"{fmt_int(r.p50_us)} / {fmt_int(r.p99_us)}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def render(
    rows: list[ThroughputRow],
    extras: list[ExtraRow],
    names: list[str],
    jobs: int,
) -> str:
    disq, bs = names[0], names[1] if len(names) > 1 else names[0]
    out: list[str] = []
    if rows:
        hdr = ["workload", "conns", "pipeline", "persistence"]
        for n in names:
            hdr += [f"{n} ops/s", f"{n} p50 / p99 (µs)"]
        if len(names) > 1:
            hdr.append(f"{disq} / {bs}")
        out.append("| " + " | ".join(hdr) + " |")
        align = ["---", "---:", "---:", "---"] + ["---:"] * (len(hdr) - 4)
        out.append("| " + " | ".join(align) + " |")
        for row in rows:
            cols = [
                row.workload + (f" ({row.tubes} tubes)" if row.tubes > 1 else ""),
                str(row.conns),
                str(row.pipeline),
                "on" if row.persist else "off",
            ]
            vals: list[float | None] = []
            for n in names:
                cell = row.cells.get(n)
                cols += list(fmt_cell_ops(cell))
                vals.append(
                    cell.result.ops_per_s if cell and cell.result and not cell.error else None
                )
            if len(names) > 1:
                cols.append(ratio(vals[0], vals[1]))
            out.append("| " + " | ".join(cols) + " |")
    if extras:
        if out:
            out.append("")
        hdr = ["metric", *names]
        if len(names) > 1:
            hdr.append(f"{disq} / {bs}")
        out.append("| " + " | ".join(hdr) + " |")
        out.append("| " + " | ".join(["---"] + ["---:"] * (len(hdr) - 1)) + " |")
        for ex in extras:
            if ex.id == "memory":
                label = f"memory per job ({jobs:,} x {BODY} B jobs, no persistence)"
                key, unit = "bytes_per_job", "B"
            else:
                label = f"restart with {jobs:,} jobs (persistence on): spawn -> all jobs ready"
                key, unit = "restart_s", "s"
            cols = [label]
            vals = []
            for n in names:
                cell = ex.cells.get(n)
                if cell is None:
                    cols.append("-")
                    vals.append(None)
                elif cell.error is not None:
                    cols.append("FAIL")
                    vals.append(None)
                else:
                    v = float(cell.extra[key])
                    vals.append(v)
                    if unit == "s":
                        size = cell.extra["data_bytes"] / 2**20
                        cols.append(f"{v:.2f} s ({size:,.0f} MiB on disk)")
                    else:
                        cols.append(f"{v:,.0f} B")
            if len(names) > 1:
                cols.append(ratio(vals[0], vals[1]))
            out.append("| " + " | ".join(cols) + " |")
    return "\n".join(out) + "\n"


def failures(rows: list[ThroughputRow], extras: list[ExtraRow]) -> list[str]:
    out = []
    for row in rows:
        for n, c in row.cells.items():
            if c.error:
                out.append(f"{row.id} / {n}: {c.error}")
    for ex in extras:
        for n, c in ex.cells.items():
            if c.error:
                out.append(f"{ex.id} / {n}: {c.error}")
    return out


def server_version(spec: ServerSpec) -> str:
    if Path(spec.cmd[0]).name == "beanstalkd":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([*spec.cmd, "-v"], capture_output=True, text=True, timeout=10)
            return out.stdout.strip() or out.stderr.strip()
    return ""


# --------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark disq against beanstalkd with the same workloads.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument(
        "--disq-cmd",
        default=str(ROOT / ".venv" / "bin" / "disq-node"),
        help="disq server command (gets -l/-p/-b flags appended); default %(default)s",
    )
    p.add_argument(
        "--disq-persist-args",
        default="-f 1000",
        help="extra disq args after -b DIR when persistence is on (%(default)s)",
    )
    p.add_argument("--beanstalkd-cmd", default="beanstalkd", help="beanstalkd command")
    p.add_argument(
        "--beanstalkd-persist-args",
        default="",
        help="extra beanstalkd args after -b DIR (default: none, i.e. fsync every 50 ms)",
    )
    p.add_argument("--only", choices=["disq", "beanstalkd"], help="run just one of the servers")
    p.add_argument(
        "--quick",
        action="store_true",
        help="short runs (~1 minute in total): 0.6 s per run, 200,000 jobs for the "
        "memory/restart rows",
    )
    p.add_argument(
        "--rows",
        default="*",
        help="comma-separated fnmatch patterns over row ids, e.g. 'put/*,memory'",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds per throughput run (default 3, or 0.6 with --quick)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="jobs for the memory/restart rows (default 1,000,000; 200,000 quick)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each throughput row N times per server (interleaved) and report the median run",
    )
    p.add_argument(
        "--max-fill",
        type=int,
        default=5_000_000,
        help="cap on jobs prefilled for reserve-delete rows",
    )
    p.add_argument("--restart-timeout", type=float, default=600.0)
    p.add_argument("--loadgen", type=Path, default=LOADGEN_BIN)
    p.add_argument("--markdown", type=Path, help="also write the tables to this markdown file")
    p.add_argument("--json", type=Path, help="write raw results as JSON to this file")
    args = p.parse_args(argv)
    if args.duration is None:
        args.duration = 0.6 if args.quick else 3.0
    if args.jobs is None:
        args.jobs = 200_000 if args.quick else 1_000_000
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    patterns = [p.strip() for p in args.rows.split(",") if p.strip()]

    def selected(row_id: str) -> bool:
        return any(fnmatch.fnmatchcase(row_id, pat) for pat in patterns)

    specs = [
        ServerSpec("disq", shlex.split(args.disq_cmd), shlex.split(args.disq_persist_args)),
        ServerSpec(
            "beanstalkd",
            shlex.split(args.beanstalkd_cmd),
            shlex.split(args.beanstalkd_persist_args),
        ),
    ]
    if args.only:
        specs = [s for s in specs if s.name == args.only]
    try:
        if any(s.name == "beanstalkd" for s in specs):
            ensure_beanstalkd(next(s for s in specs if s.name == "beanstalkd").cmd)
        loadgen = ensure_loadgen(args.loadgen.resolve())
    except (BenchError, subprocess.SubprocessError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    rows = [
        ThroughputRow(w, tubes, c, k, persist)
        for w, tubes in WORKLOADS
        for persist in (False, True)
        for c in CONNS
        for k in PIPELINES
    ]
    rows = [r for r in rows if selected(r.id)]
    extras = [ExtraRow(x) for x in ("memory", "restart") if selected(x)]
    if not rows and not extras:
        print(f"error: --rows {args.rows!r} selects nothing", file=sys.stderr)
        return 2

    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        log(f"warning: load average is {load_before:.2f} before starting; results will be noisy")
    started = datetime.datetime.now(datetime.UTC)
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="disq-bench-") as tmpname:
        bench = Bench(args, specs, loadgen, Path(tmpname))
        for i, row in enumerate(rows, 1):
            log(f"row {i}/{len(rows)}: {row.id}")
            runs: dict[str, list[Cell]] = {spec.name: [] for spec in specs}
            for _rep in range(args.repeat):  # servers interleaved, so drifting load hits both
                for spec in specs:
                    runs[spec.name].append(bench.run_throughput(row, spec))
            for name, cells in runs.items():
                row.cells[name] = median_cell(cells)
        for ex in extras:
            log(f"row: {ex.id} ({args.jobs:,} jobs)")
            for spec in specs:
                fn = bench.run_memory if ex.id == "memory" else bench.run_restart
                ex.cells[spec.name] = fn(spec)
    elapsed = time.monotonic() - t_start

    names = [s.name for s in specs]
    table = render(rows, extras, names, args.jobs)
    fails = failures(rows, extras)
    print()
    print(table, end="")
    if fails:
        print("\nFailures:\n" + "\n".join(f"- {f}" for f in fails))
    lg_pct, lg_row = bench.max_loadgen_cpu
    log(f"done in {elapsed:.0f} s; busiest loadgen run used {lg_pct:.0f}% of one core ({lg_row})")

    if args.markdown:
        exe = Path(sys.executable)
        with contextlib.suppress(ValueError):
            exe = exe.relative_to(ROOT)
        cmdline = shlex.join([str(exe), *sys.argv])
        bs_ver = next((server_version(s) for s in specs if s.name == "beanstalkd"), "")
        lines = [
            f"Command: `{cmdline}`",
            "",
            f"Date: {started:%Y-%m-%d %H:%M} UTC; machine: {machine_info()}"
            + (f"; {bs_ver}" if bs_ver else "")
            + f"; 1-min load average before the run: {load_before:.2f}",
            "",
        ]
        for s in specs:
            persist = shlex.join(["-b", "DIR", *s.persist_args])
            lines.append(
                f"- {s.name}: `{shlex.join(s.cmd)} -l {HOST} -p PORT` (persistence on: `{persist}`)"
            )
        lines += [
            f"- each throughput run lasts {args.duration:g} s on a fresh server "
            + (f"(median of {args.repeat} runs) " if args.repeat > 1 else "")
            + f"({BODY}-byte bodies, latency = first command sent -> final reply received); "
            f"reserve-delete tubes are prefilled for {args.duration:g} s with put "
            f"({FILL_CONNS} conns x pipeline {FILL_PIPELINE}) and then drained",
            f"- load generator: scripts/loadgen (C, epoll, single thread); busiest run used "
            f"{lg_pct:.0f}% of one core",
            "",
            table.rstrip("\n"),
        ]
        if fails:
            lines += ["", "Failures:", *[f"- {f}" for f in fails]]
        args.markdown.write_text("\n".join(lines) + "\n")
        log(f"wrote {args.markdown}")

    if args.json:

        def cell_json(c: Cell) -> dict[str, Any]:
            d: dict[str, Any] = {"error": c.error, **c.extra}
            if c.result is not None:
                d.update(
                    c.result.raw,
                    loadgen_cpu_s=c.result.loadgen_cpu_s,
                    server_cpu_s=c.result.server_cpu_s,
                )
            return d

        data = {
            "command": sys.argv,
            "repeat": args.repeat,
            "date": started.isoformat(),
            "duration": args.duration,
            "jobs": args.jobs,
            "rows": [{"id": r.id, **{n: cell_json(c) for n, c in r.cells.items()}} for r in rows],
            "extras": [
                {"id": e.id, **{n: cell_json(c) for n, c in e.cells.items()}} for e in extras
            ],
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
