#!/usr/bin/env python3
"""Client.add_job from 1 to 64 threads sharing one Client: adds per second of each path.

  loop      every add handed to the client's loop thread (``Client.add_job`` before issue
            29): concurrent adds travel batched, one AddJobs per loop iteration
  now       ``Client.add_job``: one add at a time on the caller's thread (a unary AddJob on
            grpc's sync channel), the adds that come meanwhile on the loop, batched
  unary     every add on its caller's thread, each a unary AddJob (what ``now`` would do
            without handing the concurrent adds to the loop)

One node (cluster/lab.py, AOF fsync everysec), REPLICATE 1, 600-byte bodies; the rows
interleaved in a random order, ``--rounds`` times, the best round kept (the machine's other
load only ever slows a round down). "now" after a round with overlapping adds starts on
the loop for up to a second (SHARED_FOR_S), as a real producer would.

    .venv/bin/python scripts/probe_add_threads.py [--adds 2000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

from bench_common import log, machine_info  # noqa: E402

from cluster.lab import Lab  # noqa: E402

BODY = b"x" * 600


def rate(add: Callable[[], object], threads: int, adds: int) -> float:
    per_thread = max(50, adds // threads)
    start = threading.Barrier(threads + 1)

    def work() -> None:
        start.wait()
        for _ in range(per_thread):
            add()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    return threads * per_thread / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adds", type=int, default=2000, help="adds per row and round")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    from disq.client import Client

    with Lab(1, Path(tempfile.mkdtemp(prefix="probe-add-threads-")), node_timeout_ms=2000) as lab:
        target = f"127.0.0.1:{lab.node(0).bus_port}"
        with Client(target, discover=False) as c:
            adder = c._adder
            paths: dict[str, Callable[[], object]] = {
                "loop": lambda: c._add_on_loop("probe-threads", BODY, replicate=1),
                "now": lambda: c.add_job("probe-threads", BODY, replicate=1),
                "unary": lambda: adder._add_here("probe-threads", BODY, {"replicate": 1}),
            }
            for name in paths:  # warm up every path and its channel
                rate(paths[name], 1, 200)
            lines = [
                f"adds/s, best of {args.rounds} rounds ({machine_info()})",
                "",
                "| threads | " + " | ".join(paths) + " |",
                "| ---: |" + " ---: |" * len(paths),
            ]
            for threads in (1, 4, 16, 64):
                best = dict.fromkeys(paths, 0.0)
                for _ in range(args.rounds):
                    order = list(paths.items())
                    random.shuffle(order)  # no row always runs after the same one
                    for name, add in order:
                        best[name] = max(best[name], rate(add, threads, args.adds))
                log(f"{threads} threads: {best}")
                lines.append(
                    f"| {threads} | " + " | ".join(f"{best[n]:,.0f}" for n in paths) + " |"
                )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
