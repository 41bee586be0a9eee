"""Graceful drain on SIGTERM (issue 11; disq/server/drain.py, disq/core/disque/handoff.py).

A node holding jobs, SIGTERMed, says it is leaving (ADDJOB answers -LEAVING), hands its
queued jobs to other nodes (a REPLICATE 1 job is copied first), exits 0 within the drain
bound, and the other nodes deliver every job at once, not after RETRY 300. Restarted on the
same data dir it rejoins, not leaving.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402

DRAIN_S = 10


def _text(x: object) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _wait_until_draining(node: Any) -> None:
    """Until the SIGTERMed node answers ADDJOB with -LEAVING (its drain has started)."""

    def refused() -> bool:
        try:
            node.call("ADDJOB", "dq", "y", 5000, "REPLICATE", 1, "RETRY", 300)
        except RespError as exc:
            return str(exc).startswith("LEAVING")
        return False

    eventually(refused, "the node to be draining", timeout=5)


def _links_up(node: Any, nodes: int) -> None:
    """Until ``node`` replicates to every other node: its peer links are up.

    The drain hands jobs only to peers whose link is up (a node whose links are still
    connecting has nobody to hand to, and stops at once), so a test that pauses a peer to
    hold the drain open must first see the link up.
    """
    eventually(
        lambda: node.call("ADDJOB", "probe", "p", 5000, "REPLICATE", nodes, "RETRY", 300),
        "the peer links to be up",
        timeout=10,
    )


def test_sigterm_hands_jobs_off_exits_0_and_restart_clears_leaving(tmp_path: Path) -> None:
    with Lab(
        3, tmp_path / "lab", node_timeout_ms=1500, extra_conf=[f"drain-timeout {DRAIN_S}"]
    ) as lab:
        n0 = lab.node(0)
        solo = {
            _text(n0.call("ADDJOB", "dq", f"solo{i}", 5000, "REPLICATE", 1, "RETRY", 300))
            for i in range(40)
        }
        dual = {
            _text(n0.call("ADDJOB", "dq", f"dual{i}", 5000, "REPLICATE", 2, "RETRY", 300))
            for i in range(20)
        }
        for i in (1, 2):  # the REPLICATE 1 jobs have no copy anywhere else
            assert all(lab.node(i).call("SHOW", j) is None for j in solo)
        assert n0.proc is not None
        proc = n0.proc

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # ADDJOBs during the drain: -LEAVING (one that ran before the signal was handled
        # is an ordinary job, handed off with the others).
        leaving = 0
        late: set[str] = set()
        try:
            with n0.client(timeout=2.0) as c:
                for k in range(10_000):
                    try:
                        r = c.call("ADDJOB", "dq", f"late{k}", 5000, "REPLICATE", 1, "RETRY", 300)
                    except RespError as exc:
                        assert str(exc).startswith("LEAVING"), exc
                        leaving += 1
                        break
                    late.add(_text(r))
        except OSError:
            pass  # the node was already gone
        code = proc.wait(DRAIN_S + 5)
        took = time.monotonic() - t0
        assert code == 0, n0.log_tail()
        assert took < DRAIN_S, f"drain took {took:.1f}s"
        lab.stop(0)  # bookkeeping only: the process is gone
        assert leaving == 1, f"no -LEAVING seen (late adds: {len(late)})"
        assert "drain_done" in n0.log_tail(200)

        # Every job is delivered by the other nodes now, far sooner than RETRY 300.
        want = solo | dual | late
        got: list[str] = []

        def delivered() -> bool:
            for i in (1, 2):
                r = lab.node(i).call("GETJOB", "NOHANG", "COUNT", 1000, "FROM", "dq")
                for _q, job_id, _body in r or []:
                    got.append(_text(job_id))
            return set(got) >= want

        eventually(delivered, "every job delivered by nodes 1 and 2", timeout=5)
        assert len(got) == len(set(got)), "a job was delivered twice"
        assert set(got) == want

        # Restarted on the same data dir: not leaving, for itself and for its peers.
        view = json.loads((n0.data_dir / "cluster.json").read_text())
        assert view["me"]["leaving"] is False
        lab.restart(0)
        assert n0.call("CLUSTER", "LEAVING") == "no"
        eventually(
            lambda: all(lab.hello(i).get(n0.id or "") == 1 for i in (1, 2)),
            "peers see node 0 back, not leaving",
        )
        # Nothing to hand off now: SIGTERM stops it at once.
        t0 = time.monotonic()
        lab.stop(0)
        assert n0.proc is not None and n0.proc.returncode == 0
        assert time.monotonic() - t0 < 3


def test_operator_leaving_is_kept_and_a_lone_node_stops_at_once(tmp_path: Path) -> None:
    # A one-node cluster: nowhere to hand anything to, the job stays for a restart.
    with Lab(1, tmp_path / "lab", node_timeout_ms=1500) as lab:
        n0 = lab.node(0)
        job_id = _text(n0.call("ADDJOB", "dq", "kept", 0, "RETRY", 300))
        assert n0.call("CLUSTER", "LEAVING", "yes") == "OK"
        t0 = time.monotonic()
        lab.stop(0)
        assert n0.proc is not None and n0.proc.returncode == 0
        assert time.monotonic() - t0 < 3
        lab.restart(0)
        assert n0.call("CLUSTER", "LEAVING") == "yes"  # the operator's flag, as in Disque
        assert n0.call("SHOW", job_id) is not None


def test_second_sigterm_stops_at_once(tmp_path: Path) -> None:
    # Node 1 is stopped (SIGSTOP) but not yet dead for a 10 s node timeout: node 0's
    # handoff waits for an answer that does not come, until a second SIGTERM.
    with Lab(2, tmp_path / "lab", node_timeout_ms=10_000) as lab:
        n0 = lab.node(0)
        _links_up(n0, 2)
        n0.call("ADDJOB", "dq", "x", 5000, "REPLICATE", 1, "RETRY", 300)
        lab.pause(1)
        try:
            assert n0.proc is not None
            n0.proc.send_signal(signal.SIGTERM)

            _wait_until_draining(n0)
            assert n0.is_running()
            t0 = time.monotonic()
            n0.proc.send_signal(signal.SIGTERM)
            assert n0.proc.wait(5) == 0
            assert time.monotonic() - t0 < 3
            assert "drain_started" in n0.log_tail(200)
        finally:
            lab.kill9(1)  # resumed, it would hand the job back to a node it thinks alive


def test_the_sdk_moves_an_add_refused_with_leaving_to_another_node(tmp_path: Path) -> None:
    from disq.client import Client

    # Node 0 drains with a job it cannot hand off: node 1 is stopped (not yet dead for a
    # 10 s node timeout) and node 0's links to node 2 are cut. So node 0 answers -LEAVING for
    # seconds, while the client still reaches node 2.
    with Lab(3, tmp_path / "lab", node_timeout_ms=10_000) as lab:
        n0, n2 = lab.node(0), lab.node(2)
        _links_up(n0, 3)
        n0.call("ADDJOB", "dq", "x", 5000, "REPLICATE", 1, "RETRY", 300)
        n2_id = _text(n2.call("HELLO")[1])  # type: ignore[index]
        assert n0.call("DEBUG", "DROP-PEERS", n2_id) == "OK"
        lab.pause(1)
        try:
            addrs = [f"127.0.0.1:{lab.node(i).bus_port}" for i in (0, 2)]
            # A client picks its home at random among equals: take one whose home is node 0.
            for _ in range(40):
                c = Client(addrs, discover=False, timeout_s=5)
                assert c.add_job("sdk-q", "before", replicate=1).startswith("D-")
                if c.last_node == addrs[0]:
                    break
                c.close()
            else:
                raise AssertionError("no client chose node 0 as its home in 40 tries")
            try:
                assert n0.proc is not None
                n0.proc.send_signal(signal.SIGTERM)

                _wait_until_draining(n0)
                job_id = c.add_job("sdk-q", "during the drain", replicate=1)
                assert c.last_node == addrs[1]  # moved on to node 2, where the job is
                assert n2.call("SHOW", job_id) is not None
            finally:
                c.close()
        finally:
            lab.kill9(1)
