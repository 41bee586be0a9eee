"""The benchmark harness (bench/): its CLI, its one report format, its verdicts, its C load
generators (against their own fake servers), and the in-process subcommands docs/benchmarks.md
quotes. No server is started here; the subcommands that start one are run by hand."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import SUBCOMMANDS, parser
from bench.common import free_port, run_loadgen
from bench.compare import verdict
from bench.report import Report, ratio

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_help_lists_every_subcommand() -> None:
    out = _bench("--help")
    for name in SUBCOMMANDS:
        assert re.search(rf"^\s+{name}\b", out, re.M), name
    # The subcommands the old scripts were, at least.
    assert {
        "cluster",
        "beanstalk",
        "celery",
        "sdk",
        "restart",
        "startup",
        "memory",
        "spark",
        "analytics",
        "dashboard",
        "compare",
        "profile",
    } <= set(SUBCOMMANDS)


def test_a_report_has_the_command_the_machine_line_and_markdown_tables() -> None:
    report = Report(["beanstalk", "--quick"])
    table = report.table("rows", ["row", "disq ops/s", "beanstalkd ops/s", "disq / beanstalkd"])
    table.add("put/c50/p16/mem", "200,000", "100,000", ratio(200_000, 100_000))
    report.note("a note")
    text = report.render()
    lines = text.splitlines()
    assert lines[0] == "## `python -m bench beanstalk --quick`"
    machine = lines[2]
    assert machine.startswith("machine: ") and "CPUs" in machine and "Python" in machine
    assert re.search(r"commit [0-9a-f]{7}", machine) and re.search(r"\d{4}-\d\d-\d\d", machine)
    assert "| --- | ---: | ---: | ---: |" in lines
    assert "| put/c50/p16/mem | 200,000 | 100,000 | 2.00x |" in lines
    assert lines[-1] == "- a note"


def test_a_row_with_the_wrong_number_of_cells_is_refused() -> None:
    table = Report(["x"]).table("t", ["a", "b"])
    with pytest.raises(ValueError):
        table.add("only one")


def test_ratios_and_verdicts() -> None:
    assert ratio(None, 2.0) == "-" and ratio(1.0, 0.0) == "-"
    assert ratio(3.0, 2.0) == "1.50x"
    # Spreads of 10% each side: a 15% difference is noise, a 30% one is not.
    assert verdict([90.0, 100.0, 100.0], [105.0, 115.0, 115.0])[1].startswith("within noise")
    assert verdict([100.0, 100.0, 100.0], [130.0, 130.0, 130.0])[1].startswith("faster")
    assert verdict([100.0], [70.0])[1].startswith("slower")
    assert verdict([], [1.0]) == ("-", "failed")


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no cc")
@pytest.mark.parametrize(
    ("name", "workload", "target"),
    [
        ("loadgen", "put-reserve-delete", ["--port"]),
        ("resp_loadgen", "addjob-getjob-ackjob", ["--ports"]),
    ],
)
def test_each_load_generator_drives_its_fake_server(
    name: str, workload: str, target: list[str]
) -> None:
    from bench.common import loadgen

    port = free_port()
    server = subprocess.Popen(
        [str(loadgen(name)), "--serve", str(port)], stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stderr is not None
        assert "listening" in server.stderr.readline()
        args = [*target, str(port), "--conns", "3", "--pipeline", "4", "--ops", "3001"]
        res = run_loadgen(name, [*args, "--workload", workload], None)
    finally:
        server.kill()
        server.wait()
    assert (res.ops, res.errors) == (3001, 0)
    assert res.raw["workload"] == workload and res.p50_us <= res.p99_us


def test_memory_objects_prints_the_bytes_a_queued_job_holds(tmp_path: Path) -> None:
    _bench("memory", "--objects", "--jobs", "3000", "--json", str(tmp_path / "r.json"))
    data = json.loads((tmp_path / "r.json").read_text())
    (table,) = data["tables"]
    parts = {row[0]: int(row[1]) for row in table["rows"]}
    assert parts["body bytes"] >= 100  # a 100-byte bytes object
    # A queue holds the job itself: no skiplist entry of its own (queue.py).
    assert parts["skiplist entry: the DJob itself"] == 0
    shares = {k: v for k, v in parts.items() if k not in ("sum", "tracemalloc, per job added")}
    assert parts["sum"] == sum(shares.values())
    assert parts["tracemalloc, per job added"] > 0


def test_schedules_misfire_times_the_catch_up_looks() -> None:
    out = _bench("schedules", "--misfire", "--quick")
    row = next(ln for ln in out.splitlines() if re.match(r"\| \d+ \|", ln))
    looks, max_ms, _median, _total, skipped = (c.strip() for c in row.strip("|").split("|"))
    assert int(looks) > 0 and float(max_ms) > 0 and int(skipped) > 0


BENCHMARKS = ROOT / "docs" / "benchmarks.md"
HEADINGS = [
    "The machine and the method",
    "Beanstalk door beside beanstalkd",
    "Disque commands on three nodes beside Disque",
    "One replicated add, hop by hop",
    "The gRPC SDK beside RESP",
    "Compiled with mypyc",
    "Celery and Dramatiq",
    "Start at the floor",
    "A restarted node's first answer",
    "A large replay",
    "Memory per job",
    "Spark",
    "Schedules",
    "What an open dashboard costs a node",
    "Metrics cost",
    "Kubernetes StatefulSet rolling restart",
    "Disque's Tcl suite and the client suites",
    "The test suite's time",
]


def test_benchmarks_md_is_short_has_its_headings_and_no_issue_numbers() -> None:
    """At most 800 lines of current figures (history is in git), under the headings README,
    ARCHITECTURE.md and docs/readme-claims.md point at."""
    text = BENCHMARKS.read_text()
    assert len(text.splitlines()) <= 800
    assert not re.search(r"\bissues? #?\d", text, re.I)
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert [h for h in headings if h in HEADINGS] == HEADINGS


def test_every_command_in_benchmarks_md_is_one_the_harness_takes() -> None:
    """Each ``python -m bench ...`` line (with its continuation lines) parses: the subcommand
    and every option exist. Commands in prose (between backticks) count too."""
    text = BENCHMARKS.read_text().replace("\\\n", " ")
    commands = re.findall(r"python -m bench [^`\n]+", text)
    assert len(commands) > 20
    for command in commands:
        argv = shlex.split(command.split("#", 1)[0])[3:]
        if argv[0] in ("<subcommand>", "--help"):
            continue
        try:
            parser().parse_args(argv)
        except SystemExit as exc:  # argparse's way of refusing
            raise AssertionError(f"docs/benchmarks.md: {command!r} does not parse") from exc
