"""Fixtures that run a real server process per test, like beanstalkd's ``testserv.c``.

Which server is started is chosen with the environment variable ``DISQ_TEST_SERVER``:

* ``disq`` (default): ``python -m disq.node_main -l 127.0.0.1 -p PORT *extra``
* ``beanstalkd``: ``beanstalkd -l 127.0.0.1 -p PORT *extra`` (``BEANSTALKD_BIN`` overrides the
  binary path).  This is how the wire tests are validated against the reference server.

Both accept beanstalkd's flags (``-l -p -b -f -F -s -z -V``).  ``-l unix:/path`` listens on a
UNIX socket instead of TCP (no ``-p`` is passed then).

Readiness is detected by polling ``connect()`` (no fixed sleeps).  The probe connection that
succeeds sends ``quit`` and waits for the server to close it, so that by the time a test
connects the probe is fully gone: ``current-connections`` then counts only the test's own
connections, and ``total-connections`` is exactly ``probe_connections`` + the test's.

Every process is killed at teardown, even when the test fails.

Every node process of the suite is a ``cluster.nodeproc.NodeProcess`` (the lab's nodes too):
``ServerProcess`` is one with beanstalkd's command line and the probe above, and
``server_factory.node(*args, ready=...)`` starts a node with any other (more ports, a config
file, another working directory or environment), killed at teardown alike. A start that must
fail runs to its end with ``cluster.nodeproc.run_node``.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from cluster import ports
from cluster.lab import Lab
from cluster.nodeproc import (
    NodeProcess,
    Probe,
    beanstalk_serves,
    grpc_api_loaded,
    resp_pong,
    start_all,
)

# Make ``import wire`` work whatever pytest's import mode / package layout is.
_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

PROJECT_ROOT = _HERE.parents[1]
SERVER_KIND = os.environ.get("DISQ_TEST_SERVER", "disq").strip().lower()
if SERVER_KIND not in ("disq", "beanstalkd"):
    raise RuntimeError(f"DISQ_TEST_SERVER must be 'disq' or 'beanstalkd', not {SERVER_KIND!r}")

# How long a server may take to accept its first connection (Python start-up is the slow one).
START_TIMEOUT = 15.0
# How long SIGTERM may take before we fall back to SIGKILL.
STOP_TIMEOUT = 10.0

_N = TypeVar("_N", bound=NodeProcess)


def _beanstalkd_bin() -> str | None:
    explicit = os.environ.get("BEANSTALKD_BIN")
    if explicit:
        return explicit
    return shutil.which("beanstalkd") or (
        "/usr/bin/beanstalkd" if os.path.exists("/usr/bin/beanstalkd") else None
    )


def free_port() -> int:
    """A free TCP port on 127.0.0.1, below the ephemeral range, distinct from every port
    handed out before in this test run and from every other xdist worker's
    (cluster/ports.py)."""
    return ports.pick((0,))


def free_bus_port(offset: int = ports.BUS_PORT_OFFSET) -> int:
    """A free port whose Disque bus port (port + offset) is free too: a config-file node binds
    both, and an ephemeral port in use at port + offset would make it fail to start."""
    return ports.pick((0, offset))


class ServerProcess(NodeProcess):
    """One beanstalk-compatible server under test (cluster/nodeproc.py's NodeProcess): a
    port (or UNIX socket), a data dir and a child process.

    Attributes:
        kind: ``"disq"`` or ``"beanstalkd"``.
        port: TCP port (kept across ``restart()``); ``None`` for a UNIX-socket server.
        unix_path: the UNIX socket path when started with ``listen="unix:..."``.
        data_dir: an empty directory owned by this server (use it for ``-b``).
        extra: extra command line arguments.
        proc: the ``subprocess.Popen`` of the current incarnation.
        probe_connections: connections the fixture itself made to the *current* process
            (always 1 after a start: the readiness probe).
    """

    def __init__(
        self,
        kind: str,
        data_dir: Path,
        extra: tuple[str, ...] = (),
        listen: str | None = None,
        binlog: bool = False,
        nofile: tuple[int, int] | None = None,
    ) -> None:
        self.kind = kind
        # (soft, hard) RLIMIT_NOFILE the process starts with; None: this process's own.
        self.nofile = nofile
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.binlog_dir = data_dir / "binlog"
        self.extra = tuple(extra)
        if binlog:
            self.binlog_dir.mkdir(exist_ok=True)
            self.extra = ("-b", str(self.binlog_dir), *self.extra)
        self.unix_path: str | None = None
        self.port: int | None = None
        if listen is not None and listen.startswith("unix:"):
            self.unix_path = listen[len("unix:") :]
        else:
            self.port = free_port()
        self.probe_connections = 0
        super().__init__(
            cwd=PROJECT_ROOT,
            log_path=data_dir / "server.log",
            start_timeout=START_TIMEOUT,
            stop_timeout=STOP_TIMEOUT,
            name=kind,
        )

    # ------------------------------------------------------------------ command line

    def argv(self) -> list[str]:
        """The exact command line used for this server."""
        if self.unix_path is not None:
            listen = ["-l", f"unix:{self.unix_path}"]
        else:
            listen = ["-l", "127.0.0.1", "-p", str(self.port)]
        if self.kind == "beanstalkd":
            binary = _beanstalkd_bin()
            if binary is None:
                pytest.skip("beanstalkd binary not found (apt-get install -y beanstalkd)")
            return [binary, *listen, *self.extra]
        return [*self.cmd, *listen, *self.extra]

    # ------------------------------------------------------------------ lifecycle

    def spawn(self) -> ServerProcess:
        self.rlimits = {resource.RLIMIT_NOFILE: self.nofile} if self.nofile is not None else {}
        self.probe_connections = 0
        super().spawn()
        return self

    def probes(self) -> list[Probe]:
        """The beanstalk port answers (its probe connection gone again), then, with
        ``--grpc-port``, the gRPC port's API is loaded: a node without peers serves its
        client ports before its gRPC port (issue 31), and the tests use it at once."""
        probes = [beanstalk_serves(self._connect_once, self._count_probe, START_TIMEOUT)]
        extra = list(self.extra)
        if self.kind == "disq" and "--grpc-port" in extra:
            port = int(extra[extra.index("--grpc-port") + 1])
            if port != 0:
                probes.append(grpc_api_loaded(port))
        return probes

    def _count_probe(self) -> None:
        self.probe_connections += 1

    def _connect_once(self) -> socket.socket:
        if self.unix_path is not None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1.0)
            try:
                s.connect(self.unix_path)
            except OSError:
                s.close()
                raise
            return s
        return socket.create_connection(("127.0.0.1", self.port), timeout=1.0)

    def start(self, wait: bool = True) -> ServerProcess:
        """Start the process and (by default) block until it accepts connections."""
        super().start(wait)
        return self

    def restart(self, wait: bool = True) -> ServerProcess:
        """Stop with SIGTERM, then start again with the same arguments and port."""
        super().restart(wait)
        return self

    # ------------------------------------------------------------------ clients

    def connect(self, timeout: float | None = None):
        """A new ``wire.Conn`` to this server."""
        from wire import DEFAULT_TIMEOUT, Conn

        t = DEFAULT_TIMEOUT if timeout is None else timeout
        if self.unix_path is not None:
            return Conn(unix_path=self.unix_path, timeout=t)
        return Conn(self.port, timeout=t)


class ServerFactory:
    """Starts servers and nodes, and kills all of them at teardown."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.servers: list[NodeProcess] = []
        self.kind = SERVER_KIND

    def new(
        self,
        *extra: str,
        listen: str | None = None,
        binlog: bool = False,
        data_dir: Path | None = None,
        start: bool = True,
        nofile: tuple[int, int] | None = None,
    ) -> ServerProcess:
        """Create (and by default start) a beanstalk-compatible server (``DISQ_TEST_SERVER``).

        ``extra``: extra flags, e.g. ``"-z", "10"``.  ``binlog=True`` adds ``-b <data_dir>/binlog``.
        ``listen="unix:/path"`` listens on a UNIX socket.  ``data_dir`` reuses a directory
        (e.g. to start a second server on the same binlog). ``nofile``: the (soft, hard)
        RLIMIT_NOFILE the process starts with.
        """
        d = data_dir if data_dir is not None else self.base_dir / f"srv{len(self.servers)}"
        srv = ServerProcess(self.kind, d, tuple(extra), listen=listen, binlog=binlog, nofile=nofile)
        return self.add(srv, start)

    __call__ = new

    def node(
        self,
        *args: str,
        ready: Probe | Sequence[Probe] = (),
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        cmd: Sequence[str] | None = None,
        start: bool = True,
    ) -> NodeProcess:
        """Create (and by default start) a disq node with any command line: flags, or a
        config file and flags after it. ``ready``: the probes that say it serves
        (cluster/nodeproc.py: ``resp_pong(port)``, ``tcp_accepts(port)``, ...); none: the
        start does not wait. The log goes to ``log_path`` (default ``node<k>.log`` in the
        factory's directory)."""
        k = len(self.servers)
        node = NodeProcess(
            args,
            cmd=cmd,
            cwd=cwd if cwd is not None else PROJECT_ROOT,
            env=env,
            log_path=log_path if log_path is not None else self.base_dir / f"node{k}.log",
            ready=ready,
            name=f"node {k}",
        )
        return self.add(node, start)

    def drop_in_nodes(self, n: int, cwd: Path) -> tuple[list[int], list[NodeProcess]]:
        """``n`` nodes from Disque configs that differ only in ``port`` and ``dir``
        (``cwd``/n<i>.conf, ``dir d<i>`` relative to the working dir ``cwd``; the bus port
        derives from the port), started side by side until each answers PING. Their RESP
        ports and nodes."""
        ports: list[int] = []
        while len(ports) < n:
            p = free_bus_port()
            if p not in ports and p + 10000 not in ports and all(p != q + 10000 for q in ports):
                ports.append(p)
        nodes = []
        for i, port in enumerate(ports):
            (cwd / f"d{i}").mkdir()
            (cwd / f"n{i}.conf").write_text(f"port {port}\ndir d{i}\n")
            nodes.append(self.node(f"n{i}.conf", cwd=cwd, ready=resp_pong(port), start=False))
        start_all(nodes)
        return ports, nodes

    def add(self, node: _N, start: bool = True) -> _N:
        """Own ``node`` (killed at teardown), and start it unless ``start`` is false."""
        self.servers.append(node)
        if start:
            node.start()
        return node

    def close(self) -> None:
        for srv in self.servers:
            srv.kill()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory (UNIX socket paths are limited to ~107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="disqw-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _factory(base_dir: Path) -> Iterator[ServerFactory]:
    factory = ServerFactory(base_dir)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def server_factory(short_tmp: Path) -> Iterator[ServerFactory]:
    """Factory for servers with extra args: ``srv = server_factory("-z", "10")``."""
    yield from _factory(short_tmp)


@pytest.fixture(scope="module")
def module_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """A factory whose nodes a whole module shares: killed after the module's last test."""
    yield from _factory(tmp_path_factory.mktemp("nodes"))


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A formed cluster of three config-file nodes (cluster/lab.py, node timeout 1.5 s) that a
    whole module shares; stopped after the module's last test."""
    with Lab(3, tmp_path_factory.mktemp("lab3"), node_timeout_ms=1500) as lab:
        yield lab


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    """A fresh server with default arguments, one process per test (like testserv.c)."""
    return server_factory.new()


@pytest.fixture
def server_kind() -> str:
    """``"disq"`` or ``"beanstalkd"``: which implementation the tests run against."""
    return SERVER_KIND
