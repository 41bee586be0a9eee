"""CPU of ``DisqueCore.add_job`` REPLICATE 1 on one node, in process, as a node runs it.

    .venv/bin/python scripts/probe_add_job.py [--adds 300000]

The node's collector thresholds (disq.node_main.GC_THRESHOLDS), events on, AOF records off,
one queue that only grows (nothing consumed), as in the ADDJOB REPLICATE 1 row. To compare two
trees, run it under each with ``PYTHONPATH`` (the old one exported with ``git archive REV``):

    PYTHONPATH=/tmp/old .venv/bin/python scripts/probe_add_job.py
    PYTHONPATH=. .venv/bin/python scripts/probe_add_job.py
"""

from __future__ import annotations

import argparse
import gc
import random
import time

from disq.core.disque.core import DisqueCore
from disq.core.membership import Membership
from disq.core.messages import ALIVE, Member
from disq.node_main import GC_THRESHOLDS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--adds", type=int, default=300_000)
    args = ap.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)
    me = Member("a" * 40, "127.0.0.1", 7710, 7711, 0, ALIVE)
    core = DisqueCore(Membership(me, random.Random(1), 0), random.Random(1), 0)
    core.persist = False
    body = b"x" * 100
    t0 = time.perf_counter()
    for k in range(args.adds):
        core.add_job(1000, k, "queue-0", body, timeout_ms=5000, repl=1)
    us = (time.perf_counter() - t0) / args.adds * 1e6
    print(f"core.add_job REPLICATE 1: {us:.2f} us per add ({args.adds:,} adds)")


if __name__ == "__main__":
    main()
