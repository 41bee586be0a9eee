"""Bytes per queued job: RSS after --jobs jobs (100-byte bodies) added to a server with no
persistence, beside Disque 1.0-rc1 (when built) and beanstalkd, in one run.

Each server starts fresh on an empty dir; its RSS (VmRSS) is read once it answers and has
settled, then after the jobs are added (pipelined, every reply read) and it settled again.
Reported: the RSS before and after, per job after (RSS / jobs) and per job added.

- disq: a node on a Disque config file (cluster/lab.py), ``appendonly no``, ``ADDJOB q <body>
  0`` over RESP (a lone node: REPLICATE 1, the job queued)
- Disque: /tmp/disque/src/disque-server (``--disque``) on the same lines, the same ADDJOB
- beanstalkd: ``beanstalkd -l 127.0.0.1 -p P`` (no ``-b``), ``put 0 0 60 100``
- ``--beanstalk``: also the disq node taking the same puts on its beanstalk port
- ``--events-max-bytes N``: the disq nodes' lifecycle event log bounded at N bytes
- ``--objects``: instead, in this process, where a queued job's bytes go: a bare DisqueCore
  takes --jobs adds (events off, no AOF, 100 adds a millisecond); the heap they took per job
  (tracemalloc) and each object one queued job holds, at its allocated size

  python -m bench memory --jobs 1000000 --beanstalk
  python -m bench memory --objects --jobs 200000

- ``--imports``: where an idle node's RSS goes: a fresh interpreter imports what a node
  imports, in its order, and reports its RSS after each step

  python -m bench memory --imports
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from bench import servers
from bench.common import ADDJOB_Q, BODY_BYTES, PUT, ROOT, Build, fill, log, rss_bytes
from bench.report import Report, ratio
from cluster.lab import Lab, find_base_port

HELP = "bytes per queued job beside Disque and beanstalkd; --objects: where they go"

SETTLE_S = 1.0  # after the last reply: a server's deferred work (event log, timers) lands


def measure(pid: int, port: int, request: bytes, marker: bytes, jobs: int) -> tuple[int, int]:
    """(RSS once settled, RSS after ``jobs`` adds and settled)."""
    time.sleep(SETTLE_S)
    before = rss_bytes(pid)
    fill(port, request, marker, jobs)
    time.sleep(SETTLE_S)
    return before, rss_bytes(pid)


def disq(tmp: Path, jobs: int, events_max_bytes: int | None, beanstalk: bool) -> tuple[int, int]:
    bs_port = find_base_port(1)
    build = Build.this()
    node_cmd = [build.python, "-m", "disq.node_main"]
    node_cmd += ["--events-max-bytes", str(events_max_bytes)] if events_max_bytes else []
    conf = ["appendonly no", "drain-timeout 0", f"beanstalk-port {bs_port}"]
    with Lab(1, tmp, extra_conf=conf, node_cmd=node_cmd, env=build.env) as lab:
        node = lab.node(0)
        assert node.pid is not None
        if beanstalk:
            return measure(node.pid, bs_port, PUT, b"INSERTED", jobs)
        return measure(node.pid, node.port, ADDJOB_Q, b"+D-", jobs)


def disque(tmp: Path, jobs: int, binary: Path) -> tuple[int, int]:
    conf = ["appendonly no"]
    with Lab(1, tmp, node_timeout_ms=5000, node_cmd=[str(binary)], extra_conf=conf) as lab:
        node = lab.node(0)
        assert node.pid is not None
        return measure(node.pid, node.port, ADDJOB_Q, b"+D-", jobs)


def beanstalkd(tmp: Path, jobs: int) -> tuple[int, int]:
    with servers.beanstalkd(tmp) as server:
        assert server.pid is not None
        return measure(server.pid, server.port, PUT, b"INSERTED", jobs)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=1, help="each server this many times")
    p.add_argument("--beanstalk", action="store_true", help="also disq's beanstalk door")
    p.add_argument("--events-max-bytes", type=int, help="the disq nodes' event log bound")
    servers.add_disque_options(p)
    p.add_argument("--objects", action="store_true", help="in process: what a queued job holds")
    p.add_argument("--quick", action="store_true", help="50,000 jobs")
    p.add_argument("--imports", action="store_true", help="an idle node's RSS, import by import")


def run(args: argparse.Namespace, report: Report) -> None:
    jobs = 50_000 if args.quick else args.jobs
    if args.imports:
        imports(report)
        return
    if args.objects:
        objects(jobs, report)
        return
    servers.ensure_beanstalkd()
    ev = args.events_max_bytes
    runs: list[tuple[str, Callable[[Path, int], tuple[int, int]]]] = [
        ("disq, ADDJOB", lambda tmp, n: disq(tmp, n, ev, False))
    ]
    binary = servers.disque_from(args)
    if binary is not None:
        runs.append(("Disque, ADDJOB", lambda tmp, n: disque(tmp, n, binary)))
    if args.beanstalk:
        runs.append(("disq, beanstalk put", lambda tmp, n: disq(tmp, n, ev, True)))
    runs.append(("beanstalkd, put", beanstalkd))
    table = report.table(
        f"{jobs:,} queued jobs of {BODY_BYTES} bytes, no persistence, each server fresh",
        [
            "server",
            "RSS before -> after, MiB",
            "per job after, B",
            "per job added, B",
            "x Disque",
            "x beanstalkd",
        ],
    )
    added: dict[str, float] = {}
    rows: list[tuple[str, int, int]] = []
    for k in range(args.rounds):
        for name, measure_one in runs:  # interleaved: the machine's drift hits them alike
            log(f"round {k + 1}/{args.rounds}: {name}")
            with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
                before, after = measure_one(Path(tmp), jobs)
            rows.append((name, before, after))
            added[name] = (after - before) / jobs
    for name, before, after in rows:
        per = (after - before) / jobs
        table.add(
            name,
            f"{before / 2**20:.1f} -> {after / 2**20:.1f}",
            f"{after / jobs:,.0f}",
            f"{per:,.0f}",
            ratio(per, added.get("Disque, ADDJOB")),
            ratio(per, added["beanstalkd, put"]),
        )


class _View:
    """A lone node's view of the cluster, for a bare core."""

    my_id = "a1b2c3d4" + "0" * 32
    leaving = False

    def cluster_size(self) -> int:
        return 1

    def reachable_peers(self) -> list[str]:
        return []

    def all_peers(self) -> list[str]:
        return []


def _alloc(obj: object) -> int:
    """Bytes ``obj`` takes from the allocator: pymalloc rounds requests up to 16 bytes."""
    return (sys.getsizeof(obj) + 15) // 16 * 16


def objects(jobs: int, report: Report) -> None:
    """What a queued job holds, on a bare DisqueCore in this process."""
    from disq.core.disque.api import AddOptions
    from disq.core.disque.core import DisqueCore
    from disq.core.events import EventBuffer

    t0 = 1_700_000_000_123
    body = b"x" * BODY_BYTES
    core = DisqueCore(_View(), random.Random(1), t0)
    core.events = EventBuffer(False)
    core.persist = False
    core.add_job(t0, 0, "q", body, AddOptions())  # the queue and its first job exist
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    now = t0
    for i in range(jobs):
        if i % 100 == 0:  # 100 adds a millisecond, about a node's pace
            now += 1
        core.add_job(now, 0, "q", bytes(bytearray(body)), AddOptions())  # a body each
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    j = core.jobs[next(reversed(core.jobs))]
    heap = core._awake
    items = [("DJob", _alloc(j)), ("id str", _alloc(j.id)), ("body bytes", _alloc(j.body))]
    timer = next(e for e in heap if (e[-1] if isinstance(e, tuple) else e.job_id) is j.id)
    items.append((f"timer entry {type(timer).__name__}", _alloc(timer)))
    if isinstance(timer, tuple):
        ints = [(k, x) for k, x in enumerate(timer) if isinstance(x, int)]
        items += [(f"  timer[{k}] int", _alloc(x)) for k, x in ints]
    q = core.queues["q"]
    entry = q.skiplist[-1]
    if entry is j:
        items.append(("skiplist entry: the DJob itself", 0))
    else:
        items.append((f"skiplist entry {type(entry).__name__}", _alloc(entry)))
    sl = q.skiplist
    sl_bytes = sys.getsizeof(sl._lists) + sum(sys.getsizeof(x) for x in sl._lists)
    sl_bytes += sys.getsizeof(sl._maxes) + sys.getsizeof(sl._index)
    items += [
        ("jobs dict share", sys.getsizeof(core.jobs) // len(core.jobs)),
        ("timer heap list share", sys.getsizeof(heap) // max(1, len(heap))),
        ("skiplist lists share", sl_bytes // len(sl)),
    ]
    table = report.table(
        f"a queued job's bytes, {jobs:,} ADDJOB q <{BODY_BYTES} bytes> 0 on a bare core",
        ["part", "B"],
    )
    for name, size in items:
        table.add(name, str(size))
    table.add("sum", str(sum(s for _, s in items)))
    table.add("tracemalloc, per job added", f"{(after - before) / jobs:.0f}")


# What a node imports, in the order it does (node_main, then the runtime's parts).
IMPORT_STEPS = (
    ("asyncio (and ssl)", "asyncio"),
    ("uvloop", "uvloop"),
    ("structlog", "structlog"),
    ("grpc", "grpc.aio"),
    ("generated protobuf", "disq.proto_gen.api_pb2_grpc"),
    ("prometheus_client", "prometheus_client"),
    ("the cores (compiled library)", "disq.core.disque.core"),
    ("runtime, peer links, gRPC services", "disq.server.api_service"),
    ("aiohttp", "aiohttp"),
    ("admin port, dashboard (Jinja2)", "disq.dashboard.app"),
    ("node_main", "disq.node_main"),
)

_IMPORTS_SCRIPT = """
import importlib, json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
out = [["interpreter", rss()]]
for name, mod in json.loads(sys.argv[1]):
    importlib.import_module(mod)
    out.append([name, rss()])
print(json.dumps(out))
"""


def imports(report: Report) -> None:
    """RSS (MiB) of a fresh interpreter after each of a node's imports."""
    got = subprocess.run(
        [sys.executable, "-c", _IMPORTS_SCRIPT, json.dumps(IMPORT_STEPS)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    steps = json.loads(got.stdout)
    table = report.table("An idle node's RSS, import by import", ["step", "+ MiB", "RSS MiB"])
    prev = 0.0
    for name, rss in steps:
        table.add(name, f"{rss - prev:+.1f}", f"{rss:.1f}")
        prev = rss
    report.raw["imports"] = steps
