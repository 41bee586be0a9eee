#!/usr/bin/env python3
"""Where one replicated ADDJOB's latency goes, hop by hop, on a real 3-node cluster.

Three ``disq-node`` processes from Disque-style config files (AOF off), formed with CLUSTER
MEET as scripts/bench_cluster.py does, each started through this script, which first wraps
a few of the server's methods to record when they run (``time.perf_counter_ns``: Linux's
CLOCK_MONOTONIC, one clock for every process on the machine). One client then adds ``--adds``
jobs with REPLICATE 3, one at a time (pipeline 1), timing each from its send to its reply.
Every add's events are cut into the path's hops and the medians printed:

  client -> door       the client's write until node A's RESP protocol has the bytes
  door: command        A parsed and ran the command (the core's add_job)
  command -> flush     the flush was scheduled (call_soon) and the loop came round to it
  flush -> frames out  A's flush: the Ready (core, AOF, messages) until the frames are
                       handed to the links (the lane writes them there; a gRPC stream's
                       writer task later, which the next hop then includes)
  wire -> peer core    A's frame until the first peer's runtime has the REPLJOB
  peer: core -> out    that peer registered the copy and wrote its GOTJOB
  wire -> A core       the first GOTJOB back at A's runtime
  2nd GOTJOB           the other peer's GOTJOB (REPLICATE 3 waits for both)
  A -> reply written   A's flush that answers the client
  reply -> client      the reply's bytes until the client has them

    .venv/bin/python scripts/probe_add_hops.py [--adds 3000] [--lane off]

``--lane off`` starts the nodes with ``job-lane-port -1``: job messages on the gRPC streams,
as before the job lane. The wrapped methods are the IO layer's, compiled by mypyc since
issue 33 (a native class's methods cannot be replaced): the probed nodes run the .py sources
(``DISQ_PURE=1``), so the hops show where an add waits, not the compiled build's CPU times.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

HOPS = [
    "client -> door",
    "door: command",
    "command -> flush",
    "flush -> frames out",
    "wire -> peer core",
    "peer: core -> out",
    "wire -> A core",
    "2nd GOTJOB",
    "A -> reply written",
    "reply -> client",
]


# ---- inside a node ---------------------------------------------------------------------------


def run_node(conf: str, out: Path) -> None:
    """Wrap the IO layer's methods, then run disq-node on ``conf``; SIGUSR2 writes ``out``."""
    if "disq" in sys.modules:
        raise SystemExit("probe_add_hops: disq was imported before the node chose pure mode")
    os.environ["DISQ_PURE"] = "1"  # the compiled IO layer's classes cannot be wrapped
    from disq.core.messages import GotJob, ReplJob
    from disq.server.peer_link import PeerLinks
    from disq.server.resp_tcp import RespProtocol
    from disq.server.runtime import NodeRuntime

    clock = time.perf_counter_ns
    events: list[tuple[str, int]] = []
    add = events.append

    def around(cls: Any, name: str, tag: str) -> None:
        orig = getattr(cls, name)

        def wrapper(self: Any, *args: Any) -> Any:
            add((tag, clock()))
            return orig(self, *args)

        setattr(cls, name, wrapper)

    around(RespProtocol, "data_received", "resp_in")
    around(RespProtocol, "_after_commands", "cmd_done")
    # At entry: the write happens inside, and the reader may run (on the other core) before
    # an exit stamp would be taken.
    around(RespProtocol, "flush", "resp_out")
    around(NodeRuntime, "_flush", "flush_in")
    around(PeerLinks, "_flush", "frames_out")
    orig_peer = NodeRuntime.on_peer_messages

    def on_peer(self: Any, sender: str, msgs: list[Any]) -> None:
        kinds = {type(m) for m in msgs}
        if ReplJob in kinds:
            add(("repljob_in", clock()))
        elif GotJob in kinds:
            add(("gotjob_in", clock()))
        orig_peer(self, sender, msgs)

    NodeRuntime.on_peer_messages = on_peer  # type: ignore[method-assign]

    def dump(_sig: int, _frame: Any) -> None:
        out.write_text(json.dumps(events))

    signal.signal(signal.SIGUSR2, dump)
    import runpy

    sys.argv = ["disq-node", conf]
    runpy.run_module("disq.node_main", run_name="__main__")


# ---- the probe -------------------------------------------------------------------------------


def addjob(queue: str, body: bytes) -> bytes:
    args = [b"ADDJOB", queue.encode(), body, b"5000", b"REPLICATE", b"3"]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def run_client(port: int, adds: int) -> list[tuple[int, int]]:
    clock = time.perf_counter_ns
    req = addjob("hops", b"x" * 100)
    spans = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(adds):
            t0 = clock()
            s.sendall(req)
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    raise SystemExit("node closed the connection")
                reply += chunk
            spans.append((t0, clock()))
            if not reply.startswith(b"+D-"):
                raise SystemExit(f"unexpected reply {reply!r}")
    return spans


def hops_of(span: tuple[int, int], nodes: list[list[tuple[str, int]]]) -> list[float] | None:
    """The hop durations (us) of one add, or None if its events are not all there."""
    t0, t1 = span
    a = [(tag, t) for tag, t in nodes[0] if t0 <= t <= t1]
    peers = [[(tag, t) for tag, t in evs if t0 <= t <= t1] for evs in nodes[1:]]

    def first(evs: list[tuple[str, int]], tag: str, after: int) -> int | None:
        return next((t for g, t in evs if g == tag and t >= after), None)

    resp_in = first(a, "resp_in", t0)
    if resp_in is None:
        return None
    cmd_done = first(a, "cmd_done", resp_in)
    flush_in = first(a, "flush_in", cmd_done or t1)
    frames_out = first(a, "frames_out", flush_in or t1)
    if cmd_done is None or flush_in is None or frames_out is None:
        return None
    # The peer whose REPLJOB arrived first, and its GOTJOB out.
    arrivals = []
    for evs in peers:
        rin = first(evs, "repljob_in", frames_out)
        if rin is None:
            return None
        out = first(evs, "frames_out", rin)
        if out is None:
            return None
        arrivals.append((rin, out))
    arrivals.sort()
    peer_in, peer_out = arrivals[0]
    got1 = first(a, "gotjob_in", peer_out)
    if got1 is None:
        return None
    got2 = first(a, "gotjob_in", got1 + 1)
    last_got = got2 if got2 is not None else got1
    reply_out = first(a, "resp_out", last_got)
    if reply_out is None:
        return None
    points = [t0, resp_in, cmd_done, flush_in, frames_out]
    points += [peer_in, peer_out, got1, last_got, reply_out, t1]
    return [(b - a_) / 1000 for a_, b in itertools.pairwise(points)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--adds", type=int, default=3000)
    p.add_argument("--lane", choices=("on", "off"), default="on")
    p.add_argument("--as-node", nargs=2, metavar=("OUT", "CONF"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.as_node:
        run_node(args.as_node[1], Path(args.as_node[0]))
        return

    import bench_cluster as bc

    extra = "job-lane-port -1\n" if args.lane == "off" else ""
    base_text = bc.Node.config_text
    bc.Node.config_text = lambda self: base_text(self) + extra  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="disq-hops-") as tmp:
        root = Path(tmp)
        outs = [root / f"hops{i}.json" for i in range(bc.NODES)]
        cluster = bc.Cluster([sys.executable, __file__, "--as-node", "OUT"], root, aof=False)
        for node, out in zip(cluster.nodes, outs, strict=True):
            node.cmd = [sys.executable, __file__, "--as-node", str(out)]
        try:
            cluster.start(60)
            run_client(cluster.ports[0], max(100, args.adds // 10))  # warm-up
            spans = run_client(cluster.ports[0], args.adds)
            for node in cluster.nodes:
                assert node.proc is not None
                os.kill(node.proc.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 10
            while not all(o.exists() for o in outs) and time.monotonic() < deadline:
                time.sleep(0.05)
            nodes = [json.loads(o.read_text()) for o in outs]
        finally:
            for node in cluster.nodes:
                node.stop()
    rows = [h for h in (hops_of(s, nodes) for s in spans) if h is not None]
    total = statistics.median((t1 - t0) / 1000 for t0, t1 in spans)
    print(
        f"ADDJOB REPLICATE 3, 1 connection, pipeline 1, {len(spans)} adds "
        f"({len(rows)} with every hop seen), job lane {args.lane}"
    )
    print(f"  {'hop':<22} {'p50 us':>8} {'p90 us':>8}")
    for k, name in enumerate(HOPS):
        col = sorted(r[k] for r in rows)
        print(f"  {name:<22} {statistics.median(col):8.1f} {col[int(len(col) * 0.9)]:8.1f}")
    print(f"  {'whole add (client)':<22} {total:8.1f}")


if __name__ == "__main__":
    main()
