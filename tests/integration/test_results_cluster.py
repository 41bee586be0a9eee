"""Jobs' results kept by the cluster (RESULT), on real node processes: a result set on one
node wakes a client waiting on another, and outlives its setter's SIGKILL on the others.
State travels over the network, so the test waits for it with ``eventually`` (a poll with a
deadline), never a sleep."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import Reply, RespClient  # noqa: E402

VALUE = b"\x00forty-two\r\n"


def test_a_result_wakes_a_waiter_elsewhere_and_outlives_its_setter(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        job_id = lab.node(0).call("ADDJOB", "tasks", "work", 5000, "REPLICATE", 1)
        assert isinstance(job_id, str)
        got: list[Reply] = []
        waiter = RespClient(lab.host, lab.node(1).port, timeout=30)
        t = threading.Thread(target=lambda: got.append(waiter.call("RESULT", "WAIT", job_id, 0)))
        t.start()
        try:
            eventually(
                lambda: lab.info(1, "clients")["blocked_clients"] == "1",
                "the RESULT WAIT blocks on node 1",
            )
            assert lab.node(0).call("RESULT", "SET", job_id, VALUE, "TIMEOUT", 5000) == "OK"
            t.join(20)
            assert not t.is_alive()
            assert got == [VALUE]
        finally:
            waiter.close()
            t.join(1)
        # OK meant three holders (the default REPLICATE: min(3, nodes)): the setter's death
        # takes none of the others' copies.
        lab.kill9(0)
        assert [lab.node(i).call("RESULT", "GET", job_id) for i in (1, 2)] == [VALUE, VALUE]
        assert lab.node(2).call("RESULT", "GET", "D-" + job_id[2:-4] + "ffff") is None
        # A killed node comes back with what its AOF logged.
        lab.restart(0)
        assert lab.node(0).call("RESULT", "GET", job_id) == VALUE


def test_a_node_down_during_a_set_learns_the_result_when_it_is_back(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        lab.kill9(2)
        # Two copies suffice for the OK; node 2 is owed the set and the delete.
        assert lab.node(0).call("RESULT", "SET", "task-7", VALUE, "REPLICATE", 2) == "OK"
        assert lab.node(0).call("RESULT", "SET", "task-8", b"x", "REPLICATE", 2) == "OK"
        assert lab.node(1).call("RESULT", "DEL", "task-8") == 1
        lab.restart(2)
        eventually(
            lambda: lab.node(2).call("RESULT", "GET", "task-7") == VALUE,
            "node 2 to learn the result set while it was down",
        )
        assert lab.node(2).call("RESULT", "GET", "task-8") is None
