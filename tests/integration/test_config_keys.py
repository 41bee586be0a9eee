"""Disque's config keys through a real node started with a config file: each key applied (a
client sees the effect) or refused at start with the key named and why."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import PROJECT_ROOT, free_bus_port, free_port  # noqa: E402
from eventually import eventually  # noqa: E402

from disq.config.options import _RESTRICTED  # noqa: E402

TIMEOUT = 30.0  # generous: a socket read that waits for the node's own action


def _call(sock: socket.socket, *args: str) -> bytes:
    sock.sendall(
        b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args)
    )
    return _read_reply(sock)


def _read_reply(sock: socket.socket) -> bytes:
    # Enough of RESP for these tests: one line, or one bulk/array read until the data stops.
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    if data[:1] in (b"$", b"*") and not data.startswith((b"$-1", b"*0", b"*-1")):
        sock.settimeout(0.5)
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except TimeoutError:
            pass
        sock.settimeout(TIMEOUT)
    return data


def _read_until_eof(sock: socket.socket) -> bytes:
    sock.settimeout(TIMEOUT)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


class Node:
    def __init__(self, directory: Path, lines: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.dir = directory
        conf = directory / "disque.conf"
        conf.write_text(
            f"port {self.port}\ngrpc-port {free_bus_port()}\nmetrics-port 0\ndir {directory}\n"
            + lines
        )
        self.log = directory / "node.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "disq.node_main", str(conf)],
            cwd=PROJECT_ROOT,
            env={**os.environ, **(env or {})},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        eventually(self._ready, "the node to answer PING", timeout=TIMEOUT)

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        with self.connect() as s:
            return _call(s, "PING") == b"+PONG\r\n"

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def start(short_tmp: Path) -> Iterator[object]:
    nodes: list[Node] = []

    def make(lines: str, env: dict[str, str] | None = None) -> Node:
        d = short_tmp / f"n{len(nodes)}"
        d.mkdir()
        nodes.append(Node(d, lines, env))
        return nodes[-1]

    yield make
    for n in nodes:
        n.stop()


def _connected(node: Node, sock: socket.socket) -> int:
    info = _call(sock, "INFO", "clients").decode()
    return int(info.split("connected_clients:")[1].split("\r\n")[0])


def test_maxclients_refuses_the_next_client_with_redis_error(start) -> None:  # type: ignore[no-untyped-def]
    node = start("maxclients 2\n")
    c1 = node.connect()
    eventually(lambda: _connected(node, c1) == 1, "the probes' connections to close")
    c2 = node.connect()
    assert _call(c2, "PING") == b"+PONG\r\n"
    c3 = node.connect()
    assert _read_until_eof(c3) == b"-ERR max number of clients reached\r\n"
    # CONFIG SET raises the limit for the next client
    assert _call(c1, "CONFIG", "SET", "maxclients", "3") == b"+OK\r\n"
    with node.connect() as c4:
        assert _call(c4, "PING") == b"+PONG\r\n"
    assert _call(c1, "CONFIG", "GET", "maxclients") == b"*2\r\n$10\r\nmaxclients\r\n$1\r\n3\r\n"
    for c in (c1, c2, c3):
        c.close()


def test_timeout_closes_idle_clients_not_blocked_ones(start) -> None:  # type: ignore[no-untyped-def]
    node = start("timeout 1\n")
    blocked = node.connect()
    blocked.sendall(b"GETJOB FROM cfgq\r\n")  # blocks: no job yet, no TIMEOUT
    idle = node.connect()
    assert _call(idle, "PING") == b"+PONG\r\n"
    assert _read_until_eof(idle) == b""  # the node closes it once idle over a second
    # The blocked client idled longer and is still served: it gets the job added now.
    with node.connect() as c:
        reply = _call(c, "ADDJOB", "cfgq", "body", "0")
        assert reply.startswith(b"+D-")
    blocked.settimeout(TIMEOUT)
    got = _read_reply(blocked)
    assert b"cfgq" in got and b"body" in got
    blocked.close()
    idle.close()


def test_unixsocket_serves_resp_with_its_mode_and_keepalive_is_in_force(start) -> None:  # type: ignore[no-untyped-def]
    node = start("unixsocket d.sock\nunixsocketperm 700\ntcp-keepalive 60\ntcp-backlog 64\n")
    path = node.dir / "d.sock"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(TIMEOUT)
        s.connect(str(path))
        assert _call(s, "PING") == b"+PONG\r\n"
        assert _call(s, "CONFIG", "GET", "tcp-keepalive") == (
            b"*2\r\n$13\r\ntcp-keepalive\r\n$2\r\n60\r\n"
        )
        assert _call(s, "CONFIG", "GET", "tcp-backlog") == (
            b"*2\r\n$11\r\ntcp-backlog\r\n$2\r\n64\r\n"
        )
        assert b"loading:0\r\n" in _call(s, "INFO", "persistence")
        assert _call(s, "CONFIG", "SET", "tcp-keepalive", "30") == b"+OK\r\n"


def test_syslog_receives_the_node_log(start, short_tmp: Path) -> None:  # type: ignore[no-untyped-def]
    path = str(short_tmp / "log.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx:
        rx.bind(path)
        rx.settimeout(TIMEOUT)
        node = start(
            "syslog-enabled yes\nsyslog-ident dqtest\nsyslog-facility local3\n",
            env={"DISQ_SYSLOG_SOCKET": path},
        )
        data = rx.recv(65536)
    pri = int(data[1 : data.index(b">")])
    assert pri // 8 == 19  # local3
    assert data[data.index(b">") + 1 :].startswith(b"dqtest[%d]: " % node.proc.pid)


def test_config_set_refuses_what_it_cannot_apply(start) -> None:  # type: ignore[no-untyped-def]
    node = start("")
    with node.connect() as c:
        reply = _call(c, "CONFIG", "SET", "hz", "50")
        assert reply.startswith(b"-ERR 'hz 50' is not supported (")
        reply = _call(c, "CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 1mb 0")
        assert reply.startswith(b"-ERR client-output-buffer-limit for the normal class")
        assert _call(c, "CONFIG", "SET", "unixsocket", "x") == (
            b"-ERR Unsupported CONFIG parameter: unixsocket\r\n"
        )
        assert _call(c, "CONFIG", "SET", "loglevel", "warning") == b"+OK\r\n"
        assert b"cluster_state:ok\r\n" in _call(c, "CLUSTER", "INFO")


# A value disq cannot honour for each key it restricts, plus the other refused lines.
_OTHER_VALUE = {"yes": "no", "no": "yes", "acks": "noeviction"}
_REFUSED = [
    *(
        f"{name} {_OTHER_VALUE.get(accepted[0], '3')}"
        for name, (accepted, _why) in sorted(_RESTRICTED.items())
        if name != "watchdog-period"  # CONFIG SET only, as in Disque
    ),
    "appendfilename jobs.aof",
    "cluster-config-file nodes-7711.conf",
    "client-output-buffer-limit normal 1mb 512kb 10",
    "daemonize yes",
]


@pytest.mark.parametrize("line", _REFUSED)
def test_the_node_refuses_to_start_on_keys_it_cannot_honour(line: str, tmp_path: Path) -> None:
    conf = tmp_path / "disque.conf"
    conf.write_text(f"port {free_port()}\ndir {tmp_path}\n{line}\n")
    done = subprocess.run(
        [sys.executable, "-m", "disq.node_main", str(conf)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert done.returncode != 0
    err = done.stderr.decode()
    assert f">>> '{line}'" in err
    assert "not supported" in err
