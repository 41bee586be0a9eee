"""NACK ... DELAY on real node processes: a job NACKed with a delay longer than its RETRY is
queued on no node of three until the delay has passed, then comes back to a consumer once,
with one nack counted and no additional delivery."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import Client  # noqa: E402


def test_a_delayed_nack_on_three_nodes(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        n0 = lab.node(0)
        job_id = n0.call("ADDJOB", "dq", "work", 5000, "REPLICATE", 3, "RETRY", 1)
        got = n0.call("GETJOB", "TIMEOUT", 1000, "FROM", "dq")
        assert isinstance(got, list) and got[0][1] == job_id.encode()
        assert n0.call("NACK", job_id, "DELAY", 4) == 1
        nacked = time.monotonic()
        # RETRY is 1 s: without the delay a holder would queue it again within about 1 s.
        # Until the 4 s have passed, no node's QLEN sees it (and no GETJOB gets it).
        while time.monotonic() - nacked < 3.5:
            assert [lab.node(i).call("QLEN", "dq") for i in range(3)] == [0, 0, 0]
            time.sleep(0.1)  # a sampling period of the invariant, not a wait for an event
        back = eventually(
            lambda: n0.call("GETJOB", "TIMEOUT", 100, "WITHCOUNTERS", "FROM", "dq"),
            "the job to come back after the delay",
            timeout=10,
        )
        assert time.monotonic() - nacked >= 4.0
        [entry] = back
        assert entry[1] == job_id.encode()
        counters = dict(zip(entry[3::2], entry[4::2], strict=True))
        assert counters == {b"nacks": 1, b"additional-deliveries": 0}


def test_the_sdk_nacks_with_a_delay(lab3: Lab) -> None:
    with Client(f"127.0.0.1:{lab3.node(0).bus_port}", discover=False) as c:
        job_id = c.add_job("sdk-nack-delay", "x", replicate=3, retry_s=1)
        [job] = c.get_jobs(["sdk-nack-delay"], timeout_s=5)
        assert job.id == job_id
        assert c.nack(job_id, delay_s=60) == 1
        shown = c.show(job_id)
        assert shown is not None and shown["nacks"] == 1
        # Held back for the delay: its next requeue is a minute away, not RETRY's second.
        assert shown["next_requeue_within_ms"] is not None
        assert shown["next_requeue_within_ms"] > 50_000
        assert c.get_jobs(["sdk-nack-delay"], nohang=True) == []
        c.ack(job_id)
