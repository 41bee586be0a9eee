"""A failed fsync stops the node (docs/disk-full.md, "A failed fsync").

The node runs under ``python -m disq.testing.faults fsync-eio --after N``: the AOF's fsync
succeeds N times, then fails with EIO. After a failed fsync the kernel may have dropped the
dirty pages and a later fsync can succeed without them ("fsyncgate"), so the node must stop
at once (exit 1), say why, and never acknowledge a write whose fsync failed: its client sees
the connection close. A restart on the same directory replays everything acknowledged.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import SERVER_KIND, ServerFactory, ServerProcess, free_port  # noqa: E402

from cluster.nodeproc import node_command  # noqa: E402
from cluster.resp_client import RespClient, encode_command  # noqa: E402

pytestmark = pytest.mark.skipif(SERVER_KIND != "disq", reason="disq's fault hook")

EXIT_TIMEOUT = 15.0


def fault_after(srv: ServerProcess, after: int | None) -> None:
    """Its next start runs the node through the fault hook (``after`` None: no fault)."""
    hook = ["-m", "disq.testing.faults", "fsync-eio", "--after", str(after), "--"]
    srv.cmd = node_command() if after is None else [sys.executable, *hook]


def faulty(factory: ServerFactory, after: int, *extra: str) -> ServerProcess:
    d = factory.base_dir / f"srv{len(factory.servers)}"
    srv = factory.new("-b", str(d / "data"), *extra, data_dir=d, start=False)
    fault_after(srv, after)
    return srv


def wait_exit(srv: ServerProcess) -> int:
    assert srv.proc is not None
    try:
        return srv.proc.wait(EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the node did not stop:\n{srv.log_text()}") from None


def assert_fsync_named(log: str) -> None:
    assert '"event": "aof_fsync_failed_stopping"' in log, log
    assert "Input/output error" in log, log


def put(f: socket.SocketIO | object, s: socket.socket, body: bytes) -> bytes:
    s.sendall(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
    return f.readline()  # type: ignore[attr-defined, no-any-return]


def test_beanstalk_put_whose_fsync_fails_is_never_acknowledged(
    server_factory: ServerFactory,
) -> None:
    srv = faulty(server_factory, 3, "-f", "0")  # fsync before every reply
    srv.start()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        f = s.makefile("rb")
        for i in (1, 2, 3):
            assert put(f, s, b"job%d" % i) == b"INSERTED %d\r\n" % i
        # The fourth put's record is written, its fsync fails: no reply, the node stops.
        assert put(f, s, b"job4") == b""  # EOF: the connection closed, nothing was sent
    assert wait_exit(srv) == 1
    assert_fsync_named(srv.log_text())

    fault_after(srv, None)
    srv.start()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        f = s.makefile("rb")
        for i in (1, 2, 3):
            s.sendall(b"peek %d\r\n" % i)
            assert f.readline() == b"FOUND %d 4\r\n" % i
            assert f.read(6) == b"job%d\r\n" % i


def test_addjob_whose_fsync_fails_is_never_acknowledged(server_factory: ServerFactory) -> None:
    resp_port = free_port()
    srv = faulty(server_factory, 2, "-f", "0", "--resp-port", str(resp_port))
    srv.start()
    acked: list[str] = []
    with socket.create_connection(("127.0.0.1", resp_port), timeout=10) as s:
        f = s.makefile("rb")
        for i in range(100):
            s.sendall(encode_command(["ADDJOB", "q", f"job{i}", "0"]))
            line = f.readline()
            if not line:
                break  # EOF: closed without a reply
            assert line.startswith(b"+D-"), line
            acked.append(line[1:-2].decode())
        else:
            raise AssertionError("no fsync failed")
    assert acked, "the fault hit before any add: nothing to check after the restart"
    assert wait_exit(srv) == 1
    assert_fsync_named(srv.log_text())

    fault_after(srv, None)
    srv.start()
    with RespClient("127.0.0.1", resp_port, timeout=10) as c:
        for job_id in acked:
            assert c.call("SHOW", job_id) is not None, job_id


def test_everysec_fsync_failure_stops_the_node(server_factory: ServerFactory) -> None:
    """Under everysec the worker thread's fsync fails: the node stops all the same. A put
    acknowledged before it (everysec acknowledges before the fsync: up to a second of
    writes may be lost by a crash) is still in the file, which a restart replays."""
    srv = faulty(server_factory, 0, "--fsync", "everysec")
    srv.start()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        f = s.makefile("rb")
        assert put(f, s, b"early") == b"INSERTED 1\r\n"
    assert wait_exit(srv) == 1
    assert_fsync_named(srv.log_text())
    fault_after(srv, None)
    srv.start()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        f = s.makefile("rb")
        s.sendall(b"peek 1\r\n")
        assert f.readline() == b"FOUND 1 5\r\n"
