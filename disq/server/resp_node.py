"""The node as the RESP commands see it (``disque_commands.NodeApi``).

Everything here is a thin read or a delegation: the job core answers job commands directly;
this class answers INFO, HELLO, CLUSTER, CONFIG, SHUTDOWN and the fault-injection hook.
"""

from __future__ import annotations

import asyncio
import os
import resource
import secrets
import time
from typing import TYPE_CHECKING

from disq import __version__
from disq.core.cluster import ClusterCore
from disq.core.cluster_api import DisqueError
from disq.core.messages import LEFT, MEMBER_STATE_NAMES
from disq.server.disque_commands import DISQUE_VERSION, NodeEntry, RespStats

if TYPE_CHECKING:
    from disq.server.cluster_runtime import ClusterRuntime
    from disq.server.resp_tcp import RespProtocol


class NodeServices:
    def __init__(self, runtime: ClusterRuntime) -> None:
        self.runtime = runtime
        self._stats = RespStats()
        self.run_id = secrets.token_hex(20)
        self.started = time.monotonic()
        self.connected_clients = 0
        self._requirepass = runtime.settings.requirepass or None

    # ------------------------------------------------------------------ basics
    @property
    def core(self) -> ClusterCore:
        return self.runtime.core

    @property
    def requirepass(self) -> str | None:
        return self._requirepass

    @property
    def aof_error(self) -> str | None:
        return self.runtime.node.aof_error

    @property
    def resp_stats(self) -> RespStats:
        return self._stats

    def now_ms(self) -> int:
        return self.runtime.node.now_ms()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.runtime.loop

    def after_resp_commands(self, proto: RespProtocol | None) -> None:
        self.runtime.after_resp_commands(proto)

    # ------------------------------------------------------------------ INFO
    def info_fields(self, section: str) -> list[tuple[str, str | int | float]]:
        rt = self.runtime
        node = rt.node
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
                ("blocked_clients", rt.core.blocked_clients()),
            ]
        if section == "memory":
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            used = rt.live_bytes() + node.engine.live_bytes
            return [
                ("used_memory", used),
                ("used_memory_human", _human(used)),
                ("used_memory_rss", rss),
                ("maxmemory", node.config.limits.max_memory_bytes),
                ("mem_warning_level", rt.core.memory_warning),
            ]
        if section == "persistence":
            aof = node.aof
            return [
                ("loading", 0),
                ("aof_enabled", 1 if aof is not None else 0),
                ("aof_state", "on" if aof is not None else "off"),
                ("aof_rewrite_in_progress", 1 if node.rewriting else 0),
                ("aof_last_write_status", "err" if node.aof_error else "ok"),
                ("aof_current_size", aof.size if aof is not None else 0),
            ]
        if section == "stats":
            s = rt.core.stats
            links = rt.links.stats()
            return [
                ("total_connections_received", self._stats.connections_received),
                ("total_commands_processed", self._stats.commands),
                ("rejected_connections", self._stats.rejected_connections),
                ("grpc_api_calls", rt.api.calls),
                ("grpc_api_errors", rt.api.errors),
                ("event_log_next_seq", rt.event_log.next_seq),
                ("event_log_bytes", rt.event_log.total_bytes),
                ("jobs_added", s["jobs_added"]),
                ("jobs_delivered", s["jobs_delivered"]),
                ("jobs_acked", s["jobs_acked"]),
                ("jobs_requeued", s["jobs_requeued"]),
                ("jobs_expired", s["jobs_expired"]),
                ("jobs_imported", s["jobs_imported"]),
                ("jobs_exported", s["jobs_exported"]),
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
        m = self.runtime.membership
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
        self.runtime.meet_client_port(host, port)
        self.runtime.pump(self.now_ms())
        return True

    def cluster_forget(self, node_id: str) -> None:
        m = self.runtime.membership
        if m.member(node_id) is None:
            raise DisqueError("ERR", f"Unknown node {node_id}")
        m.forget(self.now_ms(), node_id)
        self.runtime.pump(self.now_ms())

    def cluster_leaving(self, flag: bool | None) -> bool:
        m = self.runtime.membership
        if flag is not None and flag != m.leaving:
            m.set_leaving(self.now_ms(), flag)
            self.runtime.pump(self.now_ms())
        return m.leaving

    def cluster_reset(self, hard: bool) -> None:
        self.runtime.membership.reset(self.now_ms())
        self.runtime.pump(self.now_ms())

    def cluster_info(self) -> list[tuple[str, str | int]]:
        m = self.runtime.membership
        reachable = len(m.reachable_peers())  # peers only, as Disque counts them
        stats = m.stats
        links = self.runtime.links.stats()
        return [
            ("cluster_state", "ok"),
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
            self.runtime.save_view_now()
        except OSError as exc:
            raise DisqueError("ERR", f"error saving the cluster node config: {exc}") from exc

    # ------------------------------------------------------------------ CONFIG
    def config_get(self, pattern: str) -> list[tuple[str, str]]:
        store = self.runtime.settings.config_store
        if store is None:
            return []
        result: list[tuple[str, str]] = store.get(pattern)
        return result

    def config_set(self, name: str, value: str) -> None:
        from disq.config_file import ConfigCommandError

        store = self.runtime.settings.config_store
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
            self.core.aof_enqueue_once = value.lower() == "yes"

    def config_rewrite(self) -> None:
        from disq.config_file import ConfigCommandError

        store = self.runtime.settings.config_store
        if store is None:
            raise DisqueError("ERR", "The server is running without a config file")
        try:
            store.rewrite()
        except ConfigCommandError as exc:
            code, _, msg = str(exc).partition(" ")
            raise DisqueError(code, msg) from exc

    def config_resetstat(self) -> None:
        for k in self.core.stats:
            self.core.stats[k] = 0

    # ------------------------------------------------------------------ admin
    def shutdown(self, mode: str) -> None:
        node = self.runtime.node
        if mode == "rewrite-aof":
            try:
                node.rewrite_now()
            except Exception as exc:
                raise DisqueError("ERR", "Errors trying to SHUTDOWN. Check logs.") from exc
        node.stop()

    def bgrewriteaof(self) -> str:
        node = self.runtime.node
        if node.aof is None:
            raise DisqueError("ERR", "Background append only file rewriting needs AOF enabled")
        if node.rewriting:
            raise DisqueError("ERR", "Background append only file rewriting already in progress")
        node.request_rewrite()
        return "Background append only file rewriting started"

    def debug_sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, 60.0)))

    def drop_peers(self, node_ids: list[str]) -> None:
        links = self.runtime.links
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
