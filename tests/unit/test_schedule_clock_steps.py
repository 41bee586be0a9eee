"""Schedules under wall clock steps (issue 43, item 4): the scheduler on a fake clock whose wall
clock a test steps an hour forwards or back (``NodeCore.set_wall_offset``, what the runtime
calls when disq/server/clock.py sees a step), in disq.testing.mesh's in-memory cluster.

The semantics (disq/core/schedule/scheduler.py, "Wall clock steps"; README, "Recurring jobs"):

- a forward step: the ticks it jumped over are misfires whatever their age; CATCHUP n fires
  the newest n of them, SKIP none, then the schedule goes on at the new wall time;
- a step back, ``@every``: the schedule keeps its pace on the node clock, its tick names
  going on from the last one (ahead of the wall clock), none twice, no gap;
- a step back, cron: the repeated wall times already fired and do not fire again; the next
  tick fires at its wall time, not early;
- on three nodes, whichever node steps, one job per tick, no gap, and the peers skip nothing.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from schedule_mesh import scheduler as _sched
from schedule_mesh import tick_jobs as _jobs

from disq.core.messages import MISFIRE_CATCHUP, MISFIRE_SKIP, ScheduleDef
from disq.core.schedule.scheduler import STEP_MS
from disq.testing.mesh import Mesh

HOUR_MS = 3_600_000
T0 = int(datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp())  # Unix s, on a whole second


def _run(mesh: Mesh, name: str, ms: int, fired: dict[int, int], step: int = 10) -> None:
    """Advance ``ms`` on the node clock, noting when (node clock) each tick's job appeared."""
    end = mesh.now + ms
    while mesh.now < end:
        mesh.advance(min(step, end - mesh.now), step=step)
        for tick in _jobs(mesh, name):
            fired.setdefault(tick, mesh.now)


def _step(mesh: Mesh, ms: int, nodes: tuple[int, ...] = (0,)) -> None:
    for i in nodes:
        node = mesh.nodes[i]
        off = _sched(mesh, i).wall_offset_ms
        node.set_wall_offset(off + ms, mesh.now)


def _one_node(spec: str, **kw: int) -> Mesh:
    mesh = Mesh(1, now_ms=T0 * 1000)
    _sched(mesh).add(mesh.now, ScheduleDef("s", spec, "UTC", "q", b"", repl=1, **kw))
    return mesh


# ------------------------------------------------------------------ forwards
@pytest.mark.parametrize("spec", ["@every 1s", "* * * * * *"])  # arithmetic, and walked
@pytest.mark.parametrize(
    ("misfire", "catchup", "kept"),
    [(MISFIRE_SKIP, 0, []), (MISFIRE_CATCHUP, 1, [3602]), (MISFIRE_CATCHUP, 3, [3600, 3601, 3602])],
)
def test_a_forward_step_fires_the_policys_ticks_and_no_burst(
    spec: str, misfire: int, catchup: int, kept: list[int]
) -> None:
    """The wall clock jumps an hour ahead at T0+2.5 s (to T0+3602.5 s): ticks 3-3602 never
    came in real time. They are misfires, all of them (not only those more than MISFIRE_MS
    old): CATCHUP n fires the newest n, SKIP none, one TICK_SKIPPED for the rest; then every
    tick fires at its own time, once."""
    mesh = _one_node(spec, misfire=misfire, catchup=catchup)
    s = _sched(mesh)
    fired: dict[int, int] = {}
    _run(mesh, "s", 2_500, fired)
    stepped_at = mesh.now
    _step(mesh, HOUR_MS)
    _run(mesh, "s", 4_000, fired)
    assert sorted(_jobs(mesh, "s")) == [T0 + x for x in [1, 2, *kept, 3603, 3604, 3605, 3606]]
    assert all(len(ids) == 1 for ids in _jobs(mesh, "s").values())
    # The kept ticks fire at the step (the cron walk takes 8 looks, one per 10 ms step here),
    # the next ones each at its own time: the wall clock reads node clock + 1 h.
    for x in kept:
        assert fired[T0 + x] - stepped_at <= 100
    for x in (3603, 3604, 3605, 3606):
        assert 0 <= fired[T0 + x] + HOUR_MS - (T0 + x) * 1000 <= 20
    assert s.stats["ticks_skipped"] == 3600 - len(kept)
    assert s.stats["ticks_late"] == sum(1 for x in kept if 3602.5 - x > 2)  # over LATE_MS
    assert s.stats["fire_errors"] == 0


def test_a_small_forward_step_makes_ticks_late_not_misfires() -> None:
    """A step under STEP_MS (MISFIRE_MS) is lateness: the ticks it jumped over fire, late."""
    mesh = _one_node("@every 1s", misfire=MISFIRE_SKIP)
    fired: dict[int, int] = {}
    _run(mesh, "s", 2_500, fired)
    _step(mesh, STEP_MS - 1_000)
    _run(mesh, "s", 2_000, fired)
    assert sorted(fired) == [T0 + x for x in range(1, 9)]
    assert _sched(mesh).stats["ticks_skipped"] == 0


# ------------------------------------------------------------------ backwards
def test_a_step_back_every_keeps_its_pace_and_fires_no_tick_twice() -> None:
    """The wall clock goes an hour back at T0+2.5 s: the ticks T0+3... keep coming one a
    second on the node clock (no hour-long gap), their names going on from the last tick;
    none fires twice. The correction (an hour forwards again) changes nothing either."""
    mesh = _one_node("@every 1s", catchup=1)
    s = _sched(mesh)
    fired: dict[int, int] = {}
    _run(mesh, "s", 2_500, fired)
    _step(mesh, -HOUR_MS)
    # SHOW's next ticks go on from the last one, not from the wall clock's second.
    assert s.upcoming("s", mesh.now, 2) == [T0 + 3, T0 + 4]
    _run(mesh, "s", 5_000, fired)
    _step(mesh, HOUR_MS)
    _run(mesh, "s", 3_000, fired)
    assert sorted(fired) == [T0 + x for x in range(1, 11)]
    assert all(len(ids) == 1 for ids in _jobs(mesh, "s").values())
    for x in range(1, 11):  # each at its second on the node clock: no gap, no burst
        assert 0 <= fired[T0 + x] - (T0 + x) * 1000 <= 20
    assert s.stats["ticks_skipped"] == s.stats["ticks_late"] == 0


def test_an_every_schedule_added_just_before_a_step_back_fires_on() -> None:
    """No tick bound yet: the definition's version keeps the pace."""
    mesh = Mesh(1, now_ms=T0 * 1000 + 200)
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", repl=1))
    _step(mesh, -HOUR_MS)
    fired: dict[int, int] = {}
    _run(mesh, "s", 3_000, fired)
    assert sorted(fired) == [T0 + 1, T0 + 2, T0 + 3]


def test_resume_during_a_step_back_does_not_fire_the_past() -> None:
    """Paused at T0+2.5 s, the wall clock an hour back, resumed 5 s later: the ticks of the
    pause are the schedule's past on its own clock (the pace), not fired."""
    mesh = _one_node("@every 1s", catchup=3)
    s = _sched(mesh)
    fired: dict[int, int] = {}
    _run(mesh, "s", 2_500, fired)
    _step(mesh, -HOUR_MS)
    assert s.pause(mesh.now, "s")
    _run(mesh, "s", 5_000, fired)
    assert s.resume(mesh.now, "s")
    _run(mesh, "s", 2_000, fired)
    assert sorted(fired) == [T0 + x for x in (1, 2, 8, 9)]
    assert s.stats["ticks_skipped"] == 0


def test_a_step_back_cron_fires_none_of_its_repeated_ticks_and_goes_on_at_its_wall_time() -> None:
    """A per-second cron schedule, the wall clock 60 s back at T0+2.5 s: the 60 repeated
    seconds already fired; none fires again and the schedule is quiet until the wall clock is
    past its last tick (cron's wall times). Then one a second again, none lost."""
    mesh = _one_node("* * * * * *")
    fired: dict[int, int] = {}
    _run(mesh, "s", 2_500, fired)
    _step(mesh, -60_000)
    _run(mesh, "s", 63_000, fired, step=100)
    assert sorted(fired) == [T0 + x for x in range(1, 6)]
    assert all(len(ids) == 1 for ids in _jobs(mesh, "s").values())
    assert fired[T0 + 3] - (T0 + 3) * 1000 == pytest.approx(60_000, abs=100)  # by its wall time
    assert _sched(mesh).stats["ticks_skipped"] == 0


def test_a_step_back_daily_cron_fires_the_next_day_at_its_wall_time_not_early() -> None:
    """``30 2 * * *``: fired at 02:30; at 02:45 the wall clock goes an hour back. Nothing fires
    at the repeated 02:30 (01:45 -> 02:45 again); the next day's fires at 02:30 on the wall
    clock, not an hour early (on the node clock's 24 h)."""
    start = int(datetime(2026, 5, 1, 2, 0, 0, tzinfo=UTC).timestamp())
    mesh = Mesh(1, now_ms=start * 1000)
    _sched(mesh).add(mesh.now, ScheduleDef("n", "30 2 * * *", "UTC", "q", b"", repl=1))
    fired: dict[int, int] = {}
    _run(mesh, "n", 45 * 60_000, fired, step=60_000)
    assert list(fired) == [start + 1800]
    _step(mesh, -HOUR_MS)
    _run(mesh, "n", 26 * HOUR_MS, fired, step=60_000)
    assert sorted(fired) == [start + 1800, start + 1800 + 86_400]
    wall_when_fired = fired[start + 1800 + 86_400] - HOUR_MS  # the node's wall clock then
    assert 0 <= wall_when_fired - (start + 1800 + 86_400) * 1000 <= 60_000


# ------------------------------------------------------------------ three nodes
@pytest.mark.parametrize("direction", [1, -1], ids=["forwards", "backwards"])
@pytest.mark.parametrize("who", ["owner", "other"])
def test_three_nodes_one_stepped_one_job_per_tick_and_the_peers_skip_nothing(
    direction: int, who: str
) -> None:
    """One node of three (the schedule's owner, or another) has its wall clock stepped an
    hour. Every tick still gets one job, the ticks keep coming one a second (the names jump
    an hour ahead only where the stepped node fired past the others, forwards), and the other
    nodes skip nothing and fail no add."""
    mesh = Mesh(3, now_ms=T0 * 1000)
    for node in mesh.nodes:
        node.set_persist(True)
    _sched(mesh).add(mesh.now, ScheduleDef("s", "@every 1s", "UTC", "q", b"", repl=2))
    mesh.pump()
    owner = mesh.ids.index(_sched(mesh).owner("s"))
    k = owner if who == "owner" else (owner + 1) % 3
    fired: dict[int, int] = {}
    _run(mesh, "s", 3_500, fired)
    before = set(fired)
    _step(mesh, direction * HOUR_MS, nodes=(k,))
    _run(mesh, "s", 6_000, fired)
    jobs = _jobs(mesh, "s")
    assert all(len(ids) == 1 for ids in jobs.values()), jobs
    after = sorted(set(fired) - before)
    assert before == {T0 + 1, T0 + 2, T0 + 3}
    if direction < 0:
        assert after == [T0 + x for x in range(4, 10)]  # on time, the others' clocks
    else:
        # The ticks go on, one a second, the names continuous from where they jumped (a
        # stepped owner, or a stepped node covering for the owner after GRACE_MS, fires by
        # its own clock; the others then keep its pace): at most one tick per second.
        jump = [t for t in after if t > T0 + 100]
        assert jump == list(range(jump[0], jump[0] + len(jump)))
        assert len(jump) >= 5 and set(after) - set(jump) <= {T0 + 4, T0 + 5}
        times = sorted(fired[t] for t in jump)
        # After the first (a catch-up, fired at the step), each a second after the last.
        assert all(b - a >= 900 for a, b in itertools.pairwise(times[1:]))
    for i in range(3):
        if i != k:
            assert _sched(mesh, i).stats["ticks_skipped"] == 0
        assert _sched(mesh, i).stats["fire_errors"] == 0
