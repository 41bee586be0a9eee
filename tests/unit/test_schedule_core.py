"""Schedules the cluster keeps (issue 25): the spec, the core on a fake clock, the RESP command.

The core runs in disq.testing.mesh's in-memory cluster (real NodeCores, instant delivery, a
clock the test moves); the RESP command through a real RespDoor over a real core.
"""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime
from typing import Any

import hiredis
import pytest
from schedule_mesh import scheduler as _sched
from schedule_mesh import tick_jobs as _tick_jobs
from test_disque_commands import FakeNode, cmd, make_door

from disq.core import events as ev
from disq.core import ids
from disq.core.beanstalk.core import BeanstalkCore
from disq.core.disque.core import DisqueCore
from disq.core.disque.job import QUEUED
from disq.core.messages import MISFIRE_CATCHUP, MISFIRE_SKIP, KeyVote, KeyVotes, ScheduleDef
from disq.core.node_core import NodeCore
from disq.core.schedule.scheduler import (
    GRACE_MS,
    MISFIRE_MS,
    MISFIRE_WALK_TICKS,
    ScheduleError,
    Scheduler,
    tick_key,
)
from disq.core.schedule.spec import Spec, SpecError
from disq.doors.resp_door import RespDoor
from disq.persistence.framing import iter_frames
from disq.testing.mesh import Mesh


def _utc(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp())  # type: ignore[misc]


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


# ------------------------------------------------------------------ the spec
@pytest.mark.parametrize(
    ("spec", "zone", "after", "expected"),
    [
        ("*/15 * * * *", "UTC", (2026, 1, 1, 0, 7), ["00:15", "00:30", "00:45"]),
        ("@hourly", "UTC", (2026, 1, 1, 0, 7), ["01:00", "02:00", "03:00"]),
        ("@daily", "Asia/Tokyo", (2026, 1, 1, 0, 0), ["15:00", "15:00", "15:00"]),
        ("*/20 * * * * *", "UTC", (2026, 1, 1, 0, 0), ["00:00:20", "00:00:40", "00:01:00"]),
        ("@every 90s", "UTC", (2026, 1, 1, 0, 0), ["00:01:30", "00:03:00", "00:04:30"]),
        ("@every 2m", "Europe/Berlin", (2026, 1, 1, 0, 1), ["00:02", "00:04", "00:06"]),
    ],
)
def test_spec_ticks(spec: str, zone: str, after: tuple[int, ...], expected: list[str]) -> None:
    got = [_iso(t) for t in Spec(spec, zone).upcoming(_utc(*after), 3)]
    # UTC times of day, HH:MM or HH:MM:SS as given.
    assert [g[11 : 11 + len(e)] for g, e in zip(got, expected, strict=True)] == expected


@pytest.mark.parametrize(
    ("spec", "zone", "message"),
    [
        ("61 * * * *", "UTC", "invalid cron expression '61 * * * *'"),
        ("* * *", "UTC", "a cron expression has 5 fields, or 6 with seconds first"),
        ("@fortnightly", "UTC", "unknown schedule shortcut '@fortnightly'"),
        ("@every 0s", "UTC", "@every needs an interval of 1 s to 366 days"),
        ("30 2 31 2 *", "UTC", "never fires"),
        ("@hourly", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("@hourly", "../etc/passwd", "invalid time zone"),
        ("", "UTC", "invalid schedule spec"),
        ("R * * * *", "UTC", "cron field 'R' of 'R * * * *' is random"),
        ("0 r/5 * * *", "UTC", "cron field 'r/5'"),
        ("H * * * *", "UTC", "cron field 'H'"),
        ("0 0 H(1-28) * *", "UTC", "cron field 'H"),
        ("*/5 * * * * R", "UTC", "cron field 'R'"),
    ],
)
def test_spec_errors_name_what_is_wrong(spec: str, zone: str, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("*", r"\*").replace("(", r"\(")):
        Spec(spec, zone)


@pytest.mark.parametrize(
    "spec", ["0 0 * mar-apr thu", "0 0 * * sun,sat", "0 0 L * *", "0 0 * * 5#3", "0 0 15W * *"]
)
def test_fixed_specs_with_names_and_special_days_are_kept(spec: str) -> None:
    """Names hold R and H (MAR, THU) and L, W, # are fixed days: none of them is refused."""
    a, b = Spec(spec), Spec(spec)
    assert a.next_after(0) == b.next_after(0) is not None


def test_an_unstable_spec_is_refused_by_schedule_add_and_nothing_is_stored() -> None:
    mesh = _mesh(3, _utc(2026, 5, 1, 12, 0, 0))
    with pytest.raises(ScheduleError, match="random"):
        _sched(mesh).add(mesh.now, ScheduleDef("r", "R * * * *", "UTC", "q", b"", repl=1))
    assert _sched(mesh).names() == []


# ------------------------------------------------------------------ the core, fake clock
def _mesh(n: int, at_s: int) -> Mesh:
    mesh = Mesh(n, now_ms=at_s * 1000)
    for node in mesh.nodes:
        node.set_persist(True)
    return mesh


def test_dst_a_schedule_at_0230_in_berlin_fires_as_cron_does() -> None:
    """Spring forward (29 March 2026, 02:00 CET -> 03:00 CEST): 02:30 does not exist, the job
    runs once, at 03:00 CEST. Fall back (25 October 2026, 03:00 CEST -> 02:00 CET): 02:30
    happens twice, the job runs once, at the first. Vixie cron's rules."""
    for start, days in (((2026, 3, 27, 12, 0), 4), ((2026, 10, 23, 12, 0), 4)):
        mesh = _mesh(1, _utc(*start))
        d = ScheduleDef("nightly", "30 2 * * *", "Europe/Berlin", "q", b"", ttl_s=30 * 86400)
        _sched(mesh).add(mesh.now, d)
        mesh.advance(days * 86_400_000, step=60_000)
        fired = sorted(_tick_jobs(mesh, "nightly"))
        if start[1] == 3:
            assert [_iso(t) for t in fired] == [
                "2026-03-28 01:30:00",  # 02:30 CET
                "2026-03-29 01:00:00",  # the gap: 03:00 CEST, once
                "2026-03-30 00:30:00",  # 02:30 CEST
                "2026-03-31 00:30:00",
            ]
        else:
            assert [_iso(t) for t in fired] == [
                "2026-10-24 00:30:00",  # 02:30 CEST
                "2026-10-25 00:30:00",  # 02:30 CEST, the first of two: once
                "2026-10-26 01:30:00",  # 02:30 CET
                "2026-10-27 01:30:00",
            ]


def test_every_hour_field_wildcard_keeps_its_pace_through_the_repeated_hour() -> None:
    mesh = _mesh(1, _utc(2026, 10, 24, 23, 50))
    _sched(mesh).add(mesh.now, ScheduleDef("half", "*/30 * * * *", "Europe/Berlin", "q", b""))
    mesh.advance(3 * 3_600_000 + 600_000, step=30_000)
    assert [_iso(t)[11:16] for t in sorted(_tick_jobs(mesh, "half"))] == [
        "00:00",  # 02:00 CEST
        "00:30",  # 02:30 CEST
        "01:00",  # 02:00 CET: the repeated hour fires again
        "01:30",
        "02:00",
        "02:30",
        "03:00",
    ]


def test_three_nodes_one_job_per_tick_and_every_node_knows_the_schedule() -> None:
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(3, t0)
    _sched(mesh, 1).add(mesh.now, ScheduleDef("sync", "@every 1s", "UTC", "q", b"go", repl=2))
    mesh.pump()
    assert all(_sched(mesh, i).names() == ["sync"] for i in range(3))
    mesh.advance(10_500)
    jobs = _tick_jobs(mesh, "sync")
    assert sorted(jobs) == list(range(t0 + 1, t0 + 11))
    assert all(len(ids) == 1 for ids in jobs.values())
    # Each tick's job is one job with two copies, queued once; SHOW lists its key.
    tick, (job_id,) = next(iter(sorted(jobs.items())))
    holders = [i for i in range(3) if job_id in mesh.disque(i).jobs]
    assert len(holders) == 2
    show = dict(mesh.disque(holders[0]).inspect.show(mesh.now, job_id) or [])
    assert show["idempotency-key"] == tick_key("sync", tick) == f"schedule:sync:{tick}"
    fired = [_sched(mesh, i).stats["ticks_fired"] for i in range(3)]
    assert sum(fired) == 10 and fired.count(10) == 1  # one owner fired them all


def test_the_owner_dies_and_the_others_fire_after_the_grace_period() -> None:
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(3, t0)
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", repl=2))
    mesh.advance(2_500)
    owner = _sched(mesh).owner("s")
    k = mesh.ids.index(owner)
    mesh.cut = {owner}
    for nid in mesh.ids:
        if nid != owner:
            mesh.views[nid].down = {owner}
    first_dead = t0 + 3
    mesh.advance(5_000)
    survivors = [i for i in range(3) if i != k]
    jobs: dict[int, set[str]] = {}
    for i in survivors:
        for j in mesh.disque(i).jobs.values():
            jobs.setdefault(int(j.idem_key.rsplit(":", 1)[1]), set()).add(j.id)
    assert all(t in jobs for t in range(first_dead, t0 + 7)), sorted(jobs)
    assert all(len(ids) == 1 for t, ids in jobs.items() if t >= first_dead)
    # The cut-off owner still tries its tick: its job waits for copies it cannot get, never
    # queued (a keyed job is queued only once its key's vote, which needs a majority, is won).
    late = [j for j in mesh.disque(k).jobs.values() if int(j.idem_key.rsplit(":", 1)[1]) > t0 + 2]
    assert late and all(j.state != QUEUED for j in late)
    # A new owner among the survivors fires at the tick itself again (not grace late).
    assert len({_sched(mesh, i).owner("s") for i in survivors}) == 1
    assert sum(_sched(mesh, i).stats["ticks_fired"] for i in survivors) >= 4


def test_a_tick_is_not_fired_by_non_owners_before_the_grace_period() -> None:
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(3, t0)
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 10s", "UTC", "q", b"", repl=2))
    mesh.pump()
    owner = _sched(mesh).owner("s")
    key = tick_key("s", t0 + 10)

    def creators() -> set[str]:
        return {
            ids.node_prefix(j.id)
            for i in range(3)
            for j in mesh.disque(i).jobs.values()
            if j.idem_key == key
        }

    # The owner is silent (its messages lost) but not known dead: the others wait GRACE_MS.
    mesh.cut = {owner}
    mesh.advance(10_000 + GRACE_MS - 20, step=5)
    assert creators() <= {owner[:8]}
    mesh.advance(40, step=5)
    assert creators() - {owner[:8]}


def test_concurrent_updates_converge_on_every_node() -> None:
    mesh = _mesh(3, _utc(2026, 5, 1, 12, 0, 0))
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 5s", "UTC", "q", b"v0"))
    mesh.pump()
    mesh.cut = {mesh.ids[0]}  # node 0 apart: two updates at the same instant
    _sched(mesh, 0).add(mesh.now, ScheduleDef("s", "@every 7s", "UTC", "q", b"v-a"))
    _sched(mesh, 2).add(mesh.now, ScheduleDef("s", "@hourly", "UTC", "q2", b"v-b"))
    _sched(mesh, 1).pause(mesh.now, "s")
    mesh.pump()
    mesh.cut = set()
    for i in range(3):
        mesh.nodes[i].on_link_up(mesh.now, mesh.ids[(i + 1) % 3])
    mesh.advance(100)
    defs = [_sched(mesh, i).get("s") for i in range(3)]
    assert defs[0] == defs[1] == defs[2] and defs[0] is not None
    assert len({_sched(mesh, i).digest() for i in range(3)}) == 1


def test_the_digest_brings_a_node_that_missed_a_change_up_to_date() -> None:
    mesh = _mesh(3, _utc(2026, 5, 1, 12, 0, 0))
    mesh.cut = {mesh.ids[2]}
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@daily", "UTC", "q", b""))
    _sched(mesh).add(mesh.now, ScheduleDef("gone", "@daily", "UTC", "q", b""))
    _sched(mesh).delete(mesh.now, "gone")
    mesh.pump()
    assert _sched(mesh, 2).names() == []
    mesh.cut = set()
    mesh.advance(4_100)  # the digest timer (SYNC_MS): no link event needed
    assert _sched(mesh, 2).names() == ["s"]
    assert _sched(mesh, 2).table["gone"].deleted  # the tombstone came too


def test_a_deleted_schedule_stays_deleted_when_a_stale_node_comes_back() -> None:
    mesh = _mesh(2, _utc(2026, 5, 1, 12, 0, 0))
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", repl=1))
    mesh.pump()
    mesh.cut = {mesh.ids[1]}
    assert _sched(mesh).delete(mesh.now, "s")
    assert not _sched(mesh).delete(mesh.now, "s")  # already gone: :0
    mesh.advance(1_000)
    mesh.cut = set()
    mesh.nodes[1].on_link_up(mesh.now, mesh.ids[0])
    mesh.advance(3_000)
    assert _sched(mesh, 0).names() == _sched(mesh, 1).names() == []


def test_paused_fires_nothing_and_resume_does_not_fire_the_past() -> None:
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(1, t0)
    s = _sched(mesh)
    s.add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b""))
    mesh.advance(2_500)
    assert s.pause(mesh.now, "s")
    assert s.upcoming("s", mesh.now) == []
    mesh.advance(10_000)
    assert s.resume(mesh.now, "s")
    mesh.advance(2_000)
    assert sorted(_tick_jobs(mesh, "s")) == [t0 + 1, t0 + 2, t0 + 13, t0 + 14]
    assert not s.pause(mesh.now, "nope") and not s.resume(mesh.now, "nope")


@pytest.mark.parametrize("spec", ["@every 1s", "* * * * * *"])  # arithmetic, and walked
@pytest.mark.parametrize(
    ("misfire", "catchup", "kept"),
    [(MISFIRE_SKIP, 0, []), (MISFIRE_CATCHUP, 1, [25]), (MISFIRE_CATCHUP, 3, [23, 24, 25])],
)
def test_misfire_policy_after_the_cluster_was_down(
    misfire: int, catchup: int, kept: list[int], spec: str
) -> None:
    """The node is down from t0+2.5 s to t0+30.5 s (its clock jumps: no tick ran). Ticks 3-25
    are more than MISFIRE_MS overdue, misfires: SKIP drops them, CATCHUP n fires the last n.
    Ticks 26-30 are late but within MISFIRE_MS: they fire whatever the policy."""
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(1, t0)
    s = _sched(mesh)
    d = ScheduleDef("s", spec, "UTC", "q", b"", misfire=misfire, catchup=catchup)
    s.add(mesh.now, d)
    mesh.advance(2_500)
    mesh.now += 28_000
    mesh.advance(1_000)
    assert MISFIRE_MS == 5_000
    fired = sorted(_tick_jobs(mesh, "s"))
    assert fired == [t0 + x for x in [1, 2, *kept, 26, 27, 28, 29, 30, 31]]
    assert s.stats["ticks_skipped"] == 23 - len(kept)
    assert s.stats["ticks_late"] == len(kept) + 3  # 26-28: more than LATE_MS (2 s) late


def test_a_long_cron_misfire_is_placed_a_bounded_chunk_per_look() -> None:
    """A per-second cron schedule with CATCHUP 1000 on a node back after an hour down: its
    3,595 missed ticks are walked at most MISFIRE_WALK_TICKS per look (the loop's IO runs
    between looks), then the oldest 2,595 are skipped in one event and the last 1,000 fire."""
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = Mesh(1, now_ms=t0 * 1000)
    node = mesh.nodes[0]
    s = _sched(mesh)
    d = ScheduleDef("s", "* * * * * *", "UTC", "q", b"", catchup=1000, ttl_s=7200, repl=1)
    s.add(mesh.now, d)
    events: list[tuple[int, str | int, int]] = []

    def look() -> None:
        node.tick(mesh.now)
        rd = node.ready(mesh.now)
        for buf in rd.events:
            events.extend(zip(buf.kinds, buf.job_ids, buf.attempts, strict=True))
        node.advance()

    mesh.now += 500
    look()
    mesh.now += 3600 * 1000  # down for an hour: the clock jumps, no tick ran
    walked: list[int] = []
    while True:
        look()
        walk = s.runs["s"].walk
        if walk is None:
            break
        walked.append(walk.total)
        assert node.next_deadline_ms() <= mesh.now + 1  # the next chunk: at once, after IO
        mesh.now += 1
    steps = [b - a for a, b in zip([0, *walked], walked, strict=False)]
    assert steps and max(steps) <= MISFIRE_WALK_TICKS
    assert len(walked) == (3595 + MISFIRE_WALK_TICKS - 1) // MISFIRE_WALK_TICKS - 1
    skipped = [(j, a) for k, j, a in events if k == ev.TICK_SKIPPED]
    assert skipped == [(tick_key("s", t0 + 2595), 2595)]  # ticks 1..2595
    assert s.runs["s"].floor_s == t0 + 2595
    for _ in range(400):  # the 1,000 kept ticks fire, late, without another walk
        mesh.now += 10
        look()
        assert s.runs["s"].walk is None
    fired = sorted(_tick_jobs(mesh, "s"))
    assert fired[:1000] == [t0 + x for x in range(2596, 3596)]


def test_misfire_events_say_which_ticks_were_late_and_skipped() -> None:
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = Mesh(1, now_ms=t0 * 1000)
    node = mesh.nodes[0]
    s = _sched(mesh)
    s.add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", catchup=2))
    events: list[tuple[int, str | int, int, int]] = []

    def run(ms: int) -> None:
        end = mesh.now + ms
        while mesh.now < end:
            mesh.now += 100
            node.tick(mesh.now)
            rd = node.ready(mesh.now)
            for buf in rd.events:
                events.extend(zip(buf.kinds, buf.job_ids, buf.attempts, buf.sizes, strict=True))
            node.advance()

    run(1_500)
    mesh.now += MISFIRE_MS + 5_000  # down until t0+11.5 s: ticks 2-6 are misfires
    run(500)
    late = [size for k, _, _, size in events if k == ev.TICK_LATE]
    skipped = [(j, a) for k, j, a, _ in events if k == ev.TICK_SKIPPED]
    fired = [size for k, _, _, size in events if k == ev.TICK_FIRED]
    assert skipped == [(tick_key("s", t0 + 4), 3)]  # ticks 2-4 dropped, 5-6 caught up
    assert fired == [t0 + x for x in (1, 5, 6, 7, 8, 9, 10, 11, 12)]
    assert late == [t0 + x for x in (5, 6, 7, 8, 9)]  # more than 2 s after their time


def test_schedules_and_last_ticks_survive_a_restart_and_a_rewrite() -> None:
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(1, t0)
    s = _sched(mesh)
    s.add(mesh.now, ScheduleDef("a", "@every 1s", "UTC", "q", b"A", ttl_s=60, repl=1))
    s.add(mesh.now, ScheduleDef("b", "0 3 * * *", "Europe/Berlin", "q", b"B"))
    s.add(mesh.now, ScheduleDef("c", "@hourly", "UTC", "q", b"C"))
    s.delete(mesh.now, "c")
    s.pause(mesh.now, "b")
    mesh.advance(3_500)
    log = b"".join(mesh.aof[mesh.ids[0]])
    rewritten = b"".join(mesh.disque(0).aof.snapshot_records(mesh.now) + s.snapshot_records())
    for raw in (log, rewritten):
        fresh = Mesh(1, now_ms=mesh.now)
        core = fresh.nodes[0]
        recs = [(rtype, bytes(payload)) for rtype, payload in iter_frames(raw)]
        core.restore(fresh.now, recs)
        r = core.scheduler
        assert r is not None
        assert r.names() == ["a", "b"] and r.get("b").paused  # type: ignore[union-attr]
        assert r.get("a") == s.get("a") and r.table["c"].deleted
        assert r.last["a"] == s.last["a"] and r.last["a"][0] == t0 + 3
        fresh.advance(1_000)  # it goes on from the next tick, not again from the first
        assert sorted(t for t in _tick_jobs(fresh, "a") if t > t0 + 3) == [t0 + 4]


def test_add_checks_and_stores_nothing_on_bad_input() -> None:
    mesh = _mesh(1, _utc(2026, 5, 1, 12, 0, 0))
    s = _sched(mesh)
    bad = [
        (ScheduleDef("x" * 201, "@hourly", "UTC", "q", b""), "name must be 1 to 200 bytes"),
        (ScheduleDef("", "@hourly", "UTC", "q", b""), "name must be 1 to 200 bytes"),
        (ScheduleDef("n", "@hourly", "UTC", "q", b"x" * (1 << 20 + 1)), "body is longer"),
        (ScheduleDef("n", "@hourly", "UTC", "q", b"", repl=3), "REPLICATE 3 is more than"),
        (ScheduleDef("n", "@hourly", "UTC", "q", b"", retry_s=0), "RETRY set to 0"),
        (ScheduleDef("n", "* * * * * * *", "UTC", "q", b""), "has 7"),
        (ScheduleDef("n", "@hourly", "Nowhere/Zone", "q", b""), "unknown time zone"),
    ]
    for d, message in bad:
        with pytest.raises(Exception, match=message):
            s.add(mesh.now, d)
    assert s.names() == [] and not s.table and not s.aof_out


# ------------------------------------------------------------------ SCHEDULE over RESP
def _reply(raw: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


class _Node(FakeNode):
    def __init__(self) -> None:
        super().__init__()
        self.scheduler = Scheduler(self.view, self.disque, itertools.count(1000).__next__)


@pytest.fixture
def sdoor() -> tuple[RespDoor, _Node]:
    node = _Node()
    return make_door(node, itertools.count(1)), node  # type: ignore[arg-type]


def test_schedule_add_list_show_del(sdoor: tuple[RespDoor, _Node]) -> None:
    door, node = sdoor
    add = cmd(
        "SCHEDULE", "ADD", "nightly", "30 2 * * *", "reports", "run", "TZ", "Europe/Berlin",
        "REPLICATE", 1, "RETRY", 60, "TTL", 3600, "ASYNC", "MISFIRE", "CATCHUP", 3,
    )  # fmt: skip
    assert door.feed(add) == b"+OK\r\n"
    assert door.feed(cmd("SCHEDULE", "ADD", "every", "@every 5s", "q", "b")) == b"+OK\r\n"
    assert door.feed(cmd("SCHEDULE", "LIST")) == b"*2\r\n$5\r\nevery\r\n$7\r\nnightly\r\n"
    shown = _reply(door.feed(cmd("SCHEDULE", "SHOW", "nightly")))
    pairs = dict(zip(shown[::2], shown[1::2], strict=True))
    assert pairs[b"spec"] == b"30 2 * * *" and pairs[b"tz"] == b"Europe/Berlin"
    assert (pairs[b"queue"], pairs[b"body"], pairs[b"paused"]) == (b"reports", b"run", 0)
    assert (pairs[b"replicate"], pairs[b"retry"], pairs[b"ttl"]) == (1, 60, 3600)
    assert pairs[b"misfire"] == b"catchup 3" and pairs[b"async"] == 1
    nxt = [int(x) for x in pairs[b"next"]]
    assert len(nxt) == 5 and all(_iso(t)[11:] in ("00:30:00", "01:30:00") for t in nxt)
    assert pairs[b"last-job-id"] == b""
    # Replaced by name: +OK, and SHOW tells the new spec.
    assert door.feed(cmd("SCHEDULE", "ADD", "nightly", "@daily", "reports", "run")) == b"+OK\r\n"
    shown = _reply(door.feed(cmd("SCHEDULE", "SHOW", "nightly")))
    assert shown[shown.index(b"spec") + 1] == b"@daily"
    assert door.feed(cmd("SCHEDULE", "PAUSE", "nightly")) == b":1\r\n"
    assert door.feed(cmd("SCHEDULE", "RESUME", "nightly")) == b":1\r\n"
    assert door.feed(cmd("SCHEDULE", "DEL", "nightly")) == b":1\r\n"
    for sub in ("DEL", "PAUSE", "RESUME"):
        assert door.feed(cmd("SCHEDULE", sub, "nightly")) == b":0\r\n"
    assert door.feed(cmd("SCHEDULE", "SHOW", "nightly")) == b"$-1\r\n"
    assert door.feed(cmd("SCHEDULE", "LIST")) == b"*1\r\n$5\r\nevery\r\n"
    assert node.scheduler.names() == ["every"]


def test_schedule_show_is_a_map_in_resp3(sdoor: tuple[RespDoor, _Node]) -> None:
    door, _ = sdoor
    door.feed(cmd("HELLO", 3))
    door.feed(cmd("SCHEDULE", "ADD", "s", "@hourly", "q", "b"))
    r = door.feed(cmd("SCHEDULE", "SHOW", "s"))
    assert r.startswith(b"%")
    assert door.feed(cmd("SCHEDULE", "SHOW", "nope")) == b"_\r\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("ADD", "s", "61 * * * *", "q", "b"), "ERR invalid cron expression '61 * * * *'"),
        (("ADD", "s", "@hourly", "q", "b", "TZ", "Nowhere/X"), "ERR unknown time zone"),
        (("ADD", "s", "@hourly", "q", "b", "TZ"), "ERR TZ needs a zone name"),
        (("ADD", "s", "@hourly", "q", "b", "PRIORITY", "3"), "ERR unknown SCHEDULE ADD option"),
        (("ADD", "s", "@hourly", "q", "b", "REPLICATE", "x"), "ERR REPLICATE value 'x' is not"),
        (("ADD", "s", "@hourly", "q", "b", "REPLICATE", "0"), "ERR REPLICATE value '0' is not"),
        (("ADD", "s", "@hourly", "q", "b", "TTL", "0"), "ERR TTL value '0' is not"),
        (("ADD", "s", "@hourly", "q", "b", "RETRY", "-1"), "ERR RETRY value '-1' is not"),
        (("ADD", "s", "@hourly", "q", "b", "MISFIRE", "LATER"), "ERR MISFIRE takes SKIP"),
        (("ADD", "s", "@hourly", "q", "b", "MISFIRE", "CATCHUP"), "ERR MISFIRE CATCHUP needs"),
        (("ADD", "s", "@hourly", "q", "b", "MISFIRE", "CATCHUP", "5000"), "ERR CATCHUP takes"),
        (("ADD", "s", "@hourly", "q"), "ERR wrong number of arguments for 'schedule add'"),
        (("ADD", "x" * 201, "@hourly", "q", "b"), "ERR schedule name must be 1 to 200 bytes"),
        (("DEL",), "ERR wrong number of arguments for 'schedule del'"),
        (("LIST", "x"), "ERR wrong number of arguments for 'schedule list'"),
        (("FIRE", "s"), "ERR unknown SCHEDULE subcommand 'FIRE'"),
    ],
)
def test_schedule_bad_input_is_a_clear_error_and_stores_nothing(
    sdoor: tuple[RespDoor, _Node], args: tuple[str, ...], error: str
) -> None:
    door, node = sdoor
    r = door.feed(cmd("SCHEDULE", *args))
    assert r.startswith(b"-" + error.encode()), r
    assert node.scheduler.names() == []
    assert door.feed(cmd("PING")) == b"+PONG\r\n"  # the connection goes on


def test_schedule_needs_an_argument() -> None:
    door = make_door(_Node(), itertools.count(1))  # type: ignore[arg-type]
    assert door.feed(cmd("SCHEDULE")).startswith(b"-ERR wrong number of arguments")


def test_node_core_routes_the_scheduler_replies_and_nothing_else() -> None:
    mesh = _mesh(3, _utc(2026, 5, 1, 12, 0, 0))
    node: NodeCore = mesh.nodes[0]
    assert node.scheduler is not None and node.scheduler.tokens == {}
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", repl=3))
    mesh.advance(1_500)
    # Its adds' answers went to the scheduler, not to the IO layer's router.
    assert all(not replies for replies in mesh.replies.values())


def test_a_restarted_node_waits_for_a_peer_table_without_spinning() -> None:
    """Restored from its AOF, a node of a cluster fires nothing until a peer's table came (or
    1.5 s): its deadline meanwhile is in the future, not a busy loop on overdue ticks."""
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(3, t0)
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", repl=2))
    mesh.advance(3_000)
    records = [(rtype, bytes(p)) for rtype, p in iter_frames(b"".join(mesh.aof[mesh.ids[1]]))]
    later = mesh.now + 5_000
    restarted = NodeCore(BeanstalkCore(persist=True))
    view = mesh.views[mesh.ids[1]]
    restarted.attach_cluster(DisqueCore(view, random.Random(3), later), None)
    restarted.restore(mesh.now + 5_000, records)
    sched = restarted.scheduler
    assert sched is not None and sched.names() == ["s"] and not sched.synced
    assert restarted.next_deadline_ms() > mesh.now + 5_000
    # A peer's whole table (what a link coming up sends) ends the wait.
    _sched(mesh, 0).on_link_up(mesh.now, mesh.ids[1])
    msgs = [m for dest, m in _sched(mesh, 0).outbox if dest == mesh.ids[1]]
    restarted.on_peer_messages(mesh.now + 5_000, mesh.ids[0], msgs)
    assert sched.synced and sched.last["s"] == _sched(mesh, 0).last["s"]


def test_a_slow_tick_does_not_hold_the_next_ones_back() -> None:
    """Tick 3's vote messages are lost for 3.5 s: ticks 4-6 are fired and bound meanwhile
    (up to PIPELINE_MAX in flight), but the last tick stays at 2 until 3 is bound, so no node
    takes tick 3 as done before it is."""
    t0 = _utc(2026, 5, 1, 12, 0, 0)
    mesh = _mesh(3, t0)
    s = _sched(mesh)
    s.add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", repl=2))
    slow = tick_key("s", t0 + 3)
    lossy = True

    def drop(_src: int, _dst: int, msg: object) -> bool:
        if not lossy:
            return False
        if isinstance(msg, KeyVotes):
            return slow in msg.key
        return isinstance(msg, KeyVote) and msg.key == slow

    mesh.drop = drop
    mesh.advance(6_600)
    owner = mesh.ids.index(s.owner("s"))
    bound = sorted(_tick_jobs(mesh, "s"))
    assert {t0 + 4, t0 + 5, t0 + 6} <= set(bound)
    assert all(_sched(mesh, i).last["s"][0] == t0 + 2 for i in range(3))
    assert set(_sched(mesh, owner).runs["s"].ahead) >= {t0 + 4, t0 + 5, t0 + 6}
    lossy = False
    mesh.advance(4_000)
    assert all(_sched(mesh, i).last["s"][0] >= t0 + 9 for i in range(3))
    jobs = _tick_jobs(mesh, "s")
    assert all(len(ids) == 1 for ids in jobs.values())
    assert set(range(t0 + 1, t0 + 10)) <= set(jobs)


def test_schedule_bodies_count_towards_maxmemory_and_an_add_past_it_is_oom() -> None:
    """Definitions live on every node: their bodies are memory as jobs are. An add that would
    take the node past maxmemory is refused with ADDJOB's OOM, and nothing is stored; the
    table's bytes move the node's warning levels too."""
    mesh = _mesh(1, _utc(2026, 5, 1, 12, 0, 0))
    s = _sched(mesh)
    disque = mesh.disque(0)
    disque.memory.max_bytes = 10 << 20
    body = b"x" * (1 << 20)
    added = 0
    with pytest.raises(ScheduleError) as refused:
        for k in range(20):
            s.add(mesh.now, ScheduleDef(f"s{k}", "@daily", "UTC", "q", body))
            added += 1
    assert refused.value.code == "OOM" and "maxmemory" in refused.value.message
    assert added == 9  # 9 x (1 MiB + overhead) fit in 10 MiB, the 10th would not
    assert sorted(s.names()) == sorted(f"s{k}" for k in range(9))
    assert s.table_bytes > 9 << 20
    mesh.advance(100)
    assert disque.memory.warning >= 1  # over 75% of maxmemory: schedules alone
    # Replacing one with a smaller body frees room; a delete gives all of it back.
    s.add(mesh.now, ScheduleDef("s0", "@daily", "UTC", "q", b"small"))
    s.delete(mesh.now, "s1")
    s.add(mesh.now, ScheduleDef("s9", "@daily", "UTC", "q", body))
    assert "s9" in s.names()


def test_schedule_records_round_trip_and_refuse_garbage() -> None:
    from disq.persistence.schedule_records import (
        ScheduleRecordError,
        decode_def,
        decode_tick,
        encode_def,
        encode_tick,
    )

    defs = [
        ScheduleDef("n", "@every 5s", "UTC", "q", b"", version_ms=1, version_node="v" * 40),
        ScheduleDef(
            "r\u00e9",
            "*/5 * * * *",
            "Europe/Paris",
            "q\udcff",  # a queue name that is not UTF-8 survives
            b"\x00body",
            repl=3,
            retry_s=0,
            ttl_s=60,
            async_=True,
            misfire=MISFIRE_SKIP,
            catchup=4,
            paused=True,
            deleted=True,
        ),
    ]
    for d in defs:
        assert decode_def(encode_def(d)) == d
    assert decode_tick(encode_tick("r\u00e9", 1_700_000_000, "D-1")) == (
        "r\u00e9",
        1_700_000_000,
        "D-1",
    )
    with pytest.raises(ScheduleRecordError):
        decode_def(b"\x00" * 5)
    with pytest.raises(ScheduleRecordError, match="length"):
        decode_def(encode_def(defs[0]) + b"x")
    with pytest.raises(ScheduleRecordError, match="length"):
        decode_def(encode_def(defs[1])[:-1])
