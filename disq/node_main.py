"""``disq-node``: run one node.

Harnesses written for beanstalkd connect within milliseconds of starting it, so the listening
socket is bound before anything heavy is imported (asyncio, uvloop, the engine, structlog):
the kernel queues connections that arrive meanwhile. Everything the cluster needs later is
imported lazily.

Three ways to start it:

* ``disq-node`` with no beanstalkd flags: embedded defaults, data in ``./disq-data`` with the
  AOF on (fsynced before every answer), beanstalk door on 127.0.0.1:11300, RESP (Disque) door
  on 7711, cluster bus (gRPC) on 7710. ``--join HOST:PORT`` (the other node's bus) joins a cluster.
* ``disq-node -l ADDR -p PORT [-b DIR] [-f MS] [-F] [-s N] [-z N] [-V]``: beanstalkd's own
  flags, for scripts and harnesses that start beanstalkd. Without ``-b`` it keeps everything
  in memory, exactly like beanstalkd: a fresh process is a fresh server. The RESP door and the
  bus are off unless ``--resp-port`` / ``--grpc-port`` ask for them.
* ``disq-node path/to/disque.conf``: a drop-in for ``disque-server``: Disque's configuration
  file; the RESP door on ``port``, the bus on ``port + 10000`` as Disque's, the beanstalk door
  only with ``beanstalk-port``; ``dir`` holds the node id, the cluster view and the AOF.
"""

from __future__ import annotations

import gc
import os
import socket
import stat
import sys

from disq.node_flags import beanstalkd_args, size_arg

# typing.TYPE_CHECKING without importing typing before the port is bound (typing is a few
# milliseconds, asyncio imports it after); mypy reads any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from types import SimpleNamespace
    from typing import Any

    Args = argparse.Namespace | SimpleNamespace

DEFAULT_PORT = 11300
DEFAULT_ADDR = "127.0.0.1"  # beanstalkd listens on 0.0.0.0; public listening must be asked for
DEFAULT_DATA_DIR = "disq-data"
JOB_SIZE_MAX = 1 << 30  # beanstalkd's -z ceiling (1 GiB)
DEFAULT_MAX_CLIENTS = 10_000  # Disque's maxclients, for the open-files limit of a flags start
BEANSTALKD_FLAGS = (
    "listen",
    "port",
    "binlog_dir",
    "fsync_ms",
    "no_fsync",
    "binlog_size",
    "max_job_size",
)


def build_parser() -> argparse.ArgumentParser:
    """Every flag, for argparse. A start with only beanstalkd's flags in their plain shape is
    read by disq.node_flags instead (argparse and gettext are ~3 ms of a harness's start)."""
    import argparse

    class _HelpFormatter(argparse.HelpFormatter):
        """argparse's, sized by $COLUMNS alone: argparse builds a formatter for every
        add_argument, and its own asks shutil for the terminal's size, which imports shutil,
        bz2 and lzma (2-3 ms of every start) for a help text that is seldom printed."""

        def __init__(self, prog: str) -> None:
            try:
                width = int(os.environ.get("COLUMNS", "")) - 2
            except ValueError:
                width = 78
            super().__init__(prog, width=max(width, 40))

    p = argparse.ArgumentParser(
        prog="disq-node",
        description="Run a disq node (beanstalkd-compatible; replicated task queue).",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("-l", dest="listen", help="listen address, or unix:/path (default 127.0.0.1)")
    p.add_argument("-p", dest="port", type=int, help="beanstalk port (default 11300)")
    p.add_argument("-b", dest="binlog_dir", help="data directory (enables the AOF), as beanstalkd")
    p.add_argument("-f", dest="fsync_ms", type=int, help="fsync at most every MS ms; 0: always")
    p.add_argument("-F", dest="no_fsync", action="store_true", help="never fsync")
    p.add_argument("-s", dest="binlog_size", type=size_arg, help="reported binlog-max-size")
    p.add_argument("-z", dest="max_job_size", type=size_arg, help="max job size (default 65535)")
    p.add_argument("-u", dest="user", help="ignored (beanstalkd compatibility)")
    p.add_argument("-c", dest="compact", action="store_true", help="no-op (beanstalkd)")
    p.add_argument("-n", dest="no_compact", action="store_true", help="no-op (beanstalkd)")
    p.add_argument("-V", dest="verbose", action="count", default=0, help="more verbose")
    p.add_argument("-v", dest="show_version", action="store_true", help="print version")
    p.add_argument("--data-dir", help=f"data directory (default ./{DEFAULT_DATA_DIR})")
    p.add_argument("--in-memory", action="store_true", help="no data directory, no AOF")
    p.add_argument(
        "--fsync", choices=("always", "everysec", "no"), help="AOF fsync policy (default always)"
    )
    p.add_argument("--max-memory", type=size_arg, default=0, help="refuse puts past this (bytes)")
    p.add_argument("--repair-aof", metavar="DIR", help="cut a corrupt AOF at its first bad record")
    p.add_argument("config", nargs="?", help="a Disque configuration file (drop-in mode)")
    p.add_argument("--resp-port", type=int, help="RESP (Disque) port; 0: off (default 7711)")
    p.add_argument("--grpc-port", type=int, help="cluster bus (gRPC) port; 0: off (default 7710)")
    p.add_argument(
        "--job-lane-port",
        type=int,
        default=0,
        help="port of the job lane, the TCP connection that carries job messages between "
        "nodes beside the bus (0: any free port, announced over the bus; -1: off, every "
        "message on the bus)",
    )
    p.add_argument(
        "--join", action="append", default=[], metavar="HOST:PORT", help="a member's bus address"
    )
    p.add_argument(
        "--advertise-host",
        metavar="HOST",
        help="the address peers and clients are told to reach this node at (Redis's "
        "cluster-announce-ip; config file: advertise-host); default: the listen address, or "
        "a guess, logged, when that is 0.0.0.0 or ::",
    )
    p.add_argument("--node-timeout-ms", type=int, default=15000, help="failure detection")
    p.add_argument(
        "--beanstalk-replicate", type=int, default=1, help="copies of each beanstalk put"
    )
    p.add_argument("--requirepass", help="password RESP clients must AUTH with")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="HTTP admin port (Prometheus /metrics, /healthz) on the listen host; 0: off",
    )
    p.add_argument(
        "--dashboard-actions",
        action="store_true",
        help="let the dashboard (on the admin port) act (pause, requeue, delete, kick, leave)"
        " for loopback clients when no --requirepass is set; with one, actions need a login",
    )
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=20.0,
        help="SIGTERM: leave and hand jobs to other nodes for at most this long, then exit"
        " (0: exit at once; SIGINT always exits at once)",
    )
    p.add_argument(
        "--events-max-bytes",
        type=int,
        help="bound of the lifecycle event log (default 256 MiB on disk, 32 MiB in memory)",
    )
    tls = p.add_argument_group("TLS on the gRPC port (clients and peers; docs/sdk.md)")
    tls.add_argument("--tls-cert", metavar="FILE", help="this node's certificate (PEM)")
    tls.add_argument("--tls-key", metavar="FILE", help="the key of --tls-cert (PEM)")
    tls.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="CA that signs node and client certificates; peers verify each other with it",
    )
    tls.add_argument(
        "--tls-client-auth",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="require client certificates signed by --tls-ca (default: on with --tls-ca)",
    )
    tls.add_argument(
        "--tls-server-name", metavar="NAME", help="name checked in peers' certificates"
    )
    tls_ports = p.add_argument_group(
        "TLS on the RESP and beanstalk ports (separate ports, as Redis's tls-port; the node's "
        "--tls-cert and --tls-key; client certificates checked against --tls-ca when "
        "--tls-client-auth, default on with --tls-ca)"
    )
    tls_ports.add_argument(
        "--resp-tls-port", type=int, default=0, metavar="PORT", help="RESP over TLS; 0: off"
    )
    tls_ports.add_argument(
        "--beanstalk-tls-port",
        type=int,
        default=0,
        metavar="PORT",
        help="the beanstalk protocol over TLS; 0: off",
    )
    return p


def _listen(role: str, listen: str, port: int) -> socket.socket:
    """``_bind``, its failure named with the port's role (ListenError)."""
    from disq.server.listen_error import ListenError, reason_of

    try:
        return _bind(listen, port)
    except OSError as exc:
        raise ListenError(role, listen, port, reason_of(exc)) from exc


def _bind(listen: str, port: int) -> socket.socket:
    if listen.startswith("unix:"):
        path = listen[5:]
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                os.unlink(path)  # a stale socket from a process that died
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
    else:
        family = socket.AF_INET6 if ":" in listen else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _tls_files(args: Args, st: Any = None) -> dict[str, Any] | None:
    """The TLS flags (over the config file's tls-* keys); None: TLS off."""
    files = {
        "cert": args.tls_cert or (st.tls_cert_file if st is not None else None),
        "key": args.tls_key or (st.tls_key_file if st is not None else None),
        "ca": args.tls_ca or (st.tls_ca_cert_file if st is not None else None),
        "client_auth": args.tls_client_auth,
        "server_name": args.tls_server_name,
    }
    if files["client_auth"] is None and st is not None:
        files["client_auth"] = st.tls_auth_clients
    if not any(files.values()):
        return None
    return files


def _path(text: str) -> Path:
    """pathlib, imported for a node that has a data directory: with the modules it pulls in
    (urllib.parse, ipaddress, fnmatch) a few milliseconds a memory-only node does without."""
    from pathlib import Path

    return Path(text)


def _write_pidfile(path: Path) -> None:
    """Redis's createPidFile: the pid and a newline. A file that cannot be written is logged
    and the node runs on, as Redis does."""
    try:
        path.write_text(f"{os.getpid()}\n")
    except OSError as exc:
        from disq.logging import get_logger

        get_logger("disq").warning(
            "pidfile_not_written", path=str(path), error=exc.strerror or str(exc)
        )


def _remove_pidfile(path: Path) -> None:
    """At exit, as Redis's prepareForShutdown unlinks it."""
    try:
        path.unlink()
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args: Args | None = beanstalkd_args(argv)
    if args is None:
        args = build_parser().parse_args(argv)
    if args.show_version:
        from disq import __version__

        sys.stdout.write(f"disq-node {__version__} (beanstalkd protocol 1.12)\n")
        return 0
    if args.repair_aof:
        from disq.persistence.aof_errors import AofError
        from disq.persistence.aof_reader import repair_aof

        try:
            dropped = repair_aof(_path(args.repair_aof) / "disq.aof")
        except (AofError, OSError) as exc:
            sys.stderr.write(f"disq-node: cannot repair: {exc}\n")
            return 1
        sys.stdout.write(f"repaired: dropped {dropped} bytes\n")
        return 0

    if args.advertise_host is not None:
        from disq.config.options import advertise_host_problem

        problem = advertise_host_problem(args.advertise_host)
        if problem is not None:
            sys.stderr.write(f"disq-node: --{problem}\n")
            return 1
    if args.config:
        return _main_config_file(args)
    beanstalkd_style = any(getattr(args, f) not in (None, False) for f in BEANSTALKD_FLAGS)
    data_dir: str | None = args.data_dir or args.binlog_dir
    if data_dir is None and not beanstalkd_style and not args.in_memory:
        data_dir = DEFAULT_DATA_DIR
    if args.in_memory:
        data_dir = None

    listen = args.listen or DEFAULT_ADDR
    resp_port = args.resp_port if args.resp_port is not None else (0 if beanstalkd_style else 7711)
    grpc_port = args.grpc_port if args.grpc_port is not None else (0 if beanstalkd_style else 7710)
    host = DEFAULT_ADDR if listen.startswith("unix:") else listen
    args.metrics_host = host
    try:
        sock = _listen("beanstalk", listen, args.port or DEFAULT_PORT)
        resp_socks = [_listen("RESP", host, resp_port)] if resp_port else []
        resp_tls_socks = (
            [_listen("RESP TLS", host, args.resp_tls_port)] if args.resp_tls_port else []
        )
        tls_socks = (
            [_listen("beanstalk TLS", host, args.beanstalk_tls_port)]
            if args.beanstalk_tls_port
            else []
        )
    except OSError as exc:
        sys.stderr.write(f"disq-node: {exc}\n")
        return 1
    cluster = None
    if resp_port or grpc_port or resp_tls_socks:
        joins = []
        for j in args.join:
            h, _, p = j.rpartition(":")
            if not h or not p.isdigit():
                sys.stderr.write(f"disq-node: --join wants HOST:PORT, not {j!r}\n")
                return 1
            joins.append((h, int(p)))
        cluster = {
            "host": host,
            "resp_port": resp_port,
            "grpc_port": grpc_port,
            "node_timeout_ms": args.node_timeout_ms,
            "joins": joins,
            "requirepass": args.requirepass,
            "state_dir": data_dir,
            "beanstalk_replicate": args.beanstalk_replicate,
            "events_max_bytes": args.events_max_bytes,
            "tls_files": _tls_files(args),
            "job_lane_port": args.job_lane_port,
            "advertise_host": args.advertise_host,
        }

    # The sockets listen: now the heavy imports.
    return _run(
        args,
        [sock],
        data_dir,
        resp_socks=resp_socks,
        cluster=cluster,
        tls_ports=(tls_socks, resp_tls_socks, _tls_files(args)),
    )


def _main_config_file(args: Args) -> int:
    """Drop-in for ``disque-server disque.conf``."""
    from disq.config import ConfigFileError, load_config

    try:
        store = load_config(args.config)
    except ConfigFileError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"disq-node: cannot read {args.config}: {exc}\n")
        return 1
    if args.advertise_host is not None:
        store.override("advertise-host", args.advertise_host)  # the flag over the file
    st = store.settings
    binds = list(st.effective_bind) or [DEFAULT_ADDR]
    try:
        resp_socks = [_listen("RESP", b, st.port) for b in binds] if st.port else []
        resp_tls_socks = [_listen("RESP TLS", b, st.tls_port) for b in binds] if st.tls_port else []
        tls_socks = (
            [_listen("beanstalk TLS", binds[0], st.beanstalk_tls_port)]
            if st.beanstalk_tls_port
            else []
        )
        socks = [_listen("beanstalk", binds[0], st.beanstalk_port)] if st.beanstalk_port else []
    except OSError as exc:
        sys.stderr.write(f"disq-node: {exc}\n")
        return 1
    if st.renamed_commands:
        # Checked once the sockets listen (the table imports the engine): Disque's error for
        # a rename it refuses, at that line. The RESP hub builds the same table at start.
        from disq.doors.disque.table import RenameError, command_table

        try:
            command_table(st.renamed_commands)
        except RenameError as exc:
            sys.stderr.write(f"{store.rename_error(exc.index, exc.reason)}\n")
            return 1
    st.dir.mkdir(parents=True, exist_ok=True)
    args.pidfile = st.pidfile_path
    args.fsync = st.appendfsync
    args.metrics_port, args.metrics_host = st.metrics_port, binds[0]
    args.metrics_port_required = st.metrics_port_setting is not None
    args.drain_timeout_s = st.drain_timeout_s
    if st.maxmemory_bytes:
        args.max_memory = st.maxmemory_bytes
    cluster: dict[str, Any] = {
        "host": binds[0],
        "resp_port": st.port,
        "grpc_port": st.grpc_port,
        "node_timeout_ms": st.cluster_node_timeout_ms,
        "joins": [],
        "requirepass": st.requirepass,
        "state_dir": str(st.dir),
        "beanstalk_replicate": st.beanstalk_replicate,
        "config_store": store,
        "aof_enqueue_once": st.aof_enqueue_jobs_once,
        "logfile": str(st.logfile_path) if st.logfile_path else None,
        "loglevel": st.loglevel,
        "syslog": (st.syslog_ident, st.syslog_facility) if st.syslog_enabled else None,
        "tls_files": _tls_files(args, st),
        "job_lane_port": st.job_lane_port,
        "advertise_host": st.advertise_host,  # the flag's value, if given (override above)
        "events_max_bytes": args.events_max_bytes,  # no directive: the flag, as without a file
    }
    data_dir = str(st.dir) if st.appendonly else None
    return _run(
        args,
        socks,
        data_dir,
        resp_socks=resp_socks,
        cluster=cluster,
        tls_ports=(tls_socks, resp_tls_socks, _tls_files(args, st)),
    )


def _without_rich() -> None:
    """structlog's dev module imports rich whenever it is installed (here a development tool
    brings it), and rich pulls in pygments: 40 ms or more of every start, for exception
    rendering the node never does with it. The node process does without."""
    if "rich" not in sys.modules:
        sys.modules["rich"] = None  # type: ignore[assignment]


def _raise_open_files_limit(cluster: dict[str, Any] | None) -> None:
    """Redis's adjustOpenFilesLimit: enough descriptors for maxclients and the node's own
    (disq/server/fd_limit.py), logged; a hard limit below that is the operator's to raise."""
    from disq.logging import get_logger
    from disq.server.fd_limit import raise_open_files_limit, wanted_open_files

    store = (cluster or {}).get("config_store")
    max_clients = store.settings.maxclients if store is not None else DEFAULT_MAX_CLIENTS
    got = raise_open_files_limit(wanted_open_files(max_clients))
    log = get_logger("disq")
    fields = {"soft": got.soft, "hard": got.hard, "was": got.before, "wanted": got.wanted}
    if got.short:
        log.warning("open_files_limit_low", maxclients=max_clients, **fields)
    else:
        log.info("open_files_limit", **fields)


def _run(
    args: Args,
    socks: list[socket.socket],
    data_dir: str | None,
    *,
    resp_socks: list[socket.socket] | None = None,
    cluster: dict[str, Any] | None = None,
    tls_ports: tuple[list[socket.socket], list[socket.socket], dict[str, Any] | None] = (
        [],
        [],
        None,
    ),
) -> int:
    """``tls_ports``: the bound beanstalk and RESP TLS sockets, and the node's TLS files."""
    _without_rich()
    import asyncio

    from disq.core.beanstalk.core import Limits
    from disq.logging import configure_logging, defer, load
    from disq.server.listen_error import ListenError
    from disq.server.node_config import NodeConfig
    from disq.server.runtime import NodeRuntime

    defer()  # structlog loads once the ports serve (disq/logging.py)
    log_options = cluster or {}
    configure_logging(
        args.verbose,
        log_options.pop("logfile", None),
        log_options.pop("loglevel", None),
        log_options.pop("syslog", None),
    )
    _raise_open_files_limit(cluster)
    max_job_size = 65535 if args.max_job_size is None else args.max_job_size
    if max_job_size > JOB_SIZE_MAX:
        from disq.logging import get_logger

        get_logger("disq").warning("max_job_size_clamped", requested=max_job_size)
        max_job_size = JOB_SIZE_MAX
    fsync = args.fsync or "always"
    interval_ms = 1000
    if args.fsync_ms is not None:
        if args.fsync_ms <= 0:
            fsync = "always"
        else:
            fsync, interval_ms = "everysec", args.fsync_ms
    if args.no_fsync:
        fsync = "no"
    config = NodeConfig(
        data_dir=_path(data_dir) if data_dir else None,
        fsync=fsync,
        fsync_interval_ms=interval_ms,
        limits=Limits(max_job_size=max_job_size, max_memory_bytes=args.max_memory),
    )
    if args.binlog_size:
        config.binlog_max_size = args.binlog_size
    config.metrics_port = args.metrics_port or 0
    config.metrics_host = getattr(args, "metrics_host", DEFAULT_ADDR)
    config.metrics_port_required = getattr(args, "metrics_port_required", True)
    config.dashboard_actions = bool(getattr(args, "dashboard_actions", False))
    config.drain_timeout_s = max(0.0, args.drain_timeout_s)
    tls_socks, resp_tls_socks, tls_port_files = tls_ports
    ssl_context = None
    if tls_socks or resp_tls_socks:
        from disq.server.tls_ports import TlsPortError, server_ssl_context

        try:
            ssl_context = server_ssl_context(tls_port_files)
        except TlsPortError as exc:
            sys.stderr.write(f"disq-node: {exc}\n")
            return 1

    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    node = NodeRuntime(config, loop)
    if cluster is not None:
        from disq.server.cluster_services import attach_cluster

        try:
            tls_files = cluster.pop("tls_files", None)
            if tls_files is not None:
                from disq.tls import TlsConfig

                cluster["tls"] = TlsConfig.for_node(**tls_files)
            attach_cluster(node, cluster)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"disq-node: {exc}\n")
            return 1
    if config.data_dir is not None:
        from disq.persistence.aof_errors import AofCorruptError, AofLockedError

        try:
            node.open_aof()
        except (AofCorruptError, AofLockedError) as exc:
            sys.stderr.write(f"disq-node: {exc}\n")
            return 1
    gc.set_threshold(*GC_THRESHOLDS)
    _full_gc_every(loop, FULL_GC_INTERVAL_S)
    pidfile: Path | None = getattr(args, "pidfile", None)
    if pidfile is not None:
        _write_pidfile(pidfile)
    try:
        loop.run_until_complete(
            node.serve(
                socks,
                resp_socks or [],
                tls_sockets=tls_socks,
                resp_tls_sockets=resp_tls_socks,
                ssl_context=ssl_context,
            )
        )
    except ListenError as exc:  # the gRPC, job lane or admin port, bound as the node starts
        sys.stderr.write(f"disq-node: {exc}\n")
        return 1
    finally:
        loop.close()
        if pidfile is not None:
            _remove_pidfile(pidfile)
    # The AOF is flushed and fsynced and the sockets are closed: skip freeing millions of
    # objects one by one, which took seconds with a large queue.
    load()  # the lines kept, if the node stopped before structlog loaded
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if node.fatal else 0)


# The collector. Young collections stay cheap and not too frequent (10,000 allocations:
# the hot path allocates many short-lived objects). Full collections are what costs with a
# big queue: each one scans every job, set and tuple the node holds, and Python starts one
# whenever its old generation grew by a quarter, so a node taking adds into a growing queue
# spent more and more of its time there (13% of a one-node keyed Spark write, measured with
# py-spy --native; 1.3x on idempotency keys' cost). The automatic trigger is pushed out of
# reach (1,000 middle collections) and a full collection runs on a timer instead, so cyclic
# garbage that reached the old generation is still reclaimed, at a known pace.
GC_THRESHOLDS = (10_000, 10, 1_000)
FULL_GC_INTERVAL_S = 300.0


def _full_gc_every(loop: Any, interval_s: float) -> None:
    def run() -> None:
        gc.collect()
        loop.call_later(interval_s, run)

    loop.call_later(interval_s, run)


if __name__ == "__main__":
    sys.exit(main())
