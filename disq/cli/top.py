"""``disq top``: a live view of a cluster's queues and nodes, with rates.

Every frame compares two samples. A sample asks the cluster for its nodes (Hello), then asks
each node directly (its own client, no discovery) for INFO and for QSTAT of each of its queues:
Disque's queues are local to a node, so a queue's figures are the sums over the nodes that
hold it, and each rate is the sum of per-node counter deltas (jobs_in, jobs_out,
total_commands_processed) over the time between the two samples.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from disq.cli.format import node_state, table
from disq.client import AsyncClient, DisqError

CLEAR = "\x1b[H\x1b[2J"
QUEUE_HEADERS = ("QUEUE", "LEN", "IN/S", "OUT/S", "BLOCKED", "PAUSE")
NODE_HEADERS = ("NODE", "ADDRESS", "PRIO", "STATE", "JOBS", "QUEUES", "CLIENTS", "CMD/S")


@dataclass(slots=True)
class NodeSample:
    id: str
    addr: str  # host:grpc_port; "" when the node serves no gRPC
    priority: int
    info: dict[str, str] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None


@dataclass(slots=True)
class Sample:
    at: float  # time.monotonic() when the sample started
    nodes: list[NodeSample]


class Sampler:
    """Takes samples; keeps one client per node between them."""

    def __init__(self, seeds: str, options: dict[str, Any]) -> None:
        self._options = options
        self._main = AsyncClient(seeds, **options)
        self._direct: dict[str, AsyncClient] = {}

    async def sample(self) -> Sample:
        at = time.monotonic()
        hello = await self._main.hello()
        nodes = [
            NodeSample(n.id, f"{n.host}:{n.grpc_port}" if n.grpc_port else "", n.priority)
            for n in hello.nodes
        ]
        nodes.sort(key=lambda n: (n.addr, n.id))
        await asyncio.gather(*(self._sample_node(n) for n in nodes))
        return Sample(at, nodes)

    async def _sample_node(self, node: NodeSample) -> None:
        if not node.addr:
            node.error = "NOGRPC"
            return
        client = self._direct.get(node.addr)
        if client is None:
            client = self._direct[node.addr] = AsyncClient(
                node.addr, discover=False, **self._options
            )
        try:
            info = await client.info()
            names = await client.queues()
            stats = await asyncio.gather(*(client.qstat(q) for q in names), return_exceptions=True)
        except DisqError as exc:
            node.error = exc.reason
            return
        for s in stats:
            if isinstance(s, DisqError):
                node.error = s.reason
                return
            if isinstance(s, BaseException):
                raise s
        node.info = info
        node.queues = {s["name"]: s for s in stats if isinstance(s, dict)}

    async def close(self) -> None:
        for client in [self._main, *self._direct.values()]:
            await client.close()


async def sample_once(seeds: str, options: dict[str, Any]) -> Sample:
    """One sample of the whole cluster (``disq queues`` uses it)."""
    sampler = Sampler(seeds, options)
    try:
        return await sampler.sample()
    finally:
        await sampler.close()


def _delta(now: int, before: int | None) -> int:
    """A counter's growth; a counter that went back (queue or node recreated) restarted at 0."""
    if before is None or now < before:
        return now
    return now - before


def _int(info: dict[str, str], key: str) -> int | None:
    try:
        return int(info[key])
    except (KeyError, ValueError):
        return None


def queue_rows(cur: Sample, prev: Sample | None = None) -> list[dict[str, Any]]:
    """One row per queue name, summed over the nodes holding it; rates against ``prev``."""
    dt = max(cur.at - prev.at, 1e-6) if prev is not None else 1.0
    before = {n.id: n for n in prev.nodes if n.error is None} if prev is not None else {}
    sums: dict[str, dict[str, Any]] = {}
    for n in cur.nodes:
        if n.error is not None:
            continue
        old = before.get(n.id)
        for name, st in n.queues.items():
            q = sums.setdefault(name, {"len": 0, "blocked": 0, "in": 0, "out": 0, "pause": set()})
            q["len"] += st["len"]
            q["blocked"] += st["blocked"]
            q["pause"].add(st["pause"])
            if old is not None:  # a node not sampled before adds to no rate
                was = old.queues.get(name, {})
                q["in"] += _delta(st["jobs_in"], was.get("jobs_in"))
                q["out"] += _delta(st["jobs_out"], was.get("jobs_out"))
    return [
        {
            "name": name,
            "len": q["len"],
            "jobs_in_per_s": round(q["in"] / dt, 3),
            "jobs_out_per_s": round(q["out"] / dt, 3),
            "blocked": q["blocked"],
            "pause": next(iter(q["pause"])) if len(q["pause"]) == 1 else "mixed",
        }
        for name, q in sorted(sums.items())
    ]


def node_rows(cur: Sample, prev: Sample | None = None) -> list[dict[str, Any]]:
    """One row per node; commands/s against ``prev`` (None without one)."""
    dt = max(cur.at - prev.at, 1e-6) if prev is not None else 1.0
    before = {n.id: n for n in prev.nodes if n.error is None} if prev is not None else {}
    rows = []
    for n in cur.nodes:
        cmds = _int(n.info, "total_commands_processed")
        old_cmds = _int(before[n.id].info, "total_commands_processed") if n.id in before else None
        rate = None
        if cmds is not None and old_cmds is not None:
            rate = round(_delta(cmds, old_cmds) / dt, 3)
        rows.append(
            {
                "id": n.id,
                "addr": n.addr,
                "priority": n.priority,
                "state": n.error or node_state(n.priority),
                "jobs": _int(n.info, "registered_jobs"),
                "queues": _int(n.info, "registered_queues"),
                "clients": _int(n.info, "connected_clients"),
                "commands_per_s": rate,
            }
        )
    return rows


def frame(prev: Sample, cur: Sample) -> dict[str, Any]:
    """One frame of the view (JSON-ready) from two samples."""
    return {
        "time": _now(),
        "interval_s": round(cur.at - prev.at, 3),
        "queues": queue_rows(cur, prev),
        "nodes": node_rows(cur, prev),
    }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def render(fr: dict[str, Any], seeds: str) -> str:
    """A frame for people: a title line, the queues table, the nodes table."""
    title = f"disq top - {seeds} - {fr['time']}"
    if "error" in fr:
        return f"{title}\n\nerror: {fr['error']['reason']}: {fr['error']['message']}\n"
    title += f" - every {fr['interval_s']:.1f}s"
    queues = [
        (q["name"], q["len"], q["jobs_in_per_s"], q["jobs_out_per_s"], q["blocked"], q["pause"])
        for q in fr["queues"]
    ]
    keys = ("priority", "state", "jobs", "queues", "clients", "commands_per_s")
    nodes = [(n["id"][:8], n["addr"] or "-", *(n[k] for k in keys)) for n in fr["nodes"]]
    qtable = table(QUEUE_HEADERS, queues) + ("(no queues)\n" if not queues else "")
    return f"{title}\n\n{qtable}\n{table(NODE_HEADERS, nodes)}"


class FrameWriter:
    """Frames to a stream: JSON lines, a redrawn screen on a TTY, else blank-line separated."""

    def __init__(self, out: TextIO, seeds: str, as_json: bool) -> None:
        self.out = out
        self.seeds = seeds
        self.as_json = as_json
        self.tty = out.isatty() and not as_json
        self.count = 0

    def write(self, fr: dict[str, Any]) -> None:
        if self.as_json:
            text = json.dumps(fr) + "\n"
        elif self.tty:
            text = CLEAR + render(fr, self.seeds)
        else:
            text = ("\n" if self.count else "") + render(fr, self.seeds)
        self.out.write(text)
        self.out.flush()
        self.count += 1


async def run_top(
    seeds: str,
    options: dict[str, Any],
    out: TextIO,
    *,
    interval_s: float,
    iterations: int | None,
    as_json: bool,
) -> int:
    """Frames until ``iterations`` were shown (forever when None). A failure of the first
    sample is the command's error; later ones are shown in their frame and the view goes on."""
    sampler = Sampler(seeds, options)
    writer = FrameWriter(out, seeds, as_json)
    try:
        prev = await sampler.sample()
        while iterations is None or writer.count < iterations:
            await asyncio.sleep(interval_s)
            try:
                cur = await sampler.sample()
            except DisqError as exc:
                error = {"reason": exc.reason, "message": exc.message}
                writer.write({"time": _now(), "error": error})
                continue
            writer.write(frame(prev, cur))
            prev = cur
    finally:
        await sampler.close()
    return 0
