"""CPU of disq's hot operations in process, pure Python vs the compiled (mypyc) build.

    .venv/bin/python scripts/probe_mypyc.py [--runs 5]

Builds nothing: compile first (``make build``). Each run starts one interpreter with
``DISQ_PURE=1`` and one without, alternately (interleaved, so a slower moment of the machine
hits both), and each times every operation below; the table is the median per operation.
Only in-process work: no sockets, no files, no event loop.

- core.add_job: DisqueCore.add_job REPLICATE 1, no AOF (scripts/probe_add_job.py's case)
- door.feed ADDJOB: RESP parse + command table + core, 16 ADDJOBs per read
- REPLICATE 3 mesh: an ADDJOB REPLICATE 3 through three NodeCores (disq/testing/mesh.py):
  REPLJOB, GOTJOB, the Readies, AOF records, the reply
- beanstalk put: BeanstalkDoor.receive of ``put`` (parse + core + AOF record)
- peer_wire: encode + decode of a frame of 16 REPLJOBs (columnar) and their GOTJOBs
- AOF framing: LOADJOB record encode + frame, then scan + decode of the file image
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

BODY = b"x" * 100
ADDJOB = (
    b"*6\r\n$6\r\nADDJOB\r\n$7\r\nqueue-0\r\n$100\r\n"
    + BODY
    + b"\r\n$4\r\n5000\r\n$9\r\nREPLICATE\r\n$1\r\n1\r\n"
)


def _timed(fn: Callable[[], int]) -> float:
    """us per operation of ``fn`` (which returns how many operations it ran), best of 3."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def child() -> dict[str, float]:
    import random

    from disq import _native
    from disq.core.beanstalk.core import BeanstalkCore
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

    assert _native.COMPILED_IN_USE == (os.environ.get("DISQ_PURE") != "1"), _native.describe()
    me = Member("a" * 40, "127.0.0.1", 7710, 7711, 0, ALIVE)
    out: dict[str, float] = {}

    def add_job() -> int:
        core = DisqueCore(Membership(me, random.Random(1), 0), random.Random(1), 0)
        core.persist = False
        for k in range(50_000):
            core.add_job(1000, k, "queue-0", BODY, timeout_ms=5000, repl=1)
        return 50_000

    class _Node:
        def __init__(self, core: DisqueCore) -> None:
            self.core = core
            self.requirepass: str | None = None
            self.aof_error: str | None = None
            self.disk_full: str | None = None
            self.resp_stats = RespStats()

        def now_ms(self) -> int:
            return 1000

    def door_feed() -> int:
        core = DisqueCore(Membership(me, random.Random(1), 0), random.Random(1), 0)
        core.persist = False
        door = RespDoor(_Node(core), itertools.count(1).__next__)  # type: ignore[arg-type]
        batch = ADDJOB * 16
        for _ in range(50_000 // 16):
            door.feed(batch)
        return 50_000 // 16 * 16

    def mesh_repl3() -> int:
        mesh = Mesh(3)
        core = mesh.disque(0)
        node = mesh.nodes[0]
        n = 0
        for _ in range(50):
            for _ in range(100):
                core.add_job(mesh.now, node.new_token(), "q", BODY, timeout_ms=5000, repl=3)
                n += 1
            mesh.pump()
            for v in mesh.replies.values():
                v.clear()
            for a in mesh.aof.values():
                a.clear()
        return n

    class _Info:
        op_counts = [0] * 64

        def stats_tail(self, now_ms: int) -> list[tuple[str, object]]:
            return []

    def beanstalk_put() -> int:
        door = BeanstalkDoor(BeanstalkCore(persist=True), _Info())
        put = b"put 1024 0 60 100\r\n" + BODY + b"\r\n"
        batch = put * 16
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
    node_id = "b" * 40

    def wire() -> int:
        repl = [ReplJob(j) for j in jobs]
        got = [GotJob(j.id) for j in jobs]
        for _ in range(2000):
            decode_frame(encode_frame(node_id, 1, repl, columnar=True))
            decode_frame(encode_frame(node_id, 2, got, columnar=True))
        return 2000 * 16

    def aof() -> int:
        for _ in range(2000):
            image = b"".join(frame(REC_LOADJOB, encode_loadjob(j)) for j in jobs)
            recs: list[tuple[int, bytes]] = []
            scan(image, 0, recs)
            for _, payload in recs:
                decode_loadjob(payload)
        return 2000 * 16

    for name, fn in [
        ("core.add_job REPLICATE 1", add_job),
        ("door.feed of one ADDJOB", door_feed),
        ("ADDJOB REPLICATE 3, 3-node mesh", mesh_repl3),
        ("beanstalk put (door.receive)", beanstalk_put),
        ("peer_wire REPLJOB+GOTJOB enc+dec", wire),
        ("AOF LOADJOB frame+scan+decode", aof),
    ]:
        out[name] = _timed(fn)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child()))
        return
    results: dict[str, list[dict[str, float]]] = {"pure": [], "compiled": []}
    for _ in range(args.runs):
        for mode in ("pure", "compiled"):
            env = {k: v for k, v in os.environ.items() if k != "DISQ_PURE"}
            if mode == "pure":
                env["DISQ_PURE"] = "1"
            r = subprocess.run(
                [sys.executable, __file__, "--child"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            results[mode].append(json.loads(r.stdout))
    print(f"median of {args.runs} interleaved runs, us per operation")
    print(f"{'operation':36} {'pure':>8} {'compiled':>9} {'speedup':>8}")
    for name in results["pure"][0]:
        p = statistics.median(r[name] for r in results["pure"])
        c = statistics.median(r[name] for r in results["compiled"])
        print(f"{name:36} {p:8.2f} {c:9.2f} {p / c:7.2f}x")


if __name__ == "__main__":
    main()
