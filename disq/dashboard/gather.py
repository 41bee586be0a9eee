"""The cluster as the dashboard shows it, gathered through the client SDK.

Each node answers for itself (Disque's QLEN, QSTAT, SHOW, JSCAN and the event log are per
node), so the dashboard keeps one :class:`~disq.client.aio.AsyncClient` per node's gRPC
address with discovery off (a call goes to that node and nowhere else) and one discovering
client for what the cluster answers as a whole (ADDJOB, ACKJOB routed to the job's creator,
PAUSE broadcast). Membership and link state are this node's own view, read from the host.
Beanstalk tubes are per node and have no gRPC API: the page shows this node's.

What the live Queues page samples of *this* node (:meth:`Gatherer.local_queues`) is read from
the node's own state in the process (its Disque core's queues), never through its own gRPC
port: a sample then costs a few attribute reads per queue instead of a round of RPCs that
would compete with the node's clients.

Schedules (:meth:`Gatherer.schedules`) are read from this node's scheduler in the process too:
every node holds every schedule. Only the state of a schedule's last job, when this node holds
no copy of it, is asked of the node that created it (SHOW through the SDK).

Queue policies (:meth:`Gatherer.policies`) are read from this node's cluster core in the
process, as QPOLICY LIST answers them: every node holds every policy. A redrive
(:meth:`Gatherer.redrive`) is QREDRIVE over RESP on every reachable node (the gRPC API has no
such call; each node moves the dead letters queued on it), its counts summed.

Every fan-out is bounded: :data:`MAX_NODES` nodes, :data:`MAX_QUEUES` queues sampled per node,
:data:`MAX_EVENTS_SCANNED` events read per node for a timeline, :data:`PAGE_MAX` jobs a page,
:data:`MAX_SCHEDULES` schedules a page, :data:`MAX_JOB_LOOKUPS` last jobs asked elsewhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from disq.client.aio import AsyncClient
from disq.client.errors import DisqError
from disq.core.messages import ALIVE, DEAD, LEFT, SUSPECT
from disq.dashboard.render import (
    PolicyRow,
    ScheduleRow,
    TimelineEvent,
    merge_timeline,
    policy_rows,
    schedule_row,
)
from disq.doors.disque import info_dict, queue_bytes
from disq.proto_gen import api_pb2

if TYPE_CHECKING:
    from disq.server.metrics import MetricsHost

_log: Any = structlog.get_logger("disq.dashboard")

MAX_NODES = 16
MAX_QUEUES = 50  # queues sampled per node (by name order; the page says when there are more)
MAX_EVENTS_SCANNED = 50_000  # per node, for one job's timeline
EVENTS_CHUNK = 10_000  # ReadEvents' own maximum
PAGE_DEFAULT = 50
PAGE_MAX = 200
MAX_BULK = 1000  # jobs one "requeue all" / "delete all" acts on
CALL_TIMEOUT_S = 2.0
MAX_SCHEDULES = 500  # schedules listed (by name; the page says when there are more)
MAX_JOB_LOOKUPS = 50  # last jobs of schedules whose state is asked of another node
JOB_STATES = ("wait-repl", "active", "queued", "acked")

_STATE_NAMES = {ALIVE: "ok", SUSPECT: "suspect", DEAD: "failing", LEFT: "left"}

T = TypeVar("T")


@dataclass(slots=True)
class NodeView:
    """A member of the cluster as this node sees it."""

    node_id: str
    host: str
    grpc_port: int
    resp_port: int
    state: str  # ok | suspect | failing | leaving | left
    is_self: bool
    link_up: bool | None  # this node's outbound link to it (None: itself)
    info: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def short(self) -> str:
        return self.node_id[:8]


@dataclass(slots=True)
class JobCopy:
    node: NodeView
    info: dict[str, Any] | None  # SHOW's fields; None: not there
    error: str | None = None


@dataclass(slots=True)
class JobStory:
    job_id: str
    copies: list[JobCopy]
    timeline: list[TimelineEvent]
    scanned: dict[str, int]  # node short id -> events read for the timeline
    body: bytes | None  # from the first copy that has it
    result: bytes | None = None  # its result, when one is kept (RESULT SET)

    @property
    def found(self) -> bool:
        return (
            any(c.info is not None for c in self.copies)
            or bool(self.timeline)
            or self.result is not None
        )


class Gatherer:
    """Reads the cluster for the pages and performs the actions, through the SDK."""

    def __init__(self, host: MetricsHost, password: Callable[[], str | None]) -> None:
        self.host = host
        self._password = password
        self._clients: dict[str, AsyncClient] = {}
        self._cluster_client: AsyncClient | None = None
        self._client_pw: str | None = None
        self._closing: set[asyncio.Future[None]] = set()

    # ------------------------------------------------------------------ nodes
    @property
    def has_cluster(self) -> bool:
        return self.host.cluster is not None

    def self_id(self) -> str:
        cluster = self.host.cluster
        return cluster.membership.my_id if cluster is not None else self.host.instance_id

    def members(self) -> list[NodeView]:
        """Every member this node knows, itself first, then by node id."""
        cluster = self.host.cluster
        if cluster is None:
            return []
        me = cluster.membership.my_id
        out = []
        for m in cluster.membership.members():
            state = "leaving" if m.leaving and m.state == ALIVE else _STATE_NAMES.get(m.state, "?")
            is_self = m.node_id == me
            if is_self and cluster.membership.leaving:
                state = "leaving"
            out.append(
                NodeView(
                    node_id=m.node_id,
                    host=m.host,
                    grpc_port=m.grpc_port,
                    resp_port=m.client_port,
                    state=state,
                    is_self=is_self,
                    link_up=None
                    if is_self or cluster.links is None
                    else cluster.links.is_up(m.node_id),
                )
            )
        out.sort(key=lambda n: (not n.is_self, n.node_id))
        return out[:MAX_NODES]

    def reachable(self) -> list[NodeView]:
        """The members worth asking (not known dead or gone)."""
        return [n for n in self.members() if n.state in ("ok", "suspect", "leaving")]

    def member(self, node_id: str) -> NodeView | None:
        for n in self.members():
            if n.node_id == node_id or (len(node_id) >= 8 and n.node_id.startswith(node_id)):
                return n
        return None

    # ------------------------------------------------------------------ clients
    def _check_password(self) -> None:
        """A CONFIG SET requirepass applies at once: clients made with the old one go."""
        pw = self._password()
        if pw != self._client_pw:
            old = [*self._clients.values()]
            if self._cluster_client is not None:
                old.append(self._cluster_client)
            self._clients.clear()
            self._cluster_client = None
            self._client_pw = pw
            for c in old:
                self._close_later(c)

    def _close_later(self, c: AsyncClient) -> None:
        """Close a client in the background, keeping the task referenced until it ends."""
        task = asyncio.ensure_future(c.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def client(self, addr: str) -> AsyncClient:
        """The client of one node: calls go there only."""
        self._check_password()
        c = self._clients.get(addr)
        if c is None:
            if len(self._clients) >= 4 * MAX_NODES:  # members come and go: keep it bounded
                for old in list(self._clients.values())[:MAX_NODES]:
                    self._close_later(old)
                self._clients = dict(list(self._clients.items())[MAX_NODES:])
            c = self._clients[addr] = AsyncClient(
                addr,
                password=self._client_pw,
                timeout_s=CALL_TIMEOUT_S,
                discover=False,
                connect_timeout_s=CALL_TIMEOUT_S,
            )
        return c

    def cluster_client(self) -> AsyncClient:
        """A discovering client seeded with this node: adds, acks and broadcasts."""
        self._check_password()
        if self._cluster_client is None:
            me = self.members()
            seeds = [n.addr for n in me] or ["127.0.0.1:0"]
            self._cluster_client = AsyncClient(
                seeds, password=self._client_pw, timeout_s=5.0, connect_timeout_s=CALL_TIMEOUT_S
            )
        return self._cluster_client

    async def close(self) -> None:
        clients = [*self._clients.values()]
        if self._cluster_client is not None:
            clients.append(self._cluster_client)
        self._clients.clear()
        self._cluster_client = None
        for c in clients:
            try:
                await c.close()
            except Exception as exc:  # closing must not fail the admin port's shutdown
                _log.debug("dashboard_client_close_failed", error=str(exc))

    async def _each(
        self, nodes: Sequence[NodeView], call: Callable[[NodeView], Awaitable[T]]
    ) -> list[T | BaseException]:
        """``call`` on every node at once; an exception in place of a node's failed answer."""
        return list(await asyncio.gather(*(call(n) for n in nodes), return_exceptions=True))

    # ------------------------------------------------------------------ reading
    async def cluster(self) -> list[NodeView]:
        """Members with their INFO (errors in place of unreachable nodes' INFO)."""
        nodes = self.members()
        asked = [n for n in nodes if n.state != "left"]
        infos = await self._each(asked, self._info)
        for n, info in zip(asked, infos, strict=True):
            if isinstance(info, BaseException):
                n.error = _describe(info)
            else:
                n.info = info
        return nodes

    def local_node(self) -> NodeView:
        """This node as a member (a stand-in when it has no cluster part)."""
        for n in self.members():
            if n.is_self:
                return n
        return NodeView(self.self_id(), "127.0.0.1", 0, 0, "ok", True, None)

    def local_queues(self, cap: int = MAX_QUEUES) -> tuple[list[dict[str, Any]], int]:
        """This node's queues (the first ``cap`` by name) read in the process, as QSTAT's
        fields plus ``oldest_s`` (the oldest queued job's creation time, s since the epoch;
        None when empty), and how many it has."""
        disque = self.host.core.disque
        if disque is None:
            return [], 0
        queues = disque.queues
        names = heapq.nsmallest(cap, queues) if len(queues) > cap else sorted(queues)
        out = []
        for name in names:
            q = queues[name]
            n = len(q)
            out.append(
                {
                    "name": queue_bytes(name).decode("utf-8", "replace"),
                    "len": n,
                    "blocked": len(q.blocked),
                    "pause": q.pause_name(),
                    "jobs_in": q.jobs_in,
                    "jobs_out": q.jobs_out,
                    "oldest_s": ctime_s(q.skiplist[0].ctime) if n else None,
                }
            )
        return out, len(queues)

    async def schedules(self, cap: int = MAX_SCHEDULES) -> tuple[list[ScheduleRow], int] | None:
        """Every schedule (the first ``cap`` by name) and how many there are, from this node's
        scheduler; None on a node without one (no cluster core). A last job this node holds
        no copy of gets its state from the node that created it (its id says which)."""
        sched = self.host.core.scheduler
        if sched is None:
            return None
        now_ms = self.host.now_ms()
        now_s = self.host.wall_ms() / 1000
        me = self.self_id()
        names = sched.names()
        rows = []
        for name in names[:cap]:
            fields = sched.describe(name, now_ms)
            if fields is not None:
                rows.append(schedule_row(fields, now_s, me[:8]))
        elsewhere = [
            i
            for i, r in enumerate(rows)
            if r.last_job_state == "gone" and r.last_job_id[2:10] != me[:8]
        ][:MAX_JOB_LOOKUPS]
        if elsewhere:
            found = await asyncio.gather(*(self._job_state(rows[i].last_job_id) for i in elsewhere))
            for i, (state, node) in zip(elsewhere, found, strict=True):
                rows[i] = dataclasses.replace(rows[i], last_job_state=state, last_job_node=node)
        return rows, len(names)

    def policies(self) -> list[PolicyRow] | None:
        """Every queue policy (QPOLICY LIST of this node, by queue name); None on a node
        without its cluster core (no policies there)."""
        core = self.host.core
        if core.cluster_cores is None:
            return None
        return policy_rows(core.qpolicy_list())

    async def _job_state(self, job_id: str) -> tuple[str, str]:
        """The job's state on the node that created it, and that node's short id: ``gone``
        when it no longer holds the job, ``unknown`` when it cannot be asked."""
        creator = self.member(job_id[2:10])
        if creator is None or creator.state not in ("ok", "suspect", "leaving"):
            return "unknown", job_id[2:10]
        try:
            info = await self.client(creator.addr).show(job_id)
        except (DisqError, OSError, TimeoutError) as exc:
            _log.debug("dashboard_job_state_failed", job=job_id, error=str(exc))
            return "unknown", creator.short
        return ("gone" if info is None else str(info["state"])), creator.short

    async def _info(self, node: NodeView) -> dict[str, str]:
        """INFO of a node: this node's read in the process, the others' through the SDK."""
        services = getattr(self.host.cluster, "services", None) if node.is_self else None
        if services is None:
            return await self.client(node.addr).info()
        return info_dict(services, "default")

    async def node_queues(
        self, node: NodeView, cap: int = MAX_QUEUES
    ) -> tuple[list[dict[str, Any]], int]:
        """QSTAT of a node's queues (the first ``cap`` by name) and how many it has, through
        the SDK (for the other nodes; this node's: :meth:`local_queues`)."""
        c = self.client(node.addr)
        names = sorted(await c.queues())
        stats = await asyncio.gather(*(c.qstat(q) for q in names[:cap]), return_exceptions=True)
        return [s for s in stats if isinstance(s, dict)], len(names)

    async def oldest_age_s(self, node: NodeView, queue: str) -> float | None:
        """Age of the oldest queued job of ``queue`` on ``node`` (QPEEK 1, then its SHOW)."""
        c = self.client(node.addr)
        jobs = await c.qpeek(queue, 1)
        if not jobs:
            return None
        info = await c.show(jobs[0].id)
        if info is None:
            return None
        return max(0.0, time.time() - ctime_s(int(info["ctime"])))

    def tubes(self) -> list[dict[str, Any]]:
        """This node's beanstalk tubes (the first MAX_QUEUES by name)."""
        now_ms = self.host.now_ms()
        out = []
        for name in sorted(self.host.beanstalk.tubes)[:MAX_QUEUES]:
            t = self.host.beanstalk.tubes[name]
            out.append(
                {
                    "name": name,
                    "ready": len(t.ready),
                    "reserved": t.reserved_count,
                    "delayed": len(t.delayed),
                    "buried": len(t.buried),
                    "waiting": len(t.waiting),
                    "total": t.total_jobs,
                    "paused_s": max(0, (t.pause_until_ms - now_ms) // 1000)
                    if t.pause_until_ms > now_ms
                    else 0,
                }
            )
        return out

    async def queue_page(
        self, node: NodeView, queue: str, states: Sequence[str], cursor: int, count: int
    ) -> tuple[list[api_pb2.JobInfo], int]:
        """One JSCAN page of ``queue``'s jobs on ``node`` in ``states``; the next cursor."""
        nxt, jobs = await self.client(node.addr).scan_page(
            cursor, queue=queue, states=tuple(states), count=max(1, min(count, PAGE_MAX))
        )
        return jobs[:PAGE_MAX], nxt

    async def job_story(self, job_id: str) -> JobStory:
        """SHOW on every reachable node and the job's events from every node's log."""
        nodes = self.reachable()
        shows = await self._each(nodes, lambda n: self.client(n.addr).show(job_id))
        copies = []
        body: bytes | None = None
        since_ms = 0
        for n, s in zip(nodes, shows, strict=True):
            if isinstance(s, BaseException):
                copies.append(JobCopy(n, None, _describe(s)))
                continue
            copies.append(JobCopy(n, s))
            if s is not None:
                if body is None:
                    body = s["body"]
                since_ms = int(ctime_s(int(s["ctime"])) * 1000) - 60_000  # clock skew margin
        logs = await self._each(nodes, lambda n: self._job_events(n, job_id, max(0, since_ms)))
        # Every node keeps every result: the first that answers tells.
        results = await self._each(nodes, lambda n: self.client(n.addr).result(job_id))
        result = next((r for r in results if isinstance(r, bytes)), None)
        per_node: dict[str, list[Any]] = {}
        scanned: dict[str, int] = {}
        for n, got in zip(nodes, logs, strict=True):
            if isinstance(got, BaseException):
                scanned[n.short] = -1
                continue
            per_node[n.node_id], scanned[n.short] = got
        timeline = merge_timeline(per_node, job_id)
        return JobStory(job_id, copies, timeline, scanned, body, result)

    async def _job_events(
        self, node: NodeView, job_id: str, since_ms: int
    ) -> tuple[list[Any], int]:
        """The job's events in one node's log: read from ``since_ms`` (or the newest
        MAX_EVENTS_SCANNED when the job's time is unknown), at most MAX_EVENTS_SCANNED."""
        c = self.client(node.addr)
        head = await c.read_events(node.addr, 0, max_events=1, since_ms=0)
        start = int(head.first_seq)
        if since_ms == 0:
            start = max(start, int(head.next_seq) - MAX_EVENTS_SCANNED)
        found: list[Any] = []
        read = 0
        seq = start
        while read < MAX_EVENTS_SCANNED:
            r = await c.read_events(node.addr, seq, max_events=EVENTS_CHUNK, since_ms=since_ms)
            if not r.events:
                break
            read += len(r.events)
            found.extend(e for e in r.events if e.job_id == job_id)
            seq = int(r.events[-1].seq) + 1
            if seq >= int(r.next_seq):
                break
        return found, read

    async def dead_letter_jobs(
        self, queue: str, limit: int = PAGE_DEFAULT
    ) -> list[tuple[api_pb2.JobInfo, NodeView]]:
        """Queued jobs of a dead-letter queue over the cluster, each once (by id)."""
        nodes = self.reachable()
        pages = await self._each(nodes, lambda n: self.queue_page(n, queue, ("queued",), 0, limit))
        seen: dict[str, tuple[api_pb2.JobInfo, NodeView]] = {}
        for n, page in zip(nodes, pages, strict=True):
            if isinstance(page, BaseException):
                continue
            for j in page[0]:
                seen.setdefault(j.id, (j, n))
        return sorted(seen.values(), key=lambda p: p[0].ctime)[:limit]

    async def queue_counts(self, queue: str) -> list[tuple[NodeView, int | None]]:
        """QLEN of ``queue`` on every reachable node (None: the node did not answer)."""
        nodes = self.reachable()
        got = await self._each(nodes, lambda n: self.client(n.addr).qlen(queue))
        return [
            (n, None if isinstance(c, BaseException) else int(c))
            for n, c in zip(nodes, got, strict=True)
        ]

    async def cluster_queue_names(self) -> list[str]:
        """Every queue name any reachable node has (bounded per node)."""
        nodes = self.reachable()
        got = await self._each(nodes, lambda n: self.client(n.addr).queues())
        names: set[str] = set()
        for g in got:
            if not isinstance(g, BaseException):
                names.update(g[: MAX_QUEUES * 4])
        return sorted(names)

    # ------------------------------------------------------------------ actions
    async def pause(self, queue: str, state: str) -> str:
        """PAUSE ``queue`` none|in|out|all, broadcast to every node."""
        return await self.cluster_client().pause(queue, state, bcast=True)

    async def requeue(self, job_id: str, to_queue: str) -> str:
        """ADDJOB the job's body into ``to_queue``, then ACKJOB the job: the new job's id."""
        c = self.cluster_client()
        info = await c.show(job_id)
        if info is None:
            story = await self.job_story(job_id)
            if story.body is None:
                raise LookupError(f"job {job_id} not found on any node")
            body = story.body
        else:
            body = info["body"]
        new_id = await c.add_job(to_queue, body)
        await c.ack(job_id)
        return new_id

    async def delete(self, job_ids: Sequence[str]) -> int:
        """ACKJOB (at each job's creator): how many were known there."""
        if not job_ids:
            return 0
        return await self.cluster_client().ack(*job_ids)

    def kick(self, tube: str, bound: int = MAX_BULK) -> int:
        """Kick up to ``bound`` buried jobs of this node's ``tube``; how many were kicked."""
        bs = self.host.beanstalk
        t = bs.tubes.get(tube)
        if t is None:
            raise LookupError(f"no tube named {tube!r} on this node")
        now_ms = self.host.now_ms()
        ids = list(t.buried)[:bound]
        kicked = 0
        for job_id in ids:
            try:
                bs.kick_job(job_id, now_ms)
            except Exception as exc:  # a job gone meanwhile: the others still go
                _log.info("dashboard_kick_skipped", tube=tube, job=job_id, error=str(exc))
                continue
            kicked += 1
        # The kicks' AOF records, replication and wake-ups leave with the next flush.
        self.host.after_commands(None, now_ms)
        return kicked

    async def redrive(self, queue: str, to: str = "", count: int = 0) -> tuple[int, dict[str, str]]:
        """QREDRIVE ``queue`` [TO ``to``] [COUNT ``count``] on every reachable node (each
        moves the dead letters queued on it, at most ``count`` there): the jobs moved, summed,
        and the nodes that did not answer (short id -> why). RuntimeError when none did."""
        args = [b"QREDRIVE", queue.encode()]
        if to:
            args += [b"TO", to.encode()]
        if count:
            args += [b"COUNT", b"%d" % count]
        nodes = [n for n in self.reachable() if n.resp_port]
        if not nodes:
            raise RuntimeError("no reachable node with a RESP port")
        pw = self._password()
        got = await self._each(nodes, lambda n: resp_call(n.host, n.resp_port, args, pw))
        moved = 0
        failed: dict[str, str] = {}
        for n, r in zip(nodes, got, strict=True):
            if isinstance(r, BaseException):
                failed[n.short] = _describe(r)
            elif r.lstrip("-").isdigit():
                moved += int(r)
            else:
                failed[n.short] = f"unexpected reply {r[:80]!r}"
        if len(failed) == len(nodes):
            raise RuntimeError("; ".join(f"node {k}: {v}" for k, v in failed.items()))
        return moved, failed

    async def set_leaving(self, node: NodeView, leaving: bool) -> str:
        """CLUSTER LEAVING yes|no on ``node`` (its RESP port: the gRPC API has no such call)."""
        if not node.resp_port:
            raise LookupError(f"node {node.short} has no RESP port")
        args = [b"CLUSTER", b"LEAVING", b"yes" if leaving else b"no"]
        return await resp_call(node.host, node.resp_port, args, self._password())


def ctime_s(ctime: int) -> float:
    """A Disque ctime (the creating node's ms * 1e6 plus a counter) in seconds."""
    return ctime / 1e9


def _describe(exc: BaseException) -> str:
    if isinstance(exc, DisqError):
        return f"{exc.reason}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


def _resp_command(args: Sequence[bytes]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


async def resp_call(
    host: str, port: int, args: Sequence[bytes], password: str | None, timeout_s: float = 3.0
) -> str:
    """One RESP command (after AUTH when there is a password): the reply line's text.
    A ``-ERR`` reply raises RuntimeError with it."""

    async def run() -> str:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            cmds = []
            if password:
                cmds.append(_resp_command([b"AUTH", password.encode()]))
            cmds.append(_resp_command(args))
            writer.write(b"".join(cmds))
            await writer.drain()
            line = b""
            for _ in cmds:
                line = await reader.readline()
                if line.startswith(b"-"):
                    raise RuntimeError(line[1:].decode(errors="replace").strip())
            return line[1:].decode(errors="replace").strip()
        finally:
            writer.close()

    return await asyncio.wait_for(run(), timeout_s)
