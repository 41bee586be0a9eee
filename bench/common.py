"""What the subcommands share: the log, the C load generators (built on demand, run, their
JSON line read), a process tree's CPU and memory from /proc, medians, a few socket helpers,
and which build of disq a node runs.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOADGEN_SRC = ROOT / "bench" / "loadgen"
LOADGEN_BUILD = ROOT / "build" / "loadgen"  # make clean removes build/
HOST = "127.0.0.1"
BODY_BYTES = 100  # every workload's job body, as in the reference runs


def log(msg: str) -> None:
    """Progress on stderr; the report alone goes to stdout."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A run that could not be measured (a server that did not start, a generator's error)."""


def short_error(exc: BaseException) -> str:
    """The first line of an error and its last (a server log's last line), for a table cell."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [repr(exc)]
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 300 else text[:297] + "..."


# -- the C load generators ----------------------------------------------------------------------


def loadgen(name: str) -> Path:
    """``build/loadgen/<name>``, compiled from ``bench/loadgen/<name>.c`` when missing or older
    than its source or the header both generators include."""
    source = LOADGEN_SRC / f"{name}.c"
    binary = LOADGEN_BUILD / name
    newest = max(source.stat().st_mtime, (LOADGEN_SRC / "loadgen_common.h").stat().st_mtime)
    if binary.exists() and binary.stat().st_mtime >= newest:
        return binary
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise BenchError(f"no C compiler to build {source} (scripts/ensure_compiler.sh)")
    LOADGEN_BUILD.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-O2", "-Wall", "-o", str(binary), str(source)]
    log("compiling: " + shlex.join(cmd))
    subprocess.run(cmd, check=True)
    return binary


@dataclass
class LoadResult:
    """One load generator run; ``server_cpu_s`` (per server process) and
    ``machine_busy_pct`` are filled by :func:`measured` when the caller measures them."""

    ops: int
    seconds: float
    ops_per_s: float
    p50_us: int
    p99_us: int
    errors: int
    raw: dict[str, Any]
    loadgen_cpu_s: float = 0.0
    server_cpu_s: list[float] = field(default_factory=list)
    machine_busy_pct: float = 0.0

    @property
    def server_cpu_us_per_op(self) -> float | None:
        """The servers' CPU (all of them) per op, µs: steadier than ops/s on shared cores."""
        return 1e6 * sum(self.server_cpu_s) / self.ops if self.ops and self.server_cpu_s else None

    @property
    def server_cpu_pct(self) -> list[float]:
        return [100.0 * c / max(self.seconds, 1e-9) for c in self.server_cpu_s]

    def error_kinds(self) -> str:
        """resp_loadgen's errors by kind, e.g. ``NOREPL 120, ERR 2``, or ''."""
        kinds: dict[str, int] = self.raw.get("error_kinds") or {}
        return ", ".join(f"{k} {n:,}" for k, n in kinds.items())


def run_loadgen(name: str, args: list[str], seconds: float | None) -> LoadResult:
    """Run a generator that prints one JSON line last. Its first stderr lines go to the log;
    a non-zero exit is a BenchError. The generator's own CPU is read from the kernel's
    accounting of the reaped child."""
    cmd = [str(loadgen(name)), *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=(seconds or 0) + 600, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for line in proc.stderr.strip().splitlines()[:12]:
        log("  " + line)
    if proc.returncode != 0:
        raise BenchError(f"{name} failed (rc={proc.returncode}): {shlex.join(cmd)}")
    raw: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return LoadResult(
        ops=int(raw["ops"]),
        seconds=float(raw["seconds"]),
        ops_per_s=float(raw["ops_per_s"]),
        p50_us=int(raw["p50_us"]),
        p99_us=int(raw["p99_us"]),
        errors=int(raw["errors"]),
        raw=raw,
        loadgen_cpu_s=cpu,
    )


def _when(seconds: float | None) -> list[str]:
    return ["--seconds", f"{seconds:g}"] if seconds is not None else []


def beanstalk_load(
    port: int,
    workload: str,
    conns: int,
    pipeline: int,
    *,
    seconds: float | None,
    ops: int = 0,
    tubes: int = 1,
    tube_prefix: str = "tube-",
) -> LoadResult:
    """``loadgen``: put, reserve-delete or put-reserve-delete on one beanstalk port."""
    args = ["--host", HOST, "--port", str(port), "--conns", str(conns)]
    args += ["--pipeline", str(pipeline), "--ops", str(ops), "--workload", workload]
    args += ["--tubes", str(tubes), "--body", str(BODY_BYTES), "--tube-prefix", tube_prefix]
    return run_loadgen("loadgen", args + _when(seconds), seconds)


def resp_load(
    ports: list[int],
    workload: str,
    conns: int,
    pipeline: int,
    *,
    seconds: float | None,
    replicate: int,
    asynchronous: bool = False,
    ops: int = 0,
    queues: int = 1,
    queue_prefix: str = "queue-",
    retry_s: int = 60,
    timeout_ms: int = 5000,
) -> LoadResult:
    """``resp_loadgen``: addjob or getjob-ackjob, connections round-robin over ``ports``."""
    args = ["--host", HOST, "--ports", ",".join(map(str, ports)), "--conns", str(conns)]
    args += ["--pipeline", str(pipeline), "--ops", str(ops), "--workload", workload]
    args += ["--queues", str(queues), "--queue-prefix", queue_prefix, "--body", str(BODY_BYTES)]
    args += ["--replicate", str(replicate), "--retry", str(retry_s)]
    args += ["--timeout-ms", str(timeout_ms), *(["--async"] if asynchronous else [])]
    return run_loadgen("resp_loadgen", args + _when(seconds), seconds)


# -- runs, cells and medians ----------------------------------------------------------------------


@dataclass
class Cell:
    """One measured run of one system on one row: a result, or why there is none."""

    result: LoadResult | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ops_per_s(self) -> float | None:
        return self.result.ops_per_s if self.result is not None and not self.error else None


def median_cell(cells: list[Cell]) -> Cell:
    """The run with the median ops/s (the first failure, if any run failed)."""
    for c in cells:
        if c.ops_per_s is None:
            return c
    ordered = sorted(cells, key=lambda c: c.ops_per_s or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def measure_cell(what: str, fn: Callable[[], Cell]) -> Cell:
    """``fn()``, or a failed cell that says why (logged)."""
    try:
        return fn()
    except (BenchError, OSError, subprocess.SubprocessError, ValueError, RuntimeError) as exc:
        log(f"  {what}: FAILED: {exc}")
        return Cell(error=short_error(exc))


# -- /proc: CPU and memory --------------------------------------------------------------------


def proc_tree(pid: int) -> list[int]:
    """``pid`` and every descendant of it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def rss_bytes(pid: int) -> int:
    """VmRSS summed over the process tree rooted at ``pid``."""
    total = 0
    for p in proc_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process tree rooted at ``pid`` (clock ticks: 10 ms steps)."""
    ticks = 0
    for p in proc_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> float:
    """CPU of every thread of ``pid`` so far at the scheduler's nanoseconds: a start takes a
    tenth of /proc/PID/stat's 10 ms ticks."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs (/proc/stat)."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:9]]
    idle = vals[3] + vals[4]  # idle + iowait
    return float(sum(vals) - idle), float(sum(vals))


@dataclass
class CpuWindow:
    """What the servers and the machine spent between :func:`cpu_window`'s entry and exit."""

    server_cpu_s: list[float] = field(default_factory=list)
    machine_busy_pct: float = 0.0
    wall_s: float = 0.0


@contextmanager
def cpu_window(pids: list[int]) -> Iterator[CpuWindow]:
    """The CPU of each server in ``pids`` and how busy the whole machine was (every core,
    every process: the cores are shared) over the ``with`` block."""
    window = CpuWindow()
    cpu0 = [cpu_seconds(p) for p in pids]
    busy0, total0 = machine_cpu()
    t0 = time.monotonic()
    yield window
    window.wall_s = time.monotonic() - t0
    busy1, total1 = machine_cpu()
    window.server_cpu_s = [cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
    window.machine_busy_pct = 100.0 * (busy1 - busy0) / max(total1 - total0, 1.0)


def measured(pids: list[int], fn: Callable[[], LoadResult]) -> LoadResult:
    """``fn()`` with the servers' CPU and the machine's busy share over it filled in."""
    with cpu_window(pids) as window:
        res = fn()
    res.server_cpu_s, res.machine_busy_pct = window.server_cpu_s, window.machine_busy_pct
    return res


# -- sockets ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def exchange(sock: socket.socket, request: bytes, until: bytes = b"\r\n") -> bytes:
    """Send ``request`` and read until ``until`` has arrived; what was read (ConnectionError
    if the peer closed first)."""
    sock.sendall(request)
    got = b""
    while until not in got:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed")
        got += data
    return got


def answers(port: int, request: bytes, until: bytes = b"\r\n", timeout: float = 30.0) -> bool:
    """One connect, one request, its reply up to ``until``; False if refused or cut."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            exchange(s, request, until)
            return True
    except OSError:
        return False


def resp_request(*args: str | bytes) -> bytes:
    """One RESP multibulk request."""
    parts = [a.encode() if isinstance(a, str) else a for a in args]
    return f"*{len(parts)}\r\n".encode() + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


ADDJOB_Q = resp_request("ADDJOB", "q", b"x" * BODY_BYTES, "0")  # REPLICATE 1 on a lone node
PUT = b"put 0 0 60 %d\r\n%s\r\n" % (BODY_BYTES, b"x" * BODY_BYTES)


def fill(port: int, request: bytes, reply_marker: bytes, jobs: int) -> None:
    """Pipeline ``jobs`` copies of ``request`` in batches and read every reply (each one
    holds ``reply_marker`` once: ``+D-`` for ADDJOB, ``INSERTED`` for put)."""
    batch = 10_000
    with socket.create_connection((HOST, port), timeout=120) as s:
        done = 0
        while done < jobs:
            n = min(batch, jobs - done)
            s.sendall(request * n)
            seen, buf = 0, b""
            while seen < n:
                data = s.recv(1 << 20)
                if not data:
                    raise BenchError("connection closed while filling")
                buf += data
                seen += buf.count(reply_marker)
                buf = buf[buf.rfind(b"\n") + 1 :]
            done += n


def git(*args: str) -> str:
    """``git -C ROOT ARGS``'s output."""
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"git {shlex.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def wait_until(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``ready`` (a server's port: there is no event to wait on) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not ready after {timeout_s:g} s")
        time.sleep(0.002)


# -- builds -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Build:
    """Which disq a node runs: this checkout, or another one put first on the nodes'
    PYTHONPATH (``compare``, ``--before``), with that checkout's own venv if it has one (its
    compiled modules)."""

    label: str
    code_dir: Path
    python: str

    @classmethod
    def this(cls) -> Build:
        return cls("this tree", ROOT, sys.executable)

    @classmethod
    def checkout(cls, path: Path, label: str | None = None) -> Build:
        path = path.resolve()
        venv = path / ".venv" / "bin" / "python"
        return cls(label or str(path), path, str(venv if venv.exists() else sys.executable))

    @property
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.code_dir)}

    def lab_kwargs(self) -> dict[str, Any]:
        """What :class:`cluster.lab.Lab` and ``FlagServer`` take to run this build."""
        return {"python": self.python, "env": self.env}

    def disq_node(self) -> list[str]:
        """The ``disq-node`` console script as users run it (its start differs from
        ``-m disq.node_main``'s by runpy's imports), else ``-m disq.node_main``."""
        script = Path(self.python).parent / "disq-node"
        return (
            [self.python, str(script)] if script.exists() else [self.python, "-m", "disq.node_main"]
        )

    def run_python(self, code: str) -> str:
        """Run ``code`` in a fresh interpreter of this build, its disq first on the path and
        a neutral working directory (``-c`` puts the working directory first on sys.path);
        its stdout."""
        env = {**os.environ, **self.env}
        proc = subprocess.run(
            [self.python, "-c", code], capture_output=True, text=True, env=env, cwd="/"
        )
        if proc.returncode != 0:
            raise BenchError(f"{self.label}: {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def describe(self) -> str:
        """Where its ``disq`` comes from and whether it runs compiled, checked by importing
        it the way its nodes will."""
        code = (
            "import json, disq, disq._native as n; print(json.dumps([disq.__file__, n.describe()]))"
        )
        where, state = json.loads(self.run_python(code).strip().splitlines()[-1])
        if (self.code_dir / "disq").resolve() not in Path(where).resolve().parents:
            raise BenchError(f"{self.label}: imports {where}, not its own {self.code_dir}")
        return str(state)


def http_answers(port: int, path: str = "/healthz") -> bool:
    """Whether an HTTP GET is answered at all (a 503 is an answer too)."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@contextmanager
def celery_solo_worker(
    app: str, queue: str, env: dict[str, str], workdir: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """One Celery worker of ``app`` (a module in ``workdir``) on ``queue``: the solo pool,
    no mingle, gossip or heartbeat (the Celery benches' worker). Yields the process and its
    log file; stopped on leaving (SIGTERM, SIGKILL after 20 s)."""
    argv = [
        str(Path(sys.executable).parent / "celery"), "-A", app, "worker", "--pool", "solo",
        "-Q", queue, "--without-mingle", "--without-gossip", "--without-heartbeat",
        "-l", "WARNING",
    ]  # fmt: skip
    logfile = workdir / f"worker-{queue}.log"
    with open(logfile, "wb") as wlog:
        worker = subprocess.Popen(argv, cwd=workdir, env=env, stdout=wlog, stderr=wlog)
    try:
        yield worker, logfile
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
