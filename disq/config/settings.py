"""The settings: :class:`DisqueSettings`, the typed view of a configuration, and ``_State``,
the option values a file load or a CONFIG SET builds it from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from disq.config.options import _OPTIONS, CLIENT_LIMIT_DEFAULTS

LogLevel = Literal["debug", "verbose", "notice", "warning"]
FsyncPolicy = Literal["always", "everysec", "no"]
MaxmemoryPolicy = Literal["acks", "noeviction"]

DEFAULT_BIND = ("127.0.0.1",)
CLUSTER_PORT_INCR = 10000  # Disque's CLUSTER_PORT_INCR: the bus listens on port + 10000
METRICS_PORT_INCR = 2000  # disq's HTTP admin port (/metrics) defaults to port + 2000


@dataclass(frozen=True, slots=True)
class DisqueSettings:
    """The typed view of a configuration, in the units its field names say.

    ``dir`` is absolute. ``bind`` is what the file says (empty: not configured); listen on
    :attr:`effective_bind`. ``maxmemory_bytes`` 0 means "disq's own default". ``port`` 0 means
    no RESP listener (Disque: "Disque will not listen on a TCP socket"); ``beanstalk_port`` 0
    means no beanstalk door.
    """

    dir: Path
    port: int = 7711
    bind: tuple[str, ...] = ()
    logfile: str = ""
    loglevel: LogLevel = "notice"
    daemonize: bool = False
    pidfile: str = "/var/run/disque.pid"
    pidfile_configured: bool = False  # a pidfile line was given (see pidfile_path)
    appendonly: bool = False
    appendfilename: str = "disq.aof"
    appendfsync: FsyncPolicy = "always"
    auto_aof_rewrite_percentage: int = 100
    auto_aof_rewrite_min_size_bytes: int = 64 << 20
    aof_load_truncated: bool = True
    aof_enqueue_jobs_once: bool = False
    cluster_node_timeout_ms: int = 15000
    maxmemory_bytes: int = 0
    maxmemory_policy: MaxmemoryPolicy = "acks"
    requirepass: str | None = None
    tcp_backlog: int = 511
    timeout_s: int = 0
    tcp_keepalive_s: int = 0
    hz: int = 10
    maxclients: int = 10000
    unixsocket: str | None = None
    unixsocketperm: int = 0
    syslog_enabled: bool = False
    syslog_ident: str = "disque"
    syslog_facility: str = "local0"
    beanstalk_port: int = 0
    grpc_port_setting: int | None = None
    metrics_port_setting: int | None = None  # None: port + METRICS_PORT_INCR (metrics_port)
    beanstalk_replicate: int = 1
    drain_timeout_s: int = 20  # SIGTERM: hand jobs off this long at most (0: no drain)
    # TLS on the gRPC port (disq.tls); tls_auth_clients None: on when a CA is given.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_ca_cert_file: str | None = None
    tls_auth_clients: bool | None = None
    # TLS RESP (Redis's tls-port) and beanstalk ports (disq.server.tls_ports); 0: off.
    tls_port: int = 0
    beanstalk_tls_port: int = 0
    job_lane_port: int = 0  # disq.server.job_lane: 0 ephemeral, -1 off
    # The address peers and clients are told (None: the bind address; disq.server.advertise).
    advertise_host: str | None = None
    # rename-command lines, in order, ASCII lower-cased: (command, new name); "" removes the
    # command. Applied to the RESP command table at start (disq.doors.disque.table).
    renamed_commands: tuple[tuple[str, str], ...] = ()
    config_file: Path | None = None

    @property
    def grpc_port(self) -> int:
        """The cluster (gRPC) port: ``grpc-port`` if set, else ``port + 10000`` as Disque."""
        if self.grpc_port_setting is not None:
            return self.grpc_port_setting
        return self.port + CLUSTER_PORT_INCR

    @property
    def metrics_port(self) -> int:
        """The HTTP admin port (/metrics): ``metrics-port`` if set (0: off), else ``port +
        2000`` (7711 -> 9711); off when that is not a port (``port`` 0 or above 63535)."""
        if self.metrics_port_setting is not None:
            return self.metrics_port_setting
        port = self.port + METRICS_PORT_INCR
        return port if self.port and port <= 65535 else 0

    @property
    def effective_bind(self) -> tuple[str, ...]:
        return self.bind or DEFAULT_BIND

    @property
    def aof_path(self) -> Path:
        return self.dir / self.appendfilename

    @property
    def unixsocket_path(self) -> Path | None:
        """The Unix socket RESP is served on, or None. Relative to ``dir``, where Disque's
        process is when it creates the socket."""
        return self.dir / self.unixsocket if self.unixsocket else None

    @property
    def pidfile_path(self) -> Path | None:
        """Where the node writes its pid at start (and removes it at a clean exit), or None.
        As Redis 3.2+: written whenever ``pidfile`` is configured (Disque wrote it only when
        daemonized, which disq never is); the default path alone writes nothing. Relative to
        ``dir``, the working directory of Disque's process once its file is read."""
        return self.dir / self.pidfile if self.pidfile_configured and self.pidfile else None

    @property
    def logfile_path(self) -> Path | None:
        """Where to log; None: standard output. Relative names are relative to ``dir``, where
        Disque's process is when it opens its log."""
        return self.dir / self.logfile if self.logfile else None


@dataclass(slots=True)
class _State:
    values: dict[str, str | None]
    dir: Path
    client_limits: dict[str, tuple[int, int, int]] = field(
        default_factory=lambda: dict(CLIENT_LIMIT_DEFAULTS)
    )
    renames: list[tuple[str, str]] = field(default_factory=list)
    # Where each rename-command line is (path, line number, line), in the order of renames:
    # a rename the command table refuses is reported at its own line.
    rename_origins: list[tuple[str | None, int, str]] = field(default_factory=list)
    # Where the last value of a directive came from, for checks made after the whole file.
    origin: dict[str, tuple[str | None, int, str]] = field(default_factory=dict)

    @classmethod
    def defaults(cls, cwd: Path) -> _State:
        values: dict[str, str | None] = {o.name: o.default for o in _OPTIONS}
        return cls(values=values, dir=cwd)

    def copy(self) -> _State:
        return _State(
            values=dict(self.values),
            dir=self.dir,
            client_limits=dict(self.client_limits),
            renames=list(self.renames),
            rename_origins=list(self.rename_origins),
            origin=dict(self.origin),
        )


def _settings_from(state: _State, config_file: Path | None) -> DisqueSettings:
    v = state.values

    def num(name: str) -> int:
        text = v[name]
        assert text is not None
        return int(text)

    def flag(name: str) -> bool:
        return v[name] == "yes"

    def text(name: str) -> str:
        value = v[name]
        assert value is not None
        return value

    bind = v["bind"]
    grpc = v["grpc-port"]
    password = v["requirepass"]
    return DisqueSettings(
        dir=state.dir,
        port=num("port"),
        bind=tuple(bind.split(" ")) if bind else (),
        logfile=text("logfile"),
        loglevel=cast(LogLevel, text("loglevel")),
        daemonize=flag("daemonize"),
        pidfile=text("pidfile"),
        pidfile_configured="pidfile" in state.origin,
        appendonly=flag("appendonly"),
        appendfilename=text("appendfilename"),
        appendfsync=cast(FsyncPolicy, text("appendfsync")),
        auto_aof_rewrite_percentage=num("auto-aof-rewrite-percentage"),
        auto_aof_rewrite_min_size_bytes=num("auto-aof-rewrite-min-size"),
        aof_load_truncated=flag("aof-load-truncated"),
        aof_enqueue_jobs_once=flag("aof-enqueue-jobs-once"),
        cluster_node_timeout_ms=num("cluster-node-timeout"),
        maxmemory_bytes=num("maxmemory"),
        maxmemory_policy=cast(MaxmemoryPolicy, text("maxmemory-policy")),
        requirepass=password or None,  # "" means no password (CONFIG SET requirepass "")
        tcp_backlog=num("tcp-backlog"),
        timeout_s=num("timeout"),
        tcp_keepalive_s=num("tcp-keepalive"),
        hz=num("hz"),
        maxclients=num("maxclients"),
        unixsocket=v["unixsocket"],
        unixsocketperm=int(text("unixsocketperm"), 8),
        syslog_enabled=flag("syslog-enabled"),
        syslog_ident=text("syslog-ident"),
        syslog_facility=text("syslog-facility"),
        beanstalk_port=num("beanstalk-port"),
        grpc_port_setting=int(grpc) if grpc is not None else None,
        metrics_port_setting=int(v["metrics-port"]) if v["metrics-port"] is not None else None,
        beanstalk_replicate=num("beanstalk-replicate"),
        drain_timeout_s=num("drain-timeout"),
        tls_cert_file=v["tls-cert-file"] or None,
        tls_key_file=v["tls-key-file"] or None,
        tls_ca_cert_file=v["tls-ca-cert-file"] or None,
        tls_auth_clients=None if v["tls-auth-clients"] is None else flag("tls-auth-clients"),
        tls_port=num("tls-port"),
        beanstalk_tls_port=num("beanstalk-tls-port"),
        job_lane_port=num("job-lane-port"),
        advertise_host=v["advertise-host"] or None,
        renamed_commands=tuple(state.renames),
        config_file=config_file,
    )
