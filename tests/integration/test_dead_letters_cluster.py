"""Dead letters on three real node processes (disq/core/disque/deadletter.py): a policy set on
node 1, a job added on node 2 and NACKed after each of three deliveries lands in the dead
letter queue exactly once, with its body and headers; the same when its RETRY runs out three
times, and with a node killed between deliveries; QREDRIVE brings the dead letters back with
fresh counters; bad grammar gets a clear error and changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402


def _set_policy(lab: Lab, queue: str, dead: str, limit: int = 3) -> None:
    assert lab.node(1).call("QPOLICY", "SET", queue, "MAXDELIVERIES", limit, "DEADLETTER", dead)
    for i in (0, 2):
        eventually(
            lambda i=i: lab.node(i).call("QPOLICY", "GET", queue) is not None,
            "the policy reaches every node",
        )


def _live(lab: Lab) -> list[int]:
    return [i for i in range(3) if lab.node(i).is_running()]


def _deliver(lab: Lab, queue: str, nodes: list[int]) -> tuple[int, list[object]]:
    """A GETJOB on the first of ``nodes`` holding the job (it may have to come from a peer):
    (the node, the job's entry)."""

    def got() -> tuple[int, list[object]] | None:
        for i in nodes:
            jobs = lab.node(i).call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", queue)
            if jobs:
                return i, jobs[0]
        return None

    return eventually(got, f"a job of {queue} to be delivered", timeout=20)


def _dead_letters(lab: Lab, dead: str) -> dict[bytes, list[object]]:
    """Every dead letter queued on a live node, by id, as GETJOB WITHHEADERS would show it
    (read by QPEEK, which delivers nothing)."""
    out: dict[bytes, list[object]] = {}
    for i in _live(lab):
        for entry in lab.node(i).call("QPEEK", dead, 100):
            out[entry[1]] = entry
    return out


def _headers(lab: Lab, job_id: bytes) -> dict[bytes, bytes]:
    for i in _live(lab):
        shown = lab.node(i).call("SHOW", job_id)
        if shown:
            pairs = dict(zip(*[iter(shown)] * 2, strict=True))
            flat = pairs.get(b"headers") or []
            return dict(zip(*[iter(flat)] * 2, strict=True))
    raise AssertionError(f"no node shows {job_id!r}")


def _gone_everywhere(lab: Lab, job_id: str) -> bool:
    return all(lab.node(i).call("SHOW", job_id) is None for i in _live(lab))


def _one_dead_letter(lab: Lab, dead: str) -> bytes:
    got = eventually(lambda: _dead_letters(lab, dead) or None, "the dead letter", timeout=20)
    assert len(got) == 1, got
    [dead_id] = got
    return dead_id


@pytest.mark.timeout(240)
def test_nacked_three_times_across_the_cluster_then_redriven(lab3: Lab) -> None:
    _set_policy(lab3, "dl-nack", "dl-nack-dead")
    job_id = lab3.node(2).call(
        "ADDJOB", "dl-nack", "the body", 5000, "REPLICATE", 3, "RETRY", 60,
        "HEADERS", 1, "tenant", "acme",
    )  # fmt: skip
    for delivery in range(1, 4):
        i, entry = _deliver(lab3, "dl-nack", [2, 0, 1])
        assert entry[1] == job_id.encode()
        assert entry[4] == delivery - 1  # nacks so far
        assert lab3.node(i).call("NACK", job_id) == 1
    dead_id = _one_dead_letter(lab3, "dl-nack-dead")
    assert _dead_letters(lab3, "dl-nack-dead")[dead_id][2] == b"the body"
    headers = _headers(lab3, dead_id)
    assert headers[b"tenant"] == b"acme" and headers[b"disq-source-queue"] == b"dl-nack"
    assert headers[b"disq-original-id"] == job_id.encode()
    assert headers[b"disq-nacks"] == b"3" and headers[b"disq-dead-reason"] == b"maxdeliveries"
    eventually(lambda: _gone_everywhere(lab3, job_id), "the original acked on every node")
    assert sum(lab3.node(i).call("QLEN", "dl-nack") for i in range(3)) == 0
    assert sum(int(lab3.info(i, "stats")["jobs_dead_lettered"]) for i in range(3)) == 1
    # QREDRIVE: each node moves the dead letters it holds; the job is back with counters 0.
    moved = sum(lab3.node(i).call("QREDRIVE", "dl-nack-dead") for i in range(3))
    assert moved == 1
    _i, entry = _deliver(lab3, "dl-nack", [0, 1, 2])
    assert entry[2] == b"the body" and entry[3:] == [b"nacks", 0, b"additional-deliveries", 0]
    assert _headers(lab3, entry[1]) == {b"tenant": b"acme"}
    eventually(lambda: not _dead_letters(lab3, "dl-nack-dead"), "the dead letter acked")
    assert sum(int(lab3.info(i, "stats")["jobs_redriven"]) for i in range(3)) == 1
    lab3.node(0).call("ACKJOB", entry[1])


@pytest.mark.timeout(240)
def test_a_retry_run_out_three_times_dead_letters_once(lab3: Lab) -> None:
    _set_policy(lab3, "dl-retry", "dl-retry-dead")
    job_id = lab3.node(2).call("ADDJOB", "dl-retry", "r", 5000, "REPLICATE", 3, "RETRY", 1)
    for _delivery in range(3):
        _i, entry = _deliver(lab3, "dl-retry", [2, 0, 1])
        assert entry[1] == job_id.encode()  # never acked: its RETRY brings it back
    dead_id = _one_dead_letter(lab3, "dl-retry-dead")
    assert _headers(lab3, dead_id)[b"disq-additional-deliveries"] == b"3"
    eventually(lambda: _gone_everywhere(lab3, job_id), "the original acked on every node")
    assert len(_dead_letters(lab3, "dl-retry-dead")) == 1
    assert lab3.node(0).call("QREDRIVE", "dl-retry-dead", "TO", "dl-retry-back") in (0, 1)


@pytest.mark.timeout(300)
def test_a_node_killed_between_deliveries(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        _set_policy(lab, "dl-kill", "dl-kill-dead")
        job_id = lab.node(2).call("ADDJOB", "dl-kill", "k", 5000, "REPLICATE", 3, "RETRY", 60)
        i, _entry = _deliver(lab, "dl-kill", [2])
        assert lab.node(i).call("NACK", job_id) == 1
        lab.kill9(0)
        for _delivery in range(2):
            i, entry = _deliver(lab, "dl-kill", [2, 1])
            assert entry[1] == job_id.encode()
            assert lab.node(i).call("NACK", job_id) == 1
        _one_dead_letter(lab, "dl-kill-dead")
        lab.restart(0)
        lab.wait_cluster()
        eventually(lambda: _gone_everywhere(lab, job_id), "the original acked, node 0's too")
        assert len(_dead_letters(lab, "dl-kill-dead")) == 1
        assert sum(lab.node(k).call("QLEN", "dl-kill") for k in range(3)) == 0


def test_bad_qredrive_grammar_is_refused_and_changes_nothing(lab3: Lab) -> None:
    n0 = lab3.node(0)
    n0.call("ADDJOB", "dl-bad", "x", 0, "REPLICATE", 1, "HEADERS", 1, "disq-source-queue", "b")
    with n0.client() as c:
        for args, error in [
            (("dl-bad", "TO"), "TO needs a queue name"),
            (("dl-bad", "COUNT", 0), "COUNT value '0' is not an integer 1..10000"),
            (("dl-bad", "COUNT", "x"), "is not an integer"),
            (("dl-bad", "FROM", "y"), "unknown QREDRIVE option 'FROM'"),
            (("dl-bad", "TO", "a", "TO", "b"), "given twice"),
            (("dl-bad", "TO", "dl-bad"), "another queue"),
            (("",), "queue name must not be empty"),
        ]:
            with pytest.raises(RespError, match=error):
                c.call("QREDRIVE", *args)
            assert c.call("QLEN", "dl-bad") == 1
        with pytest.raises(RespError, match="wrong number of arguments"):
            c.call("QREDRIVE")
        assert c.call("QREDRIVE", "dl-bad", "COUNT", 1) == 1
        assert c.call("QLEN", "b") == 1 and c.call("QLEN", "dl-bad") == 0
