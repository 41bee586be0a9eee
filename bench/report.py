"""The one report format of every subcommand.

A report starts with the command that made it and the machine line (CPU, cores, Linux, Python,
which disq ran, the commit, the date, the load before the run), then its tables in markdown:
the first column names the row, then each system's figures, then the ratios of disq to the
reference measured in the same run. Notes follow. The same report can go to a markdown file
(``--markdown``) and, with the raw figures, to a JSON file (``--json``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BenchError, git, log


def git_commit() -> str:
    """The checkout's commit, and whether its tree has uncommitted changes."""
    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, BenchError):
        return "no git"
    return head + (" + uncommitted changes" if dirty else "")


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def disq_code() -> str:
    """Whether this process's disq (the nodes' too, but for ``compare`` and ``--before``) is
    compiled: ``DISQ_PURE`` in the environment reaches the nodes as it reaches us."""
    from disq import _native

    return _native.describe()


def machine_line(load_before: float, started: datetime.datetime) -> str:
    return (
        f"machine: {os.cpu_count()} CPUs ({cpu_model()}), Linux {platform.release()}, "
        f"Python {sys.version.split()[0]}; disq {disq_code()}; commit {git_commit()}; "
        f"{started:%Y-%m-%d %H:%M} UTC; 1-min load {load_before:.2f} before the run"
    )


def ratio(value: float | None, reference: float | None) -> str:
    """``value / reference`` as ``1.23x``; ``-`` when either is missing."""
    if value is None or not reference:
        return "-"
    return f"{value / reference:.2f}x"


def fmt_int(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.1f} ms"


@dataclass
class Table:
    """A titled markdown table; the first column is left-aligned, the others right."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([str(c) for c in cells])

    def render(self) -> list[str]:
        align = ["---"] + ["---:"] * (len(self.columns) - 1)
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("| " + " | ".join(align) + " |")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return lines


class Report:
    def __init__(self, argv: list[str]) -> None:
        self.command = "python -m bench " + shlex.join(argv)
        self.started = datetime.datetime.now(datetime.UTC)
        self.load_before = os.getloadavg()[0]
        if self.load_before > 0.5:
            log(f"warning: load average {self.load_before:.2f} before the run: noisy figures")
        self.tables: list[Table] = []
        self.notes: list[str] = []
        self.raw: dict[str, Any] = {}
        self.failures: list[str] = []

    def table(self, title: str, columns: list[str]) -> Table:
        t = Table(title, columns)
        self.tables.append(t)
        return t

    def note(self, text: str) -> None:
        self.notes.append(text)

    def fail(self, text: str) -> None:
        """A run that failed: listed at the end, and the exit status is 1."""
        self.failures.append(text)

    def render(self) -> str:
        lines = [f"## `{self.command}`", "", machine_line(self.load_before, self.started)]
        for t in self.tables:
            lines += ["", *t.render()]
        if self.notes:
            lines += ["", *[f"- {n}" for n in self.notes]]
        if self.failures:
            lines += ["", "Failures:", *[f"- {f}" for f in self.failures]]
        return "\n".join(lines) + "\n"

    def emit(self, markdown: Path | None, json_path: Path | None) -> int:
        """Print the report (and write the files asked for); the exit status."""
        text = self.render()
        sys.stdout.write("\n" + text)
        sys.stdout.flush()
        if markdown is not None:
            markdown.write_text(text)
            log(f"wrote {markdown}")
        if json_path is not None:
            data = {
                "command": self.command,
                "machine": machine_line(self.load_before, self.started),
                "tables": [
                    {"title": t.title, "columns": t.columns, "rows": t.rows} for t in self.tables
                ],
                "notes": self.notes,
                "failures": self.failures,
                "raw": self.raw,
            }
            json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
            log(f"wrote {json_path}")
        return 1 if self.failures else 0


def load_cells(cell: Any) -> list[str]:
    """A load run's three columns: ops/s (with its errors), p50 / p99 µs, server CPU µs/op.
    ``cell`` is a :class:`bench.common.Cell` or None (not run)."""
    if cell is None:
        return ["-", "-", "-"]
    if cell.result is None or cell.error:
        return ["FAIL", "-", "-"]
    r = cell.result
    ops = fmt_int(r.ops_per_s)
    notes = (
        [f"{r.errors:,} errors" + (f": {r.error_kinds()}" if r.error_kinds() else "")]
        if r.errors
        else []
    )
    notes += cell.extra.get("notes", [])
    if notes:
        ops += f" ({'; '.join(notes)})"
    cpu = r.server_cpu_us_per_op
    return [ops, f"{r.p50_us:,} / {r.p99_us:,}", "-" if cpu is None else f"{cpu:.1f}"]
