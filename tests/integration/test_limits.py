"""Bounds on a live node: memory, job size, and that refusing work never loses accepted jobs."""

from __future__ import annotations

import pytest
from conftest import ServerFactory
from wire import Conn


def test_max_memory_refuses_puts_and_keeps_every_accepted_job(
    server_factory: ServerFactory, server_kind: str
) -> None:
    if server_kind != "disq":
        pytest.skip("--max-memory is disq's own flag")
    srv = server_factory.new("--max-memory", "200kb")
    c: Conn = srv.connect()
    body = b"m" * 1000
    accepted: list[int] = []
    for _ in range(1000):
        c.send(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
        line = c.read_line()
        if line == b"OUT_OF_MEMORY\r\n":
            break
        assert line.startswith(b"INSERTED "), line
        accepted.append(int(line.split()[1]))
    else:
        raise AssertionError("the memory limit was never reached")
    assert 50 < len(accepted) < 200
    # The connection and the node go on serving; every accepted job is intact.
    assert c.stats()["current-jobs-ready"] == str(len(accepted))
    for job_id in accepted:
        c.cmd(b"peek %d" % job_id, b"FOUND %d %d\r\n%s\r\n" % (job_id, len(body), body))
    # Room comes back when jobs go away.
    for job_id in accepted[:10]:
        c.cmd(b"delete %d" % job_id, b"DELETED\r\n")
    c.send(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
    assert c.read_line().startswith(b"INSERTED ")
