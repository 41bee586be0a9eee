"""The SDK's look at what a node holds: a job (SHOW), queues (QLEN, QSTAT, QSCAN, PAUSE),
jobs page by page (JSCAN), a node's lifecycle events and INFO. The methods of
:class:`~disq.client.AsyncClient` as a mixin (aio.py stays within its size; calls.py says how
the mixin reaches the client's calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from disq.client.calls import NodeCalls
from disq.proto_gen import api_pb2


class AsyncInspectionMixin:
    """The inspecting methods of AsyncClient."""

    async def show(self: NodeCalls, job_id: str) -> dict[str, Any] | None:
        r = await self._call("Show", api_pb2.JobId(id=job_id), prefer=job_id[2:10])
        if not r.found:
            return None
        d: dict[str, Any] = {
            "id": r.id,
            "queue": r.queue,
            "state": r.state,
            "repl": r.repl,
            "ttl_s": r.ttl_s,
            "ctime": r.ctime,
            "delay_s": r.delay_s,
            "retry_s": r.retry_s,
            "nacks": r.nacks,
            "additional_deliveries": r.additional_deliveries,
            "nodes_delivered": list(r.nodes_delivered),
            "nodes_confirmed": list(r.nodes_confirmed),
            "next_requeue_within_ms": (
                r.next_requeue_within_ms if r.HasField("next_requeue_within_ms") else None
            ),
            "next_awake_within_ms": (
                r.next_awake_within_ms if r.HasField("next_awake_within_ms") else None
            ),
            "body": r.body,
            # A keyed job's key; a schedule's tick job: schedule:<name>:<tick>.
            "idempotency_key": r.idempotency_key if r.HasField("idempotency_key") else None,
            # The result kept under the job's id (RESULT SET), if any.
            "result": r.result if r.HasField("result") else None,
            "headers": dict(r.headers),  # the add's headers ({}: none)
        }
        return d

    async def qlen(self: NodeCalls, queue: str, *, node: str | None = None) -> int:
        """QLEN: the jobs queued on one node (``node``: its gRPC address; default: any).
        Queues are per node, so a cluster's total is the sum over its nodes."""
        req = api_pb2.QueueName(queue=queue)
        r = await (self._call_node(node, "QLen", req) if node else self._call("QLen", req))
        return int(r.count)

    async def qstat(
        self: NodeCalls, queue: str, *, node: str | None = None
    ) -> dict[str, Any] | None:
        """QSTAT of one node (``node``: its gRPC address; default: any); None when it holds
        nothing of the queue. ``jobs``: the live jobs of the queue it holds, queued or not
        (``active``: delivered or waiting for a requeue; ``delayed``: waiting out a DELAY)."""
        req = api_pb2.QueueName(queue=queue)
        r = await (self._call_node(node, "QStat", req) if node else self._call("QStat", req))
        if not r.found:
            return None
        return {
            "name": r.name,
            "len": r.len,
            "age_s": r.age_s,
            "idle_s": r.idle_s,
            "blocked": r.blocked,
            "import_from": list(r.import_from),
            "import_rate": r.import_rate,
            "jobs_in": r.jobs_in,
            "jobs_out": r.jobs_out,
            "pause": r.pause,
            "jobs": r.jobs,
            "active": r.active,
            "delayed": r.delayed,
        }

    async def queues(self: NodeCalls, *, minlen: int | None = None) -> list[str]:
        """Every queue of the node answering (QSCAN to the end)."""
        out: list[str] = []
        cursor = 0
        while True:
            req = api_pb2.QScanRequest(cursor=cursor, count=1000)
            if minlen is not None:
                req.minlen = minlen
            r = await self._call("QScan", req)
            out.extend(r.queues)
            cursor = r.cursor
            if cursor == 0:
                return out

    async def pause(
        self: NodeCalls, queue: str, state: str | None = None, *, bcast: bool = False
    ) -> str:
        """PAUSE: read (state None) or set none|in|out|all; the resulting state."""
        req = api_pb2.PauseRequest(queue=queue, bcast=bcast)
        if state is not None:
            req.state = state
        r = await self._call("Pause", req)
        return str(r.state)

    async def scan_jobs(
        self: NodeCalls,
        node: str,
        *,
        queue: str = "",
        states: Sequence[str] = (),
        page: int = 1000,
    ) -> list[api_pb2.JobInfo]:
        """JSCAN to the end on one node (``node``: its gRPC address): every job there, or
        those of ``queue`` in ``states`` (wait-repl, active, queued, acked), bodies included."""
        out: list[api_pb2.JobInfo] = []
        cursor = 0
        while True:
            req = api_pb2.JScanRequest(cursor=cursor, count=page, queue=queue, states=states)
            r = await self._call_node(node, "JScan", req)
            out.extend(r.jobs)
            cursor = r.cursor
            if cursor == 0:
                return out

    async def scan_page(
        self: NodeCalls,
        cursor: int = 0,
        *,
        queue: str = "",
        states: Sequence[str] = (),
        count: int = 100,
        node: str | None = None,
    ) -> tuple[int, list[api_pb2.JobInfo]]:
        """One JSCAN page: the next cursor (0 at the end) and up to about ``count`` jobs,
        those of ``queue`` in ``states`` (wait-repl, active, queued, acked) when given,
        bodies included. ``node`` (a gRPC address) asks that node only, as a cursor is one
        node's; without it, any node answers (a client with discovery off: its node)."""
        req = api_pb2.JScanRequest(cursor=cursor, count=count, queue=queue, states=states)
        if node is not None:
            r = await self._call_node(node, "JScan", req)
        else:
            r = await self._call("JScan", req)
        return int(r.cursor), list(r.jobs)

    async def read_events(
        self: NodeCalls, node: str, from_seq: int = 0, *, max_events: int = 1000, since_ms: int = 0
    ) -> api_pb2.ReadEventsResponse:
        """One node's lifecycle events from ``from_seq`` (``node``: its gRPC address);
        sequence numbers are per node."""
        req = api_pb2.ReadEventsRequest(from_seq=from_seq, max_events=max_events, since_ms=since_ms)
        r: api_pb2.ReadEventsResponse = await self._call_node(node, "ReadEvents", req)
        return r

    async def info(
        self: NodeCalls, section: str = "", *, node: str | None = None
    ) -> dict[str, str]:
        """INFO of one node (``node``: a known address, or an id prefix; default: any)."""
        req = api_pb2.InfoRequest(section=section)
        if node is not None and node in self.view.by_addr:
            r = await self._call_node(node, "Info", req)
        else:
            r = await self._call("Info", req, prefer=node)
        return dict(r.fields)
