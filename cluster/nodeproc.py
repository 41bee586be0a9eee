"""One node process: how the tests, the lab (:mod:`cluster.lab`) and the benchmarks start,
wait for, restart and stop a disq node, or any server with the same life cycle (the reference
beanstalkd, the venv's ``disq-node`` script, a node under a fault hook).

A :class:`NodeProcess` is:

* a command line: ``[*prefix, *cmd, *args]``. ``cmd`` defaults to ``python -m
  disq.node_main`` (:func:`node_command`); ``args`` are flags (flag mode) or a config file
  and the flags after it (config-file mode); ``prefix`` runs it elsewhere (``ip netns exec``);
* the environment it runs in: this process's, with this checkout first on ``PYTHONPATH`` (the
  node imports this checkout's disq even where the venv lacks the editable install),
  ``PYTHONUNBUFFERED=1``, and ``env``'s variables over them; a working directory (``cwd``,
  default the checkout); resource limits (``rlimits``, set between fork and exec); its own
  session (``new_session``: a Ctrl-C in the terminal reaches only its owner);
* a log file: stdout and stderr of every incarnation, appended (``log_path``; none: the
  output is dropped), each incarnation's first line its start's number, time and command
  line with ``mark_starts``;
* the probes that say it serves (``ready``): callables polled in turn, each until it answers
  true, with ``poll_interval`` between tries. A probe that raises ``OSError`` or
  :class:`~cluster.resp_client.RespError` is asked again; one that raises :class:`NotServing`
  (it got an answer that says the process will never serve) ends the start: the process is
  given ``stop_timeout`` to exit with its own status. :func:`tcp_accepts`,
  :func:`resp_pong`, :func:`grpc_api_loaded` and :func:`beanstalk_serves` are the probes the
  suite uses.

Readiness is awaited, never slept for; a process that exits while it is awaited fails the
start at once (:class:`NodeStartError`, a ``RuntimeError``, with the exit status and the
log), and so does one that is not ready by ``start_timeout`` (it is killed first).

Starts that must fail: :meth:`NodeProcess.run` runs the command to its end and returns the
``CompletedProcess`` (exit status, stdout and stderr apart), for a bad flag, a bad config
file, a port in use, or a command that is not a server (``--repair-aof``, ``-v``).
:meth:`NodeProcess.start` with ``wait=False`` then :meth:`NodeProcess.wait` is for a start
whose process must exit after it has bound its ports.

Stopping: :meth:`NodeProcess.stop` (SIGCONT, then SIGTERM: a clean shutdown, also of a
SIGSTOPped process; SIGKILL after ``timeout``), :meth:`NodeProcess.kill` (SIGKILL: kill -9),
:meth:`NodeProcess.restart` (stop, then the same command line again: same port, same data
dir), :func:`stop_all` (many at once, in parallel); :func:`start_all` starts many side by
side.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cluster.resp_client import RespClient, RespError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"

# A fresh Python process imports grpc, uvloop and the engine, and on a loaded 2-core machine
# with several of them starting at once that takes seconds: be generous, fail with the log.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0

Probe = Callable[[], object]


class NodeStartError(RuntimeError):
    """The process did not come to serve: it exited, or was not ready in time."""

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


class NotServing(Exception):
    """Raised by a probe that got through and learnt the process will never serve (e.g. it
    accepted a connection, then exited on a locked data dir)."""


def node_command(python: str | None = None) -> list[str]:
    """``[python, "-m", "disq.node_main"]``: a node of this checkout."""
    return [python or sys.executable, "-m", "disq.node_main"]


def node_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, this checkout first on ``PYTHONPATH``, unbuffered output,
    then ``extra`` over all of it."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.update(extra or {})
    return env


class NodeProcess:
    """One server process and its life cycle; ``proc`` is the current incarnation's Popen."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        cmd: Sequence[str] | None = None,
        prefix: Sequence[str] = (),
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        ready: Probe | Sequence[Probe] = (),
        rlimits: Mapping[int, tuple[int, int]] | None = None,
        new_session: bool = False,
        start_timeout: float = START_TIMEOUT,
        stop_timeout: float = STOP_TIMEOUT,
        poll_interval: float = 0.01,
        name: str = "node",
        mark_starts: bool = False,
    ) -> None:
        self.args = list(args)
        self.cmd = list(cmd) if cmd else node_command()
        self.prefix = list(prefix)
        self.cwd = Path(cwd) if cwd is not None else PROJECT_ROOT
        self.extra_env = dict(env or {})
        self.log_path = Path(log_path) if log_path is not None else None
        self.ready = [ready] if callable(ready) else list(ready)
        self.rlimits = dict(rlimits or {})
        self.new_session = new_session
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.poll_interval = poll_interval
        self.name = name
        self.mark_starts = mark_starts
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- the command ---------------------------------------------------------------------

    def argv(self) -> list[str]:
        """The exact command line of the next start."""
        return [*self.prefix, *self.cmd, *self.args]

    def environ(self) -> dict[str, str]:
        return node_env(self.extra_env)

    def probes(self) -> list[Probe]:
        """What :meth:`wait_ready` awaits, in turn."""
        return self.ready

    def _set_limits(self) -> None:
        # In the child between fork and exec: nothing to import, nothing to allocate much.
        for which, limits in self.rlimits.items():
            resource.setrlimit(which, limits)

    # -- starting ------------------------------------------------------------------------

    def spawn(self) -> NodeProcess:
        """Start the process, without waiting for it to serve."""
        if self.is_running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        argv = self.argv()
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_path, "ab") if self.log_path is not None else None
        if out is not None and self.mark_starts:
            out.write(f"\n=== start #{self.starts + 1} at {time.ctime()}: {argv} ===\n".encode())
            out.flush()
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=str(self.cwd),
                env=self.environ(),
                stdin=subprocess.DEVNULL,
                stdout=out if out is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                preexec_fn=self._set_limits if self.rlimits else None,
                start_new_session=self.new_session,
            )
        finally:
            if out is not None:
                out.close()  # the child has its own descriptor
        self.starts += 1
        return self

    def start(self, wait: bool = True) -> NodeProcess:
        """Start the process and (by default) block until every probe says it serves."""
        self.spawn()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, deadline: float | None = None) -> None:
        """Poll each probe in turn until it answers true. Raises :class:`NodeStartError`
        if the process exits first, or is not ready by ``deadline`` (``time.monotonic()``;
        default ``start_timeout`` from now: then it is killed)."""
        if deadline is None:
            deadline = time.monotonic() + self.start_timeout
        for probe in self.probes():
            while True:
                self._check_alive()
                try:
                    if probe():
                        break
                except (OSError, RespError):
                    pass
                except NotServing as exc:
                    self._let_it_exit()
                    raise NodeStartError(
                        f"{self.name} accepted a connection but does not serve ({exc}): "
                        f"{self.argv()}\n{self.log_text()}",
                        self.returncode,
                    ) from None
                if time.monotonic() > deadline:
                    self.kill()
                    raise NodeStartError(
                        f"{self.name} was not ready in time: {self.argv()}\n{self.log_text()}"
                    )
                time.sleep(self.poll_interval)

    def _check_alive(self) -> None:
        assert self.proc is not None, "not started"
        code = self.proc.poll()
        if code is not None:
            raise NodeStartError(
                f"{self.name} exited with {code} during start-up: {self.argv()}\n"
                + self.log_text(),
                code,
            )

    def _let_it_exit(self) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(self.stop_timeout)  # let it exit with its own status
        except subprocess.TimeoutExpired:
            self.kill()

    def run(self, timeout: float = 60.0, text: bool = True) -> subprocess.CompletedProcess[Any]:
        """Run the command to its end (a start that must fail, or a command that is not a
        server): its exit status, stdout and stderr apart. No log file, no probes."""
        return subprocess.run(
            self.argv(),
            cwd=str(self.cwd),
            env=self.environ(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=text,
            timeout=timeout,
            preexec_fn=self._set_limits if self.rlimits else None,
        )

    # -- the running process -------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """Send a signal (e.g. ``SIGUSR1``, ``SIGSTOP``, ``SIGCONT``) to a running process."""
        assert self.is_running(), f"{self.name} is not running"
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit; its status (``subprocess.TimeoutExpired`` if not)."""
        assert self.proc is not None, "not started"
        return self.proc.wait(timeout)

    # -- stopping ------------------------------------------------------------------------

    def terminate(self) -> None:
        """SIGCONT (a stopped process keeps SIGTERM pending until continued), then SIGTERM."""
        if self.is_running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); the exit status, None if never
        started."""
        stop_all([self], self.stop_timeout if timeout is None else timeout)
        return self.proc.returncode if self.proc is not None else None

    def kill(self) -> None:
        """SIGKILL (no chance to flush anything; works on a stopped process too) and wait."""
        if self.is_running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()

    def restart(self, wait: bool = True) -> NodeProcess:
        """Stop with SIGTERM, then start again with the same command line."""
        self.stop()
        return self.start(wait)

    def log_text(self) -> str:
        """What the process printed so far, every incarnation (stdout and stderr)."""
        if self.log_path is None:
            return "(no log)"
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def start_all(nodes: Iterable[NodeProcess], timeout: float | None = None) -> None:
    """Spawn every one, then wait until each serves: they start side by side. ``timeout``
    (default the longest ``start_timeout``) bounds the whole wait."""
    nodes = list(nodes)
    for nd in nodes:
        nd.spawn()
    if timeout is None:
        timeout = max((nd.start_timeout for nd in nodes), default=0.0)
    deadline = time.monotonic() + timeout
    for nd in nodes:
        nd.wait_ready(deadline)


def stop_all(nodes: Iterable[NodeProcess], timeout: float = STOP_TIMEOUT) -> list[NodeProcess]:
    """SIGTERM every running one at once, then wait; SIGKILL whatever is left at the
    deadline. Returns the ones that had to be killed."""
    live = [nd for nd in nodes if nd.is_running()]
    for nd in live:
        nd.terminate()
    deadline = time.monotonic() + timeout
    killed = []
    for nd in live:
        assert nd.proc is not None
        try:
            nd.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(nd)
            nd.kill()
    return killed


# -- probes ------------------------------------------------------------------------------


def tcp_accepts(port: int, host: str = HOST) -> Probe:
    """Ready when ``host:port`` accepts a connection."""

    def probe() -> bool:
        socket.create_connection((host, port), timeout=1.0).close()
        return True

    return probe


def resp_pong(port: int, host: str = HOST, password: str | None = None) -> Probe:
    """Ready when the RESP port answers PING with PONG (after AUTH, with a password)."""

    def probe() -> bool:
        with RespClient(host, port, timeout=1.0) as c:
            if password is not None:
                c.call("AUTH", password)
            return bool(c.call("PING") == "PONG")

    return probe


def grpc_api_loaded(port: int, host: str = HOST) -> Probe:
    """Ready when the gRPC port accepts and its client API is loaded: any answer of the
    health service but UNAVAILABLE "not run" (a node whose peers hear first loads its API a
    moment after its client ports serve: issue 31, disq/server/late_services.py). A health
    status, or a TLS port's refusal of this plaintext channel, is an answer."""
    accepts = tcp_accepts(port, host)

    def probe() -> bool:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from disq.server.late_services import NOT_STARTED_DETAILS

        accepts()
        with grpc.insecure_channel(f"{host}:{port}") as ch:
            try:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            except grpc.RpcError as exc:
                return bool(exc.details() != NOT_STARTED_DETAILS)
        return True

    return probe


def beanstalk_serves(
    connect: Callable[[], socket.socket],
    on_connect: Callable[[], None] | None = None,
    timeout: float = 15.0,
) -> Probe:
    """Ready when a connection from ``connect()`` gets through and the server answers an
    unknown command, then closes it on ``quit``: by the time the probe returns, its
    connection is gone from ``current-connections`` (``total-connections`` counts it:
    ``on_connect`` is called for it). An unknown command is answered but counted in no stat;
    a server that accepted and then died (corrupt AOF, locked data dir) never answers it:
    :class:`NotServing`. A stale UNIX socket file accepts nothing, so a connect proves this
    process listens."""

    def probe() -> bool:
        sock = connect()
        if on_connect is not None:
            on_connect()
        got = b""
        try:
            sock.settimeout(timeout)
            sock.sendall(b"probe\r\nquit\r\n")
            while chunk := sock.recv(4096):
                got += chunk
        except OSError:
            pass
        finally:
            sock.close()
        if got != b"UNKNOWN_COMMAND\r\n":
            raise NotServing(f"got {got!r}")
        return True

    return probe


def run_node(
    *args: str,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    cmd: Sequence[str] | None = None,
    timeout: float = 60.0,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """``python -m disq.node_main *args`` (or ``cmd *args``) run to its end: see
    :meth:`NodeProcess.run`."""
    return NodeProcess(args, cmd=cmd, cwd=cwd, env=env).run(timeout, text)
