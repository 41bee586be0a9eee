"""Results through the SDK, its gRPC API and the integrations' RESP path, on a real 3-node
cluster (cluster/lab.py): a worker stores its handler's return value and acks with it, a
waiter on another node wakes with it, a fresh process reads it after the worker has gone,
and the node that stored it can die without taking it along.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402
from test_sdk import PINNED, addr, all_addrs, running  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import BadIdError, Client, InvalidArgumentError  # noqa: E402
from disq.integrations.resp_calls import RespCalls  # noqa: E402
from disq.worker import Worker  # noqa: E402


def test_set_on_one_node_get_and_wait_on_another(lab3: Lab) -> None:
    with Client(addr(lab3, 0), discover=False) as c0, Client(addr(lab3, 2), discover=False) as c2:
        assert c2.result("task-a1") is None  # nothing yet: at once, no wait
        got: list[bytes | None] = []
        waiter = threading.Thread(target=lambda: got.append(c2.result("task-a1", timeout_s=20)))
        waiter.start()
        # The waiter is parked on node 2 (INFO's blocked_clients) before the set: it wakes.
        eventually(lambda: _blocked(c2) >= 1, "the waiter to block on node 2")
        c0.set_result("task-a1", b"forty-two", replicate=3)
        waiter.join(20)
        assert got == [b"forty-two"]
        assert c2.result("task-a1") == b"forty-two"
        assert c0.delete_result("task-a1") is True
        eventually(lambda: c2.result("task-a1") is None, "the delete to reach node 2")
        assert c2.result("task-a1", timeout_s=0.2) is None  # a wait that runs out


def _blocked(c: Client) -> int:
    info = c.info()
    return int(info.get("blocked_clients", 0))


def test_bad_keys_and_an_ack_of_no_job_are_refused(lab3: Lab) -> None:
    with Client(addr(lab3, 1), discover=False) as c:
        with pytest.raises(InvalidArgumentError):
            c.set_result("has space", b"v")
        with pytest.raises(InvalidArgumentError):
            c.result("k" * 256)
        with pytest.raises(BadIdError):
            c.set_result("not-a-job-id", b"v", ack=True)
        assert c.result("has-no-space") is None  # the connection and the node go on


def test_a_worker_stores_its_return_value_and_a_fresh_process_reads_it(lab3: Lab) -> None:
    def handler(job: object) -> bytes:
        return b"done:" + job.body  # type: ignore[attr-defined]

    with Client(all_addrs(lab3), discover=False) as c:
        job_id = c.add_job("results-work", "x1", replicate=2)
        w = Worker(
            addr(lab3, 0), "results-work", handler, fetch_timeout_s=0.2, store_results=True,
            **PINNED,
        )  # fmt: skip
        with running(w) as errors:
            assert c.result(job_id, timeout_s=20) == b"done:x1"
            eventually(lambda: w.stats.results_stored == 1, "the worker to count the result")
        assert not errors
    # Acked by the same call: no copy of the job is left on any node.
    for i in range(3):
        with Client(addr(lab3, i), discover=False) as ci:
            eventually(lambda ci=ci: ci.show(job_id) is None, f"the job to be gone on node {i}")
    # The worker has exited; a new process, on another node, reads the result.
    script = textwrap.dedent(
        f"""
        from disq.client import Client
        with Client({addr(lab3, 2)!r}, discover=False) as c:
            print(c.result({job_id!r}, timeout_s=10).decode())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done:x1"


def test_the_resp_path_sets_and_waits_as_the_sdk_does(lab3: Lab) -> None:
    nodes = [Client(addr(lab3, i), discover=False) for i in range(3)]
    with Client(all_addrs(lab3)) as c:
        calls = RespCalls(c)
        got: list[bytes | None] = []
        waiter = threading.Thread(target=lambda: got.append(calls.result("dq-msg-7", 20)))
        waiter.start()
        blocked = lambda: sum(_blocked(n) for n in nodes) >= 1  # noqa: E731
        eventually(blocked, "the RESP waiter to block")
        nodes[1].set_result("dq-msg-7", "value", replicate=2)
        waiter.join(20)
        assert got == [b"value"]
        assert calls.result("dq-msg-7") == b"value"
        assert calls.delete_result("dq-msg-7") is True
        assert calls.result("dq-msg-7") is None
        calls.close()
    for n in nodes:
        n.close()


def test_a_result_outlives_the_node_that_stored_it(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        with Client(addr(lab, 0), discover=False) as c0:
            c0.set_result("survivor", b"kept", replicate=3)
        lab.kill9(0)
        with Client(f"{addr(lab, 1)},{addr(lab, 2)}", discover=False) as c:
            assert c.result("survivor") == b"kept"
