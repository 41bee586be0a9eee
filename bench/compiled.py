"""The CPU of disq's hot operations in process, the compiled build (mypyc) beside the Python
sources (``DISQ_PURE=1``).

Builds nothing: compile first (``make build``); without a compiled build only the sources run
and the report says so. Each run starts one interpreter with ``DISQ_PURE=1`` and one without,
alternately (a slower moment of the machine hits both), and each times every operation below
(the best of 3 timings); the table has the medians per operation and the speed-up. Only
in-process work: no sockets, no files, no event loop.

- core.add_job: DisqueCore.add_job REPLICATE 1, no AOF
- door.feed of one ADDJOB: RESP parsing, the command table and the core, 16 ADDJOBs a read
- REPLICATE 3 mesh: an ADDJOB REPLICATE 3 through three node cores (disq/testing/mesh.py):
  REPLJOB, GOTJOB, the Readies, AOF records, the reply
- beanstalk put: BeanstalkDoor.receive of ``put`` (parse, core, AOF record)
- peer_wire: a frame of 16 REPLJOBs (columnar) and their GOTJOBs encoded and decoded
- AOF: LOADJOB records encoded and framed, then the image scanned and decoded

  python -m bench mypyc --runs 5
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable

from bench.common import BODY_BYTES, median, resp_request
from bench.report import Report, ratio

HELP = "the hot operations' CPU in process, compiled (mypyc) beside the Python sources"

BODY = b"x" * BODY_BYTES
ADDJOB = resp_request("ADDJOB", "queue-0", BODY, "5000", "REPLICATE", "1")


def _timed(fn: Callable[[], int]) -> float:
    """µs per operation of ``fn`` (which returns how many it ran), the best of 3."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def operations() -> dict[str, Callable[[], int]]:
    """The timed operations, each returning how many it ran."""
    from disq.core.beanstalk.core import BeanstalkCore
    from disq.core.disque.api import AddOptions
    from disq.core.disque.core import DisqueCore
    from disq.core.membership import Membership
    from disq.core.messages import ALIVE, GotJob, JobData, Member, ReplJob
    from disq.doors.beanstalk_door import BeanstalkDoor
    from disq.doors.disque import RespStats
    from disq.doors.resp_door import RespDoor
    from disq.persistence.cluster_records import REC_LOADJOB, decode_loadjob, encode_loadjob
    from disq.persistence.framing import frame, scan
    from disq.server.peer_wire import decode_frame, encode_frame
    from disq.testing.mesh import Mesh

    me = Member("a" * 40, "127.0.0.1", 7710, 7711, 0, ALIVE)
    opts_one, opts_three = AddOptions(5000, repl=1), AddOptions(5000, repl=3)

    def new_core() -> DisqueCore:
        core = DisqueCore(Membership(me, random.Random(1), 0), random.Random(1), 0)
        core.persist = False
        return core

    def add_job() -> int:
        core = new_core()
        for k in range(50_000):
            core.add_job(1000, k, "queue-0", BODY, opts_one)
        return 50_000

    class _Node:  # what the RESP door asks of its node
        def __init__(self, core: DisqueCore) -> None:
            self.core = core
            self.requirepass: str | None = None
            self.aof_error: str | None = None
            self.disk_full: str | None = None
            self.resp_stats = RespStats()

        def now_ms(self) -> int:
            return 1000

    def door_feed() -> int:
        door = RespDoor(_Node(new_core()), itertools.count(1).__next__)  # type: ignore[arg-type]
        for _ in range(50_000 // 16):
            door.feed(ADDJOB * 16)
        return 50_000 // 16 * 16

    def mesh_repl3() -> int:
        mesh = Mesh(3)
        core, node = mesh.disque(0), mesh.nodes[0]
        for _ in range(50):
            for _ in range(100):
                core.add_job(mesh.now, node.new_token(), "q", BODY, opts_three)
            mesh.pump()
            for replies in mesh.replies.values():
                replies.clear()
            for records in mesh.aof.values():
                records.clear()
        return 5000

    class _Info:  # what the beanstalk door asks of its server
        op_counts = [0] * 64

        def stats_tail(self, now_ms: int) -> list[tuple[str, object]]:
            return []

    def beanstalk_put() -> int:
        door = BeanstalkDoor(BeanstalkCore(persist=True), _Info())
        batch = (b"put 1024 0 60 100\r\n" + BODY + b"\r\n") * 16
        sink: list[bytes] = []
        for _ in range(40_000 // 16):
            door.receive(batch, 1000, sink)
            sink.clear()
            door.engine.aof_out.clear()
        return 40_000 // 16 * 16

    jobs = [
        JobData(f"D-{k:08x}-{'a' * 24}-05a0", "q", BODY, 3, 1_000_000 + k, 0, 300, 3600)
        for k in range(16)
    ]

    def wire() -> int:
        repl, got = [ReplJob(j) for j in jobs], [GotJob(j.id) for j in jobs]
        for _ in range(2000):
            decode_frame(encode_frame("b" * 40, 1, repl, columnar=True))
            decode_frame(encode_frame("b" * 40, 2, got, columnar=True))
        return 2000 * 16

    def aof() -> int:
        for _ in range(2000):
            image = b"".join(frame(REC_LOADJOB, encode_loadjob(j)) for j in jobs)
            recs: list[tuple[int, bytes]] = []
            scan(image, 0, recs)
            for _, payload in recs:
                decode_loadjob(payload)
        return 2000 * 16

    return {
        "core.add_job REPLICATE 1": add_job,
        "door.feed of one ADDJOB": door_feed,
        "ADDJOB REPLICATE 3 through a 3-node mesh": mesh_repl3,
        "beanstalk put (door.receive)": beanstalk_put,
        "peer_wire: REPLJOB + GOTJOB, encoded and decoded": wire,
        "AOF: LOADJOB framed, scanned, decoded": aof,
    }


def child() -> None:
    from disq import _native

    want = os.environ.get("DISQ_PURE") != "1"
    if _native.COMPILED_IN_USE != want:
        raise SystemExit(f"asked for {'compiled' if want else 'pure'}: {_native.describe()}")
    sys.stdout.write(json.dumps({name: _timed(fn) for name, fn in operations().items()}) + "\n")


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DISQ_PURE"}
    return {**env, "DISQ_PURE": "1"} if pure else env


def compiled_state() -> str:
    code = "import disq._native as n; print(n.describe())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(False), capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=5, help="interleaved runs of each build")
    p.add_argument("--quick", action="store_true", help="one run of each")


def run(args: argparse.Namespace, report: Report) -> None:
    runs = 1 if args.quick else args.runs
    state = compiled_state()
    builds = ["pure"] + (["compiled"] if state.startswith("compiled") else [])
    if len(builds) == 1:
        report.note(f"no compiled build ({state}): `make build` compiles it; sources alone")
    else:
        report.note(f"compiled build: {state}")
    results: dict[str, list[dict[str, float]]] = {b: [] for b in builds}
    for _ in range(runs):
        for b in builds:
            out = subprocess.run(
                [sys.executable, "-m", "bench.compiled"],
                env=_env(b == "pure"),
                capture_output=True,
                text=True,
                check=True,
            )
            results[b].append(json.loads(out.stdout.strip().splitlines()[-1]))
    table = report.table(
        f"µs per operation, median of {runs} interleaved runs (each the best of 3)",
        ["operation", *(f"{b} µs" for b in builds), "compiled / pure (speed-up)"],
    )
    for name in results["pure"][0]:
        med = {b: median(r[name] for r in results[b]) for b in builds}
        speedup = ratio(med["pure"], med.get("compiled"))
        table.add(name, *(f"{med[b]:.2f}" for b in builds), speedup)


if __name__ == "__main__":
    child()
