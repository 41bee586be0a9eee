"""``disq-node``: run one node.

Harnesses written for beanstalkd connect within milliseconds of starting it, so the listening
socket is bound before anything heavy is imported (asyncio, uvloop, the engine, structlog):
the kernel queues connections that arrive meanwhile. Everything the cluster needs later is
imported lazily.

Two ways to start it:

* ``disq-node`` with no beanstalkd flags: embedded defaults, data in ``./disq-data`` with the
  AOF on (fsync every second), beanstalk door on 127.0.0.1:11300.
* ``disq-node -l ADDR -p PORT [-b DIR] [-f MS] [-F] [-s N] [-z N] [-V]``: beanstalkd's own
  flags, for scripts and harnesses that start beanstalkd. Without ``-b`` it keeps everything
  in memory, exactly like beanstalkd: a fresh process is a fresh server.
"""

from __future__ import annotations

import argparse
import os
import socket
import stat
import sys
from pathlib import Path

DEFAULT_PORT = 11300
DEFAULT_ADDR = "127.0.0.1"  # beanstalkd listens on 0.0.0.0; public listening must be asked for
DEFAULT_DATA_DIR = "disq-data"
JOB_SIZE_MAX = 1 << 30  # beanstalkd's -z ceiling (1 GiB)
BEANSTALKD_FLAGS = (
    "listen",
    "port",
    "binlog_dir",
    "fsync_ms",
    "no_fsync",
    "binlog_size",
    "max_job_size",
)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
    t = text.strip().lower()
    for suffix in sorted(units, key=len, reverse=True):
        if t.endswith(suffix):
            return int(t[: -len(suffix)]) * units[suffix]
    return int(t)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="disq-node",
        description="Run a disq node (beanstalkd-compatible; replicated task queue).",
    )
    p.add_argument("-l", dest="listen", help="listen address, or unix:/path (default 127.0.0.1)")
    p.add_argument("-p", dest="port", type=int, help="beanstalk port (default 11300)")
    p.add_argument("-b", dest="binlog_dir", help="data directory (enables the AOF), as beanstalkd")
    p.add_argument("-f", dest="fsync_ms", type=int, help="fsync at most every MS ms; 0: always")
    p.add_argument("-F", dest="no_fsync", action="store_true", help="never fsync")
    p.add_argument("-s", dest="binlog_size", type=_size, help="reported binlog-max-size")
    p.add_argument("-z", dest="max_job_size", type=_size, help="max job size (default 65535)")
    p.add_argument("-u", dest="user", help="ignored (beanstalkd compatibility)")
    p.add_argument("-c", dest="compact", action="store_true", help="no-op (beanstalkd)")
    p.add_argument("-n", dest="no_compact", action="store_true", help="no-op (beanstalkd)")
    p.add_argument("-V", dest="verbose", action="count", default=0, help="more verbose")
    p.add_argument("-v", dest="show_version", action="store_true", help="print version")
    p.add_argument("--data-dir", help=f"data directory (default ./{DEFAULT_DATA_DIR})")
    p.add_argument("--in-memory", action="store_true", help="no data directory, no AOF")
    p.add_argument("--fsync", choices=("always", "everysec", "no"), help="AOF fsync policy")
    p.add_argument("--max-memory", type=_size, default=0, help="refuse puts past this (bytes)")
    p.add_argument("--repair-aof", metavar="DIR", help="cut a corrupt AOF at its first bad record")
    return p


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.show_version:
        from disq import __version__

        sys.stdout.write(f"disq-node {__version__} (beanstalkd protocol 1.12)\n")
        return 0
    if args.repair_aof:
        from disq.persistence.aof_file import AofError, repair_aof

        try:
            dropped = repair_aof(Path(args.repair_aof) / "disq.aof")
        except (AofError, OSError) as exc:
            sys.stderr.write(f"disq-node: cannot repair: {exc}\n")
            return 1
        sys.stdout.write(f"repaired: dropped {dropped} bytes\n")
        return 0

    beanstalkd_style = any(getattr(args, f) not in (None, False) for f in BEANSTALKD_FLAGS)
    data_dir: str | None = args.data_dir or args.binlog_dir
    if data_dir is None and not beanstalkd_style and not args.in_memory:
        data_dir = DEFAULT_DATA_DIR
    if args.in_memory:
        data_dir = None

    try:
        sock = _bind(args.listen or DEFAULT_ADDR, args.port or DEFAULT_PORT)
    except OSError as exc:
        sys.stderr.write(f"disq-node: cannot listen on {args.listen or DEFAULT_ADDR}: {exc}\n")
        return 1

    # The socket listens: now the heavy imports.
    return _run(args, sock, data_dir)


def _run(args: argparse.Namespace, sock: socket.socket, data_dir: str | None) -> int:
    import asyncio
    import gc

    from disq.core.engine import Limits
    from disq.logging import configure_logging
    from disq.server.node import Node, NodeConfig

    configure_logging(args.verbose)
    max_job_size = 65535 if args.max_job_size is None else args.max_job_size
    if max_job_size > JOB_SIZE_MAX:
        import structlog

        structlog.get_logger("disq").warning("max_job_size_clamped", requested=max_job_size)
        max_job_size = JOB_SIZE_MAX
    fsync = args.fsync or "everysec"
    interval_ms = 1000
    if args.fsync_ms is not None:
        if args.fsync_ms <= 0:
            fsync = "always"
        else:
            fsync, interval_ms = "everysec", args.fsync_ms
    if args.no_fsync:
        fsync = "no"
    config = NodeConfig(
        data_dir=Path(data_dir) if data_dir else None,
        fsync=fsync,
        fsync_interval_ms=interval_ms,
        limits=Limits(max_job_size=max_job_size, max_memory_bytes=args.max_memory),
    )
    if args.binlog_size:
        config.binlog_max_size = args.binlog_size

    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    node = Node(config, loop)
    if config.data_dir is not None:
        from disq.persistence.aof_file import AofCorruptError, AofLockedError

        try:
            node.open_aof()
        except (AofCorruptError, AofLockedError) as exc:
            sys.stderr.write(f"disq-node: {exc}\n")
            return 1
    # Fewer young-generation collections: the hot path allocates many short-lived objects.
    gc.set_threshold(10_000, 10, 10)
    try:
        loop.run_until_complete(node.serve([sock]))
    finally:
        loop.close()
    # The AOF is flushed and fsynced and the sockets are closed: skip freeing millions of
    # objects one by one, which took seconds with a large queue.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if node.fatal else 0)


if __name__ == "__main__":
    sys.exit(main())
