"""MONITOR, SLOWLOG, LATENCY, CLIENT and COMMAND against a real node over TCP, replies checked
against the formats Redis documents (redis.io/commands/monitor, slowlog-get, latency-latest,
latency-history, client-list, client-kill, command-info)."""

from __future__ import annotations

import re
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from conftest import SERVER_KIND, ServerFactory, free_port

from cluster.resp_client import RespClient, RespError, encode_command

pytestmark = pytest.mark.skipif(SERVER_KIND != "disq", reason="RESP is disq's port")

# redis.io/commands/monitor: +1339518083.107412 [0 127.0.0.1:60866] "keys" "*"
MONITOR_LINE = re.compile(rb"^\+(\d+)\.(\d{6}) \[0 (127\.0\.0\.1:\d+)\] (.*)\r\n$")
# The fields CLIENT LIST starts with, in Redis's order (redis.io/commands/client-list).
CLIENT_FIELDS = ["id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db"]


@pytest.fixture
def resp_port(server_factory: ServerFactory) -> int:
    # In flag mode the node builds its CONFIG store from "port N", which refuses a port whose
    # cluster port (N + 10000) would not exist; above 55535 CONFIG SET is then unavailable.
    port = free_port()
    while port > 55535:
        port = free_port()
    server_factory.new("--resp-port", str(port))
    return port


@pytest.fixture
def client(resp_port: int) -> Iterator[RespClient]:
    with RespClient("127.0.0.1", resp_port, timeout=10) as c:
        yield c


def local_addr(c: RespClient) -> str:
    host, port = c._sock.getsockname()[:2]  # type: ignore[union-attr]
    return f"{host}:{port}"


def read_lines(f: socket.SocketIO | object, n: int) -> list[bytes]:
    return [f.readline() for _ in range(n)]  # type: ignore[attr-defined]


def parse_client_list(text: bytes) -> list[dict[str, str]]:
    assert text.endswith(b"\n")
    rows = []
    for line in text.decode().splitlines():
        pairs = [field.split("=", 1) for field in line.split(" ")]
        assert [k for k, _ in pairs][: len(CLIENT_FIELDS)] == CLIENT_FIELDS
        assert [k for k, _ in pairs][-1] != "" and "cmd" in dict(pairs)
        rows.append(dict(pairs))
    return rows


# ---------------------------------------------------------------- MONITOR
def test_monitor_streams_another_clients_commands_in_order(
    resp_port: int, client: RespClient
) -> None:
    with socket.create_connection(("127.0.0.1", resp_port), timeout=10) as mon:
        f = mon.makefile("rb")
        mon.sendall(encode_command(["MONITOR"]))
        assert f.readline() == b"+OK\r\n"
        client.call("PING")
        client.call("CONFIG", "GET", "maxmemory")  # admin: not shown, as in Redis
        client.call("ADDJOB", "q1", b'a "quoted"\nbody', 0)
        client.call("QLEN", "q1")
        lines = read_lines(f, 3)
        matches = [MONITOR_LINE.match(line) for line in lines]
        assert all(matches), lines
        me = local_addr(client)
        assert [m.group(3).decode() for m in matches if m] == [me, me, me]
        assert [m.group(4) for m in matches if m] == [
            b'"PING"',
            b'"ADDJOB" "q1" "a \\"quoted\\"\\nbody" "0"',
            b'"QLEN" "q1"',
        ]
        stamps = [float(m.group(1) + b"." + m.group(2)) for m in matches if m]
        assert stamps == sorted(stamps)
        # The monitor is listed with Redis's monitor flag.
        rows = parse_client_list(client.call("CLIENT", "LIST"))
        assert [r["flags"] for r in rows if r["cmd"] == "monitor"] == ["O"]
        # QUIT ends the stream: its +OK, then the connection closes.
        mon.sendall(encode_command(["QUIT"]))
        assert f.readline() == b"+OK\r\n"
        assert f.readline() == b""


# ---------------------------------------------------------------- SLOWLOG
def test_slowlog_logs_every_command_at_zero_with_redis_entry_format(client: RespClient) -> None:
    assert client.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == "OK"
    assert client.call("SLOWLOG", "RESET") == "OK"
    assert client.call("SLOWLOG", "LEN") == 1  # the RESET itself, logged after it ran
    client.call("CLIENT", "SETNAME", "worker")
    client.call("PING")
    client.call("ECHO", b"x" * 200)
    entries = client.call("SLOWLOG", "GET")
    # Newest first: ECHO, PING, SETNAME, LEN, RESET.
    assert [e[3][0] for e in entries] == [b"ECHO", b"PING", b"CLIENT", b"SLOWLOG", b"SLOWLOG"]
    ids = [e[0] for e in entries]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    echo = entries[0]
    assert len(echo) == 6
    entry_id, unix_time, micros, argv, addr, name = echo
    assert isinstance(entry_id, int) and isinstance(micros, int) and micros >= 0
    assert abs(unix_time - time.time()) < 600
    assert argv == [b"ECHO", b"x" * 128 + b"... (72 more bytes)"]
    assert addr.decode() == local_addr(client)
    assert name == b"worker"
    assert len(client.call("SLOWLOG", "GET", 2)) == 2
    assert client.call("SLOWLOG", "LEN") == 7


def test_slowlog_max_len_trims(client: RespClient) -> None:
    client.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
    assert client.call("CONFIG", "SET", "slowlog-max-len", "3") == "OK"
    for _ in range(10):
        client.call("PING")
    assert client.call("SLOWLOG", "LEN") == 3
    got = client.call("SLOWLOG", "GET", -1)
    assert [e[3] for e in got] == [[b"SLOWLOG", b"LEN"], [b"PING"], [b"PING"]]
    # Disque's CONFIG SET refuses negative numbers (config_set_numerical_field); a negative
    # slowlog-log-slower-than comes from the config file (the unit tests cover it). A high
    # threshold stops the logging just as well.
    with pytest.raises(RespError, match="Invalid argument '-1'"):
        client.call("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    client.call("CONFIG", "SET", "slowlog-log-slower-than", "10000000")
    client.call("SLOWLOG", "RESET")
    client.call("PING")
    assert client.call("SLOWLOG", "LEN") == 0
    with pytest.raises(RespError, match="SLOWLOG subcommand"):
        client.call("SLOWLOG", "NOPE")


# ---------------------------------------------------------------- LATENCY
def test_latency_threshold_latest_history_reset(client: RespClient) -> None:
    client.call("DEBUG", "SLEEP", "0.03")  # threshold 0: the monitor is off
    assert client.call("LATENCY", "LATEST") == []
    assert client.call("CONFIG", "SET", "latency-monitor-threshold", "10") == "OK"
    client.call("PING")  # fast, below the threshold
    assert client.call("LATENCY", "LATEST") == []
    client.call("DEBUG", "SLEEP", "0.03")
    latest = client.call("LATENCY", "LATEST")
    assert len(latest) == 1
    event, stamp, last_ms, max_ms = latest[0]
    assert event == b"command" and last_ms >= 30 and max_ms >= last_ms
    assert abs(stamp - time.time()) < 600
    history = client.call("LATENCY", "HISTORY", "command")
    assert history[-1] == [stamp, last_ms]
    assert client.call("LATENCY", "HISTORY", "fast-command") == []
    assert b"latency" in client.call("LATENCY", "DOCTOR").lower()
    assert client.call("LATENCY", "RESET") == 1
    assert client.call("LATENCY", "LATEST") == []


# ---------------------------------------------------------------- CLIENT
def test_client_list_setname_getname_id_kill(resp_port: int, client: RespClient) -> None:
    assert client.call("CLIENT", "GETNAME") is None
    assert client.call("CLIENT", "SETNAME", "alpha") == "OK"
    assert client.call("CLIENT", "GETNAME") == b"alpha"
    with (
        RespClient("127.0.0.1", resp_port, timeout=10) as other,
        socket.create_connection(("127.0.0.1", resp_port), timeout=10) as third,
    ):
        other.call("PING")
        rows = {r["addr"]: r for r in parse_client_list(client.call("CLIENT", "LIST"))}
        me, them = rows[local_addr(client)], rows[local_addr(other)]
        assert me["name"] == "alpha" and me["cmd"] == "client" and me["db"] == "0"
        assert them["name"] == "" and them["cmd"] == "ping" and them["flags"] == "N"
        assert me["laddr"] == f"127.0.0.1:{resp_port}"
        assert int(me["id"]) == client.call("CLIENT", "ID")
        assert int(me["fd"]) >= 0 and int(me["age"]) >= 0 and int(me["idle"]) >= 0
        info = client.call("CLIENT", "INFO")
        assert info.startswith(b"id=%d addr=" % int(me["id"]))
        # The new form answers a count; SKIPME yes (the default) spares the caller.
        assert client.call("CLIENT", "KILL", "ID", int(them["id"])) == 1
        host, port = third.getsockname()[:2]
        third_addr = f"{host}:{port}"
        assert client.call("CLIENT", "KILL", third_addr) == "OK"  # the old form
        # Killed for real: both sockets see the close.
        other._sock.settimeout(10)  # type: ignore[union-attr]
        assert other._sock.recv(1) == b""  # type: ignore[union-attr]
        assert third.recv(1) == b""
        with pytest.raises(RespError, match="No such client"):
            client.call("CLIENT", "KILL", third_addr)
        assert client.call("CLIENT", "KILL", "ADDR", third_addr, "SKIPME", "no") == 0
        with pytest.raises(RespError, match="Unknown client type"):
            client.call("CLIENT", "KILL", "TYPE", "bogus")
    assert [r["name"] for r in parse_client_list(client.call("CLIENT", "LIST"))] == ["alpha"]


def test_client_pause_answers_other_clients_only_after_the_pause(
    resp_port: int, client: RespClient
) -> None:
    with RespClient("127.0.0.1", resp_port, timeout=10) as other:
        other.call("PING")
        t0 = time.monotonic()
        assert client.call("CLIENT", "PAUSE", 400) == "OK"
        assert other.call("PING") == "PONG"  # waits for the pause to end
        assert time.monotonic() - t0 >= 0.3  # loosely: not before the pause ends
        assert client.call("QLEN", "q") == 0


# ---------------------------------------------------------------- COMMAND
def test_command_info_rows_and_count(client: RespClient) -> None:
    rows = client.call("COMMAND", "INFO", "addjob", "GETJOB", "monitor", "slowlog", "nosuch")
    assert rows == [
        [b"addjob", -4, ["write", "denyoom", "fast"], 0, 0, 0],
        [b"getjob", -2, ["write", "fast"], 0, 0, 0],
        [b"monitor", 1, ["readonly", "admin"], 0, 0, 0],
        [b"slowlog", -2, ["readonly"], 0, 0, 0],
        None,
    ]
    count = client.call("COMMAND", "COUNT")
    assert count >= 30  # Disque 1.0's serverCommandTable has 30 entries
    table = client.call("COMMAND")
    assert len(table) == count
    names = {row[0] for row in table}
    assert {b"monitor", b"slowlog", b"latency", b"client", b"command"} <= names
