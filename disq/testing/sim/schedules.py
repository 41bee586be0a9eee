"""Recurring schedules under the simulator's faults (issue 25), and invariant 10.

The workload: at the start of the clients phase ``cfg.schedules`` schedules are added through
a random live node's scheduler (``Scheduler.add``, what SCHEDULE ADD calls): "@every 1s",
the 6-field cron "*/2 * * * * *" or "@every 3s", REPLICATE within what ``max_down`` leaves
up, RETRY within the run, CATCHUP large enough to cover the whole run for some (CATCHUP-all),
CATCHUP 1-2 or SKIP for the others. With ``schedule_changes`` one of them is paused from one
node and resumed from another during the chaos phase. Every tick's job is a keyed add
(``schedule:<name>:<tick>``); consumers take them as any job.

What is observed, per tick key:

- every job id delivered for it (by consumers or the drain);
- every job id some node recorded as the key's decided job: IDEMKEY records (the key vote's
  decision, disq/core/disque/keyvote.py) and SCHEDTICK records (the scheduler's last bound
  tick, taken from the add's answer or a peer), as they reach a node's AOF.

The world logs the cluster's availability at every nemesis action (``World.avail_log``:
which nodes are up, unfrozen, not leaving, not under a memory warning, and on which side of a
partition); before every tick of a schedule that is not CATCHUP-all, this part notes which
nodes know its current definition (unpaused).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from disq.core.disque.job import DJob
from disq.core.messages import MISFIRE_CATCHUP, MISFIRE_SKIP, ScheduleDef
from disq.core.schedule.scheduler import GRACE_MS, KEY_PREFIX, MISFIRE_MS, ScheduleError, tick_key
from disq.core.schedule.spec import Spec
from disq.persistence.cluster_records import REC_IDEMKEY, decode_idemkeys
from disq.persistence.schedule_records import REC_SCHEDTICK, decode_tick
from disq.testing.sim.config import INF, SCHED_SKIP_QUEUE, T0_MS
from disq.testing.sim.model import Delivery, SimNode
from disq.testing.sim.step import NodeStep
from disq.testing.sim.world import World

SPECS = ("@every 1s", "*/2 * * * * *", "@every 3s")
CATCHUP_ALL = 1000  # CATCHUP_MAX: more ticks than any run has
# A tick is checked under the SKIP rule only if the group that could fire it was up (and had
# the definition) this long before the earliest node's clock reached it: SWIM's views and a
# restarted node's first sync (STARTUP_SYNC_MS) settle in that time.
LEAD_MS = 1500


@dataclass(slots=True)
class SchedRec:
    """One schedule as the workload made it."""

    name: str
    spec: str
    queue: str
    body: bytes
    repl: int
    misfire: int
    catchup: int
    node: int  # added through
    t_add: int
    # (sim time, version ms, paused) of the add and of every change since, in order
    versions: list[tuple[int, int, bool]] = field(default_factory=list)

    def winner(self, t: int) -> tuple[int, int, bool] | None:
        """The change in force once every node has heard of those made up to sim time
        ``t``: the highest version (last writer wins by the writers' clocks, so with skew a
        resume made later than a pause it never heard of can lose to it)."""
        made = [v for v in self.versions if v[0] <= t]
        return max(made, key=lambda v: v[1]) if made else None

    @property
    def catchup_all(self) -> bool:
        return self.misfire == MISFIRE_CATCHUP and self.catchup >= CATCHUP_ALL


class Schedules:
    """The schedules' workload, what is observed of their ticks, and invariant 10."""

    def __init__(self, world: World, stepper: NodeStep) -> None:
        self.w = world
        self.stepper = stepper
        self.scheds: dict[str, SchedRec] = {}
        # tick key -> job id -> how it showed (delivered / IDEMKEY / SCHEDTICK on a node)
        self.sched_jobs: dict[str, dict[str, str]] = {}
        self.sched_delivered: dict[str, set[str]] = {}  # tick key -> job ids delivered
        # (name, tick) -> nodes knowing the definition
        self._knowers: dict[tuple[str, int], frozenset[int]] = {}
        self._required_cache: dict[str, tuple[str, int]] | None = None  # key -> (name, tick)

    def start(self) -> None:
        if self.w.cfg.schedules:
            self.w.note_availability()
            self.w.at(self.w.t_clients, self._sched_add_all, None)

    # ------------------------------------------------------------------ availability
    def _group_over(self, a: int, b: int, among: frozenset[int]) -> tuple[int, int]:
        """The largest set of nodes of ``among`` available and on one side together over the
        whole of [a, b]: (its size, how many of it take copies throughout)."""
        log = self.w.avail_log
        k = 0
        while k + 1 < len(log) and log[k + 1][0] <= a:
            k += 1
        snaps = [log[k]]
        snaps.extend(s for s in log[k + 1 :] if s[0] <= b)
        together: dict[tuple[int, ...], list[int]] = {}
        for i in sorted(among):
            if all(s[1][i] for s in snaps):
                together.setdefault(tuple(s[2][i] for s in snaps), []).append(i)
        best = (0, 0)
        for members in together.values():
            takers = sum(1 for i in members if all(s[3][i] for s in snaps))
            best = max(best, (len(members), takers))
        return best

    # ------------------------------------------------------------------ the workload
    def _sched_add_all(self, _: object) -> None:
        cfg = self.w.cfg
        rng = self.w.rng
        n = len(self.w.nodes)
        # REPLICATE: at most the nodes the nemesis leaves up (and at least 1).
        top = max(1, min(3, n - min(self.w.max_down, n - 1)))
        for k in range(cfg.schedules):
            up = self.w.up_nodes()
            if not up:
                self.w.at(self.w.now + 100, self._sched_add_all, None)
                return
            nd = rng.choice(up)
            name = f"s{k}"
            kind = rng.choice(("all", "all", "skip", "few"))
            # Every kind may tick every second: a schedule keeps up to PIPELINE_MAX ticks in
            # flight, so one tick's slow vote (10-20% loss, 200 ms delays) does not hold the
            # next ones back (with one at a time, seeds 364, 1186, 1390 and 2758 lost ticks
            # of 1 s SKIP schedules with the whole cluster up).
            spec = rng.choice(SPECS)
            if kind == "skip":
                misfire, catchup, queue = MISFIRE_SKIP, 0, SCHED_SKIP_QUEUE
            elif kind == "few":
                misfire, catchup, queue = MISFIRE_CATCHUP, rng.randint(1, 2), SCHED_SKIP_QUEUE
            else:
                misfire, catchup = MISFIRE_CATCHUP, CATCHUP_ALL
                queue = rng.choice(cfg.queues)
            repl = rng.randint(1, top)
            body = f"sched:{name}".encode()
            d = ScheduleDef(
                name,
                spec,
                "UTC",
                queue,
                body,
                repl=repl,
                retry_s=rng.randint(1, self.w.max_retry_s),
                misfire=misfire,
                catchup=catchup,
            )
            sched = nd.nc.scheduler if nd.nc is not None else None
            assert sched is not None
            try:
                self.w.guard(nd, sched.add, self.w.now + nd.skew, d)
            except ScheduleError as e:
                raise self.w.violation("10 (schedules)", f"SCHEDULE ADD on {nd.name}: {e}") from e
            rec = SchedRec(name, spec, queue, body, repl, misfire, catchup, nd.idx, self.w.now)
            rec.versions.append((self.w.now, d.version_ms, False))
            self.scheds[name] = rec
            if self.w.tr:
                pol = "SKIP" if misfire == MISFIRE_SKIP else f"CATCHUP {catchup}"
                self.w.t(
                    f"SCHEDULE ADD {nd.name} {name} {spec!r} {queue} REPLICATE {repl} {pol} "
                    f"version {d.version_ms}"
                )
            self.stepper.flush(nd)
            self._sched_probes(rec)  # CATCHUP-all ticks before a change take the SKIP rule
        if cfg.schedule_changes and self.scheds:
            name = rng.choice(sorted(self.scheds))
            t = self.w.now + rng.randint(500, max(600, cfg.duration_ms // 2))
            self.w.at(t, self._sched_change, (name, True))
            self.w.at(t + rng.randint(500, 2000), self._sched_change, (name, False))

    def _sched_change(self, arg: tuple[str, bool]) -> None:
        """PAUSE (True) or RESUME (False) from a random live node (another than last time)."""
        name, pause = arg
        rec = self.scheds[name]
        up = self.w.up_nodes()
        if not up:
            self.w.at(self.w.now + 100, self._sched_change, arg)
            return
        nd = self.w.rng.choice(up)
        sched = nd.nc.scheduler if nd.nc is not None else None
        assert sched is not None
        now = self.w.now + nd.skew
        done = self.w.guard(nd, sched.pause if pause else sched.resume, now, name)
        d = sched.get(name)
        if self.w.tr:
            what = "PAUSE" if pause else "RESUME"
            self.w.t(f"SCHEDULE {what} {nd.name} {name} -> {done} {d and d.version_ms}")
        if done and d is not None:
            rec.versions.append((self.w.now, d.version_ms, pause))
        elif not pause and not done:
            # The node does not know the schedule (cut off when it was added): another.
            self.w.at(self.w.now + 200, self._sched_change, arg)
        self.stepper.flush(nd)

    def _sched_probes(self, rec: SchedRec) -> None:
        """Before each tick (LEAD_MS before the fastest clock reaches it), note which nodes
        know the definition then in force, unpaused."""
        spec = Spec(rec.spec, "UTC")
        ahead = max(nd.skew for nd in self.w.nodes)
        after = rec.versions[0][1] // 1000
        for tick in spec.ticks_between(after, self.w.t_drain // 1000 + 10, 100):
            at = tick * 1000 - ahead - LEAD_MS
            self.w.at(max(at, self.w.now), self._sched_probe, (rec.name, tick))

    def _sched_probe(self, arg: tuple[str, int]) -> None:
        name, tick = arg
        rec = self.scheds[name]
        win = rec.winner(self.w.now)
        assert win is not None
        _, version, paused = win
        knows = set()
        if not paused:
            for nd in self.w.nodes:
                sched = nd.nc.scheduler if nd.nc is not None else None
                d = sched.get(name) if sched is not None else None
                if d is not None and d.version_ms == version and not d.paused:
                    knows.add(nd.idx)
        self._knowers[(name, tick)] = frozenset(knows)

    # ------------------------------------------------------------------ observations
    def delivery(self, d: Delivery, j: DJob) -> None:
        key = j.idem_key
        name = key[len(KEY_PREFIX) :].rsplit(":", 1)[0]
        rec = self.scheds.get(name)
        if rec is None or j.body != rec.body:
            raise self.w.violation(
                "10 (schedules: no phantom tick jobs)",
                f"{d.job_id} {j.body!r} with key {key} delivered by n{d.node}, but no schedule "
                f"{name!r} with that body was added",
                d.job_id,
            )
        self.sched_delivered.setdefault(key, set()).add(d.job_id)
        self.sched_jobs.setdefault(key, {}).setdefault(d.job_id, f"delivered by n{d.node}")
        self._check_tick_key(key)

    def track_frames(self, nd: SimNode, frames: list[tuple[int, bytes]]) -> None:
        """A node's AOF records naming a tick key's job: IDEMKEY (the vote's decision) and
        SCHEDTICK (the scheduler's last bound tick)."""
        for rtype, payload in frames:
            if rtype == REC_IDEMKEY:
                for _queue, key, job_id, _until in decode_idemkeys(payload):
                    if key.startswith(KEY_PREFIX):
                        self._sched_bound(key, job_id, f"IDEMKEY on {nd.name}")
            elif rtype == REC_SCHEDTICK:
                name, tick, job_id = decode_tick(payload)
                self._sched_bound(tick_key(name, tick), job_id, f"SCHEDTICK on {nd.name}")

    def _sched_bound(self, key: str, job_id: str, how: str) -> None:
        self.sched_jobs.setdefault(key, {}).setdefault(job_id, how)
        if self.w.tr:
            self.w.t(f"bound {key} -> {job_id} ({how})")
        self._check_tick_key(key)

    def _check_tick_key(self, key: str) -> None:
        """Invariant 10, none twice: one tick, one job."""
        jobs = self.sched_jobs.get(key)
        if jobs is not None and len(jobs) > 1:
            self.w.stats["sched_dup_ticks"] = self.w.stats.get("sched_dup_ticks", 0) + 1
            raise self.w.violation(
                "10 (schedules: one tick, one job)",
                f"tick {key} has {len(jobs)} jobs: "
                + "; ".join(f"{i} {how}" for i, how in sorted(jobs.items())),
                sorted(jobs)[-1],
            )

    # ------------------------------------------------------------------ none lost
    def _sched_required(self) -> dict[str, tuple[str, int]]:
        """Tick key -> (schedule, tick) of every tick that must have a delivered job."""
        if self._required_cache is not None:
            return self._required_cache
        out: dict[str, tuple[str, int]] = {}
        skews = [nd.skew for nd in self.w.nodes]
        ahead, behind = max(skews), min(skews)
        # Due on every node's clock, its grace included, before the drain starts (the drain
        # then waits for its job, up to drain_max_ms).
        last = (self.w.t_drain - GRACE_MS + behind) // 1000
        for rec in self.scheds.values():
            spec = Spec(rec.spec, "UTC")
            first_version = rec.versions[0][1]
            for tick in spec.ticks_between(first_version // 1000, last, 1000):
                if self._tick_required(rec, tick, ahead, behind):
                    out[tick_key(rec.name, tick)] = (rec.name, tick)
        self._required_cache = out
        return out

    def _tick_required(self, rec: SchedRec, tick: int, ahead: int, behind: int) -> bool:
        t_ms = tick * 1000
        final = rec.winner(INF)
        assert final is not None
        if rec.catchup_all and not final[2] and tick > final[1] // 1000:
            # CATCHUP covering the run, after the version of the definition that wins in the
            # end: every tick, whatever happened (the heal restarts everything and the
            # catch-up fires what was missed).
            return True
        # SKIP (and CATCHUP 1-2, and the ticks of a CATCHUP-all schedule before a change):
        # fired if a group that can bind it (a majority that votes, ``repl`` of it taking
        # copies) knew the definition and stayed up, unfrozen and together from before the
        # fastest clock reached the tick until the slowest clock's misfire edge, with no
        # change of the schedule meanwhile.
        a = t_ms - ahead - LEAD_MS
        b = t_ms - behind + MISFIRE_MS
        if any(a <= v[0] <= b for v in rec.versions):
            return False
        win = rec.winner(a)
        if win is None:
            return False
        _, version, paused = win
        if paused or tick <= version // 1000:
            return False
        knowers = self._knowers.get((rec.name, tick))
        if knowers is None:
            return False
        size, takers = self._group_over(a, b, knowers)
        return size >= len(self.w.nodes) // 2 + 1 and takers >= rec.repl

    def waiting(self) -> bool:
        """The drain goes on while a required tick has no delivered job."""
        if not self.scheds:
            return False
        return any(not self._got(key) for key in self._sched_required())

    def _got(self, key: str) -> bool:
        """A job was delivered for the tick ``key``, or a dead letter of its job (a queue's
        delivery limit moved it, invariant 11)."""
        if key in self.sched_delivered:
            return True
        return any(job_id in self.w.dead_letters for job_id in self.sched_jobs.get(key, {}))

    def check(self) -> None:
        """Invariant 10, none lost (none twice is checked as jobs show up)."""
        if not self.scheds:
            return
        required = self._sched_required()
        self.w.stats["sched_ticks_required"] = len(required)
        self.w.stats["sched_ticks_delivered"] = len(self.sched_delivered)
        missing = sorted(
            (tick, name) for key, (name, tick) in required.items() if not self._got(key)
        )
        if missing:
            tick, name = missing[0]
            rec = self.scheds[name]
            key = tick_key(name, tick)
            bound = self.sched_jobs.get(key, {})
            pol = "SKIP" if rec.misfire == MISFIRE_SKIP else f"CATCHUP {rec.catchup}"
            raise self.w.violation(
                "10 (schedules: no tick lost)",
                f"{len(missing)} required tick(s) got no delivered job, first {key} "
                f"(t={tick * 1000 - T0_MS}; {rec.spec!r} {pol} REPLICATE {rec.repl}, added on "
                f"n{rec.node} at t={rec.t_add - T0_MS}, versions "
                f"{[(t - T0_MS, v - T0_MS, p) for t, v, p in rec.versions]}); "
                f"bound: {bound or 'nowhere'}",
                next(iter(bound), None),
            )
