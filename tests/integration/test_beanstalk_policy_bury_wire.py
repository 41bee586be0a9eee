"""A queue policy's MAXDELIVERIES on a beanstalk tube, end to end: the policy set over RESP
(QPOLICY SET), the job reserved and released over the beanstalk port of the same real node;
the release past the limit still answers RELEASED and the job is buried, where peek-buried
finds it and kick brings it back. The TTR path too, and the Prometheus counter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from test_metrics import node, scrape, value  # noqa: E402, F401  # node: a fixture
from wire import Conn  # noqa: E402

from cluster.resp_client import RespClient  # noqa: E402


@pytest.fixture
def policy_node(request: pytest.FixtureRequest) -> tuple[ServerProcess, int, int]:
    """test_metrics' node (beanstalk port, RESP, metrics), tube t with MAXDELIVERIES 2."""
    got: tuple[ServerProcess, int, int] = request.getfixturevalue("node")
    with RespClient(port=got[1]) as c:
        assert c.call("QPOLICY", "SET", "t", "MAXDELIVERIES", 2) in (b"OK", "OK")
    return got


def _only(c: Conn, tube: bytes, leave: bytes = b"default", use: bool = True) -> None:
    """Use and watch ``tube`` alone, no longer ``leave``."""
    if use:
        c.cmd(b"use " + tube, b"USING " + tube + b"\r\n")
    c.cmd(b"watch " + tube, b"WATCHING 2\r\n")
    c.cmd(b"ignore " + leave, b"WATCHING 1\r\n")


def test_release_past_maxdeliveries_buries_and_kick_brings_it_back(
    policy_node: tuple[ServerProcess, int, int],
) -> None:
    srv, _, mport = policy_node
    with srv.connect() as c:
        _only(c, b"t")
        c.cmd(b"put 5 0 60 6\r\npoison", b"INSERTED 1\r\n")
        c.cmd(b"reserve", b"RESERVED 1 6\r\npoison\r\n")
        c.cmd(b"release 1 5 0", b"RELEASED\r\n")
        job = c.stats_job(1)
        assert (job["state"], job["reserves"], job["releases"]) == ("ready", "1", "1")
        c.cmd(b"reserve", b"RESERVED 1 6\r\npoison\r\n")
        # The limit reached: the client's release is answered as asked, the policy buries.
        c.cmd(b"release 1 5 0", b"RELEASED\r\n")
        job = c.stats_job(1)
        assert (job["state"], job["reserves"], job["buries"]) == ("buried", "2", "1")
        c.cmd(b"peek-buried", b"FOUND 1 6\r\npoison\r\n")
        c.cmd(b"reserve-with-timeout 0", b"TIMED_OUT\r\n")
        tube = c.stats_tube(b"t")
        assert (tube["current-jobs-buried"], tube["current-jobs-ready"]) == ("1", "0")
        assert value(scrape(mport), "disq_beanstalk_policy_buried_total") == 1
        # kick: try again, with MAXDELIVERIES more reserves.
        c.cmd(b"kick 1", b"KICKED 1\r\n")
        c.cmd(b"reserve", b"RESERVED 1 6\r\npoison\r\n")
        c.cmd(b"release 1 5 0", b"RELEASED\r\n")
        assert c.stats_job(1)["state"] == "ready"
        c.cmd(b"reserve", b"RESERVED 1 6\r\npoison\r\n")
        c.cmd(b"release 1 5 0", b"RELEASED\r\n")
        assert c.stats_job(1)["state"] == "buried"
        assert value(scrape(mport), "disq_beanstalk_policy_buried_total") == 2
        # A tube without a policy: released as often as asked.
        _only(c, b"free", leave=b"t")
        c.cmd(b"put 0 0 60 1\r\nx", b"INSERTED 2\r\n")
        for _ in range(3):
            c.cmd(b"reserve", b"RESERVED 2 1\r\nx\r\n")
            c.cmd(b"release 2 0 0", b"RELEASED\r\n")
        job = c.stats_job(2)
        assert (job["state"], job["reserves"]) == ("ready", "3")


def test_the_ttr_running_out_past_maxdeliveries_buries(
    policy_node: tuple[ServerProcess, int, int],
) -> None:
    srv, _, _ = policy_node
    with srv.connect() as c, srv.connect() as waiter, srv.connect() as other:
        _only(c, b"t")
        _only(waiter, b"t", use=False)
        c.cmd(b"put 0 0 1 4\r\nslow", b"INSERTED 1\r\n")
        c.cmd(b"reserve", b"RESERVED 1 4\r\nslow\r\n")
        # The TTR of 1 s runs out: the job is ready again, and the waiter's blocking
        # reserve takes it (the 2nd reserve).
        waiter.cmd(b"reserve-with-timeout 10", b"RESERVED 1 4\r\nslow\r\n")
        job = c.stats_job(1)
        assert (job["reserves"], job["timeouts"]) == ("2", "1")
        # Its TTR runs out again (in 1 s): buried, so a blocking reserve times out.
        _only(other, b"t", use=False)
        other.cmd(b"reserve-with-timeout 2", b"TIMED_OUT\r\n")
        job = c.stats_job(1)
        assert (job["state"], job["reserves"], job["timeouts"]) == ("buried", "2", "2")
        c.cmd(b"peek-buried", b"FOUND 1 4\r\nslow\r\n")
