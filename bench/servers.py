"""The reference servers disq runs beside: beanstalkd (Debian's 1.12), Disque 1.0-rc1 (built
under /tmp from antirez/disque's source, never committed), redis-server and rabbitmq-server
(Debian's).

beanstalkd starts as a :class:`cluster.lab.FlagServer`, as a standalone disq node does; Disque
nodes start under :class:`cluster.lab.Lab` with ``node_cmd`` (they read the same config
lines); redis-server has flags of its own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from bench.common import HOST, ROOT, BenchError, answers, free_port, log, wait_until
from cluster.lab import FlagServer

# The commit scripts/run_disque_suite.sh runs Disque's own suite from.
DISQUE_REPO = "https://github.com/antirez/disque"
DISQUE_COMMIT = "0192ba7e1cda157024229962b7bee1c6e86d771b"
DISQUE_DIR = Path("/tmp/disque")
DISQUE_SERVER = DISQUE_DIR / "src" / "disque-server"
HOW_TO_GET_DISQUE = (
    f"git clone {DISQUE_REPO} {DISQUE_DIR} && git -C {DISQUE_DIR} checkout {DISQUE_COMMIT[:7]} "
    f"&& make -C {DISQUE_DIR}, or pass --build-disque"
)


def _ensure(script: str, what: str) -> None:
    if subprocess.run([str(ROOT / "scripts" / script)], check=False).returncode != 0:
        raise BenchError(f"{what} is not installed and scripts/{script} could not install it")


def ensure_beanstalkd() -> None:
    _ensure("ensure_beanstalkd.sh", "beanstalkd")


def ensure_redis_server() -> None:
    _ensure("ensure_redis_server.sh", "redis-server")


def beanstalkd_version() -> str:
    out = subprocess.run(["beanstalkd", "-v"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip()


def beanstalkd(base_dir: Path, binlog_dir: Path | None = None) -> FlagServer:
    """beanstalkd on a free port; ``-b binlog_dir`` (fsync every 50 ms, its default) if given."""
    flags: list[str] = []
    if binlog_dir is not None:
        binlog_dir.mkdir(parents=True, exist_ok=True)  # beanstalkd locks it, it does not make it
        flags = ["-b", str(binlog_dir)]
    return FlagServer(base_dir, flags, node_cmd=["beanstalkd"])


def add_disque_options(p: argparse.ArgumentParser) -> None:
    """--disque, --build-disque and --no-disque, for the subcommands with Disque beside."""
    p.add_argument("--disque", type=Path, help="a disque-server (default /tmp/disque's build)")
    p.add_argument("--build-disque", action="store_true", help="build /tmp/disque if missing")
    p.add_argument("--no-disque", action="store_true", help="disq alone")


def disque_from(args: argparse.Namespace) -> Path | None:
    """The disque-server the options of :func:`add_disque_options` name, if any."""
    return None if args.no_disque else disque_server(args.disque, args.build_disque)


def disque_server(path: Path | None, build: bool) -> Path | None:
    """The ``disque-server`` to run beside disq: ``path``, or /tmp/disque's build, built there
    first from the pinned commit when ``build`` (cloning needs the network). None, with how to
    get one in the log, when there is none: the subcommand then runs disq alone."""
    binary = path or DISQUE_SERVER
    if not binary.exists() and build and path is None:
        build_disque()
    if binary.exists():
        return binary.resolve()
    log(f"no Disque build at {binary}: disq runs alone. For Disque beside it: {HOW_TO_GET_DISQUE}")
    return None


def build_disque() -> None:
    """Clone antirez/disque at the pinned commit into /tmp/disque (unless a checkout is
    there) and build it with its own Makefile (jemalloc, as its release)."""
    if not (DISQUE_DIR / "Makefile").exists():
        log(f"cloning {DISQUE_REPO} into {DISQUE_DIR}")
        subprocess.run(["git", "clone", "-q", DISQUE_REPO, str(DISQUE_DIR)], check=True)
        subprocess.run(["git", "-C", str(DISQUE_DIR), "checkout", "-q", DISQUE_COMMIT], check=True)
    log(f"building Disque in {DISQUE_DIR} (a minute or two)")
    subprocess.run(["make", "-C", str(DISQUE_DIR)], stdout=subprocess.DEVNULL, check=True)


class RedisServer:
    """redis-server on a free port with an AOF fsynced every second, no RDB snapshots."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        ensure_redis_server()
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--dir",
            str(self.workdir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_until(lambda: answers(self.port, b"PING\r\n", timeout=0.5), 10, "redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RabbitServer:
    """rabbitmq-server (Debian's, one node) on free ports, no plugins, its data and logs in a
    directory of its own under /tmp: Debian's start script runs the broker as the ``rabbitmq``
    user, who must reach it (a caller's private temporary directory it could not). Stopped
    with its process group; the directory goes with it."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-rabbitmq-"))
        self.port = free_port()
        self.node = f"bench{self.port}@localhost"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        _ensure("ensure_rabbitmq_server.sh", "rabbitmq-server")
        plugins = self.workdir / "enabled_plugins"
        plugins.write_text("[].\n")
        if os.geteuid() == 0:
            for path in (self.workdir, plugins):
                shutil.chown(path, "rabbitmq", "rabbitmq")
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.workdir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
        }
        self.proc = subprocess.Popen(
            ["rabbitmq-server"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # The AMQP 0-9-1 header: a broker that is up answers with Connection.Start.
        wait_until(
            lambda: answers(self.port, b"AMQP\x00\x00\x09\x01", b"\xce", timeout=0.5),
            60,
            "rabbitmq-server",
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # The broker (beam, under su) leaves the script's process group: ask it to stop.
            subprocess.run(
                ["rabbitmqctl", "-n", self.node, "stop"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                timeout=60,
                check=False,
            )
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> RabbitServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
