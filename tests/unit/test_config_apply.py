"""The config keys the runtime applies, at the level of their system calls: tcp-keepalive's
socket options, tcp-backlog's listen, unixsocket's bind and mode, syslog's datagrams, the
loglevel switch, and the live INFO fields (cluster_state's rule, the current RSS)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from disq.config import parse_config
from disq.config.options import _RESTRICTED
from disq.logging import set_level, syslog_logger
from disq.server.node_services import _current_rss, cluster_state
from disq.server.resp_tcp import set_keepalive
from disq.server.runtime import bind_unix, start_server


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        client = socket.create_connection(lsock.getsockname())
        server, _ = lsock.accept()
        try:
            yield server, client
        finally:
            server.close()
            client.close()


def test_keepalive_sets_redis_socket_options(tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    server, _ = tcp_pair
    assert server.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
    set_keepalive(server, 60)
    assert server.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60
    assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 20
    assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3


def test_keepalive_zero_and_unix_sockets_are_left_alone(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    server, _ = tcp_pair
    set_keepalive(server, 0)
    assert server.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
    a, b = socket.socketpair()
    with a, b:
        set_keepalive(a, 60)  # AF_UNIX: no TCP options, and no error


class _RecordingLoop:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def create_server(self, factory: Any, *, sock: Any, backlog: int, ssl: Any) -> Any:
        self.calls.append(("tcp", backlog))

    async def create_unix_server(self, factory: Any, *, sock: Any, backlog: int) -> Any:
        self.calls.append(("unix", backlog))


def test_tcp_backlog_is_the_listen_backlog(tmp_path: Path) -> None:
    loop = _RecordingLoop()
    with socket.socket() as tcp, bind_unix(tmp_path / "s.sock", 0) as unix:
        asyncio.run(start_server(loop, object, tcp, 77))  # type: ignore[arg-type]
        asyncio.run(start_server(loop, object, unix, 33))  # type: ignore[arg-type]
    assert loop.calls == [("tcp", 77), ("unix", 33)]


def test_tcp_backlog_real_listen_still_accepts() -> None:
    async def run() -> bytes:
        sock = socket.create_server(("127.0.0.1", 0))
        sock.setblocking(False)

        class Echo(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                transport.write(b"hi")
                transport.close()

        server = await start_server(asyncio.get_running_loop(), Echo, sock, 5)
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        data = await reader.read()
        writer.close()
        server.close()
        return data

    assert asyncio.run(run()) == b"hi"


def test_unixsocket_mode_and_stale_socket(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    with bind_unix(path, 0o700):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    # the file of a socket whose process died is replaced, as Redis does
    with bind_unix(path, 0o770):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o770


def test_unixsocket_never_replaces_another_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    with pytest.raises(OSError):
        bind_unix(path, 0o700)
    assert path.read_text() == "keep me"


def test_unixsocket_path_is_relative_to_dir(tmp_path: Path) -> None:
    s = parse_config(f"dir {tmp_path}\nunixsocket d.sock\n").settings
    assert s.unixsocket_path == tmp_path.resolve() / "d.sock"


def test_syslog_handler_sends_ident_and_facility(tmp_path: Path) -> None:
    path = str(tmp_path / "log.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx:
        rx.bind(path)
        rx.settimeout(30)
        logger = syslog_logger("dqtest", "local3", address=path)
        logger.warning("hello")
        data = rx.recv(4096)
        for h in logger.handlers:
            h.close()
    # PRI = facility * 8 + severity: local3 is 19, warning is 4
    assert data.startswith(b"<156>dqtest[%d]: hello" % os.getpid())


def test_set_level_reaches_loggers_bound_before() -> None:
    import structlog

    from disq.logging import _filter_level

    set_level("warning")
    try:
        with pytest.raises(structlog.DropEvent):
            _filter_level(None, "info", {})
        assert _filter_level(None, "error", {"e": 1}) == {"e": 1}
        set_level("debug")
        assert _filter_level(None, "debug", {}) == {}
    finally:
        set_level("notice")
    with pytest.raises(structlog.DropEvent):
        _filter_level(None, "debug", {})


@pytest.mark.parametrize("name", sorted(_RESTRICTED))
def test_restricted_keys_accept_what_disq_does(name: str) -> None:
    accepted, why = _RESTRICTED[name]
    if name != "watchdog-period":  # not a file directive (Disque)
        assert parse_config(f"{name} {accepted[0]}\n").get(name) == [(name, accepted[0])]
    assert why


@pytest.mark.parametrize(
    ("known", "reachable", "state"),
    [(1, 0, "ok"), (2, 1, "ok"), (2, 0, "fail"), (3, 1, "ok"), (3, 0, "fail"), (5, 1, "fail")],
)
def test_cluster_state_needs_a_majority(known: int, reachable: int, state: str) -> None:
    assert cluster_state(known, reachable) == state


def test_used_memory_rss_is_the_current_rss() -> None:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    rss = _current_rss()
    assert rss % os.sysconf("SC_PAGE_SIZE") == 0
    # the same measure as statm, within what this test itself allocates between the reads
    assert abs(rss - pages * os.sysconf("SC_PAGE_SIZE")) < 16 << 20
