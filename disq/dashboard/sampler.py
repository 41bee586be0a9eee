"""The live numbers behind the Queues page: one sampling task per node, running only while
someone looks.

Every :data:`INTERVAL_S` it reads this node's queues and beanstalk tubes in the process
(:meth:`~disq.dashboard.gather.Gatherer.local_queues`: no RPC to itself), asks each other
reachable node for its queues' QSTAT through the SDK, and keeps the last :data:`HISTORY`
samples of each queue's cluster-wide depth and rates, and of its depth per node, in ring
buffers (ten minutes at two seconds). This node's oldest-job ages come with its queues; the
other nodes' cost two calls per queue, so they are refreshed every :data:`AGE_EVERY` samples
only (aged by the clock in between). At most :data:`~disq.dashboard.gather.MAX_QUEUES` queues
are sampled per node.

A sample is turned into JSON at most once, when first asked for (:meth:`Sampler.frame` for
the event streams, :meth:`Sampler.api_json` for the page's first fetch), and every stream
and poller shares those bytes: ten open tabs cost about what one does.

The task starts on the first request that wants samples (a page, the JSON API or the event
stream) and stops :data:`IDLE_STOP_S` after the last one, so a node nobody watches does no
work for the dashboard. Waiters (the event streams) are woken after each sample.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Hashable
from typing import Any

import structlog

from disq.dashboard.gather import MAX_QUEUES, Gatherer, NodeView
from disq.dashboard.render import rate

_log: Any = structlog.get_logger("disq.dashboard")

INTERVAL_S = 2.0
HISTORY = 300  # samples kept per series: 10 minutes
AGE_EVERY = 15  # the other nodes' oldest-job ages every 15th sample (30 s)
IDLE_STOP_S = 60.0
MAX_SERIES = 200  # queues and tubes with a history; later ones get numbers but no chart
MAX_NODE_SERIES = 600  # (queue, node) pairs with a per-node depth history


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


class Sampler:
    def __init__(self, gather: Gatherer, interval_s: float = INTERVAL_S) -> None:
        self.gather = gather
        self.interval_s = interval_s
        self.times: deque[float] = deque(maxlen=HISTORY)
        # name -> series name -> values; series: depth, in, out (queues); ready, ... (tubes)
        self.queue_hist: dict[str, dict[str, deque[float]]] = {}
        self.tube_hist: dict[str, dict[str, deque[float]]] = {}
        # (queue, node short id) -> {"depth": values}
        self.node_hist: dict[tuple[str, str], dict[str, deque[float]]] = {}
        self.latest: dict[str, Any] = {"time": 0.0, "queues": [], "tubes": [], "nodes": []}
        self.samples = 0
        self._prev: dict[tuple[str, str], tuple[float, int, int]] = {}  # (node, q) -> t, in, out
        # (node, q) -> the oldest job's creation time (s since the epoch) at the last look
        self._oldest: dict[tuple[str, str], float | None] = {}
        # The latest sample as JSON, built when first asked for and shared until the next.
        self._frame: bytes | None = None
        self._api: bytes | None = None
        self._with_history: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wanted_until = 0.0
        self._new = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    def want(self) -> None:
        """Someone looks: (re)start sampling and keep it going for IDLE_STOP_S."""
        self._wanted_until = time.monotonic() + IDLE_STOP_S
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    async def wait_next(self, timeout_s: float) -> bool:
        """Wait for the next sample; False on timeout."""
        ev = self._new
        try:
            await asyncio.wait_for(ev.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _run(self) -> None:
        _log.info("dashboard_sampling_started")
        try:
            while time.monotonic() < self._wanted_until:
                started = time.monotonic()
                try:
                    await self.sample()
                except Exception as exc:  # a bad sample must not end the charts
                    _log.warning("dashboard_sample_failed", error=str(exc))
                spent = time.monotonic() - started
                await asyncio.sleep(max(0.1, self.interval_s - spent))
        finally:
            _log.info("dashboard_sampling_stopped")

    # ------------------------------------------------------------------ one sample
    async def sample(self) -> None:
        now = time.time()
        me = self.gather.local_node()
        others = [n for n in self.gather.reachable() if not n.is_self]
        with_age = self.samples % AGE_EVERY == 0
        local: Any
        try:  # read at ``now``, before waiting for the other nodes
            local = self._local(me, now)
        except Exception as exc:
            local = exc
        got_others = await asyncio.gather(
            *(self._remote(n, now, with_age) for n in others), return_exceptions=True
        )
        per_node: list[tuple[NodeView, Any]] = [(me, local)]
        per_node += zip(others, got_others, strict=True)
        queues: dict[str, dict[str, Any]] = {}
        node_rows: list[dict[str, Any]] = []
        for n, got in per_node:
            if isinstance(got, BaseException):
                node_rows.append({"node": n.short, "error": str(got) or type(got).__name__})
                continue
            rows, total = got
            node_rows.append({"node": n.short, "queues": total, "sampled": len(rows)})
            for r in rows:
                q = queues.get(r["name"])
                if q is None:
                    q = queues[r["name"]] = {
                        "name": r["name"],
                        "depth": 0,
                        "in": 0.0,
                        "out": 0.0,
                        "blocked": 0,
                        "paused": set(),
                        "age_s": None,
                        "nodes": {},
                    }
                q["depth"] += r["len"]
                q["in"] += r["rate_in"]
                q["out"] += r["rate_out"]
                q["blocked"] += r["blocked"]
                if r["pause"] != "none":
                    q["paused"].add(r["pause"])
                if r["age_s"] is not None:
                    q["age_s"] = max(q["age_s"] or 0.0, r["age_s"])
                q["nodes"][n.short] = r
        qlist = []
        for q in sorted(queues.values(), key=lambda q: q["name"]):
            q["paused"] = "/".join(sorted(q["paused"])) or "none"
            qlist.append(q)
        tubes = self.gather.tubes()
        self.times.append(now)
        self._record(
            self.queue_hist,
            [(q["name"], {"depth": q["depth"], "in": q["in"], "out": q["out"]}) for q in qlist],
            MAX_SERIES,
        )
        self._record(
            self.node_hist,
            [
                ((q["name"], node), {"depth": r["len"]})
                for q in qlist
                for node, r in q["nodes"].items()
            ],
            MAX_NODE_SERIES,
        )
        self._record(
            self.tube_hist,
            [
                (t["name"], {k: t[k] for k in ("ready", "reserved", "delayed", "buried")})
                for t in tubes
            ],
            MAX_SERIES,
        )
        self.latest = {"time": now, "queues": qlist, "tubes": tubes, "nodes": node_rows}
        self._frame = self._api = self._with_history = None
        self.samples += 1
        if len(self._prev) > 4 * MAX_SERIES * 16:  # queues come and go: forget old counters
            self._prev.clear()
            self._oldest.clear()
        ev, self._new = self._new, asyncio.Event()
        ev.set()

    def _record(
        self,
        hist: dict[Any, dict[str, deque[float]]],
        rows: list[tuple[Hashable, dict[str, float]]],
        cap: int,
    ) -> None:
        """Append this sample's values; series of names not seen get a 0 (they emptied)."""
        seen = set()
        for name, values in rows:
            series = hist.get(name)
            if series is None:
                if len(hist) >= cap:
                    continue
                pad = len(self.times) - 1
                series = hist[name] = {k: deque([0.0] * pad, maxlen=HISTORY) for k in values}
            for k, v in values.items():
                series[k].append(float(v))
            seen.add(name)
        for name, series in hist.items():
            if name not in seen:
                for d in series.values():
                    d.append(0.0)

    def _row(self, node: NodeView, s: dict[str, Any], now: float) -> dict[str, Any]:
        """A queue's numbers on one node from its QSTAT fields and the previous sample."""
        key = (node.short, s["name"])
        prev = self._prev.get(key)
        dt = now - prev[0] if prev else 0.0
        jobs_in, jobs_out = int(s["jobs_in"]), int(s["jobs_out"])
        self._prev[key] = (now, jobs_in, jobs_out)
        return {
            "name": s["name"],
            "len": int(s["len"]),
            "blocked": int(s["blocked"]),
            "pause": s["pause"],
            "rate_in": rate(prev[1] if prev else None, jobs_in, dt),
            "rate_out": rate(prev[2] if prev else None, jobs_out, dt),
            "age_s": None,
        }

    def _local(self, node: NodeView, now: float) -> tuple[list[dict[str, Any]], int]:
        """This node's queues, read in the process: no RPC, ages included."""
        stats, total = self.gather.local_queues(MAX_QUEUES)
        rows = []
        for s in stats:
            row = self._row(node, s, now)
            if s["oldest_s"] is not None:
                row["age_s"] = max(0.0, now - s["oldest_s"])
            rows.append(row)
        return rows, total

    async def _remote(
        self, node: NodeView, now: float, with_age: bool
    ) -> tuple[list[dict[str, Any]], int]:
        """Another node's queues through the SDK; oldest ages only every AGE_EVERY samples."""
        stats, total = await self.gather.node_queues(node, MAX_QUEUES)
        rows = []
        for s in stats:
            key = (node.short, s["name"])
            row = self._row(node, s, now)
            if not row["len"]:
                self._oldest[key] = None
            elif with_age or key not in self._oldest:
                try:
                    age = await self.gather.oldest_age_s(node, s["name"])
                except Exception:
                    age = None
                self._oldest[key] = None if age is None else now - age
            oldest = self._oldest.get(key)
            if oldest is not None and row["len"]:
                row["age_s"] = max(0.0, now - oldest)  # between looks it only gets older
            rows.append(row)
        return rows, total

    # ------------------------------------------------------------------ views
    def snapshot(self, with_history: bool) -> dict[str, Any]:
        """The latest sample (JSON-ready); with the charts' history when asked (built once
        per sample)."""
        if not with_history:
            return self.latest
        if self._with_history is None:
            pernode: dict[str, dict[str, list[float]]] = {}
            for (q, node), series in self.node_hist.items():
                pernode.setdefault(q, {})[node] = list(series["depth"])
            self._with_history = {
                **self.latest,
                "history": {
                    "times": list(self.times),
                    "queues": {
                        n: {k: list(v) for k, v in s.items()} for n, s in self.queue_hist.items()
                    },
                    "pernode": pernode,
                    "tubes": {
                        n: {k: list(v) for k, v in s.items()} for n, s in self.tube_hist.items()
                    },
                },
            }
        return self._with_history

    def frame(self) -> bytes:
        """The latest sample as one server-sent event (shared by every stream)."""
        if self._frame is None:
            self._frame = b"data: " + dumps(self.latest).encode() + b"\n\n"
        return self._frame

    def api_json(self) -> bytes:
        """The latest sample with its history as JSON (shared by every poller)."""
        if self._api is None:
            self._api = dumps(self.snapshot(with_history=True)).encode()
        return self._api
