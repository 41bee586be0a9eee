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
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.lab import ephemeral_port_low

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


def _beanstalkd_bin() -> str | None:
    explicit = os.environ.get("BEANSTALKD_BIN")
    if explicit:
        return explicit
    return shutil.which("beanstalkd") or (
        "/usr/bin/beanstalkd" if os.path.exists("/usr/bin/beanstalkd") else None
    )


# Ports handed out in this pytest process. A port is checked free and then closed, so two
# calls in a row could get the same one back before either node binds it; this set keeps
# every port handed out distinct (and bus ports too) for the whole run.
_HANDED_OUT: set[int] = set()
_LOWEST_PORT = 12000


def _pick(offsets: tuple[int, ...]) -> int:
    """A port P such that P + each offset is free now and never handed out before in this run.

    Below the kernel's ephemeral range: a port from bind(0) is one any outgoing connection on
    the machine may take between our check and the node's bind (or between a kill and a
    restart), and a node that cannot bind exits, which a test only sees as a 30 s timeout.
    """
    rng = random.Random()
    high = ephemeral_port_low() - max(offsets)
    for _ in range(10_000):
        port = rng.randrange(_LOWEST_PORT, high)
        wanted = [port + off for off in offsets]
        if any(p in _HANDED_OUT for p in wanted):
            continue
        if all(_bindable(p) for p in wanted):
            _HANDED_OUT.update(wanted)
            return port
    raise RuntimeError("no free port below the ephemeral range")


def free_port() -> int:
    """A free TCP port on 127.0.0.1, below the ephemeral range, distinct from every port
    handed out before in this test run."""
    return _pick((0,))


def free_bus_port(offset: int = 10000) -> int:
    """A free port whose Disque bus port (port + offset) is free too: a config-file node binds
    both, and an ephemeral port in use at port + offset would make it fail to start."""
    return _pick((0, offset))


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ServerProcess:
    """One server under test: a port (or UNIX socket), a data dir and a child process.

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
        self.proc: subprocess.Popen[bytes] | None = None
        self.probe_connections = 0
        self._log_path = data_dir / "server.log"
        self._log = None

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
        return [sys.executable, "-m", "disq.node_main", *listen, *self.extra]

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ServerProcess:
        """Start the process and block until it accepts connections."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(PROJECT_ROOT) + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._log = open(self._log_path, "ab")  # closed in _reap()
        self.proc = subprocess.Popen(
            self.argv(),
            cwd=str(PROJECT_ROOT),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=self._limit_files if self.nofile is not None else None,
        )
        self.probe_connections = 0
        self._wait_ready()
        return self

    def _limit_files(self) -> None:
        # In the child between fork and exec: nothing to import, nothing to allocate much.
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

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

    def _wait_ready(self) -> None:
        """Poll-connect until the server accepts, then retire the probe with ``quit``."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.proc.returncode} during start-up: "
                    f"{self.argv()}\n{self.log_text()}"
                )
            try:
                probe = self._connect_once()
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(
                        f"server did not accept connections within {START_TIMEOUT}s: "
                        f"{self.argv()}\n{self.log_text()}"
                    ) from None
                time.sleep(0.01)
                continue
            break
        self.probe_connections += 1
        # A stale UNIX socket file (from an earlier process) could accept nothing, so the
        # connect above proves this process listens.  Now send `quit` and wait for the
        # server to hang up, so the probe is no longer counted in current-connections.
        # An unknown command is answered but counted in no stat: a server that accepted the
        # connection and then died (corrupt AOF, locked data dir) never answers it.
        got = b""
        try:
            probe.settimeout(START_TIMEOUT)
            probe.sendall(b"probe\r\nquit\r\n")
            while chunk := probe.recv(4096):
                got += chunk
        except OSError:
            pass
        finally:
            probe.close()
        if got != b"UNKNOWN_COMMAND\r\n":
            try:
                self.proc.wait(STOP_TIMEOUT)  # let it exit with its own status
            except subprocess.TimeoutExpired:
                self.kill()
            raise RuntimeError(
                f"server accepted a connection but did not serve it (got {got!r}): "
                f"{self.argv()}\n{self.log_text()}"
            )
        self._wait_bus(deadline)

    def _wait_bus(self, deadline: float) -> None:
        """A node without peers serves its client ports before its gRPC port (issue 31):
        with ``--grpc-port``, wait until that port accepts too (the tests use it at once)."""
        extra = list(self.extra)
        if self.kind != "disq" or "--grpc-port" not in extra:
            return
        port = int(extra[extra.index("--grpc-port") + 1])
        if port == 0:
            return
        assert self.proc is not None
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the gRPC port {port} did not come up: {self.argv()}\n{self.log_text()}"
                    ) from None
                time.sleep(0.01)
        self._wait_api(port, deadline)

    def _wait_api(self, port: int, deadline: float) -> None:
        """A node whose peers hear first (``--join``) loads its client API a moment after its
        client ports serve, and answers UNAVAILABLE "not run" until then (issue 31,
        disq/server/late_services.py): wait that out. Any other answer ends the wait (a
        health status; a TLS port's refusal of this plaintext channel)."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from disq.server.late_services import NOT_STARTED_DETAILS

        assert self.proc is not None
        while True:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                try:
                    health_pb2_grpc.HealthStub(ch).Check(
                        health_pb2.HealthCheckRequest(), timeout=1.0
                    )
                    return
                except grpc.RpcError as exc:
                    if exc.details() != NOT_STARTED_DETAILS:
                        return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the gRPC API on {port} did not load: {self.argv()}\n{self.log_text()}"
                )
            time.sleep(0.01)

    def signal(self, signum: int) -> None:
        """Send a signal to the server process (e.g. ``signal.SIGUSR1`` for drain mode)."""
        assert self.proc is not None and self.proc.poll() is None, "server not running"
        self.proc.send_signal(signum)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM the process and wait for it (SIGKILL after ``timeout``).

        Returns the exit status, or None if it was not running.
        """
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reap()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the process (no chance to flush anything) and wait for it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reap()

    def restart(self) -> ServerProcess:
        """Stop with SIGTERM, then start again with the same arguments and port."""
        self.stop()
        return self.start()

    def _reap(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_text(self) -> str:
        """What the server printed so far (stdout and stderr)."""
        try:
            return self._log_path.read_text(errors="replace")
        except OSError:
            return ""

    # ------------------------------------------------------------------ clients

    def connect(self, timeout: float | None = None):
        """A new ``wire.Conn`` to this server."""
        from wire import DEFAULT_TIMEOUT, Conn

        t = DEFAULT_TIMEOUT if timeout is None else timeout
        if self.unix_path is not None:
            return Conn(unix_path=self.unix_path, timeout=t)
        return Conn(self.port, timeout=t)


class ServerFactory:
    """Starts servers with extra arguments and kills all of them at teardown."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.servers: list[ServerProcess] = []
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
        """Create (and by default start) a server.

        ``extra``: extra flags, e.g. ``"-z", "10"``.  ``binlog=True`` adds ``-b <data_dir>/binlog``.
        ``listen="unix:/path"`` listens on a UNIX socket.  ``data_dir`` reuses a directory
        (e.g. to start a second server on the same binlog). ``nofile``: the (soft, hard)
        RLIMIT_NOFILE the process starts with.
        """
        d = data_dir if data_dir is not None else self.base_dir / f"srv{len(self.servers)}"
        srv = ServerProcess(self.kind, d, tuple(extra), listen=listen, binlog=binlog, nofile=nofile)
        self.servers.append(srv)
        if start:
            srv.start()
        return srv

    __call__ = new

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


@pytest.fixture
def server_factory(short_tmp: Path) -> Iterator[ServerFactory]:
    """Factory for servers with extra args: ``srv = server_factory("-z", "10")``."""
    factory = ServerFactory(short_tmp)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    """A fresh server with default arguments, one process per test (like testserv.c)."""
    return server_factory.new()


@pytest.fixture
def server_kind() -> str:
    """``"disq"`` or ``"beanstalkd"``: which implementation the tests run against."""
    return SERVER_KIND
