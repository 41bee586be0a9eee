"""What a standalone node's start costs beyond the floor, step by step, in CPU time.

Each run is a fresh interpreter that takes disq-node's steps in its order (the flags, the
bind, the engine's modules, the runtime, uvloop, the listening server) and prints the CPU
milliseconds (``time.process_time()``) of each; the table is the median of ``--runs``. The
first step, ``import asyncio``, is the floor's own (docs/benchmarks.md, "Issue 31").

Usage: ``PYTHONPATH=$PWD .venv/bin/python scripts/startup_steps.py [--runs 11]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

STEPS = r"""
import time
P = time.process_time
marks = [("start", P())]
def mark(name):
    marks.append((name, P()))
import asyncio; mark("import asyncio (the floor's)")
import disq; mark("disq package, disq._native's stale-build guard")
import disq.node_main as nm; mark("disq.node_main (socket, disq.node_flags)")
args = nm.beanstalkd_args(["-l", "127.0.0.1", "-p", "0"]); mark("the flags (no argparse)")
sock = nm._listen("beanstalk", "127.0.0.1", 0); mark("bind")
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {}
    for _ in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", STEPS],
            capture_output=True,
            text=True,
            check=True,
            cwd="/",  # -c puts the working directory first on sys.path
        ).stdout
        for line in out.splitlines():
            name, ms = line.split("\t")
            rows.setdefault(name, []).append(float(ms))
    beyond = 0.0
    for name, values in rows.items():
        med = statistics.median(values)
        if not name.startswith("import asyncio"):
            beyond += med
        print(f"{med:7.2f} ms  {name}")
    print(f"{beyond:7.2f} ms  beyond the floor's import asyncio (sum of medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
