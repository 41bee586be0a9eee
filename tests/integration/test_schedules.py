"""Schedules the cluster keeps (issue 25), on real node processes over real TCP.

- a schedule added on one node reaches every node, fires one job per tick, survives a
  kill -9 of every node (AOF), and SHOW of a tick's job lists its key;
- the nemesis run: 3 nodes, a schedule every second for 60 s while nodes are killed with
  SIGKILL and restarted one at a time (a majority always up): every tick of the window got
  exactly one job, read off the jobs' keys.
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespError  # noqa: E402

KEY_PREFIX = "schedule:"


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _pairs(reply: Any) -> dict[str, Any]:
    assert isinstance(reply, list), reply
    return {_text(k): _text(v) for k, v in zip(reply[::2], reply[1::2], strict=True)}


def _drain(lab: Lab, queue: str, seconds: float) -> dict[int, set[str]]:
    """Take every job of ``queue`` out of every live node for ``seconds`` (copies of jobs whose
    queueing node died are requeued by their RETRY meanwhile), acking each: tick -> the ids
    delivered for it, read from each job's idempotency key (SHOW)."""
    seen: dict[int, set[str]] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got_any = False
        for node in lab.nodes:
            try:
                jobs = node.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", queue)
            except (OSError, RespError):
                continue
            for _, job_id, _body in jobs or []:
                got_any = True
                shown = _pairs(node.call("SHOW", job_id))
                key = str(shown["idempotency-key"])
                assert key.startswith(f"{KEY_PREFIX}"), key
                seen.setdefault(int(key.rsplit(":", 1)[1]), set()).add(_text(job_id))
                node.call("ACKJOB", job_id)
        if not got_any:
            time.sleep(0.1)  # nothing queued right now: requeues come by RETRY
    return seen


@pytest.mark.timeout(120)
def test_a_schedule_reaches_every_node_fires_once_per_tick_and_survives_kill_9(
    tmp_path: Path,
) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=3000) as lab:
        a, b, c = lab.nodes
        assert a.call("SCHEDULE", "ADD", "beat", "@every 1s", "ticks", "hello",
                      "REPLICATE", 2, "RETRY", 2) == "OK"  # fmt: skip
        for node in (b, c):
            eventually(
                lambda n=node: n.call("SCHEDULE", "LIST") == [b"beat"], "the schedule spreads"
            )
        with pytest.raises(RespError, match="invalid cron expression"):
            b.call("SCHEDULE", "ADD", "bad", "61 * * * *", "q", "x")
        with pytest.raises(RespError, match="unknown time zone"):
            b.call("SCHEDULE", "ADD", "bad", "@hourly", "q", "x", "TZ", "Nowhere/Zone")
        assert c.call("SCHEDULE", "LIST") == [b"beat"]  # nothing stored for either
        shown = _pairs(c.call("SCHEDULE", "SHOW", "beat"))
        assert (shown["spec"], shown["queue"], shown["tz"], shown["paused"]) == (
            "@every 1s", "ticks", "UTC", 0,
        )  # fmt: skip
        first = eventually(
            lambda: _pairs(b.call("SCHEDULE", "SHOW", "beat"))["last-tick"], "a first tick", 10
        )
        # Every node down at once, then back on its AOF: the schedule is still there, and it
        # fires on from where it was (never a tick twice: the key vote, and the last tick).
        for i in range(3):
            lab.kill9(i)
        for i in range(3):
            lab.restart(i)
        assert all(n.call("SCHEDULE", "LIST") == [b"beat"] for n in lab.nodes)
        eventually(
            lambda: _pairs(a.call("SCHEDULE", "SHOW", "beat"))["last-tick"] >= first + 4,
            "ticks after the restart",
            20,
        )
        assert a.call("SCHEDULE", "PAUSE", "beat") == 1
        assert c.call("SCHEDULE", "DEL", "nope") == 0
        ticks = _drain(lab, "ticks", 4.0)
        assert ticks and all(len(ids) == 1 for ids in ticks.values()), ticks
        # Every tick from the first to the last: the outage was shorter than MISFIRE_MS (5 s),
        # so the ticks it spanned were fired late, once each.
        assert sorted(ticks) == list(range(min(ticks), max(ticks) + 1))
        assert min(ticks) <= first and max(ticks) >= first + 4


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_nemesis_every_tick_of_60_s_has_exactly_one_job(tmp_path: Path) -> None:
    """3 nodes, `@every 1s`, 60 s of kill -9 and restart, one node at a time."""
    rng = random.Random(25)
    with Lab(3, tmp_path / "lab", node_timeout_ms=3000) as lab:
        assert lab.nodes[0].call(
            "SCHEDULE", "ADD", "beat", "@every 1s", "ticks", "x",
            "REPLICATE", 2, "RETRY", 2, "MISFIRE", "CATCHUP", 100,
        ) == "OK"  # fmt: skip
        for node in lab.nodes:
            eventually(
                lambda n=node: n.call("SCHEDULE", "LIST") == [b"beat"], "the schedule spreads"
            )
        start = int(time.time()) + 1
        end = start + 60
        kills = 0
        while time.time() < end - 3:
            time.sleep(rng.uniform(1.0, 4.0))
            victim = rng.randrange(3)
            lab.kill9(victim)
            kills += 1
            time.sleep(rng.uniform(0.2, 2.5))
            lab.restart(victim)
        while time.time() < end + 2:  # the window's last ticks, at most GRACE_MS late
            time.sleep(0.2)
        assert lab.nodes[0].call("SCHEDULE", "PAUSE", "beat") == 1
        ticks = _drain(lab, "ticks", 8.0)
        window = set(range(start, end + 1))
        twice = {t: ids for t, ids in ticks.items() if len(ids) > 1}
        missing = sorted(window - set(ticks))
        assert not twice, f"ticks with two jobs: {twice}"
        assert not missing, f"{len(missing)} ticks of {len(window)} without a job: {missing}"
        assert kills >= 10


@pytest.mark.timeout(120)
def test_a_node_that_joins_later_learns_every_schedule(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=3000) as lab:
        a, _, c = lab.nodes
        assert a.call("SCHEDULE", "ADD", "beat", "@every 1s", "ticks", "x", "REPLICATE", 2) == "OK"
        assert a.call("SCHEDULE", "ADD", "nightly", "0 3 * * *", "reports", "y") == "OK"
        assert a.call("SCHEDULE", "DEL", "nightly") == 1
        assert a.call("SCHEDULE", "ADD", "hourly", "@hourly", "reports", "z") == "OK"
        eventually(
            lambda: _pairs(a.call("SCHEDULE", "SHOW", "beat"))["last-tick"], "a first tick", 10
        )
        # Node 2 is replaced by a new, empty node (new data dir, new id) that meets node 0.
        old_id = c.id
        lab.kill9(2)
        shutil.rmtree(c.data_dir)
        c.data_dir.mkdir()  # as a new volume would be: empty
        lab.restart(2)
        assert c.id != old_id and c.call("SCHEDULE", "LIST") == []
        assert c.call("CLUSTER", "MEET", a.host, a.port) == "OK"
        eventually(
            lambda: c.call("SCHEDULE", "LIST") == [b"beat", b"hourly"], "the joiner learns them"
        )
        shown = _pairs(c.call("SCHEDULE", "SHOW", "beat"))
        assert shown["last-tick"] > 0 and str(shown["last-job-id"]).startswith("D-")
