"""The node as the RESP commands are typed against it (:class:`NodeApi`), the records it
hands them (:class:`NodeEntry`, :class:`RespStats`), and INFO's rendering (:func:`info_text`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from disq.core.node_core import NodeCore
    from disq.core.schedule.scheduler import Scheduler

DISQUE_VERSION = "1.0-rc1"  # the Disque release whose protocol the RESP port speaks


class NodeEntry(NamedTuple):
    """One cluster member as HELLO and CLUSTER NODES show it (this node included)."""

    node_id: str  # 40 hex chars
    host: str
    client_port: int  # the RESP port clients should use
    state: str  # messages.MEMBER_STATE_NAMES: alive | suspect | dead | left
    leaving: bool
    priority: int  # HELLO priority: 1 ok, 5 no link, 10 suspect, 100 dead or leaving


@dataclass(slots=True)
class RespStats:
    """Counters of the RESP port, kept by the doors and the transport, read by INFO."""

    commands: int = 0  # total_commands_processed
    connections_received: int = 0  # total_connections_received
    rejected_connections: int = 0
    net_input_bytes: int = 0  # total_net_input_bytes
    net_output_bytes: int = 0  # total_net_output_bytes
    calls: dict[str, list[int]] = field(default_factory=dict)  # name -> [calls, usec]

    def reset(self) -> None:
        """CONFIG RESETSTAT (resetServerStats + resetCommandTableStats)."""
        self.commands = 0
        self.connections_received = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.calls.clear()


# Disque's INFO keys per section, in its order (server.c genDisqueInfoString), for the node's
# info_fields: tests and tools parse these names. Persistence adds aof_current_size,
# aof_base_size, aof_pending_rewrite, aof_buffer_length, aof_rewrite_buffer_length,
# aof_pending_bio_fsync and aof_delayed_fsync while the AOF is on.
DISQUE_INFO_KEYS: dict[str, tuple[str, ...]] = {
    "server": (
        "disque_version",
        "disque_git_sha1",
        "disque_git_dirty",
        "disque_build_id",
        "os",
        "arch_bits",
        "multiplexing_api",
        "gcc_version",
        "process_id",
        "run_id",
        "tcp_port",
        "uptime_in_seconds",
        "uptime_in_days",
        "hz",
        "executable",
        "config_file",
    ),
    "clients": (
        "connected_clients",
        "client_longest_output_list",
        "client_biggest_input_buf",
        "blocked_clients",
    ),
    "memory": (
        "used_memory",
        "used_memory_human",
        "used_memory_rss",
        "used_memory_peak",
        "used_memory_peak_human",
        "mem_fragmentation_ratio",
        "mem_allocator",
    ),
    "persistence": (
        "loading",
        "aof_enabled",
        "aof_state",
        "aof_rewrite_in_progress",
        "aof_rewrite_scheduled",
        "aof_last_rewrite_time_sec",
        "aof_current_rewrite_time_sec",
        "aof_last_bgrewrite_status",
        "aof_last_write_status",
    ),
    "stats": (
        "total_connections_received",
        "total_commands_processed",
        "instantaneous_ops_per_sec",
        "total_net_input_bytes",
        "total_net_output_bytes",
        "instantaneous_input_kbps",
        "instantaneous_output_kbps",
        "rejected_connections",
        "latest_fork_usec",
    ),
    "cpu": ("used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"),
}


def bytes_to_human(n: int) -> str:
    """bytesToHuman, for used_memory_human: ``100B``, ``2.00K``, ``1.50M``, ..."""
    if n < 1024:
        return f"{n}B"
    for unit, shift in (("K", 10), ("M", 20), ("G", 30), ("T", 40), ("P", 50)):
        if n < 1 << (shift + 10):
            return f"{n / (1 << shift):.2f}{unit}"
    return f"{n}B"


class NodeApi(Protocol):
    """What the RESP commands need from the node besides the job core. The node implements
    it; tests use a fake. Methods that can fail raise :class:`DisqueError`, whose code and
    message become the reply (``-ERR <message>`` for code ``ERR``)."""

    @property
    def core(self) -> NodeCore:
        """The node core: every Disque command is its input (``add_job``, ``get_job``...)."""
        ...

    @property
    def scheduler(self) -> Scheduler | None:
        """The recurring schedules (SCHEDULE); None on a node without its cluster core."""
        ...

    @property
    def requirepass(self) -> str | None:
        """The password clients must AUTH with, or None. Read on every command, so CONFIG
        SET requirepass takes effect at once for every connection, as in Disque."""
        ...

    @property
    def aof_error(self) -> str | None:
        """Why the last AOF write failed (strerror text), or None. While set, write commands
        and PING get ``-MISCONF Errors writing to the AOF file: <text>``."""
        ...

    @property
    def disk_full(self) -> str | None:
        """While the data directory's filesystem is below its free-space mark: why new jobs
        are refused (``disk full: ...``); ADDJOB answers ``-OOM <text>``. None otherwise."""
        ...

    @property
    def resp_stats(self) -> RespStats:
        """Shared counters: the doors count commands, the transport connections."""
        ...

    def now_ms(self) -> int:
        """The node clock in ms (monotonic, disq/server/clock.py): passed to the core."""
        ...

    def wall_ms(self) -> int:
        """The wall clock in ms (Unix time): TIME's answer."""
        ...

    def info_fields(self, section: str) -> list[tuple[str, str | int | float]]:
        """The ``key:value`` lines of one INFO section, in order. ``section`` is one of
        ``server clients memory persistence stats cpu`` (Jobs and Queues come from the core).
        Floats print with two decimals. Disque's keys: server ``disque_version``, ``run_id``,
        ``tcp_port``, ``uptime_in_seconds``, ...; clients ``connected_clients``,
        ``blocked_clients``, ...; memory ``used_memory``, ...; persistence ``aof_enabled``,
        ``aof_state``, ...; stats ``total_connections_received``,
        ``total_commands_processed`` (from ``resp_stats``), ...; cpu ``used_cpu_sys``, ..."""
        ...

    def cluster_nodes(self) -> list[NodeEntry]:
        """Every known node, this one included (HELLO lists them all, as Disque does)."""
        ...

    def cluster_meet(self, host: str, port: int) -> bool:
        """Start joining the node at host:port (its RESP port). False: the address is
        invalid (``Invalid node address specified``). The join itself is asynchronous."""
        ...

    def cluster_forget(self, node_id: str) -> None:
        """Forget a known peer (never this node; the command checks both)."""
        ...

    def cluster_leaving(self, flag: bool | None) -> bool:
        """Set this node's leaving flag (unless None) and return it; gossip spreads it."""
        ...

    def cluster_reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every peer (ignored until a meet) and every job and queue.
        ``hard`` is accepted as Disque's, without its new node id."""
        ...

    def cluster_info(self) -> list[tuple[str, str | int]]:
        """CLUSTER INFO lines: cluster_state, cluster_known_nodes, cluster_reachable_nodes,
        cluster_size, cluster_stats_messages_sent, cluster_stats_messages_received."""
        ...

    def cluster_saveconfig(self) -> None:
        """Persist the membership now (raises ``ERR error saving the cluster node config:
        <strerror>``)."""
        ...

    def config_get(self, pattern: str) -> list[tuple[str, str]]:
        """CONFIG GET: (name, value) of every parameter matching the glob pattern."""
        ...

    def config_set(self, name: str, value: str) -> None:
        """CONFIG SET. Raises ``ERR Unsupported CONFIG parameter: <name>`` or ``ERR Invalid
        argument '<value>' for CONFIG SET '<name>'``."""
        ...

    def config_rewrite(self) -> None:
        """CONFIG REWRITE. Raises ``ERR The server is running without a config file`` or
        ``ERR Rewriting config file: <strerror>``."""
        ...

    def config_resetstat(self) -> None:
        """CONFIG RESETSTAT for the node's own counters (the command resets ``resp_stats``)."""
        ...

    def shutdown(self, mode: str) -> None:
        """SHUTDOWN; mode is ``default``, ``rewrite-aof``, ``save`` or ``nosave``. Returns
        once the stop is scheduled (the client gets no reply: the server goes away); raises
        ``ERR Errors trying to SHUTDOWN. Check logs.`` when it cannot stop."""
        ...

    def bgrewriteaof(self) -> str:
        """Start an AOF rewrite; the status text to reply (``Background append only file
        rewriting started``). Raises an ERR when one is already running or AOF is off."""
        ...

    def debug_sleep(self, seconds: float) -> None:
        """DEBUG SLEEP: stall the whole node for ``seconds`` (Disque blocks its event loop;
        the cluster lab uses it to fake a hung node)."""
        ...

    def drop_peers(self, node_ids: list[str]) -> None:
        """DEBUG DROP-PEERS (disq extension): drop every message to and from these peers
        until the next call; an empty list heals. Fault injection for the cluster lab."""
        ...


# ------------------------------------------------------------------ INFO
_INFO_SECTIONS = (
    ("server", "Server"),
    ("clients", "Clients"),
    ("memory", "Memory"),
    ("jobs", "Jobs"),
    ("queues", "Queues"),
    ("persistence", "Persistence"),
    ("stats", "Stats"),
    ("cpu", "CPU"),
)


def _info_value(v: str | int | float) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def info_text(node: NodeApi, section: str) -> str:
    """genDisqueInfoString: ``# Title\\r\\nkey:value\\r\\n...`` per section, a blank line
    between sections; ``default`` and ``all`` give every section (``all`` adds
    Commandstats); an unknown section gives an empty string."""
    section = section.lower()
    every = section in ("default", "all")
    parts: list[str] = []
    for key, title in _INFO_SECTIONS:
        if not every and section != key:
            continue
        if key == "jobs":
            fields: list[tuple[str, str | int | float]] = [
                ("registered_jobs", node.core.job_count())
            ]
        elif key == "queues":
            fields = [("registered_queues", node.core.queue_count())]
        else:
            fields = node.info_fields(key)
        lines = "".join(f"{k}:{_info_value(v)}\r\n" for k, v in fields)
        parts.append(f"# {title}\r\n{lines}")
    if section in ("all", "commandstats"):
        lines = "".join(
            f"cmdstat_{name}:calls={calls},usec={usec},usec_per_call={usec / calls:.2f}\r\n"
            for name, (calls, usec) in node.resp_stats.calls.items()
            if calls
        )
        parts.append(f"# Commandstats\r\n{lines}")
    return "\r\n".join(parts)


def info_dict(node: NodeApi, section: str) -> dict[str, str]:
    """INFO's ``key:value`` lines as a dict (the gRPC API's Info, the dashboard)."""
    fields: dict[str, str] = {}
    for line in info_text(node, section).split("\r\n"):
        if line and not line.startswith("#") and ":" in line:
            k, _, v = line.partition(":")
            fields[k] = v
    return fields
