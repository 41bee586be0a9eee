"""The node as its doors see it: the RESP commands' ``NodeApi`` and the gRPC API's
``ApiNode``, so neither is typed against the runtime class.

Everything here is a thin read or a delegation: the Disque core answers job commands
directly; this class answers INFO, HELLO, CLUSTER, CONFIG, SHUTDOWN, the fault-injection
hook, and hands out tokens and waits for deferred answers through the runtime's router.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from typing import TYPE_CHECKING

from disq import __version__
from disq.core.disque.api import DisqueError
from disq.core.messages import LEFT, MEMBER_STATE_NAMES
from disq.doors.disque import DISQUE_VERSION, NodeEntry, RespStats

if TYPE_CHECKING:
    from disq.core.node_core import NodeCore
    from disq.core.routes.table import Routes
    from disq.core.schedule.scheduler import Scheduler
    from disq.persistence.event_log import EventLog
    from disq.server.flow import Flushable
    from disq.server.host import ClusterPart, NodeHost
    from disq.server.router import Waiter


class NodeServices:
    def __init__(self, runtime: NodeHost, cluster: ClusterPart) -> None:
        self.runtime = runtime
        self.cluster = cluster
        self._stats = RespStats()
        self.run_id = os.urandom(20).hex()
        self.started = time.monotonic()
        self._requirepass = cluster.settings.requirepass or None

    # ------------------------------------------------------------------ basics
    @property
    def core(self) -> NodeCore:
        return self.runtime.core

    @property
    def scheduler(self) -> Scheduler | None:
        return self.runtime.core.scheduler

    @property
    def routes(self) -> Routes | None:
        return self.runtime.core.routes

    @property
    def requirepass(self) -> str | None:
        return self._requirepass

    @property
    def aof_error(self) -> str | None:
        return self.runtime.aof_error

    @property
    def disk_full(self) -> str | None:
        return self.runtime.aof.disk_full_reason

    @property
    def resp_stats(self) -> RespStats:
        return self._stats

    def now_ms(self) -> int:
        return self.runtime.now_ms()

    def wall_ms(self) -> int:
        return self.runtime.wall_ms()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.runtime.loop

    @property
    def my_id(self) -> str:
        return self.cluster.membership.my_id

    @property
    def event_log(self) -> EventLog:
        return self.cluster.event_log

    def member_grpc_port(self, node_id: str) -> int:
        m = self.cluster.membership.member(node_id)
        return m.grpc_port if m is not None else 0

    # ------------------------------------------------------------------ deferred answers
    def new_token(self) -> int:
        return self.runtime.core.new_token()

    def wait_reply(self, token: int, waiter: Waiter) -> None:
        self.runtime.router.wait(token, waiter)

    def cancel(self, token: int) -> None:
        """The waiter of ``token`` went away (a closed connection, a cancelled call)."""
        self.runtime.router.forget(token)
        self.runtime.core.cancel(token)

    def blocked(self) -> int:
        return len(self.runtime.router)

    def after_commands(self, conn: Flushable | None = None) -> None:
        """Commands ran: ``conn``'s replies and the core's output leave with the flush."""
        self.runtime.after_commands(conn, self.runtime.now_ms())

    def durable(self) -> asyncio.Future[None]:
        """Done once what the cores did so far is as durable as the fsync policy makes it."""
        return self.runtime.durable()

    def mark_dirty(self, conn: Flushable) -> None:
        self.runtime.mark_dirty(conn)

    # ------------------------------------------------------------------ INFO
    def info_fields(self, section: str) -> list[tuple[str, str | int | float]]:
        rt, node = self.cluster, self.runtime
        if section == "server":
            return [
                ("disque_version", DISQUE_VERSION),
                ("disq_version", __version__),
                ("run_id", self.run_id),
                ("process_id", os.getpid()),
                ("tcp_port", rt.settings.resp_port),
                ("cluster_bus_port", rt.settings.grpc_port),
                ("uptime_in_seconds", int(time.monotonic() - self.started)),
                ("uptime_in_days", int(time.monotonic() - self.started) // 86400),
                ("node_id", rt.membership.my_id),
            ]
        if section == "clients":
            return [
                ("connected_clients", rt.hub.connected_clients),
                (
                    "blocked_clients",
                    self.cluster.disque.blocked.count() + self.cluster.disque.results.count(),
                ),
            ]
        if section == "memory":
            rss = _current_rss()
            used = node.core.live_bytes()
            return [
                ("used_memory", used),
                ("used_memory_human", _human(used)),
                ("used_memory_rss", rss),
                ("maxmemory", node.config.limits.max_memory_bytes),
                ("mem_warning_level", self.cluster.disque.memory.warning),
            ]
        if section == "persistence":
            aof = node.aof.writer
            policy = node.aof.disk_policy
            return [
                ("loading", 1 if getattr(node, "loading", False) else 0),
                ("aof_enabled", 1 if aof is not None else 0),
                ("aof_state", "on" if aof is not None else "off"),
                ("aof_rewrite_in_progress", 1 if node.aof.rewriting else 0),
                ("aof_last_write_status", "err" if node.aof_error else "ok"),
                ("aof_current_size", aof.size if aof is not None else 0),
                # docs/disk-full.md: adds refused below the low mark, taken again at the high
                ("aof_disk_full", 1 if node.aof.disk_full else 0),
                ("aof_disk_free_bytes", max(node.aof.disk_free, 0)),
                ("aof_disk_low_bytes", policy.low_bytes if policy is not None else 0),
                ("aof_disk_high_bytes", policy.high_bytes if policy is not None else 0),
                ("aof_disk_reserve_bytes", node.aof.reserve_bytes),
            ]
        if section == "stats":
            s = self.cluster.disque.stats
            links = rt.links.stats() if rt.links is not None else {}  # None: the bus loads
            api = rt.api
            return [
                ("total_connections_received", self._stats.connections_received),
                ("total_commands_processed", self._stats.commands),
                ("rejected_connections", self._stats.rejected_connections),
                ("grpc_api_calls", api.calls if api is not None else 0),
                ("grpc_api_errors", api.errors if api is not None else 0),
                ("event_log_next_seq", rt.event_log.next_seq),
                ("event_log_bytes", rt.event_log.total_bytes),
                ("jobs_added", s["jobs_added"]),
                ("jobs_delivered", s["jobs_delivered"]),
                ("jobs_acked", s["jobs_acked"]),
                ("jobs_requeued", s["jobs_requeued"]),
                ("jobs_requeue_advanced", s["jobs_requeue_advanced"]),
                ("jobs_expired", s["jobs_expired"]),
                ("jobs_imported", s["jobs_imported"]),
                ("jobs_exported", s["jobs_exported"]),
                ("jobs_dead_lettered", s.get("jobs_dead_lettered", 0)),
                ("jobs_dead_letter_dropped", s.get("jobs_dead_letter_dropped", 0)),
                ("jobs_redriven", s.get("jobs_redriven", 0)),
                ("cluster_frames_sent", links.get("frames_sent", 0)),
                ("cluster_frames_received", links.get("frames_received", 0)),
                ("cluster_frames_dropped", links.get("frames_dropped", 0)),
            ]
        if section == "cpu":
            ru = resource.getrusage(resource.RUSAGE_SELF)
            return [("used_cpu_sys", ru.ru_stime), ("used_cpu_user", ru.ru_utime)]
        return []

    # ------------------------------------------------------------------ CLUSTER / HELLO
    def cluster_nodes(self) -> list[NodeEntry]:
        m = self.cluster.membership
        out = []
        for rec in m.members():
            if rec.state == LEFT:
                continue
            out.append(
                NodeEntry(
                    rec.node_id,
                    rec.host,
                    rec.client_port,
                    MEMBER_STATE_NAMES.get(rec.state, "alive"),
                    rec.leaving,
                    m.hello_priority(rec.node_id),
                )
            )
        return out

    def cluster_meet(self, host: str, port: int) -> bool:
        if not host or not 0 < port < 65536:
            return False
        self.cluster.meet_client_port(host, port)
        self.after_commands()
        return True

    def cluster_forget(self, node_id: str) -> None:
        m = self.cluster.membership
        if m.member(node_id) is None:
            raise DisqueError("ERR", f"Unknown node {node_id}")
        m.forget(self.now_ms(), node_id)
        self.after_commands()

    def cluster_leaving(self, flag: bool | None) -> bool:
        m = self.cluster.membership
        if flag is not None and flag != m.leaving:
            m.set_leaving(self.now_ms(), flag)
            self.after_commands()
        return m.leaving

    def cluster_reset(self, hard: bool) -> None:
        # HARD also takes a new node id, as Disque's: the peers that knew the old one are
        # refused at their next connect (a link checks the id it reaches), and the jobs
        # made from now on carry the new one.
        runtime = self.runtime
        new_id = os.urandom(20).hex() if hard else ""
        runtime.core.cluster_reset(self.now_ms(), new_id)
        if new_id:
            self.cluster.adopt_node_id(new_id)
        self.after_commands()
        if runtime.aof.writer is not None:
            # The DELJOBs are in the file; a rewrite also drops the idempotency keys and
            # key votes of the flushed jobs, which a restart would otherwise load again.
            runtime.aof.request_rewrite()

    def cluster_info(self) -> list[tuple[str, str | int]]:
        m = self.cluster.membership
        reachable = len(m.reachable_peers())  # peers only, as Disque counts them
        stats = m.stats
        links = self.cluster.links.stats() if self.cluster.links is not None else {}
        return [
            ("cluster_state", cluster_state(m.cluster_size(), reachable)),
            ("cluster_known_nodes", m.cluster_size()),
            ("cluster_reachable_nodes", reachable),
            ("cluster_size", m.cluster_size()),
            ("cluster_stats_messages_sent", links.get("messages_sent", stats["messages_sent"])),
            (
                "cluster_stats_messages_received",
                links.get("messages_received", stats["messages_received"]),
            ),
        ]

    def cluster_saveconfig(self) -> None:
        try:
            self.cluster.save_view_now()
        except OSError as exc:
            raise DisqueError("ERR", f"error saving the cluster node config: {exc}") from exc

    # ------------------------------------------------------------------ CONFIG
    @property
    def command_renames(self) -> tuple[tuple[str, str], ...]:
        """The configuration file's rename-command lines, in order (none without a file): the
        RESP hub builds its command table from them once, at start."""
        store = self.cluster.settings.config_store
        if store is None:
            return ()
        renames: tuple[tuple[str, str], ...] = store.settings.renamed_commands
        return renames

    def config_get(self, pattern: str) -> list[tuple[str, str]]:
        store = self.cluster.settings.config_store
        if store is None:
            return []
        result: list[tuple[str, str]] = store.get(pattern)
        return result

    def config_set(self, name: str, value: str) -> None:
        from disq.config import ConfigCommandError

        store = self.cluster.settings.config_store
        if store is None:
            raise DisqueError("ERR", f"Unsupported CONFIG parameter: {name}")
        try:
            store.set(name, value)
        except ConfigCommandError as exc:
            text = str(exc)
            code, _, msg = text.partition(" ")
            raise DisqueError(code, msg) from exc
        canonical = name.lower()
        if canonical == "requirepass":
            self._requirepass = value or None
        elif canonical == "aof-enqueue-jobs-once":
            self.cluster.disque.aof_enqueue_once = value.lower() == "yes"

    def config_rewrite(self) -> None:
        from disq.config import ConfigCommandError

        store = self.cluster.settings.config_store
        if store is None:
            raise DisqueError("ERR", "The server is running without a config file")
        try:
            store.rewrite()
        except ConfigCommandError as exc:
            code, _, msg = str(exc).partition(" ")
            raise DisqueError(code, msg) from exc

    def config_resetstat(self) -> None:
        for k in self.cluster.disque.stats:
            self.cluster.disque.stats[k] = 0

    # ------------------------------------------------------------------ admin
    def shutdown(self, mode: str) -> None:
        node = self.runtime
        if mode == "rewrite-aof":
            try:
                node.aof.rewrite_now()
            except Exception as exc:
                raise DisqueError("ERR", "Errors trying to SHUTDOWN. Check logs.") from exc
        node.stop()

    def bgrewriteaof(self) -> str:
        aof = self.runtime.aof
        if aof.writer is None:
            raise DisqueError("ERR", "Background append only file rewriting needs AOF enabled")
        if aof.rewriting:
            raise DisqueError("ERR", "Background append only file rewriting already in progress")
        aof.request_rewrite()
        return "Background append only file rewriting started"

    def debug_sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, 60.0)))

    def drop_peers(self, node_ids: list[str]) -> None:
        links = self.cluster.links
        if links is None:
            raise DisqueError("ERR", "the cluster bus is still starting")
        if node_ids:
            links.block(set(node_ids))
        else:
            links.unblock_all()


def _human(n: int) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024:
            return f"{n:.2f}{unit}" if unit != "B" else f"{n}B"
        n //= 1024
    return f"{n:.2f}T"


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _current_rss() -> int:
    """used_memory_rss: the resident set now (Redis's zmalloc_get_rss reads /proc/self/stat;
    statm's second field is the same count of pages), not ru_maxrss, the peak."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):  # not Linux: the peak is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cluster_state(known: int, reachable_peers: int) -> str:
    """CLUSTER INFO cluster_state from this node's membership view: ``ok`` while the node
    reaches a majority of the nodes it knows, itself included (a single node is always ok);
    ``fail`` otherwise -- e.g. a node of a 3-node cluster whose two peers are DEAD in its view
    (Membership.reachable_peers: ALIVE or SUSPECT, not leaving). A minority side of a
    partition says fail, as Redis Cluster's state does without a majority of masters."""
    if known <= 1:
        return "ok"
    return "ok" if (reachable_peers + 1) * 2 > known else "fail"
