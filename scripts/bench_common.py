"""What the benchmark scripts share: logging, building a C load generator, running it, reading
a process tree's CPU and memory from /proc, medians and the machine line of the report.

Used by scripts/bench_beanstalk.py (loadgen.c against disq and beanstalkd) and
scripts/bench_cluster.py (resp_loadgen.c against a 3-node disq cluster).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


def ensure_binary(path: Path, default: Path, source: Path) -> Path:
    """Compile ``source`` to ``default`` if it is missing or older than its source; a path
    other than ``default`` (given on the command line) is used as it is."""
    if path != default:
        if not path.exists():
            raise BenchError(f"load generator binary not found: {path}")
        return path
    header = source.parent / "loadgen_common.h"  # shared by both generators
    newest = max(source.stat().st_mtime, header.stat().st_mtime if header.exists() else 0.0)
    if path.exists() and path.stat().st_mtime >= newest:
        return path
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise BenchError(f"gcc not found (needed to build {source.name})")
    cmd = [cc, "-O2", "-Wall", "-o", str(path), str(source)]
    log("compiling: " + shlex.join(cmd))
    subprocess.run(cmd, check=True)
    return path


@dataclass
class LoadResult:
    ops: int
    seconds: float
    ops_per_s: float
    p50_us: int
    p99_us: int
    errors: int
    raw: dict[str, Any]
    loadgen_cpu_s: float = 0.0


def run_json_tool(cmd: list[str], seconds: float | None) -> tuple[dict[str, Any], float]:
    """Run a load generator that prints one JSON line last; return it and the tool's CPU
    seconds. Its stderr (first lines) goes to the log; a non-zero exit is a BenchError."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    limit = (seconds or 0) + 600
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.stderr.strip():
        for line in proc.stderr.strip().splitlines()[:12]:
            log("  " + line)
    if proc.returncode != 0:
        name = Path(cmd[0]).name
        raise BenchError(
            f"{name} failed (rc={proc.returncode}): {shlex.join(cmd)}\n{proc.stderr.strip()}"
        )
    raw: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return raw, cpu


def load_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The LoadResult fields of a load generator's JSON line."""
    return {
        "ops": int(raw["ops"]),
        "seconds": float(raw["seconds"]),
        "ops_per_s": float(raw["ops_per_s"]),
        "p50_us": int(raw["p50_us"]),
        "p99_us": int(raw["p99_us"]),
        "errors": int(raw["errors"]),
        "raw": raw,
    }


def proc_tree(pid: int) -> list[int]:
    """pid and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def rss_bytes(pid: int) -> int:
    """Sum of VmRSS over the process tree rooted at pid."""
    total = 0
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process tree rooted at pid."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tck


@dataclass
class Cell:
    result: Any = None  # a LoadResult (or a subclass of it)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def short_error(exc: BaseException) -> str:
    """First line of the message plus its last line (e.g. a server log's last line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [repr(exc)]
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 300 else text[:297] + "..."


def median_cell(cells: list[Cell]) -> Cell:
    """The run with the median throughput (a failure if any run failed)."""
    for c in cells:
        if c.error is not None or c.result is None:
            return c
    ordered = sorted(cells, key=lambda c: c.result.ops_per_s if c.result else 0.0)
    return ordered[(len(ordered) - 1) // 2]


def fmt_int(v: float) -> str:
    return f"{v:,.0f}"


def machine_info() -> str:
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    pyver = sys.version.split()[0]
    return f"{os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, Python {pyver}"
