"""Where a cluster job's CPU goes, without sockets: the per-piece costs docs/benchmarks.md cites.

    .venv/bin/python scripts/profile_cluster.py

1. ADDJOB REPLICATE 1 on one node: RESP parsing, the command layer, the core.
2. ADDJOB REPLICATE 3 through three cores in one process, every message through the real
   protobuf codec (peer_wire), AOF records built: the CPU one replicated job costs a cluster
   before any IO.
"""

from __future__ import annotations

import itertools
import random
import time

from disq.core.disque.core import DisqueCore
from disq.core.membership import Membership
from disq.core.messages import ALIVE, Member, Message
from disq.doors.disque import RespStats, execute
from disq.doors.resp_door import RespDoor
from disq.protocol.resp import RespParser
from disq.server.peer_wire import decode_frame, encode_frame
from disq.testing.mesh import StaticView

BODY = b"x" * 100
ADDJOB = (
    b"*6\r\n$6\r\nADDJOB\r\n$7\r\nqueue-0\r\n$100\r\n"
    + BODY
    + b"\r\n$4\r\n5000\r\n$9\r\nREPLICATE\r\n$1\r\n1\r\n"
)


def us_per(n: int, t0: float) -> float:
    return (time.perf_counter() - t0) / n * 1e6


class _Node:
    def __init__(self, core: DisqueCore) -> None:
        self.core = core
        self.requirepass: str | None = None
        self.aof_error: str | None = None
        self.disk_full: str | None = None
        self.resp_stats = RespStats()

    def now_ms(self) -> int:
        return int(time.time() * 1000)


def single_node(n: int = 50_000) -> None:
    me = Member("a" * 40, "127.0.0.1", 7710, 7711, 0, ALIVE)
    core = DisqueCore(Membership(me, random.Random(1), 0), random.Random(1), 0)
    core.persist = False
    t0 = time.perf_counter()
    for k in range(n):
        core.add_job(1000, k, "queue-0", BODY, timeout_ms=5000, repl=1)
    print(f"core.add_job REPLICATE 1:            {us_per(n, t0):5.1f} us")
    parser = RespParser()
    batch = ADDJOB * 16
    t0 = time.perf_counter()
    for _ in range(n // 16):
        parser.feed(batch)
    print(f"RESP parse of one ADDJOB:            {us_per(n, t0):5.1f} us")
    node = _Node(core)
    door = RespDoor(node, itertools.count(1).__next__)  # type: ignore[arg-type]
    argv = [b"ADDJOB", b"queue-0", BODY, b"5000", b"REPLICATE", b"1"]
    t0 = time.perf_counter()
    for _ in range(n):
        execute(door.client, argv, 1000)
    print(f"command layer + core (parsed argv):  {us_per(n, t0):5.1f} us")
    t0 = time.perf_counter()
    for _ in range(n // 16):
        door.feed(batch)
    print(f"door.feed (parse + command + core):  {us_per(n, t0):5.1f} us")


def three_nodes(n: int = 16_000, in_flight: int = 800, columnar: bool = False) -> None:
    ids = [f"{i:02x}" * 20 for i in range(1, 4)]
    cores = {
        nid: DisqueCore(StaticView(nid, [p for p in ids if p != nid]), random.Random(k), 0)
        for k, nid in enumerate(ids)
    }
    creator = cores[ids[0]]
    now = 1000
    codec_s = 0.0
    t0 = time.perf_counter()
    for start in range(0, n, in_flight):
        for k in range(start, start + in_flight):
            creator.add_job(now, k, "q", BODY, timeout_ms=5000, repl=3)
        moved = True
        while moved:
            moved = False
            for src, core in cores.items():
                if not core.outbox:
                    continue
                by_dest: dict[str, list[Message]] = {}
                for dest, msg in core.outbox:
                    by_dest.setdefault(dest, []).append(msg)
                core.outbox.clear()
                for dest, msgs in by_dest.items():
                    c0 = time.perf_counter()
                    _, _, decoded = decode_frame(encode_frame(src, 1, msgs, columnar=columnar))
                    codec_s += time.perf_counter() - c0
                    for m in decoded:
                        cores[dest].on_message(now, src, m)
                moved = True
        for core in cores.values():
            core.replies.clear()
            core.aof_out.clear()
    us = us_per(n, t0)
    form = "batch messages  " if columnar else "one msg per job "
    print(
        f"REPLICATE 3, 3 cores, {form}: {us:5.1f} us of CPU per job ({1e6 / us:,.0f}/s),"
        f" of which codec {codec_s / n * 1e6:4.1f} us"
    )


if __name__ == "__main__":
    single_node()
    three_nodes(columnar=False)  # to a peer of an older build
    three_nodes(columnar=True)  # between nodes of this build (peer_link.py WIRE_COLUMNAR)
