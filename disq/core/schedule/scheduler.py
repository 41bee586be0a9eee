"""Schedules the cluster keeps: recurring jobs, one job per tick, no scheduler process.

What a schedule is: a name, a spec (spec.py: cron or ``@every``) in a time zone, the queue
and the body of the job each tick adds, and the add's options. What keeps it:

- **Every node holds every schedule.** A definition is versioned ``(wall ms, node id)``; an
  add, update, pause, resume or delete is a new version, and the highest wins on every node
  (last writer wins), so two concurrent updates of one schedule end the same everywhere. A
  delete is a tombstone, kept a week so that a node that missed it cannot bring the schedule
  back. A change is pushed to every peer at once (SchedSync); every ``SYNC_MS`` each node
  sends each reachable peer a digest of its definitions, and two nodes whose digests differ
  swap their whole tables; a link that comes up gets the whole table. A node that joins late
  learns everything that way. Definitions and the last bound tick of each schedule are AOF
  records (SCHEDULE, SCHEDTICK), written before anything that depends on them leaves, and a
  rewrite keeps them.
- **One job per tick: the key vote.** A tick's job is a keyed add (idempotency key
  ``schedule:<name>:<tick as Unix seconds>``), and the Disque core binds a key to one job by
  a majority vote (disq/core/disque/keyvote.py). So whichever nodes fire a tick, and however
  many times, the tick has one job; a node that fires a tick already bound gets the bound
  job's id back and its own job is deleted. This is what makes firing from several nodes
  safe, and it is also the price: a tick needs a majority, like any keyed add.
- **Who fires.** One node owns each schedule: the highest rendezvous hash of (name, node)
  over the live nodes as this node sees them, so ownership moves when the owner dies and
  every node agrees once their views do. The owner fires at the tick; every other node fires
  ``GRACE_MS`` later unless it already knows the tick's key bound. So a dead owner costs a
  tick a second of delay, not the tick, and views that disagree cost a vote, not a job. A
  tick that was already late when it became due here gets its grace from then (a cluster
  catching up after an outage does not fire every late tick from every node at once).
- **Misfires.** A tick more than ``MISFIRE_MS`` overdue (the cluster, or a majority of it, was
  down at its time), or one a forward step of the wall clock jumped over (below), follows the
  schedule's policy: SKIP drops every such tick and waits for the next one; CATCHUP n fires
  the last n of them, late, and drops the older ones. Every tick fired here is a TICK_FIRED
  event (``attempt``: seconds late), a late one also TICK_LATE; dropped ticks are one
  TICK_SKIPPED event (``attempt``: how many) on the owner.
- **Ticks never repeat.** The last bound tick of each schedule travels with the syncs and is
  a SCHEDTICK record, and a node never fires a tick at or before it, nor before the
  version of the definition (a schedule added or resumed now does not fire its past). So a
  tick whose key has left the key window (1 h) is not fired again.
- **A slow tick does not hold the next ones back.** Up to ``PIPELINE_MAX`` ticks of a
  schedule may have their adds in flight at once (a vote slowed by lost messages can take
  longer than a 1 s period). The last bound tick moves only over contiguous ticks: one bound
  while an earlier one is still in flight waits in the run's ``ahead``, so no node learns a
  tick as done that nobody bound.
- **Wall clock steps.** Ticks are wall-clock instants, but every deadline here is on the
  node clock (monotonic, disq/server/clock.py): a schedule reads its own clock, the node clock
  plus an offset (``_off``), so a step of the wall clock (NTP, ``date -s``, a VM resumed) is
  one change of that offset, seen at the next look. What a step does:

  - *Forwards* (the schedule's clock moves ahead more than ``STEP_MS`` at once): the ticks it
    jumped over never came in real time, so they are misfires whatever their lateness, and
    the policy decides: CATCHUP n fires the newest n (at most n jobs, however far the jump),
    SKIP none; then the schedule goes on at the new wall time. A step under ``STEP_MS``
    makes its ticks late, fired late as any (at most ``STEP_MS`` worth). The same for both
    kinds of spec.
  - *Backwards*, a cron schedule: its ticks are wall times, and the ones the step repeats
    already fired; none fires again (the key and the last tick), and the next one fires when
    the wall clock reaches it. So a cron schedule is quiet for the repeated span, at most the
    step (Vixie cron's rule for its fixed-time jobs: a job that ran is not run again).
  - *Backwards*, an ``@every`` schedule: an interval is a pace, and it keeps it. Its clock
    never falls behind the last tick bound plus the node-clock time since it was bound (the
    ``_pace`` offset, the highest ``tick - node clock at bind`` seen): the next tick fires one
    interval after the last, and its name (its Unix second) follows the last one's, ahead of
    the wall clock by the step. It stays ahead (the pace cannot slow down to let the wall
    clock catch up without a gap) until a forward step, or a restart after at least that
    long down (the pace is not on disk, the last tick is), brings the two together again. A
    definition's version counts as a bound tick, so a schedule added just before the step
    keeps its pace too.

  The peers see one node's step as nothing but its ticks: every node fires only ticks after
  the last bound one, and a tick bound by a node whose clock is ahead moves an ``@every``
  schedule's clock ahead on every node that learns it (the pace offset), so they keep firing
  at the same pace instead of waiting for their wall clocks. What a wrong clock can still do
  is name the ticks: the node that fires (the owner, or a non-owner covering for it after
  ``GRACE_MS``) fires by its own clock, and the cluster's next ticks follow from there.

Pure, as the other cores: ``now_ms`` is the node clock, ``wall_offset_ms`` turns it into the
wall clock the ticks are in; the node core routes the add replies back here by token.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from disq.core import events as ev
from disq.core import ids
from disq.core.disque.api import AddOptions, ClusterView, DisqueError
from disq.core.disque.job import STATE_NAMES
from disq.core.events import EventBuffer
from disq.core.messages import (
    MISFIRE_CATCHUP,
    MISFIRE_SKIP,
    Message,
    SchedSync,
    ScheduleDef,
)
from disq.core.schedule.spec import Spec, SpecError
from disq.core.timers import pop_due
from disq.persistence.framing import frame
from disq.persistence.schedule_records import (
    REC_SCHEDTICK,
    REC_SCHEDULE,
    decode_def,
    decode_tick,
    encode_def,
    encode_tick,
)

GRACE_MS: Final = 1000  # non-owners fire a tick this long after it, if still unbound
MISFIRE_MS: Final = 5000  # a tick more overdue than this is a misfire (its policy applies)
# A schedule's clock that moves ahead more than this at once (between two looks, so real time
# is not counted) was stepped: the ticks it jumped over are misfires.
STEP_MS: Final = MISFIRE_MS
LATE_MS: Final = 2000  # a tick fired more than this after its time counts as late
FIRE_TIMEOUT_MS: Final = 3000  # a tick's add: NOREPL after this, then fired again
FIRE_RETRY_MS: Final = 300  # after a failed add
PIPELINE_MAX: Final = 8  # ticks of one schedule whose adds may be in flight at once
SYNC_MS: Final = 2000  # digest to every reachable peer
STARTUP_SYNC_MS: Final = 1500  # a node fires nothing before a peer's table, or this long
TOMBSTONE_KEEP_MS: Final = 7 * 86400 * 1000
SYNC_CHUNK_BYTES: Final = 1 << 20  # a full table travels in messages of about this size
# A cron schedule's misfire is placed by walking its missed ticks forwards (croniter, some
# 14 us a tick here); one look walks at most this many and the next look, a millisecond
# later, goes on: a per-second schedule back after a day down walks 86,400 ticks in 169
# looks of about 7 ms, with the loop's IO between them, instead of blocking it for a second.
MISFIRE_WALK_TICKS: Final = 512

SCHEDULES_MAX: Final = 10_000
NAME_MAX_BYTES: Final = 200  # the key schedule:<name>:<tick> stays within 256 bytes
BODY_MAX_BYTES: Final = 1 << 20
CATCHUP_MAX: Final = 1000
UPCOMING_SHOWN: Final = 5
# What a live definition costs beyond its strings (the ScheduleDef, its run, the dict and heap
# entries): a rough tracemalloc figure, as QUEUE_OVERHEAD_BYTES is for a queue. Definitions
# count towards maxmemory with the jobs: 10,000 schedules of 1 MiB bodies are on every node.
SCHEDULE_OVERHEAD_BYTES: Final = 1000


def def_bytes(d: ScheduleDef) -> int:
    """The memory a definition holds here (0: a tombstone's strings are kept, but small)."""
    if d.deleted:
        return 0
    return len(d.body) + len(d.spec) + len(d.name) + len(d.queue) + SCHEDULE_OVERHEAD_BYTES


KEY_PREFIX: Final = "schedule:"

if TYPE_CHECKING:
    from disq.core.disque.core import DisqueCore


class ScheduleError(Exception):
    """A SCHEDULE command failed: ``code`` is the RESP error prefix (ERR)."""

    def __init__(self, message: str, code: str = "ERR") -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


def _earlier(a: int, b: int) -> int:
    """The earlier of two deadlines, -1 being none."""
    return b if a < 0 or (0 <= b < a) else a


def tick_key(name: str, tick_s: int) -> str:
    return f"{KEY_PREFIX}{name}:{tick_s}"


def _owner_hash(name: str, node: str) -> int:
    return zlib.crc32(f"{name}\0{node}".encode("utf-8", "surrogateescape"))


@dataclass(slots=True)
class _Run:
    """This node's firing state of one live schedule (not kept: rebuilt at start)."""

    spec: Spec
    floor_s: int  # ticks at or before it never fire here (version time, skipped ticks)
    due_ms: int = 0  # node clock: when this schedule next needs a look (0: now)
    # Ticks whose add is in flight: tick -> (token, when it started, how late it was then, ms).
    # Up to PIPELINE_MAX at once, so a tick whose vote is slow (lost messages) does not hold
    # the next ones back.
    inflight: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # Ticks bound here past the last contiguous one (an earlier tick still in flight): they
    # join ``Scheduler.last`` once every tick before them is bound.
    ahead: dict[int, str] = field(default_factory=dict)
    # Tick -> the schedule's time it first was due here (a non-owner's grace counts from then).
    seen: dict[int, int] = field(default_factory=dict)
    walk: _MisfireWalk | None = None  # a cron misfire being placed, over several looks
    # Misfires were placed up to this tick: the overdue ticks after the floor and at or
    # before it are the ones CATCHUP keeps, fired without walking them again each time.
    placed_s: int = 0
    # The schedule's clock minus the node clock at the last look (None: not looked at yet): a
    # look that finds it more than STEP_MS ahead saw a forward step.
    off_ms: int | None = None
    # Ticks at or before it were jumped over by a forward step: misfires, whatever their age.
    step_s: int = 0


@dataclass(slots=True)
class _MisfireWalk:
    """The missed ticks of a cron schedule in ``(start, edge_s]``, walked forwards a chunk
    per look: how many there are and the newest ``keep + 1`` (the kept ones and the newest
    skipped, which becomes the floor). Dropped if the floor moves meanwhile."""

    edge_s: int  # the misfire edge when the walk began (ticks after it: the next misfire's)
    start: int  # the floor when it began
    keep: int  # ticks CATCHUP fires late (0: SKIP)
    cursor: int = 0  # walked up to here
    total: int = 0
    newest: list[int] = field(default_factory=list)  # the newest keep + 1 walked, oldest first


class Scheduler:
    """Every schedule of the cluster, and the firing of this node's share of them."""

    def __init__(
        self,
        view: ClusterView,
        disque: DisqueCore,
        new_token: Callable[[], int],
    ) -> None:
        self.view = view
        self.disque = disque  # DisqueCore: add_job, decided_key, jobs
        self.new_token = new_token
        self.wall_offset_ms = 0
        self.persist = False
        self.aof_out: list[bytes] = []
        self.outbox: list[tuple[str, Message]] = []
        self.events = EventBuffer()
        self.table: dict[str, ScheduleDef] = {}
        self.table_bytes = 0  # def_bytes of every definition held: counts towards maxmemory
        self.last: dict[str, tuple[int, str]] = {}  # name -> (last bound tick, its job)
        # name -> the highest (tick ms - node clock) at which a tick (or the definition's
        # version) was bound here: an @every schedule's clock never runs behind it, so a wall
        # clock stepped back does not stop it (the module's "Wall clock steps").
        self._pace: dict[str, int] = {}
        self.runs: dict[str, _Run] = {}
        self.tokens: dict[int, tuple[str, int]] = {}  # a tick's add -> (schedule, tick)
        self.last_error: dict[str, str] = {}  # name -> why its last add failed here
        self.stats: dict[str, int] = {
            "ticks_fired": 0,
            "ticks_late": 0,
            "ticks_skipped": 0,
            "ticks_bound_elsewhere": 0,
            "fire_errors": 0,
            "syncs_sent": 0,
            "syncs_merged": 0,
        }
        self._heap: list[tuple[int, str]] = []  # (due_ms, name), stale entries skipped
        self._started_ms = -1  # the first tick's time (the cores are built before a clock)
        self.synced = False
        self._sync_at_ms = 0
        self._digest = 0  # 0: stale

    # ------------------------------------------------------------------ clocks
    def _wall(self, now_ms: int) -> int:
        return now_ms + self.wall_offset_ms

    def _off(self, name: str, run: _Run) -> int:
        """The schedule's clock minus the node clock: the wall clock's offset, or for an
        ``@every`` schedule whose wall clock went back behind its last tick, its pace."""
        off = self.wall_offset_ms
        if run.spec.interval_s:
            pace = self._pace.get(name)
            if pace is not None and pace > off:
                return pace
        return off

    def _pace_to(self, name: str, t_ms: int, now_ms: int) -> None:
        """A tick (or a version) at ``t_ms`` became bound here at node time ``now_ms``."""
        cur = self._pace.get(name)
        if cur is None or t_ms - now_ms > cur:
            self._pace[name] = t_ms - now_ms

    def set_wall_offset(self, ms: int) -> None:
        if ms == self.wall_offset_ms:
            return
        self.wall_offset_ms = ms
        for run in self.runs.values():  # every due time is a wall time: look again now
            run.due_ms = 0
        self._rebuild_heap()

    # ------------------------------------------------------------------ commands
    def add(self, now_ms: int, d: ScheduleDef) -> None:
        """SCHEDULE ADD: check, version, store, push. Raises ScheduleError, nothing stored."""
        name_bytes = len(d.name.encode("utf-8", "surrogateescape"))
        if not d.name or name_bytes > NAME_MAX_BYTES:
            raise ScheduleError(f"schedule name must be 1 to {NAME_MAX_BYTES} bytes")
        if len(d.body) > BODY_MAX_BYTES:
            raise ScheduleError(f"schedule body is longer than {BODY_MAX_BYTES} bytes")
        if not d.queue:
            raise ScheduleError("schedule queue name is empty")
        if not 0 <= d.catchup <= CATCHUP_MAX:
            raise ScheduleError(f"CATCHUP takes 0 to {CATCHUP_MAX} ticks")
        try:
            Spec(d.spec, d.zone)
        except SpecError as exc:
            raise ScheduleError(str(exc)) from None
        self._check_add_options(d)
        live = sum(1 for x in self.table.values() if not x.deleted)
        if d.name not in self.table and live >= SCHEDULES_MAX:
            raise ScheduleError(f"too many schedules (at most {SCHEDULES_MAX})")
        limit = self.disque.memory.max_bytes
        if limit > 0:
            cur = self.table.get(d.name)
            grow = def_bytes(d) - (def_bytes(cur) if cur is not None else 0)
            used = self.disque.memory.used_bytes + self.table_bytes
            if grow > 0 and (self.disque.memory.warning >= 3 or used + grow > limit):
                # ADDJOB's refusal, in the same words: the add would take the node past it.
                raise ScheduleError("command not allowed when used memory > 'maxmemory'.", "OOM")
        self._local_change(now_ms, d)

    def _check_add_options(self, d: ScheduleDef) -> None:
        size = self.view.cluster_size()
        if d.repl < 0 or d.repl > size:
            raise ScheduleError(
                f"REPLICATE {d.repl} is more than the {size} node(s) of the cluster"
                if d.repl > 0
                else "REPLICATE must be positive"
            )
        if d.ttl_s == 0 or d.ttl_s < -1:
            raise ScheduleError("TTL must be a positive number of seconds")
        if d.retry_s < -1:
            raise ScheduleError("RETRY must be 0 or more seconds")
        if d.retry_s == 0 and d.repl != 1:
            raise ScheduleError(
                "With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"
            )

    def delete(self, now_ms: int, name: str) -> bool:
        return self._change(now_ms, name, deleted=True)

    def pause(self, now_ms: int, name: str) -> bool:
        return self._change(now_ms, name, paused=True)

    def resume(self, now_ms: int, name: str) -> bool:
        return self._change(now_ms, name, paused=False)

    def _change(self, now_ms: int, name: str, **fields: bool) -> bool:
        cur = self.table.get(name)
        if cur is None or cur.deleted:
            return False
        d = ScheduleDef(
            cur.name,
            cur.spec,
            cur.zone,
            cur.queue,
            cur.body,
            cur.repl,
            cur.retry_s,
            cur.ttl_s,
            cur.async_,
            cur.misfire,
            cur.catchup,
            fields.get("paused", cur.paused),
            fields.get("deleted", False),
        )
        self._local_change(now_ms, d)
        return True

    def _local_change(self, now_ms: int, d: ScheduleDef) -> None:
        cur = self.table.get(d.name)
        d.version_ms = self._wall(now_ms)
        if cur is not None and d.version_ms <= cur.version_ms:
            d.version_ms = cur.version_ms + 1  # a later change here is always a newer version
        d.version_node = self.view.my_id
        self._apply(now_ms, d)
        run = self.runs.get(d.name)
        if run is not None:
            off = self._off(d.name, run)
            if off - self.wall_offset_ms > STEP_MS:
                # "Not its past" on the schedule's own clock, which an @every schedule's pace
                # keeps ahead of the wall clock its version is in after a step back. Only
                # then: a clock a little behind its peers' (their ticks move the pace too)
                # would skip ticks after the version the others count on.
                run.floor_s = max(run.floor_s, (now_ms + off) // 1000)
        for peer in self.view.all_peers():
            self.outbox.append((peer, SchedSync(entries=[d])))
        self.stats["syncs_sent"] += len(self.view.all_peers())

    def names(self) -> list[str]:
        return sorted(n for n, d in self.table.items() if not d.deleted)

    def get(self, name: str) -> ScheduleDef | None:
        d = self.table.get(name)
        return None if d is None or d.deleted else d

    def upcoming(self, name: str, now_ms: int, count: int = UPCOMING_SHOWN) -> list[int]:
        """The next ticks (Unix s) that will fire (none while paused)."""
        d = self.get(name)
        run = self.runs.get(name)
        if d is None or run is None or d.paused:
            return []
        after = max(self._after(name, run), (now_ms + self._off(name, run)) // 1000 - 1)
        return run.spec.ticks_between(after, 1 << 40, count)

    def owner(self, name: str) -> str:
        live = [self.view.my_id, *self.view.reachable_peers()]
        return max(live, key=lambda node: (_owner_hash(name, node), node))

    # ------------------------------------------------------------------ the table
    def _apply(self, now_ms: int, d: ScheduleDef) -> bool:
        """Take ``d`` if it is newer than what is held; log it. True: taken."""
        cur = self.table.get(d.name)
        if cur is not None and (cur.version_ms, cur.version_node) >= (
            d.version_ms,
            d.version_node,
        ):
            return False
        self.table_bytes += def_bytes(d) - (def_bytes(cur) if cur is not None else 0)
        self.table[d.name] = d
        self._digest = 0
        if self.persist:
            self.aof_out.append(frame(REC_SCHEDULE, encode_def(d)))
        self._reset_run(now_ms, d)
        return True

    def _reset_run(self, now_ms: int, d: ScheduleDef) -> None:
        old = self.runs.pop(d.name, None)
        # An add in flight keeps its token here: its reply still comes to on_reply, which
        # ignores it (the new run's token differs; the tick's key holds). Dropping it let the
        # reply out to the IO layer as a client's (the simulator's "reply for unknown token").
        if d.deleted:
            return
        try:
            spec = Spec(d.spec, d.zone)
        except SpecError:
            return  # a peer's zone this node's tzdata lacks: held and synced, not fired
        # A definition fires only ticks after its version: adding, updating or resuming a
        # schedule does not fire its past.
        floor = d.version_ms // 1000
        # The version is a bound tick to the pace (above): an @every schedule added or
        # resumed just before the wall clock steps back fires on.
        self._pace_to(d.name, d.version_ms, now_ms)
        run = _Run(spec, floor)
        if old is not None:
            run.floor_s = max(floor, old.floor_s)
            run.off_ms = old.off_ms
        self.runs[d.name] = run
        heapq.heappush(self._heap, (0, d.name))

    def digest(self) -> int:
        if not self._digest:
            acc = 1
            for name in sorted(self.table):
                d = self.table[name]
                acc = zlib.crc32(f"{name}\0{d.version_ms}\0{d.version_node}".encode(), acc)
            self._digest = acc or 1
        return self._digest

    def _bind(self, now_ms: int, name: str, tick_s: int, job_id: str, push: bool) -> bool:
        """Every tick of ``name`` up to ``tick_s`` is bound (or skipped), the last to
        ``job_id``: what a peer's sync and the AOF say. True: a newer last tick."""
        cur = self.last.get(name)
        if cur is not None and cur[0] >= tick_s:
            return False
        self.last[name] = (tick_s, job_id)
        self._pace_to(name, tick_s * 1000, now_ms)
        self.last_error.pop(name, None)
        if self.persist:
            self.aof_out.append(frame(REC_SCHEDTICK, encode_tick(name, tick_s, job_id)))
        if push:
            msg = SchedSync(tick_names=[name], tick_s=[tick_s], tick_jobs=[job_id])
            for peer in self.view.reachable_peers():
                self.outbox.append((peer, msg))
        run = self.runs.get(name)
        if run is not None:
            for old in [t for t in run.ahead if t <= tick_s]:
                del run.ahead[old]
            for old in [t for t in run.seen if t <= tick_s]:
                del run.seen[old]
            run.due_ms = 0
            heapq.heappush(self._heap, (0, name))
        return True

    def _bound_here(self, now_ms: int, name: str, tick_s: int, job_id: str) -> None:
        """This node learned that tick ``tick_s`` is bound to ``job_id`` (its add's answer,
        or the key known here). The last tick moves only over contiguous ticks: a tick
        bound while an earlier one is still in flight waits in ``ahead``, so no node ever
        takes a tick as done that nobody bound."""
        run = self.runs.get(name)
        if run is None:
            self._bind(now_ms, name, tick_s, job_id, push=True)
            return
        after = self._after(name, run)
        if tick_s <= after:
            return
        if run.spec.next_after(after) != tick_s:
            run.ahead[tick_s] = job_id
            return
        last_tick, last_job = tick_s, job_id
        while True:
            nxt = run.spec.next_after(last_tick)
            if nxt is None or nxt not in run.ahead:
                break
            last_tick, last_job = nxt, run.ahead.pop(nxt)
        self._bind(now_ms, name, last_tick, last_job, push=True)

    # ------------------------------------------------------------------ peers
    def on_message(self, now_ms: int, sender: str, msg: SchedSync) -> None:
        took = False
        for d in msg.entries:
            if d.name and self._apply(now_ms, d):
                took = True
        for name, tick_s, job_id in zip(msg.tick_names, msg.tick_s, msg.tick_jobs, strict=False):
            if self._bind(now_ms, name, tick_s, job_id, push=False):
                took = True
        if msg.entries or msg.tick_names or msg.want:
            self.synced = True
        if took:
            self.stats["syncs_merged"] += 1
        if msg.want:
            self._send_all(sender, want=False)
        elif msg.digest and not msg.entries and msg.digest != self.digest():
            self._send_all(sender, want=True)
        elif msg.digest and not msg.entries:
            self.synced = True  # the same table: nothing to learn from this peer

    def on_link_up(self, now_ms: int, peer: str) -> None:
        """A link came up (a node joined or came back): it gets the whole table."""
        self._send_all(peer, want=False)

    def _send_all(self, peer: str, want: bool) -> None:
        entries = list(self.table.values())
        names = list(self.last)
        chunk: list[ScheduleDef] = []
        size = 0
        first = True
        for d in entries:
            chunk.append(d)
            size += len(d.body) + len(d.spec) + len(d.name) + 64
            if size >= SYNC_CHUNK_BYTES:
                self.outbox.append((peer, SchedSync(entries=chunk, want=want and first)))
                first = False
                chunk, size = [], 0
        self.outbox.append(
            (
                peer,
                SchedSync(
                    entries=chunk,
                    tick_names=names,
                    tick_s=[self.last[n][0] for n in names],
                    tick_jobs=[self.last[n][1] for n in names],
                    want=want and first,
                    # An empty table still says so: the peer then knows it is in sync.
                    digest=self.digest() if not chunk and not names else 0,
                ),
            )
        )
        self.stats["syncs_sent"] += 1

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> int:
        if not self.table:
            # Nothing to fire or to compare: a peer with schedules probes this node, and its
            # empty answer brings them all.
            return -1
        if not self.synced and self._started_ms >= 0 and self.view.cluster_size() > 1:
            # tick() fires nothing before the first sync: wake for the digest and for the end
            # of STARTUP_SYNC_MS, not for the runs already due (their due time, 0 for a
            # restored schedule, kept the loop spinning until then). A single node has no
            # peer to wait for: its first tick marks it synced.
            return min(self._sync_at_ms, self._started_ms + STARTUP_SYNC_MS)
        heap = self._heap
        while heap:
            due, name = heap[0]
            run = self.runs.get(name)
            if run is None or run.due_ms != due:
                heapq.heappop(heap)
                continue
            return min(due, self._sync_at_ms)
        return self._sync_at_ms

    def tick(self, now_ms: int) -> None:
        if self._started_ms < 0:
            self._started_ms = now_ms
            self._sync_at_ms = now_ms + SYNC_MS
        if now_ms >= self._sync_at_ms:
            self._sync_at_ms = now_ms + SYNC_MS
            peers = self.view.reachable_peers()
            if peers:
                digest = self.digest()
                for peer in peers:
                    self.outbox.append((peer, SchedSync(digest=digest)))
            self._prune(now_ms)
        if not self.synced:
            if self.view.cluster_size() <= 1 or now_ms - self._started_ms >= STARTUP_SYNC_MS:
                self.synced = True
            else:
                return
        heap = self._heap
        for due, name in pop_due(heap, now_ms):
            run = self.runs.get(name)
            if run is None or run.due_ms != due:
                continue
            run.due_ms = self._look(now_ms, name, run)
            if run.due_ms >= 0:
                heapq.heappush(heap, (run.due_ms, name))

    def _rebuild_heap(self) -> None:
        self._heap = [(r.due_ms, n) for n, r in self.runs.items() if r.due_ms >= 0]
        heapq.heapify(self._heap)

    def _after(self, name: str, run: _Run) -> int:
        last = self.last.get(name)
        return max(run.floor_s, last[0] if last is not None else 0)

    def _look(self, now_ms: int, name: str, run: _Run) -> int:
        """Fire what is due of one schedule; when to look again (node clock; -1: never,
        until something changes)."""
        d = self.table.get(name)
        if d is None or d.deleted or d.paused:
            return -1
        wake = -1
        for waiting, (_token, started, _late) in list(run.inflight.items()):
            if now_ms - started > FIRE_TIMEOUT_MS + FIRE_RETRY_MS:
                # No answer past the add's own timeout (a keyed add's vote can outlast it):
                # fire the tick again. The token stays ours, so a late answer still comes to
                # on_reply (a job id binds the tick) instead of reaching the IO layer as a
                # client's (the simulator's "reply for unknown token", seed 1270).
                del run.inflight[waiting]
            else:
                wake = _earlier(wake, started + FIRE_TIMEOUT_MS + FIRE_RETRY_MS + 1)
        off = self._off(name, run)
        if run.off_ms is not None and off - run.off_ms > STEP_MS:
            # The schedule's clock stepped forward: what it jumped over never came.
            run.step_s = (now_ms + off) // 1000
        run.off_ms = off
        wall = now_ms + off  # the schedule's clock: ticks, grace and misfires are on it
        spec = run.spec
        after = self._after(name, run)
        t = after
        fired = 0
        for _ in range(64):  # ticks bound elsewhere are stepped over here, a few per look
            tick = spec.next_after(t)
            if tick is None:
                break
            t = tick
            if tick in run.inflight or tick in run.ahead:
                continue
            seen = run.seen.setdefault(tick, wall)
            mine = self.owner(name) == self.view.my_id
            # Non-owners give the owner GRACE_MS from when the tick became due here, not
            # from its time: when the cluster is behind (catching up after an outage) every
            # tick is already past its grace, and every node firing every late tick at once
            # made their key votes duel, each tick took longer than the period and the
            # schedule never caught up (ticks lost with the whole cluster up; found by the
            # simulator, invariant 10). On time, this is the tick's time plus GRACE_MS.
            fire_at = tick * 1000 if mine else max(tick * 1000, seen) + GRACE_MS
            if wall < fire_at:
                return _earlier(wake, fire_at - off)
            key = tick_key(name, tick)
            bound = self.disque.keys.decided_key(d.queue, key, now_ms)
            if bound:
                self._bound_here(now_ms, name, tick, bound)
                self.stats["ticks_bound_elsewhere"] += 1
                continue
            if (wall - tick * 1000 > MISFIRE_MS or tick <= run.step_s) and tick > run.placed_s:
                moved = self._misfire(now_ms, wall, name, d, run, after)
                if moved < 0:
                    return now_ms + 1  # the walk goes on at the next look, after the loop's IO
                if moved:
                    t = after = self._after(name, run)  # skipped some: look at what is left
                    continue
            if len(run.inflight) >= PIPELINE_MAX:
                return wake  # an answer brings us back (or the oldest add's timeout)
            if not self._fire(now_ms, wall, name, d, run, tick):
                return _earlier(wake, now_ms + FIRE_RETRY_MS)  # refused: again soon
            fired += 1
            if tick not in run.inflight:
                after = self._after(name, run)  # bound at once (one node, a known key)
            if fired >= PIPELINE_MAX:
                # A catch-up binding at once (one node, known keys) would fire every kept
                # tick in one look, a keyed add each; the rest go on after the loop's IO.
                return now_ms + 1
        else:
            return now_ms + 1  # more to step over: the next look, after the loop's IO
        return wake

    def _misfire(
        self, now_ms: int, wall: int, name: str, d: ScheduleDef, run: _Run, after: int
    ) -> int:
        """Ticks after ``after`` more than MISFIRE_MS overdue at the schedule's time ``wall``,
        or jumped over by a forward step: apply the policy. 1: the floor moved (some were
        skipped); 0: nothing to skip; -1: still walking a cron schedule's missed ticks
        (MISFIRE_WALK_TICKS per look), look again."""
        spec = run.spec
        edge_s = max((wall - MISFIRE_MS - 1) // 1000, run.step_s)
        keep = d.catchup if d.misfire == MISFIRE_CATCHUP else 0
        if spec.interval_s:
            # Arithmetic: the last missed tick, the newest skipped and the count in O(1).
            n = spec.interval_s
            last_missed = edge_s // n * n
            skip_to = last_missed - keep * n
            run.placed_s = edge_s
            if skip_to <= after:
                return 0
            count = skip_to // n - after // n
        else:
            walk = run.walk
            if walk is None or walk.start != after:
                walk = run.walk = _MisfireWalk(edge_s, after, keep, after)
            newest = walk.newest
            for _ in range(MISFIRE_WALK_TICKS):
                tick = spec.next_after(walk.cursor)
                if tick is None or tick > walk.edge_s:
                    break
                walk.cursor = tick
                walk.total += 1
                newest.append(tick)
                if len(newest) > keep + 1:
                    del newest[0]
            else:
                return -1
            run.walk = None
            run.placed_s = walk.edge_s
            if walk.total <= keep:
                return 0
            skip_to = newest[0]
            count = walk.total - keep
        # Ticks whose add is in flight, or bound past an earlier one, were fired, not
        # skipped: they are stepped over with the skipped ones but not counted with them.
        count -= sum(1 for t in (*run.inflight, *run.ahead) if after < t <= skip_to)
        run.floor_s = skip_to
        for old in [t for t in run.ahead if t <= skip_to]:
            del run.ahead[old]
        for old in [t for t in run.seen if t <= skip_to]:
            del run.seen[old]
        if count > 0 and self.owner(name) == self.view.my_id:
            self.stats["ticks_skipped"] += count
            self.events.add(ev.TICK_SKIPPED, now_ms, d.queue, tick_key(name, skip_to), count, 0)
        return 1

    def _fire(
        self, now_ms: int, wall: int, name: str, d: ScheduleDef, run: _Run, tick: int
    ) -> bool:
        """Add the tick's job (``wall``: the schedule's time now). False: refused now (tried
        again after FIRE_RETRY_MS)."""
        late_ms = max(0, wall - tick * 1000)
        token = self.new_token()
        try:
            opts = AddOptions(
                FIRE_TIMEOUT_MS,
                repl=d.repl or None,
                retry_s=None if d.retry_s < 0 else d.retry_s,
                ttl_s=None if d.ttl_s < 0 else d.ttl_s,
                async_=d.async_,
                idem_key=tick_key(name, tick),
            )
            res = self.disque.add_job(now_ms, token, d.queue, d.body, opts)
        except DisqueError as exc:  # NOREPL, PAUSED, OOM, LEAVING, MAXLEN...
            self.stats["fire_errors"] += 1
            self.last_error[name] = str(exc)
            return False
        if isinstance(res, str):
            self._fired(now_ms, name, tick, res, late_ms)
            return True
        run.inflight[tick] = (token, now_ms, late_ms)
        self.tokens[token] = (name, tick)
        return True

    def on_reply(self, now_ms: int, token: int, result: object) -> None:
        """The Disque core answered a tick's add: the bound job's id, or an error."""
        entry = self.tokens.pop(token, None)
        if entry is None:
            return
        name, tick = entry
        run = self.runs.get(name)
        late_ms = max(0, self._wall(now_ms) - tick * 1000)
        if run is not None:
            late_ms = max(0, now_ms + self._off(name, run) - tick * 1000)
            mine = run.inflight.get(tick)
            if mine is not None and mine[0] == token:
                late_ms = mine[2]
                del run.inflight[tick]
        if isinstance(result, str):
            # Bound, even if the definition changed meanwhile (a replaced run): a job exists.
            self._fired(now_ms, name, tick, result, late_ms)
            return
        self.stats["fire_errors"] += 1
        self.last_error[name] = str(result)
        if run is not None:
            run.due_ms = now_ms + FIRE_RETRY_MS
            heapq.heappush(self._heap, (run.due_ms, name))

    def _fired(self, now_ms: int, name: str, tick: int, job_id: str, late_ms: int) -> None:
        """Tick ``tick`` is bound to ``job_id``, the answer to an add of this node's that
        started ``late_ms`` after the tick's time (the schedule's clock)."""
        mine = ids.node_prefix(job_id) == self.view.my_id[:8]
        self._bound_here(now_ms, name, tick, job_id)
        run = self.runs.get(name)
        if run is not None:
            run.due_ms = 0
            heapq.heappush(self._heap, (0, name))
        if not mine:
            self.stats["ticks_bound_elsewhere"] += 1
            return
        d = self.table.get(name)
        queue = d.queue if d is not None else ""
        self.stats["ticks_fired"] += 1
        self.events.add(ev.TICK_FIRED, now_ms, queue, job_id, late_ms // 1000, tick)
        if late_ms > LATE_MS:
            self.stats["ticks_late"] += 1
            self.events.add(ev.TICK_LATE, now_ms, queue, job_id, late_ms // 1000, tick)

    def cancel_all(self) -> None:
        self.tokens.clear()
        for run in self.runs.values():
            run.inflight.clear()

    def _prune(self, now_ms: int) -> None:
        edge = self._wall(now_ms) - TOMBSTONE_KEEP_MS
        gone = [n for n, d in self.table.items() if d.deleted and d.version_ms < edge]
        for n in gone:
            del self.table[n]
            self.last.pop(n, None)
            self._pace.pop(n, None)
        if gone:
            self._digest = 0

    # ------------------------------------------------------------------ persistence
    def restore(self, now_ms: int, records: list[tuple[int, bytes]]) -> None:
        if self._started_ms < 0:
            self._started_ms = now_ms
            self._sync_at_ms = now_ms + SYNC_MS
        persist, self.persist = self.persist, False
        for rtype, payload in records:
            if rtype == REC_SCHEDULE:
                self._apply(now_ms, decode_def(payload))
            elif rtype == REC_SCHEDTICK:
                name, tick, job_id = decode_tick(payload)
                self._bind(now_ms, name, tick, job_id, push=False)
        self.persist = persist

    def snapshot_records(self) -> list[bytes]:
        out = [frame(REC_SCHEDULE, encode_def(d)) for d in self.table.values()]
        out.extend(
            frame(REC_SCHEDTICK, encode_tick(n, tick, job)) for n, (tick, job) in self.last.items()
        )
        return out

    def has_output(self) -> bool:
        return bool(self.aof_out or self.outbox or len(self.events))

    # ------------------------------------------------------------------ introspection
    def describe(self, name: str, now_ms: int) -> list[tuple[str, object]] | None:
        """SCHEDULE SHOW's fields, in order."""
        d = self.get(name)
        if d is None:
            return None
        last = self.last.get(name)
        last_job = last[1] if last is not None else ""
        state = ""
        if last_job:
            j = self.disque.jobs.get(last_job)
            state = STATE_NAMES[j.state] if j is not None else "gone"
        return [
            ("name", d.name),
            ("spec", d.spec),
            ("tz", d.zone),
            ("queue", d.queue),
            ("body", d.body),
            # None: the add's default (REPLICATE min(3, nodes), RETRY TTL/10, TTL 1 day).
            ("replicate", d.repl or None),
            ("retry", None if d.retry_s < 0 else d.retry_s),
            ("ttl", None if d.ttl_s < 0 else d.ttl_s),
            ("async", int(d.async_)),
            ("misfire", "skip" if d.misfire == MISFIRE_SKIP else f"catchup {d.catchup}"),
            ("paused", int(d.paused)),
            ("next", list(self.upcoming(name, now_ms))),
            ("last-tick", last[0] if last is not None else 0),
            ("last-job-id", last_job),
            ("last-job-state", state),
            ("last-error", self.last_error.get(name, "")),
            ("owner", self.owner(name)),
            ("version", f"{d.version_ms}-{d.version_node}"),
        ]
