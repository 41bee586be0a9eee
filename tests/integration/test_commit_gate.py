"""The group commit under ``appendfsync always`` (disq/server/commit_gate.py): a reply waits
for the fsync that covers its record, and the node goes on taking work meanwhile.

The node runs under ``python -m disq.testing.faults fsync-hold --gate G``: while the file G
exists, the AOF's fsync waits (a slow disk). The records of the adds sent meanwhile reach the
file (its size grows) while no reply leaves; once G is gone every reply comes, in order. (A
node fsyncs in threads until its disk has shown itself fast, over dozens of fsyncs: this one
has made a few.)
"""

from __future__ import annotations

import select
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import SERVER_KIND, ServerFactory, free_port  # noqa: E402
from eventually import eventually  # noqa: E402

from cluster.resp_client import RespClient, encode_command  # noqa: E402

pytestmark = pytest.mark.skipif(SERVER_KIND != "disq", reason="disq's fault hook")


def nothing_to_read(s: socket.socket) -> bool:
    readable, _, _ = select.select([s], [], [], 0)
    if readable:
        raise AssertionError(f"a reply left before its fsync: {s.recv(100)!r}")
    return True


def test_replies_wait_for_their_fsync_and_the_node_takes_work_meanwhile(
    server_factory: ServerFactory,
) -> None:
    d = server_factory.base_dir / "gate"
    gate = d / "hold"
    aof = d / "data" / "disq.aof"
    rport = free_port()
    srv = server_factory.new("-b", str(d / "data"), "--resp-port", str(rport), start=False)
    srv.cmd = [sys.executable, "-m", "disq.testing.faults", "fsync-hold", "--gate", str(gate), "--"]
    srv.start()
    bs = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    resp = socket.create_connection(("127.0.0.1", rport), timeout=10)
    with bs, resp, RespClient("127.0.0.1", rport, timeout=10) as probe:
        assert probe.call("PING") == "PONG"
        gate.touch()  # from now on every fsync waits
        size = aof.stat().st_size
        bs.sendall(b"put 0 0 60 5\r\nfirst\r\n")
        eventually(lambda: aof.stat().st_size > size, "the put's record is written")
        assert nothing_to_read(bs)
        # The fsync of the put is held: another client's add is still taken and logged.
        size = aof.stat().st_size
        resp.sendall(encode_command(["ADDJOB", "q", "second", 0]))
        eventually(lambda: aof.stat().st_size > size, "the ADDJOB's record is written")
        assert nothing_to_read(bs) and nothing_to_read(resp)
        gate.unlink()
        f = bs.makefile("rb")
        assert f.readline() == b"INSERTED 1\r\n"
        assert resp.makefile("rb").readline().startswith(b"+D-")
        # Its reply left after its fsync: the job is there.
        assert probe.call("QLEN", "q") == 1
