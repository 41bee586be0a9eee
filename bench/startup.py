"""A fresh server's start: disq-node on beanstalkd's flags (memory only) beside beanstalkd.

Three measures, each server spawned fresh for each (cluster.lab.FlagServer): spawn -> its
first accepted connection, spawn -> its first answer (``stats``), and greenstalk's own test
harness (sleep 0.1 s after spawning, connect, then a ``put`` with delay 1 and the ``reserve``
that gets it, timed by the client: its test_delays wants 1.000-1.050 s). Beside them the
floor: the same interpreter spawning ``python -c "import asyncio"`` and exiting, what any
asyncio server in Python pays before it can answer. Each run times the floor and every server
in turn (a drift of the machine hits them alike); disq's "after the floor" is the median of
each run's difference.

  --cpu    the CPU time instead: the node's (every thread, from /proc, the moment its first
           answer arrives) against the floor's (its own process_time at the end of its
           import): what the load of a shared machine moves least
  --steps  what the node's start costs beyond the floor, step by step, in CPU ms: a fresh
           interpreter takes disq-node's steps in its order and times each (medians)
  --before DIR  another checkout's build, measured in the same runs

  python -m bench startup --runs 31
  python -m bench startup --cpu --runs 15
  python -m bench startup --steps --runs 11
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench import servers
from bench.common import HOST, Build, exchange, median, thread_cpu_seconds
from bench.report import Report, ratio
from cluster.lab import FlagServer

HELP = "a fresh node's first answer after spawning, beside beanstalkd and the floor"

FLOOR = "import asyncio"
REFUSED = float("nan")  # greenstalk's harness found nothing listening after its 0.1 s

Measure = Callable[[FlagServer], float]


def _timed(server: FlagServer, ready: Callable[[], bool]) -> float:
    """Seconds from the spawn until ``ready()``; the server is stopped after."""
    start = time.perf_counter()
    server.spawn()
    try:
        while not ready():
            if not server.is_running():
                raise RuntimeError(f"{server.cmd[0]} exited:\n{server.log_tail()}")
            time.sleep(0.0005)
        return time.perf_counter() - start
    finally:
        server.stop()


def _connects(server: FlagServer) -> bool:
    try:
        socket.create_connection((HOST, server.port), timeout=1).close()
        return True
    except OSError:
        return False


def to_listening(server: FlagServer) -> float:
    return _timed(server, lambda: _connects(server))


def to_first_answer(server: FlagServer) -> float:
    return _timed(server, server.answers)


def greenstalk_delay(server: FlagServer) -> float:
    """greenstalk's harness: what a fresh server's start adds to a client's first timer."""
    server.spawn()
    try:
        time.sleep(0.1)  # the harness's fixed wait, reproduced on purpose
        try:
            s = socket.create_connection((HOST, server.port), timeout=5)
        except ConnectionRefusedError:
            return REFUSED
        with s:
            start = time.monotonic()
            exchange(s, b"put 0 1 60 7\r\ndelayed\r\n")
            exchange(s, b"reserve\r\n")
            return time.monotonic() - start
    finally:
        server.stop()


def cpu_to_first_answer(server: FlagServer) -> float:
    """CPU seconds of every thread of the node when its first answer arrives."""
    server.spawn()
    try:
        while not server.answers():
            time.sleep(0.0005)
        assert server.pid is not None
        return thread_cpu_seconds(server.pid)
    finally:
        server.stop()


def floor_wall(python: str) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", FLOOR], check=True, cwd="/")
    return time.perf_counter() - start


def floor_cpu(python: str) -> float:
    code = f"{FLOOR}; import time; print(time.process_time())"
    return float(
        subprocess.run(
            [python, "-c", code], capture_output=True, text=True, check=True, cwd="/"
        ).stdout
    )


# What disq-node does before its first answer, in its order; each step's CPU is printed.
STEPS = r"""
import time
P = time.process_time
marks = [("start", P())]
def mark(name):
    marks.append((name, P()))
import asyncio; mark("import asyncio (the floor's)")
import disq; mark("the disq package, disq._native's stale-build guard")
import disq.node_main as nm; mark("disq.node_main (socket, disq.node_flags)")
args = nm.beanstalkd_args(["-l", "127.0.0.1", "-p", "0"]); mark("the flags")
sock = nm._listen("beanstalk", "127.0.0.1", 0); mark("the bind")
nm._without_rich()
from disq.core.beanstalk.core import Limits; mark("the beanstalk core and its imports")
from disq.logging import configure_logging, defer
from disq.server.node_config import NodeConfig; mark("disq.logging, the node config")
from disq.server.runtime import NodeRuntime; mark("the runtime, door, protocol, AOF service")
defer(); configure_logging(0, None, None, None)
nm._raise_open_files_limit(None); mark("the open-files limit and its log line")
import uvloop; mark("uvloop")
loop = uvloop.new_event_loop(); asyncio.set_event_loop(loop)
node = NodeRuntime(NodeConfig(data_dir=None, limits=Limits()), loop)
async def serve():
    await loop.create_server(lambda: None, sock=sock, backlog=1024)
loop.run_until_complete(serve()); mark("the loop, the runtime object, the server")
prev = marks[0][1]
for name, t in marks[1:]:
    print(f"{name}\t{(t - prev) * 1000:.3f}")
    prev = t
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--before", type=Path, help="another checkout, measured in the same runs")
    p.add_argument("--cpu", action="store_true", help="CPU to the first answer, not wall times")
    p.add_argument("--steps", action="store_true", help="the start's CPU step by step")
    p.add_argument("--quick", action="store_true", help="3 runs")


def run(args: argparse.Namespace, report: Report) -> None:
    runs = 3 if args.quick else args.runs
    builds = [("disq-node", Build.this())]
    if args.before:
        builds.append(("before", Build.checkout(args.before)))
        report.note(f"before: {args.before} ({builds[1][1].describe()})")
    if args.steps:
        _steps(runs, builds, report)
        return
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp_name:
        tmp = Path(tmp_name)
        made: dict[str, FlagServer] = {
            name: FlagServer(tmp / name, node_cmd=b.disq_node(), env=b.env) for name, b in builds
        }
        if args.cpu:
            floor = partial(floor_cpu, sys.executable)
            _series(report, "CPU to the first answer", cpu_to_first_answer, floor, made, runs)
            return
        servers.ensure_beanstalkd()
        report.note(f"reference: {servers.beanstalkd_version()}")
        made["beanstalkd"] = servers.beanstalkd(tmp / "beanstalkd")
        floor = partial(floor_wall, sys.executable)
        _series(report, "spawn -> listening", to_listening, floor, made, runs)
        _series(report, "spawn -> first answer", to_first_answer, floor, made, runs)
        _series(
            report,
            "greenstalk's harness: put delay 1 -> reserve (refused: nothing "
            "listened 0.1 s after the spawn)",
            greenstalk_delay,
            None,
            made,
            runs,
        )


def _series(
    report: Report,
    what: str,
    measure: Measure,
    floor: Callable[[], float] | None,
    made: dict[str, FlagServer],
    runs: int,
) -> None:
    """Run by run: the floor, then each server in turn."""
    floors: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in made}
    for _ in range(runs):
        if floor is not None:
            floors.append(floor() * 1000)
        for name, server in made.items():
            times[name].append(measure(server) * 1000)
    table = report.table(
        f"{what}, ms: median (fastest-slowest) of {runs} runs",
        ["server", "ms", "after the floor, run by run", "x beanstalkd"],
    )
    if floors:
        table.add("floor: `python -c 'import asyncio'`", _span(floors), "-", "-")
    reference = median(times["beanstalkd"]) if "beanstalkd" in times else None
    for name, values in times.items():
        answered = [t for t in values if t == t]  # NaN: refused
        shown = _span(answered) if answered else "-"
        if len(answered) < len(values):
            shown += f", {len(values) - len(answered)} refused"
        after = "-"
        if floors and name != "beanstalkd":
            after = _span([t - f for t, f in zip(values, floors, strict=True) if t == t])
        vs = ratio(median(answered), reference) if answered and name != "beanstalkd" else "-"
        table.add(name, shown, after, vs)
    report.raw[what] = {"floor": floors, **times}


def _steps(runs: int, builds: list[tuple[str, Build]], report: Report) -> None:
    for name, build in builds:
        rows: dict[str, list[float]] = {}
        for _ in range(runs):
            out = build.run_python(STEPS)
            for line in out.splitlines():
                step, ms = line.split("\t")
                rows.setdefault(step, []).append(float(ms))
        table = report.table(
            f"{name}: CPU of each start step, median of {runs} fresh interpreters",
            ["step", "CPU ms"],
        )
        beyond = 0.0
        for step, values in rows.items():
            table.add(step, f"{median(values):.2f}")
            beyond += 0.0 if step.startswith("import asyncio") else median(values)
        table.add("beyond the floor's import asyncio (sum of medians)", f"{beyond:.2f}")


def _span(values: list[float]) -> str:
    return f"{median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"
