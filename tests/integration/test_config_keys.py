"""Disque's config keys through a real node started with a config file: each key applied (a
client sees the effect) or refused at start with the key named and why. Also CONFIG GET and
INFO as Redis 7 answers them on a RESP3 connection (a map, a verbatim string)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import hiredis
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, free_bus_port, free_port  # noqa: E402
from eventually import eventually, listening  # noqa: E402

from cluster.nodeproc import run_node  # noqa: E402
from disq.config.options import _RESTRICTED  # noqa: E402
from disq.doors.disque import COMMANDS  # noqa: E402

TIMEOUT = 30.0  # generous: a socket read that waits for the node's own action


def _call(sock: socket.socket, *args: str) -> bytes:
    sock.sendall(
        b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args)
    )
    return _read_reply(sock)


def _read_reply(sock: socket.socket) -> bytes:
    """One whole reply as the raw bytes it came in: read until hiredis's reader (RESP2 and
    RESP3) holds a complete one, rather than until the socket stays quiet for a while."""
    reader = hiredis.Reader()
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
        reader.feed(chunk)
        if reader.gets() is not False:
            break
    return data


def _read_until_eof(sock: socket.socket) -> bytes:
    sock.settimeout(TIMEOUT)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


class Node:
    """A node started from ``directory``/disque.conf: the lines given, after a port, a bus
    port, no metrics port and ``dir`` (this directory)."""

    def __init__(
        self,
        factory: ServerFactory,
        directory: Path,
        lines: str,
        env: dict[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        password: str | None = None,
    ) -> None:
        self.port = free_port()
        self.dir = directory
        self.host = host  # where the probes connect (the file's bind, if it has one)
        self.password = password  # the probes AUTH first when the file sets requirepass
        conf = directory / "disque.conf"
        conf.write_text(
            f"port {self.port}\ngrpc-port {free_bus_port()}\nmetrics-port 0\ndir {directory}\n"
            + lines
        )
        self.log = directory / "node.log"
        self.process = factory.node(str(conf), env=env, log_path=self.log, ready=self._ready)

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        assert self.process.proc is not None
        return self.process.proc

    def _ready(self) -> bool:
        """It answers PING (after AUTH, when the file sets requirepass)."""
        with self.connect() as s:
            if self.password is not None:
                assert _call(s, "AUTH", self.password) == b"+OK\r\n"
            return _call(s, "PING") == b"+PONG\r\n"

    def connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=TIMEOUT)


@pytest.fixture
def start(server_factory: ServerFactory, short_tmp: Path) -> object:
    """Start a node from config lines (see Node); the factory kills it at teardown."""
    nodes: list[Node] = []

    def make(
        lines: str,
        env: dict[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        password: str | None = None,
        files: dict[str, str] | None = None,
    ) -> Node:
        # ``files``: more files written into the node's dir first (an include's target).
        d = short_tmp / f"n{len(nodes)}"
        d.mkdir()
        for name, text in (files or {}).items():
            (d / name).write_text(text)
        nodes.append(Node(server_factory, d, lines, env, host=host, password=password))
        return nodes[-1]

    return make


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


def _ss(*args: str) -> str:
    return subprocess.run(["ss", "-Hn", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_tcp_backlog_and_keepalive_on_the_node_sockets(start) -> None:  # type: ignore[no-untyped-def]
    node = start("tcp-keepalive 60\ntcp-backlog 64\n")
    # A listening socket's Send-Q is its listen backlog.
    assert _ss("-lt", f"sport = :{node.port}").split()[:4] == [
        "LISTEN",
        "0",
        "64",
        f"127.0.0.1:{node.port}",
    ]

    def timer(c: socket.socket) -> str:
        assert _call(c, "PING") == b"+PONG\r\n"  # accepted, and its options set
        me = c.getsockname()[1]
        return _ss("-to", "state", "established", f"( sport = :{node.port} and dport = :{me} )")

    with node.connect() as c:
        assert "timer:(keepalive," in timer(c)
        assert _call(c, "CONFIG", "SET", "tcp-keepalive", "0") == b"+OK\r\n"
    with node.connect() as c:
        got = timer(c)
        assert f":{node.port}" in got and "keepalive" not in got  # 0: off for new clients


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


def _info(sock: socket.socket, section: str) -> dict[str, str]:
    text = _call(sock, "INFO", section).decode()
    body = text.split("\r\n", 1)[1]  # after the bulk header
    return dict(line.split(":", 1) for line in body.split("\r\n") if ":" in line)


def test_watchdog_period_is_config_set_only_and_only_0(start, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    node = start("")
    with node.connect() as c:
        assert _call(c, "CONFIG", "SET", "watchdog-period", "100") == (
            b"-ERR 'watchdog-period 100' is not supported (disq has no software watchdog); "
            b"accepted: 0\r\n"
        )
        assert _call(c, "CONFIG", "SET", "watchdog-period", "0") == b"+OK\r\n"
        assert _call(c, "CONFIG", "GET", "watchdog-period") == (
            b"*2\r\n$15\r\nwatchdog-period\r\n$1\r\n0\r\n"
        )
    # Not a file directive, as in Disque: a file naming it does not start.
    conf = tmp_path / "disque.conf"
    conf.write_text(
        f"port {free_port()}\ngrpc-port {free_bus_port()}\nmetrics-port 0\n"
        f"dir {tmp_path}\nwatchdog-period 0\n"
    )
    done = run_node(str(conf), timeout=TIMEOUT, text=False)
    assert done.returncode != 0
    err = done.stderr.decode()
    assert ">>> 'watchdog-period 0'\nBad directive or wrong number of arguments" in err


_BODY = "x" * 4000
_JOBS = 40  # 160 kB of bodies: past a 64kb threshold, far below the default 64mb


def _fill_then_delete_most(c: socket.socket) -> int:
    """Add jobs, then delete all but one: the AOF is now many times the live data. The
    file's size once the adds are written is returned."""
    ids = []
    for _ in range(_JOBS):
        reply = _call(c, "ADDJOB", "aofq", _BODY, "0")
        assert reply.startswith(b"+D-"), reply
        ids.append(reply[1:-2].decode())
    peak = int(_info(c, "persistence")["aof_current_size"])
    assert peak > _JOBS * len(_BODY)
    assert _call(c, "DELJOB", *ids[1:]) == b":%d\r\n" % (_JOBS - 1)
    return peak


def _rewritten(c: socket.socket, peak: int) -> bool:
    p = _info(c, "persistence")
    return p["aof_rewrite_in_progress"] == "0" and int(p["aof_current_size"]) < peak // 4


def test_auto_aof_rewrite_min_size_decides_when_the_aof_is_rewritten(start) -> None:  # type: ignore[no-untyped-def]
    # Disque's default file names are read as disq's own, in dir.
    small = start(
        "appendonly yes\nauto-aof-rewrite-min-size 64kb\n"
        "appendfilename disque.aof\ncluster-config-file nodes.conf\n"
    )
    default = start("appendonly yes\n")
    assert (small.dir / "disq.aof").is_file() and not (small.dir / "disque.aof").exists()
    with small.connect() as c:
        assert _call(c, "CONFIG", "GET", "auto-aof-rewrite-min-size") == (
            b"*2\r\n$25\r\nauto-aof-rewrite-min-size\r\n$5\r\n65536\r\n"
        )
        peak = _fill_then_delete_most(c)
        # Past 64kb and over twice the live data: rewritten down to about the one job left.
        eventually(lambda: _rewritten(c, peak), "the AOF to be rewritten")
    with default.connect() as c:
        peak = _fill_then_delete_most(c)
        # The same load under the default 64mb: the rewrite check runs as each write is
        # made, before the reply, so by now a rewrite would have started. None did.
        p = _info(c, "persistence")
        assert p["aof_rewrite_in_progress"] == "0"
        assert int(p["aof_current_size"]) > peak
        # CONFIG SET lowers the threshold: the next write starts the rewrite.
        assert _call(c, "CONFIG", "SET", "auto-aof-rewrite-min-size", "64kb") == b"+OK\r\n"
        assert _call(c, "ADDJOB", "aofq", "one more", "0").startswith(b"+D-")
        eventually(lambda: _rewritten(c, peak), "the AOF to be rewritten after CONFIG SET")


def test_requirepass_from_an_included_file(start) -> None:  # type: ignore[no-untyped-def]
    # include: the included file's lines apply at that point (here: the password).
    node = start(
        "include auth.conf\n", password="s3cret", files={"auth.conf": "requirepass s3cret\n"}
    )
    with node.connect() as c:
        assert _call(c, "PING") == b"-NOAUTH Authentication required.\r\n"
        assert _call(c, "AUTH", "wrong") == b"-ERR invalid password\r\n"
        assert _call(c, "AUTH", "s3cret") == b"+OK\r\n"
        assert _call(c, "PING") == b"+PONG\r\n"
        # CONFIG SET requirepass "" removes the password for the next clients.
        assert _call(c, "CONFIG", "SET", "requirepass", "") == b"+OK\r\n"
    with node.connect() as c:
        assert _call(c, "PING") == b"+PONG\r\n"


def test_bind_decides_the_listening_address(start) -> None:  # type: ignore[no-untyped-def]
    node = start("bind 127.0.0.2\n", host="127.0.0.2")
    with node.connect() as c:
        assert _call(c, "PING") == b"+PONG\r\n"
        assert _call(c, "CONFIG", "GET", "bind") == b"*2\r\n$4\r\nbind\r\n$9\r\n127.0.0.2\r\n"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", node.port), timeout=TIMEOUT).close()


def test_logfile_gets_the_log_at_the_loglevel(start) -> None:  # type: ignore[no-untyped-def]
    node = start("logfile disq-node.log\nloglevel warning\n")
    log = node.dir / "disq-node.log"  # relative to dir, as Disque opens it
    with node.connect() as c:
        # At warning, CONFIG SET's info line is not logged; at notice it is.
        assert _call(c, "CONFIG", "SET", "maxclients", "4321") == b"+OK\r\n"
        assert _call(c, "CONFIG", "SET", "loglevel", "notice") == b"+OK\r\n"
        assert _call(c, "CONFIG", "SET", "maxclients", "1234") == b"+OK\r\n"
    eventually(lambda: "1234" in log.read_text(), "the CONFIG SET at notice in the logfile")
    text = log.read_text()
    assert "4321" not in text  # logged before, at warning: dropped
    assert "config_set" in text
    assert b"config_set" not in node.log.read_bytes()  # not on standard output


def test_slowlog_and_latency_keys_from_the_file(start) -> None:  # type: ignore[no-untyped-def]
    node = start("slowlog-log-slower-than 0\nslowlog-max-len 2\nlatency-monitor-threshold 5\n")
    with node.connect() as c:
        for _ in range(5):
            assert _call(c, "PING") == b"+PONG\r\n"
        # 0: every command is logged; max-len 2: only the last two are kept.
        assert _call(c, "SLOWLOG", "LEN") == b":2\r\n"
        # A 20 ms command passes the 5 ms threshold: the monitor records it.
        assert _call(c, "DEBUG", "SLEEP", "0.02") == b"+OK\r\n"
        assert _call(c, "LATENCY", "LATEST").startswith(b"*1\r\n*4\r\n$7\r\ncommand\r\n")
    other = start("slowlog-log-slower-than 10000000\n")  # and the monitor off (default 0)
    with other.connect() as c:
        for _ in range(5):
            assert _call(c, "PING") == b"+PONG\r\n"
        assert _call(c, "DEBUG", "SLEEP", "0.02") == b"+OK\r\n"
        assert _call(c, "SLOWLOG", "LEN") == b":0\r\n"
        assert _call(c, "LATENCY", "LATEST") == b"*0\r\n"


def test_maxmemory_from_the_file_refuses_adds(start) -> None:  # type: ignore[no-untyped-def]
    node = start("maxmemory 1mb\n")
    body = "x" * 60000
    with node.connect() as c:
        assert _info(c, "memory")["maxmemory"] == "1048576"
        # Within some 13 adds the jobs pass 75% of 1mb: a lone node must then replicate
        # elsewhere and cannot, so ADDJOB is refused as Disque refuses it.
        replies = [_call(c, "ADDJOB", "memq", body, "0") for _ in range(40)]
        assert replies[0].startswith(b"+D-")
        assert replies[-1].startswith(b"-NOREPL ")
        assert replies[-1].endswith(b"I'm out of memory\r\n")


def _fsyncs(node: Node, metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=TIMEOUT) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("disq_aof_fsync_seconds_count"):
            return float(line.split()[-1])
    raise AssertionError("no disq_aof_fsync_seconds_count in /metrics")


def test_appendfsync_always_fsyncs_every_write_and_no_never(start) -> None:  # type: ignore[no-untyped-def]
    metrics = free_port()
    node = start(f"appendonly yes\nappendfsync always\nmetrics-port {metrics}\n")
    with node.connect() as c:
        before = _fsyncs(node, metrics)
        for _ in range(10):
            assert _call(c, "ADDJOB", "fsq", "x", "0").startswith(b"+D-")
        # always: each write is fsynced before its reply
        assert _fsyncs(node, metrics) >= before + 10
        assert _call(c, "CONFIG", "SET", "appendfsync", "no") == b"+OK\r\n"
        now = _fsyncs(node, metrics)
        for _ in range(10):
            assert _call(c, "ADDJOB", "fsq", "x", "0").startswith(b"+D-")
        assert _fsyncs(node, metrics) == now  # no: the kernel decides, disq never fsyncs


def test_config_get_and_info_in_resp3_with_redis_py(start) -> None:  # type: ignore[no-untyped-def]
    redis = pytest.importorskip("redis")
    node = start("maxclients 77\n")
    r3 = redis.Redis(port=node.port, protocol=3)
    r2 = redis.Redis(port=node.port, protocol=2)
    try:
        assert r3.config_get("maxclients") == {"maxclients": "77"}
        assert r2.config_get("maxclients") == {"maxclients": "77"}
        for r in (r3, r2):
            info = r.info()
            assert isinstance(info, dict) and info["disque_version"] == "1.0-rc1"
            assert r.info("persistence")["aof_enabled"] == 0
    finally:
        r3.close()
        r2.close()
    with node.connect() as c:
        assert _call(c, "HELLO", "3").startswith(b"%7\r\n")
        assert _call(c, "CONFIG", "GET", "maxclients") == b"%1\r\n$10\r\nmaxclients\r\n$2\r\n77\r\n"
        assert _call(c, "INFO", "clients").startswith(b"=")


def _beanstalk(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(request)
        return _read_line(s)


def _read_line(s: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_beanstalk_port_replicate_and_grpc_port(start) -> None:  # type: ignore[no-untyped-def]
    b1, b2 = free_port(), free_port()
    one = start(f"beanstalk-port {b1}\n")
    assert _beanstalk(b1, b"put 0 0 10 1\r\nx\r\n").startswith(b"INSERTED ")
    with one.connect() as c:
        bus = int(_info(c, "server")["cluster_bus_port"])
        assert _call(
            c, "CONFIG", "GET", "grpc-port"
        ) == b"*2\r\n$9\r\ngrpc-port\r\n$%d\r\n%d\r\n" % (
            len(str(bus)),
            bus,
        )
    listening(bus, "the bus port")  # it listens (after the client ports: issue 31)
    # beanstalk-replicate 2 on a lone node: the put cannot get its copy (as the flag's test).
    two = start(f"beanstalk-port {b2}\nbeanstalk-replicate 2\n")
    assert _beanstalk(b2, b"put 0 0 10 1\r\nx\r\n") == b"INTERNAL_ERROR\r\n"
    with two.connect() as c:
        assert _call(c, "CONFIG", "SET", "beanstalk-replicate", "1") == b"+OK\r\n"
    assert _beanstalk(b2, b"put 0 0 10 1\r\nx\r\n").startswith(b"INSERTED ")


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
    # A bus port of its own: the default (RESP port + 10000) is past 65535 for a high port.
    conf.write_text(
        f"port {free_port()}\ngrpc-port {free_bus_port()}\nmetrics-port 0\ndir {tmp_path}\n{line}\n"
    )
    done = run_node(str(conf), timeout=TIMEOUT, text=False)
    assert done.returncode != 0
    err = done.stderr.decode()
    assert f">>> '{line}'" in err
    assert "not supported" in err


def test_rename_command_moves_and_removes_commands(start) -> None:  # type: ignore[no-untyped-def]
    node = start('rename-command ADDJOB MYADD\nrename-command DEBUG ""\n')
    with node.connect() as c:
        assert _call(c, "ADDJOB", "rnq", "body", "0") == b"-ERR unknown command 'ADDJOB'\r\n"
        assert _call(c, "myadd", "rnq", "body", "0").startswith(b"+D-")
        assert _call(c, "QLEN", "rnq") == b":1\r\n"
        assert _call(c, "DEBUG", "SLEEP", "0") == b"-ERR unknown command 'DEBUG'\r\n"
        # As Disque: the command keeps its own name in its errors and in COMMAND's entries;
        # COMMAND finds it by the new name only, and no longer lists the removed one.
        assert _call(c, "MYADD", "rnq") == (
            b"-ERR wrong number of arguments for 'addjob' command\r\n"
        )
        assert _call(c, "COMMAND", "INFO", "addjob", "debug") == b"*2\r\n$-1\r\n$-1\r\n"
        assert _call(c, "COMMAND", "INFO", "MYADD").startswith(b"*1\r\n*6\r\n$6\r\naddjob\r\n")
        assert _call(c, "COMMAND", "COUNT") == b":%d\r\n" % (len(COMMANDS) - 1)


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        # Not a Disque command (a Redis sample file's FLUSHALL): Disque refuses it too.
        (["rename-command FLUSHALL nope"], "No such command in rename-command"),
        # Renames apply in order: the second line looks for a name the first one took away.
        (
            ["rename-command ADDJOB put", "rename-command ADDJOB again"],
            "No such command in rename-command",
        ),
        (["rename-command ADDJOB getjob"], "Target command name already exists"),
    ],
)
def test_rename_command_refused_at_its_line(lines: list[str], reason: str, tmp_path: Path) -> None:
    conf = tmp_path / "disque.conf"
    head = f"port {free_port()}\ngrpc-port {free_bus_port()}\nmetrics-port 0\ndir {tmp_path}\n"
    conf.write_text(head + "".join(f"{x}\n" for x in lines))
    done = run_node(str(conf), timeout=TIMEOUT, text=False)
    assert done.returncode != 0
    bad = len(lines) + 4  # the last line, after the four of head
    assert (
        f"Reading the configuration file, at line {bad}\n>>> '{lines[-1]}'\n{reason}\n"
        in done.stderr.decode()
    )


def test_pidfile_holds_the_pid_until_a_sigterm_stop(start, short_tmp: Path) -> None:  # type: ignore[no-untyped-def]
    pidfile = short_tmp / "disq.pid"
    node = start(f"pidfile {pidfile}\n")
    assert pidfile.read_text() == f"{node.proc.pid}\n"
    # A relative path is relative to dir, where Disque's process works.
    other = start("pidfile other.pid\n")
    assert (other.dir / "other.pid").read_text() == f"{other.proc.pid}\n"
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(timeout=TIMEOUT) == 0
    assert not pidfile.exists()
    assert (other.dir / "other.pid").exists()  # the other node still runs
