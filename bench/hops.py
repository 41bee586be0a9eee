"""Where one replicated ADDJOB's latency goes, hop by hop, on 3 real nodes; the whole add
beside Disque's, in one run.

Three nodes from Disque config files (cluster/lab.py, AOF off) started as ``python -m
bench.hop_node``: a disq node whose IO layer stamps when its methods run (the Python sources:
compiled classes cannot be wrapped). One client adds --adds jobs with REPLICATE 3, one at a
time (pipeline 1), timing each from its send to its reply; every add is cut into its hops and
the medians printed:

  client -> door       the client's write until node A's RESP protocol has the bytes
  door: command        A parsed and ran the command (the core's add_job)
  command -> flush     the flush was scheduled (call_soon) and the loop came round to it
  flush -> frames out  A's flush: the core's output, records and messages, handed to the links
  wire -> peer core    A's frame until the first peer's runtime has the REPLJOB
  peer: core -> out    that peer registered the copy and wrote its GOTJOB
  wire -> A core       the first GOTJOB back at A's runtime
  2nd GOTJOB           the other peer's GOTJOB (REPLICATE 3 waits for both)
  A -> reply written   A's flush that answers the client
  reply -> client      the reply's bytes until the client has them

Then the same client, the same adds, on 3 disq nodes as built (compiled when it is: nothing
wrapped) and on 3 Disque nodes (when built): the whole add, side by side.
``--lane off``: job messages on the gRPC streams (``job-lane-port -1``), not the job lane.

  python -m bench hops --adds 3000
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path

from bench import servers
from bench.common import HOST, Build, log, resp_request
from bench.report import Report, ratio
from cluster.lab import Lab

HELP = "one replicated ADDJOB's latency hop by hop; the whole add beside Disque"

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
Events = list[tuple[str, int]]


def add_spans(port: int, adds: int) -> list[tuple[int, int]]:
    """``adds`` ADDJOB REPLICATE 3, one at a time: (sent, answered) of each, in ns."""
    clock = time.perf_counter_ns
    req = resp_request("ADDJOB", "hops", b"x" * 100, "5000", "REPLICATE", "3")
    spans = []
    with socket.create_connection((HOST, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(adds):
            t0 = clock()
            s.sendall(req)
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError("the node closed the connection")
                reply += chunk
            spans.append((t0, clock()))
            if not reply.startswith(b"+D-"):
                raise RuntimeError(f"unexpected reply {reply!r}")
    return spans


def hops_of(span: tuple[int, int], nodes: list[Events]) -> list[float] | None:
    """The hop durations (µs) of one add, or None if its events are not all there."""
    t0, t1 = span
    a, *peers = [[(tag, t) for tag, t in evs if t0 <= t <= t1] for evs in nodes]

    def first(evs: Events, tag: str, after: int) -> int | None:
        return next((t for g, t in evs if g == tag and t >= after), None)

    points = [t0]
    for tag in ("resp_in", "cmd_done", "flush_in", "frames_out"):  # on node A, in turn
        t = first(a, tag, points[-1])
        if t is None:
            return None
        points.append(t)
    arrivals = []  # per peer: its REPLJOB in, its GOTJOB out
    for evs in peers:
        rin = first(evs, "repljob_in", points[-1])
        out = None if rin is None else first(evs, "frames_out", rin)
        if rin is None or out is None:
            return None
        arrivals.append((rin, out))
    peer_in, peer_out = min(arrivals)  # the first peer the REPLJOB reached
    got1 = first(a, "gotjob_in", peer_out)
    if got1 is None:
        return None
    got2 = first(a, "gotjob_in", got1 + 1) or got1
    reply_out = first(a, "resp_out", got2)
    if reply_out is None:
        return None
    points += [peer_in, peer_out, got1, got2, reply_out, t1]
    return [(b - x) / 1000 for x, b in itertools.pairwise(points)]


def whole_adds(lab: Lab, adds: int) -> list[float]:
    add_spans(lab.node(0).port, max(100, adds // 10))  # warm-up
    return [(t1 - t0) / 1000 for t0, t1 in add_spans(lab.node(0).port, adds)]


def conf(lane: str) -> list[str]:
    return ["appendonly no", "drain-timeout 0", *(["job-lane-port -1"] if lane == "off" else [])]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adds", type=int, default=3000)
    p.add_argument("--lane", choices=("on", "off"), default="on")
    servers.add_disque_options(p)
    p.add_argument("--quick", action="store_true", help="300 adds")


def run(args: argparse.Namespace, report: Report) -> None:
    adds = 300 if args.quick else args.adds
    build = Build.this()
    whole: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-hops-") as tmp_name:
        tmp = Path(tmp_name)
        log(f"{adds:,} adds on 3 nodes recording their hops")
        lab = Lab(
            3,
            tmp / "hops",
            node_timeout_ms=5000,
            extra_conf=conf(args.lane),
            node_cmd=[build.python, "-m", "bench.hop_node"],
            python=build.python,
            env={**build.env, "DISQ_PURE": "1"},
        )
        with lab:
            spans = add_spans(lab.node(0).port, max(100, adds // 10))  # warm-up
            spans = add_spans(lab.node(0).port, adds)
        events = [json.loads((nd.dir / "hops.json").read_text()) for nd in lab.nodes]
        whole["disq, hops recorded (Python sources)"] = [(t1 - t0) / 1000 for t0, t1 in spans]
        log(f"{adds:,} adds on 3 disq nodes as built")
        with Lab(
            3, tmp / "built", node_timeout_ms=5000, extra_conf=conf(args.lane), **build.lab_kwargs()
        ) as lab:
            whole["disq as built"] = whole_adds(lab, adds)
        binary = servers.disque_from(args)
        if binary is not None:
            log(f"{adds:,} adds on 3 Disque nodes")
            with Lab(
                3,
                tmp / "disque",
                node_timeout_ms=5000,
                node_cmd=[str(binary)],
                extra_conf=["appendonly no"],
            ) as lab:
                whole["Disque"] = whole_adds(lab, adds)
    rows = [h for h in (hops_of(s, events) for s in spans) if h is not None]
    table = report.table(
        f"ADDJOB REPLICATE 3, 1 connection, pipeline 1, {len(spans):,} adds ({len(rows):,} "
        f"with every hop seen), job lane {args.lane}, µs",
        ["hop", "p50", "p90"],
    )
    for k, name in enumerate(HOPS):
        col = sorted(r[k] for r in rows)
        table.add(name, f"{statistics.median(col):.1f}", f"{col[int(len(col) * 0.9)]:.1f}")
    ref = statistics.median(whole["Disque"]) if "Disque" in whole else None
    table = report.table(
        "the whole add, as the client sees it, µs", ["nodes", "p50", "p90", "x Disque"]
    )
    for name, values in whole.items():
        values.sort()
        med = statistics.median(values)
        table.add(name, f"{med:,.1f}", f"{values[int(len(values) * 0.9)]:,.1f}", ratio(med, ref))
