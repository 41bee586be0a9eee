"""A deterministic, seeded simulation of a whole disq cluster (design.md sections 1 and 4).

The REAL pure cores (``ClusterCore`` and, by default, the SWIM ``Membership``) of 3-7 nodes run
against a fake clock and a fake network. One ``random.Random(seed)`` drives everything: message
delays (so messages reorder), loss, duplication, partitions, crashes and restarts, and the
clients; each node's cores get their own ``Random`` derived from it. Events sit in one heap
ordered by ``(time, sequence)``: no wall clock, no threads, so a seed replays byte for byte
(``python -m disq.testing.sim --seed N --trace``).

What a node is here, and why it matches ``disq/server``:

- One *step* = one event handled by one node (a message, a timer, a client command). After
  the step the node *flushes* like the real loop does: first the AOF records the step produced
  are appended to the node's in-memory AOF (they are durable from then on), then its messages
  and its client replies are released. So a GOTJOB or an ADDJOB reply never leaves before the
  record it vouches for is written (group commit). With ``fsync_lost`` the unsynced tail (since
  the last once-a-second fsync) is dropped at a crash, as ``appendfsync everysec`` after a power
  loss; that weakens invariant 1 (see ``_check_final``).
- A crash throws the node's memory away (cores, blocked clients, in-flight messages to it).
  A restart builds new cores for the same node id and replays its AOF with ``restore``; the
  membership comes back from its last snapshot, as ``disq-node`` does from its data dir.
- Clients talk to any live node (clients are never partitioned from nodes: partitions cut
  node-to-node links only). Producers ADDJOB unique bodies (sync or ASYNC, REPLICATE from a
  range, RETRY 1-3 s, sometimes DELAY 1 or at-most-once, sometimes hanging up early);
  consumers GETJOB (NOHANG or blocking, sometimes hanging up) and then ACK (sometimes on
  another node, sometimes FASTACK), NACK, WORKING, admin ENQUEUE, or vanish without acking.
- The nemesis (random from the seed, or a fixed ``nemesis_script``): partitions (random
  halves, one node isolated), heal, crash (never more than ``max_down`` nodes down at once),
  restart, AOF rewrite, and optionally memory warnings (external replication), CLUSTER
  LEAVING and queue PAUSE. At ``duration_ms`` everything heals and every node restarts; the
  consumers go on for ``settle_ms`` (requeues happen), then every node is drained.

Invariants (``InvariantViolation`` carries the seed and, replayed with tracing, the job's
history and its messages):

1. Every acknowledged ADDJOB (an id came back) with RETRY > 0 is delivered at least once by
   the end. The nemesis keeps at most ``max_down`` nodes down at once (default R-1 for the
   smallest replication used) and every node comes back before the final drain. With
   ``fsync_lost`` a job is excused only if every node that logged it lost that record.
2. No delivery happens after every node that ever held a copy had it acked or deleted and no
   copy was on the wire ("zombie" delivery). Holders come from the AOF records (what a
   restart would bring back), the REPLJOB/YOURJOBS in flight, and the creator's WAIT_REPL
   copy. Hindsight: a node that gets its first copy later was "not yet acked" before.
3. No core raises (any exception is reported with the seed), and no core spins (its next
   deadline stays at ``now``).
4. Structure, checked after steps: every id in a node's queues is in its ``jobs`` with state
   QUEUED (and the same queue and ctime), and every QUEUED job is in its queue.
5. Nothing is delivered that no producer submitted (or whose ADDJOB was refused); one ADDJOB
   is one job id; a RETRY 0 job (at-most-once) is delivered at most once.
6. Optional (``final_gc_ms``): once everything is healed, every acked job is garbage
   collected on every node.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import heapq
import random
import shlex
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, ParamSpec, TypeVar

from disq.core.cluster import ClusterCore
from disq.core.cluster_api import PENDING, ClusterView, DisqueError
from disq.core.djob import ACKED, ACTIVE, QUEUED, STATE_NAMES, WAIT_REPL, DJob
from disq.core.membership import Membership
from disq.core.messages import (
    ALIVE,
    MEMBER_STATE_NAMES,
    Ack,
    DelJob,
    Enqueue,
    GotAck,
    GotJob,
    JobData,
    Member,
    Message,
    NeedJobs,
    Pause,
    Ping,
    PingReq,
    Queued,
    ReplJob,
    SetAck,
    WillQueue,
    Working,
    YourJobs,
)

_P = ParamSpec("_P")
_R = TypeVar("_R")

T0_MS = 1_700_000_000_000  # a realistic epoch: ctime = ms * 1e6 must stay within 63 bits
INF = 1 << 62
_MEMBERSHIP_TYPES = (Ping, Ack, PingReq)
_SAME_TIME_TICKS_MAX = 10_000  # a node whose deadline never moves past now is spinning

# AOF-derived copy states per (job, node), for invariant 2.
_HOLDS = 1  # latest record is LOADJOB: a copy that a restart would bring back
_GONE = 0  # latest record is DELJOB (acked or deleted), or the record was lost
# A copy travelling in a REPLJOB or YOURJOBS is a copy too (a RETRY 0 job moved by federation
# exists only there): sent (+1) and landed or lost on the way (-1).
_FLYING = 2
_LANDED = 3
_WAITING = 4  # the creator's WAIT_REPL copy: in memory only, but it can still send copies


class InvariantViolation(AssertionError):
    """A broken invariant or a core exception. ``str()`` is the readable report."""

    def __init__(
        self, seed: int, invariant: str, detail: str, report: str = "", job_id: str | None = None
    ) -> None:
        self.seed = seed
        self.invariant = invariant
        self.detail = detail
        self.report = report
        self.job_id = job_id  # the job the report follows, when there is one
        super().__init__(self._text())

    def _text(self) -> str:
        head = f"[seed {self.seed}] invariant {self.invariant}: {self.detail}"
        return head + ("\n" + self.report if self.report else "")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything a run depends on besides the seed (so a failure replays exactly)."""

    nodes: int = 3
    loss: float = 0.0  # probability a message is dropped
    dup: float = 0.0  # probability a message is delivered twice
    delay_ms: tuple[int, int] = (1, 20)  # per message, uniform: reordering comes from this
    partitions: bool = True
    crashes: bool = True
    duration_ms: int = 3000  # chaos phase: producers, consumers and nemesis
    jobs: int = 30  # ADDJOBs over the chaos phase
    producers: int = 3
    consumers: int = 3
    queues: tuple[str, ...] = ("q0", "q1")
    repl: tuple[int, int] | None = None  # REPLICATE range; None: (1, min(3, nodes))
    max_retry_s: int = 2  # RETRY drawn from 1..max_retry_s
    ttl_s: int = 3600  # far beyond the run; jobs whose TTL ends before the end are excused
    at_most_once_prob: float = 0.0  # REPLICATE 1 RETRY 0 jobs
    async_prob: float = 0.15
    delay_prob: float = 0.05  # DELAY 1
    add_timeout_ms: tuple[int, int] = (200, 2000)
    client_cancel_prob: float = 0.03  # the producer disconnects before the sync reply
    max_down: int | None = None  # None: min(REPLICATE) - 1
    nemesis_every_ms: tuple[int, int] = (200, 1200)
    # Instead of the random nemesis: (ms after the clients start, action, node indexes) with
    # action in isolate, split (args = one side), heal, crash, crash_all, restart,
    # restart_all, rewrite (AOF), pressure/relief (memory warning), leave/stay.
    nemesis_script: tuple[tuple[int, str, tuple[int, ...]], ...] | None = None
    aof_rewrite_prob: float = 0.1  # share of nemesis actions that rewrite one node's AOF
    memory_pressure: bool = False  # nemesis: memory warning 1 on a node (external replication)
    leaving: bool = False  # nemesis: CLUSTER LEAVING yes/no on a node
    pauses: bool = False  # nemesis: PAUSE a queue (in/out/all, broadcast) on a node
    get_cancel_prob: float = 0.03  # a consumer hangs up while blocked in GETJOB
    fsync_lost: bool = False
    enqueue_on_restart_prob: float = 0.0  # aof-enqueue-jobs-once yes (a controlled restart)
    clock_skew_ms: int = 0  # each node's clock is off by up to this much (fixed offset)
    view: str = "swim"  # "swim" (real Membership), "oracle" (perfect detector), "static"
    probe_interval_ms: int = 500
    ping_timeout_ms: int = 200
    node_timeout_ms: int = 3000
    warmup_ms: int = 1500  # membership converges before clients start
    consumer_start_ms: int = 0  # consumers start this long after the clients phase begins
    producer_nodes: tuple[int, ...] | None = None  # None: any live node
    consumer_nodes: tuple[int, ...] | None = None
    ack_other_node_prob: float = 0.3
    settle_ms: int | None = None  # after healing, consumers go on; None: 3 x max retry + 2 s
    drain: str = "all"  # "all": NOHANG on every node; "consumers": blocking on consumer nodes
    drain_max_ms: int = 60_000
    final_gc_ms: int = 0  # > 0: then check that every acked job was garbage collected
    check_every: int = 1  # structural check every this many steps (per stepping node)
    # Known core gaps whose consequences invariant 1 tolerates (so a sweep can stay useful
    # while they are open; tests/unit/test_sim.py pins each with a strict xfail):
    # "extrepl-repl1": REPLICATE 1 without ASYNC on a node with a memory warning or leaving.
    # "extrepl-async": ASYNC on such a node (no local copy at all when the id is returned).
    # "amo-enqueue-once": a RETRY 0 job delivered again after a restart with
    # aof-enqueue-jobs-once (the DELIVERED flag is not in the AOF).
    exempt: tuple[str, ...] = ()
    trace: bool = False


@dataclass(slots=True)
class AddRec:
    """One ADDJOB as its producer saw it."""

    body: bytes
    node: int
    queue: str
    repl: int
    retry_s: int
    async_: bool
    t_start: int
    status: str = "pending"  # ok | failed (refused, nothing created) | indeterminate
    job_id: str | None = None
    t_end: int = 0
    why: str = ""
    waiting_id: str | None = None  # the creator's WAIT_REPL copy, while the add is pending
    extrepl: bool = False  # added on a node with a memory warning or leaving


@dataclass(slots=True)
class Delivery:
    step: int
    t: int
    node: int
    job_id: str
    body: bytes


@dataclass(slots=True)
class _Op:
    kind: str  # "add" | "get"
    client: int
    add: AddRec | None = None


@dataclass(slots=True)
class SimResult:
    seed: int
    config: SimConfig
    stats: dict[str, int]
    adds: dict[bytes, AddRec]
    deliveries: list[Delivery]
    trace_hash: str
    trace: list[str]
    leftover: list[str]  # "node: job state" still live after the drain (not a violation)


class _StaticView:
    """Everybody is always reachable: what the job core saw before SWIM existed. Only the
    LEAVING flags (CLUSTER LEAVING) are known, instantly."""

    def __init__(self, my_id: str, peers: list[str], sim: Simulation) -> None:
        self._my_id = my_id
        self._peers = peers
        self._sim = sim

    @property
    def my_id(self) -> str:
        return self._my_id

    @property
    def leaving(self) -> bool:
        return self._my_id in self._sim.leaving

    def cluster_size(self) -> int:
        return len(self._peers) + 1

    def reachable_peers(self) -> list[str]:
        return [p for p in self._peers if p not in self._sim.leaving]

    def all_peers(self) -> list[str]:
        return list(self._peers)


class _OracleView(_StaticView):
    """A perfect failure detector: reachable = up, not leaving, and on our side of any
    partition."""

    def reachable_peers(self) -> list[str]:
        return self._sim.oracle_reachable(self._my_id, self._peers)

    def all_peers(self) -> list[str]:
        return self._sim.oracle_up(self._peers)


class _Node:
    __slots__ = (
        "aof",
        "core",
        "gen",
        "id",
        "idx",
        "member",
        "mstate",
        "name",
        "pending",
        "same_time_ticks",
        "skew",
        "snapshot",
        "steps",
        "synced",
        "up",
        "view",
        "wake_at",
    )

    def __init__(self, idx: int, node_id: str, skew: int) -> None:
        self.idx = idx
        self.id = node_id
        self.name = f"n{idx}"
        self.skew = skew
        self.up = False
        self.gen = 0  # bumped at every crash: timers and messages of an old life are void
        self.core: ClusterCore | None = None
        self.member: Membership | None = None
        self.view: ClusterView | None = None
        self.aof: list[tuple[str, object]] = []
        self.synced = 0  # AOF records up to here survive a crash when fsync_lost is on
        self.snapshot: dict[str, Any] | None = None
        self.mstate: dict[str, int] = {}  # membership events: what this node thinks of peers
        self.wake_at = INF
        self.same_time_ticks = 0
        self.pending: dict[int, _Op] = {}  # client token -> blocked command on this node
        self.steps = 0


class Simulation:
    def __init__(self, seed: int, nodes: int = 3, **overrides: Any) -> None:
        self._init(seed, SimConfig(nodes=nodes, **overrides))

    @classmethod
    def from_config(cls, seed: int, config: SimConfig) -> Simulation:
        sim = cls.__new__(cls)
        sim._init(seed, config)
        return sim

    # ================================================================== setup
    def _init(self, seed: int, cfg: SimConfig) -> None:
        if not 1 <= cfg.nodes <= 16:
            raise ValueError("nodes must be in 1..16")
        if cfg.view not in ("swim", "oracle", "static"):
            raise ValueError(f"unknown view {cfg.view!r}")
        self.seed = seed
        self.cfg = cfg
        self.rng = random.Random(seed)
        self._tr = cfg.trace
        self.trace: list[str] = []
        self.now = T0_MS
        self.step = 0
        self._seq = 0
        self._heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._token = 0
        self._done = False

        n = cfg.nodes
        lo, hi = cfg.repl if cfg.repl is not None else (1, min(3, n))
        self.repl_range = (max(1, lo), max(1, min(hi, n)))
        if cfg.max_down is not None:
            self.max_down = cfg.max_down
        else:
            self.max_down = max(0, self.repl_range[0] - 1)
        self.max_retry_s = max(1, cfg.max_retry_s)

        self.nodes: list[_Node] = []
        for i in range(n):
            node_id = f"{self.rng.getrandbits(160):040x}"
            skew = self.rng.randint(-cfg.clock_skew_ms, cfg.clock_skew_ms)
            self.nodes.append(_Node(i, node_id, skew))
        self.by_id = {nd.id: nd for nd in self.nodes}
        self.ids = [nd.id for nd in self.nodes]
        self.side = [0] * n  # partition side of each node; same side = connected
        self.leaving: set[str] = set()  # node ids with CLUSTER LEAVING yes (static views)

        # Client-side history (what invariants are checked against).
        self.adds: dict[bytes, AddRec] = {}
        self.deliveries: list[Delivery] = []
        self.delivered: dict[str, list[Delivery]] = {}
        self._body_of: dict[str, bytes] = {}
        # job id -> [(step, node, _HOLDS|_GONE|_FLYING|_LANDED|_WAITING)] from the AOF
        # stream, the copies on the wire and the creators' WAIT_REPL copies: invariant 2.
        self._copies: dict[str, list[tuple[int, int, int]]] = {}
        # fsync_lost: job id -> nodes that lost a LOADJOB of it in a crash.
        self._lost_load: dict[str, set[int]] = {}
        self._lost_del: set[str] = set()  # fsync_lost: a DELJOB of this job was lost
        self._client_acks: dict[str, int] = {}  # job id -> first client ACK/FASTACK time
        self._enqueue_once_restarts: list[int] = []  # times of aof-enqueue-jobs-once restarts
        self._admin_enqueued: set[str] = set()  # jobs an admin ENQUEUE really queued
        self._jobs_left = cfg.jobs
        self._job_seq = 0
        self.stats: dict[str, int] = {
            k: 0
            for k in (
                "steps",
                "msgs_sent",
                "msgs_delivered",
                "msgs_lost",
                "msgs_dup",
                "msgs_cut",
                "crashes",
                "restarts",
                "partitions",
                "heals",
                "aof_rewrites",
                "add_ok",
                "add_failed",
                "add_indeterminate",
                "add_cancelled",
                "deliveries",
                "redeliveries",
                "acks",
                "dummy_acks",
                "fastacks",
                "nacks",
                "workings",
                "dropped_by_consumer",
                "enqueues",
                "get_cancelled",
                "get_leaving",
                "pressure",
                "leaving",
                "pauses",
            )
        }

        # Phases (global time).
        self.t_clients = T0_MS + (cfg.warmup_ms if cfg.view == "swim" else 0)
        self.t_heal = self.t_clients + cfg.duration_ms
        settle = cfg.settle_ms
        if settle is None:
            settle = 3 * self.max_retry_s * 1000 + 2000
        self.t_drain = self.t_heal + settle
        self.t_give_up = self.t_drain + cfg.drain_max_ms

        for nd in self.nodes:
            self._start_node(nd, fresh=True)
        if cfg.view == "swim":
            # --join: every node meets node 0 (and one random other, so node 0 being slow
            # does not serialise the whole join).
            for nd in self.nodes[1:]:
                assert nd.member is not None
                self._send(nd, self.ids[0], nd.member.meet_message())
                other = self.rng.randrange(n)
                if other != nd.idx:
                    self._send(nd, self.ids[other], nd.member.meet_message())

        for p in range(cfg.producers):
            self._at(self.t_clients + self.rng.randint(0, 50), self._produce, p)
        for c in range(cfg.consumers):
            start = self.t_clients + cfg.consumer_start_ms + self.rng.randint(0, 50)
            self._at(start, self._consume, c)
        if cfg.nemesis_script is not None:
            for at, action, args in cfg.nemesis_script:
                self._at(self.t_clients + at, self._scripted, (action, args))
        elif (
            cfg.partitions
            or cfg.crashes
            or cfg.aof_rewrite_prob > 0
            or cfg.memory_pressure
            or cfg.leaving
            or cfg.pauses
        ):
            self._at(self.t_clients + self._nemesis_gap(), self._nemesis, None)
        if cfg.fsync_lost:
            self._at(T0_MS + self.rng.randint(0, 999), self._fsync, None)
        self._at(self.t_heal, self._heal_all, None)
        self._at(self.t_drain, self._drain_round, True)

    def _start_node(self, nd: _Node, fresh: bool) -> None:
        cfg = self.cfg
        now = self.now + nd.skew
        peers = [i for i in self.ids if i != nd.id]
        rng_core = random.Random(self.rng.getrandbits(64))
        nd.gen += 1
        nd.up = True
        nd.wake_at = INF
        nd.same_time_ticks = 0
        nd.member = None
        if cfg.view == "swim":
            rng_m = random.Random(self.rng.getrandbits(64))
            me = Member(nd.id, f"10.0.0.{nd.idx + 1}", 7710, 7711, 0, ALIVE)
            timing = {
                "probe_interval_ms": cfg.probe_interval_ms,
                "ping_timeout_ms": cfg.ping_timeout_ms,
                "node_timeout_ms": cfg.node_timeout_ms,
            }
            if fresh or nd.snapshot is None:
                nd.member = Membership(me, rng_m, now, **timing)
            else:
                nd.member = Membership.restore(nd.snapshot, me, rng_m, now, **timing)
            nd.mstate = {}
            nd.view = nd.member
        elif cfg.view == "oracle":
            nd.view = _OracleView(nd.id, peers, self)
        else:
            nd.view = _StaticView(nd.id, peers, self)
        nd.core = ClusterCore(nd.view, rng_core, now)
        if not fresh:
            records = list(nd.aof)
            core = self._core(nd)
            if cfg.enqueue_on_restart_prob and self.rng.random() < cfg.enqueue_on_restart_prob:
                core.aof_enqueue_once = True
                self._enqueue_once_restarts.append(self.now)
            self._guard(nd, core.restore, now, records)
            if self._tr:
                once = " (aof-enqueue-jobs-once)" if cfg.enqueue_on_restart_prob else ""
                self._t(f"{nd.name} restart: restore {len(records)} AOF records{once}")
        self._flush(nd)

    # ================================================================== event loop
    def _at(self, t: int, fn: Callable[[Any], None], arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, arg))

    def run(self) -> SimResult:
        """Run to the end and check the invariants. Raises ``InvariantViolation``."""
        heap = self._heap
        try:
            while heap and not self._done:
                t, _, fn, arg = heapq.heappop(heap)
                self.now = t
                self.step += 1
                fn(arg)
            self._check_all_structures()
            self._check_final()
        except InvariantViolation as e:
            raise self._enrich(e) from None
        except Exception as e:  # a bug of the simulator itself: still report the seed
            v = InvariantViolation(
                self.seed, "simulator raised", f"{type(e).__name__}: {e}", traceback.format_exc()
            )
            raise self._enrich(v) from e
        return self.result()

    def result(self) -> SimResult:
        self.stats["steps"] = self.step
        return SimResult(
            seed=self.seed,
            config=self.cfg,
            stats=dict(self.stats),
            adds=self.adds,
            deliveries=self.deliveries,
            trace_hash=hashlib.sha256("\n".join(self.trace).encode()).hexdigest(),
            trace=self.trace,
            leftover=self._leftover(),
        )

    def _guard(self, nd: _Node, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Invariant 3: any exception out of a core is a failure of the seed. DisqueError is
        a command's normal error answer and goes back to the caller."""
        try:
            return fn(*args, **kwargs)
        except (InvariantViolation, DisqueError):
            raise
        except Exception as e:
            raise InvariantViolation(
                self.seed,
                "3 (no core raises)",
                f"{nd.name} at t={self.now - T0_MS}: {type(e).__name__}: {e}",
                traceback.format_exc(),
            ) from e

    # ================================================================== nodes and network
    def _core(self, nd: _Node) -> ClusterCore:
        assert nd.core is not None
        return nd.core

    def oracle_reachable(self, me: str, peers: list[str]) -> list[str]:
        side = self.side[self.by_id[me].idx]
        return [
            p
            for p in peers
            if self.by_id[p].up and self.side[self.by_id[p].idx] == side and p not in self.leaving
        ]

    def oracle_up(self, peers: list[str]) -> list[str]:
        return [p for p in peers if self.by_id[p].up]

    def _flush(self, nd: _Node) -> None:
        """End of a step: AOF first (group commit), then messages, then replies, then the
        node's next timer."""
        core = nd.core
        assert core is not None
        nd.steps += 1
        if core.aof_out:
            for rec in core.aof_out:
                nd.aof.append(rec)
                self._track_aof(nd, rec)
            core.aof_out.clear()
        m = nd.member
        if m is not None:
            if m.events:
                for node_id, state in m.events:
                    nd.mstate[node_id] = state
                    if self._tr:
                        other = self.by_id.get(node_id)
                        oname = other.name if other is not None else node_id[:8]
                        self._t(f"{nd.name} view: {oname} {MEMBER_STATE_NAMES.get(state, state)}")
                m.events.clear()
            if m.outbox:
                # Sorted by destination: the cores iterate sets of node ids (hash order
                # differs between processes), and message delays are drawn in send order.
                m.outbox.sort(key=itemgetter(0))
                for dest, msg in m.outbox:
                    self._send(nd, dest, msg)
                m.outbox.clear()
        if core.outbox:
            core.outbox.sort(key=itemgetter(0))
            for dest, msg in core.outbox:
                self._send(nd, dest, msg)
            core.outbox.clear()
        if core.replies:
            replies = list(core.replies)
            core.replies.clear()
            for token, res in replies:
                self._on_reply(nd, token, res)
        if self.cfg.check_every and nd.steps % self.cfg.check_every == 0:
            self._check_structure(nd)
        self._schedule_tick(nd)

    def _schedule_tick(self, nd: _Node) -> None:
        core = nd.core
        assert core is not None
        dl = core.next_deadline_ms()
        if nd.member is not None:
            dl = min(dl, nd.member.next_deadline_ms())
        t = dl - nd.skew
        if t <= self.now:
            t = self.now
        if t < nd.wake_at:
            nd.wake_at = t
            self._at(t, self._tick, (nd.idx, nd.gen))

    def _tick(self, arg: tuple[int, int]) -> None:
        idx, gen = arg
        nd = self.nodes[idx]
        if not nd.up or nd.gen != gen or nd.wake_at != self.now:
            return  # an old life's timer, or superseded by an earlier one
        nd.wake_at = INF
        now = self.now + nd.skew
        m = nd.member
        core = self._core(nd)
        if m is not None:
            self._guard(nd, m.tick, now)
        self._guard(nd, core.tick, now)
        self._flush(nd)
        if nd.wake_at == self.now:
            nd.same_time_ticks += 1
            if nd.same_time_ticks > _SAME_TIME_TICKS_MAX:
                raise InvariantViolation(
                    self.seed,
                    "3 (no core spins)",
                    f"{nd.name}: next_deadline_ms() stays <= now after "
                    f"{_SAME_TIME_TICKS_MAX} ticks at t={self.now - T0_MS}",
                )
        else:
            nd.same_time_ticks = 0

    def _send(self, src: _Node, dest: str, msg: Message) -> None:
        dst = self.by_id.get(dest)
        if dst is None:
            return
        rng = self.rng
        self.stats["msgs_sent"] += 1
        if self.side[src.idx] != self.side[dst.idx]:
            self.stats["msgs_cut"] += 1
            if self._tr:
                self._t(f"cut  {src.name}>{dst.name} {self._fmt(msg)}")
            return
        if rng.random() < self.cfg.loss:
            self.stats["msgs_lost"] += 1
            if self._tr:
                self._t(f"loss {src.name}>{dst.name} {self._fmt(msg)}")
            return
        lo, hi = self.cfg.delay_ms
        copies = 2 if rng.random() < self.cfg.dup else 1
        if copies == 2:
            self.stats["msgs_dup"] += 1
        carried = _carried_ids(msg)
        for _ in range(copies):
            for job_id in carried:
                self._copies.setdefault(job_id, []).append((self.step, dst.idx, _FLYING))
            d = rng.randint(lo, hi)
            if self._tr:
                self._t(f"send {src.name}>{dst.name} +{d} {self._fmt(msg)}")
            self._at(self.now + d, self._deliver, (dst.idx, src.idx, msg, dst.gen))

    def _deliver(self, arg: tuple[int, int, Message, int]) -> None:
        idx, sidx, msg, gen = arg
        nd = self.nodes[idx]
        src = self.nodes[sidx]
        if not nd.up or nd.gen != gen:
            # The link broke when the receiver died: what was on it is gone.
            if self._tr:
                self._t(f"void {src.name}>{nd.name} {self._fmt(msg)} (receiver restarted)")
        elif self.side[idx] != self.side[sidx]:
            self.stats["msgs_cut"] += 1
            if self._tr:
                self._t(f"cut  {src.name}>{nd.name} {self._fmt(msg)} (in flight)")
        else:
            self.stats["msgs_delivered"] += 1
            if self._tr:
                self._t(f"recv {src.name}>{nd.name} {self._fmt(msg)}")
            now = self.now + nd.skew
            if isinstance(msg, _MEMBERSHIP_TYPES):
                m = nd.member
                if m is not None:  # static/oracle views: no SWIM
                    self._guard(nd, m.on_message, now, src.id, msg)
            else:
                core = self._core(nd)
                self._guard(nd, core.on_message, now, src.id, msg)
            self._flush(nd)
        # After the receiver's LOADJOB (if any): the copy is never unaccounted for.
        for job_id in _carried_ids(msg):
            self._copies[job_id].append((self.step, idx, _LANDED))

    def _up_nodes(self, allowed: tuple[int, ...] | None = None) -> list[_Node]:
        return [nd for nd in self.nodes if nd.up and (allowed is None or nd.idx in allowed)]

    # ================================================================== AOF tracking
    def _track_aof(self, nd: _Node, rec: tuple[str, object]) -> None:
        kind, payload = rec
        if kind == "LOADJOB":
            assert isinstance(payload, JobData)
            job_id, state = payload.id, _HOLDS
        else:
            assert isinstance(payload, str)
            job_id, state = payload, _GONE
        self._copies.setdefault(job_id, []).append((self.step, nd.idx, state))
        if self._tr:
            self._t(f"aof  {nd.name} {kind} {job_id}")

    def _fsync(self, _: object) -> None:
        for nd in self.nodes:
            if nd.up:
                nd.synced = len(nd.aof)
        if self.now < self.t_give_up:
            self._at(self.now + 1000, self._fsync, None)

    # ================================================================== nemesis
    def _nemesis_gap(self) -> int:
        lo, hi = self.cfg.nemesis_every_ms
        return self.rng.randint(lo, hi)

    def _nemesis(self, _: object) -> None:
        if self.now >= self.t_heal:
            return
        cfg = self.cfg
        rng = self.rng
        up = self._up_nodes()
        down = [nd for nd in self.nodes if not nd.up]
        actions: list[str] = []
        if cfg.partitions:
            actions += ["halves", "isolate", "heal"]
        if cfg.crashes:
            if down:
                actions += ["restart", "restart"]
            if len(down) < self.max_down and len(up) > 1:
                actions += ["crash"]
        if up:
            if cfg.memory_pressure:
                actions += ["pressure"]
            if cfg.leaving:
                actions += ["leave"]
            if cfg.pauses:
                actions += ["pause"]
        if cfg.aof_rewrite_prob > 0 and rng.random() < cfg.aof_rewrite_prob:
            actions = ["rewrite"]
        if actions:
            action = rng.choice(actions)
            n = len(self.nodes)
            if action == "halves":
                order = list(range(n))
                rng.shuffle(order)
                k = rng.randint(1, n - 1)
                self._partition([order[:k], order[k:]])
            elif action == "isolate":
                i = rng.randrange(n)
                self._partition([[i], [j for j in range(n) if j != i]])
            elif action == "heal":
                self._partition([list(range(n))])
            elif action == "crash":
                self._crash(rng.choice(up))
            elif action == "restart":
                self._restart(rng.choice(down))
            elif action == "rewrite" and up:
                self._rewrite(rng.choice(up))
            elif action == "pressure":
                nd = rng.choice(up)
                self._set_pressure(nd, 0 if self._core(nd).memory_warning else 1)
            elif action == "leave":
                nd = rng.choice(up)
                self._set_leaving(nd, nd.id not in self.leaving)
            elif action == "pause":
                nd = rng.choice(up)
                queue = rng.choice(self.cfg.queues)
                self._pause(nd, queue, rng.choice((0, 1, 2, 3, 3)), bcast=True)
        self._at(self.now + self._nemesis_gap(), self._nemesis, None)

    def _scripted(self, arg: tuple[str, tuple[int, ...]]) -> None:
        action, args = arg
        n = len(self.nodes)
        if action == "isolate":
            i = args[0]
            self._partition([[i], [j for j in range(n) if j != i]])
        elif action == "split":  # args: the nodes of one side
            self._partition([list(args), [j for j in range(n) if j not in args]])
        elif action == "heal":
            self._partition([list(range(n))])
        elif action == "crash":
            for i in args:
                if self.nodes[i].up:
                    self._crash(self.nodes[i])
        elif action == "crash_all":
            for nd in self.nodes:
                if nd.up:
                    self._crash(nd)
        elif action == "restart":
            for i in args:
                if not self.nodes[i].up:
                    self._restart(self.nodes[i])
        elif action == "restart_all":
            for nd in self.nodes:
                if not nd.up:
                    self._restart(nd)
        elif action == "rewrite":
            for i in args:
                if self.nodes[i].up:
                    self._rewrite(self.nodes[i])
        elif action in ("pressure", "relief"):
            for i in args:
                if self.nodes[i].up:
                    self._set_pressure(self.nodes[i], 1 if action == "pressure" else 0)
        elif action in ("leave", "stay"):
            for i in args:
                if self.nodes[i].up:
                    self._set_leaving(self.nodes[i], action == "leave")
        else:
            raise ValueError(f"unknown nemesis action {action!r}")

    def _partition(self, groups: list[list[int]]) -> None:
        for g, members in enumerate(groups):
            for i in members:
                self.side[i] = g
        if len(groups) > 1:
            self.stats["partitions"] += 1
        else:
            self.stats["heals"] += 1
        if self._tr:
            desc = " | ".join(",".join(f"n{i}" for i in sorted(g)) for g in groups)
            self._t(f"NEMESIS partition [{desc}]")

    def _crash(self, nd: _Node) -> None:
        self.stats["crashes"] += 1
        if nd.member is not None:
            # disq-node keeps its membership snapshot in the data dir.
            nd.snapshot = nd.member.snapshot()
        lost: list[tuple[str, object]] = []
        if self.cfg.fsync_lost and nd.synced < len(nd.aof):
            lost = nd.aof[nd.synced :]
            del nd.aof[nd.synced :]
        if self._tr:
            extra = f", {len(lost)} unsynced AOF records lost" if lost else ""
            self._t(f"NEMESIS crash {nd.name}{extra}")
        nd.up = False
        nd.gen += 1
        nd.core = None
        nd.member = None
        nd.view = None
        nd.wake_at = INF
        for token, op in list(nd.pending.items()):
            self._client_lost(nd, token, op)
        nd.pending.clear()
        if lost:
            self._note_lost(nd, lost)

    def _note_lost(self, nd: _Node, lost: list[tuple[str, object]]) -> None:
        """fsync_lost: the node now holds whatever its surviving AOF says."""
        touched: set[str] = set()
        for kind, payload in lost:
            if kind == "LOADJOB":
                assert isinstance(payload, JobData)
                self._lost_load.setdefault(payload.id, set()).add(nd.idx)
                touched.add(payload.id)
            else:
                assert isinstance(payload, str)
                self._lost_del.add(payload)
                touched.add(payload)
        latest: dict[str, int] = {}
        for kind, payload in nd.aof:
            jid = payload.id if isinstance(payload, JobData) else str(payload)
            if jid in touched:
                latest[jid] = _HOLDS if kind == "LOADJOB" else _GONE
        for jid in sorted(touched):
            self._copies.setdefault(jid, []).append((self.step, nd.idx, latest.get(jid, _GONE)))

    def _restart(self, nd: _Node) -> None:
        self.stats["restarts"] += 1
        if self._tr:
            self._t(f"NEMESIS restart {nd.name}")
        nd.synced = len(nd.aof)
        self._start_node(nd, fresh=False)

    def _rewrite(self, nd: _Node) -> None:
        """Background AOF rewrite: the file is replaced by a dump of the live jobs."""
        self.stats["aof_rewrites"] += 1
        core = self._core(nd)
        now = self.now + nd.skew
        records = self._guard(nd, core.snapshot_records, now)
        assert isinstance(records, list)
        nd.aof = records
        nd.synced = len(records)  # written, fsynced, renamed
        if self._tr:
            self._t(f"NEMESIS aof-rewrite {nd.name}: {len(records)} records")

    def _set_pressure(self, nd: _Node, level: int) -> None:
        """Memory warning 1: the node refuses REPLJOBs and replicates ADDJOBs externally."""
        self.stats["pressure"] += level
        self._core(nd).memory_warning = level
        if self._tr:
            self._t(f"NEMESIS memory-warning {nd.name} {level}")

    def _set_leaving(self, nd: _Node, leaving: bool) -> None:
        self.stats["leaving"] += leaving
        if leaving:
            self.leaving.add(nd.id)
        else:
            self.leaving.discard(nd.id)
        if nd.member is not None:
            self._guard(nd, nd.member.set_leaving, self.now + nd.skew, leaving)
        if self._tr:
            self._t(f"NEMESIS leaving {nd.name} {'yes' if leaving else 'no'}")
        self._flush(nd)

    def _pause(self, nd: _Node, queue: str, flags: int, bcast: bool) -> None:
        self.stats["pauses"] += bool(flags)
        core = self._core(nd)
        self._guard(nd, core.pause, self.now + nd.skew, queue, flags, bcast)
        if self._tr:
            self._t(f"NEMESIS pause {nd.name} {queue} {flags}{' bcast' if bcast else ''}")
        self._flush(nd)

    def _heal_all(self, _: object) -> None:
        if self._tr:
            self._t("END chaos: heal, restart every node")
        self._partition([list(range(len(self.nodes)))])
        for nd in self.nodes:
            if not nd.up:
                self._restart(nd)
        self._normalise()

    def _normalise(self) -> None:
        """What an operator does after the storm: no memory warning, nobody leaving, every
        queue unpaused on every node (locally: a broadcast PAUSE might be lost)."""
        for nd in self.nodes:
            core = self._core(nd)
            if core.memory_warning:
                self._set_pressure(nd, 0)
            if nd.id in self.leaving or (nd.member is not None and nd.member.leaving):
                self._set_leaving(nd, False)
            for name, q in sorted(core.queues.items()):
                if q.pause:
                    self._pause(nd, name, 0, bcast=False)

    # ================================================================== clients
    def _new_token(self) -> int:
        self._token += 1
        return self._token

    def _produce(self, p: int) -> None:
        cfg = self.cfg
        if self._jobs_left <= 0 or self.now >= self.t_heal:
            return
        rng = self.rng
        up = self._up_nodes(cfg.producer_nodes)
        if not up:
            self._at(self.now + 100, self._produce, p)
            return
        nd = rng.choice(up)
        self._jobs_left -= 1
        self._job_seq += 1
        body = f"j{self._job_seq:04d}".encode()
        queue = rng.choice(cfg.queues)
        if cfg.at_most_once_prob and rng.random() < cfg.at_most_once_prob:
            repl, retry = 1, 0
        else:
            repl = rng.randint(*self.repl_range)
            retry = rng.randint(1, self.max_retry_s)
        async_ = repl > 1 and rng.random() < cfg.async_prob
        delay = 1 if rng.random() < cfg.delay_prob else 0
        timeout = rng.randint(*cfg.add_timeout_ms)
        rec = AddRec(body, nd.idx, queue, repl, retry, async_, self.now)
        assert nd.view is not None
        rec.extrepl = self._core(nd).memory_warning > 0 or nd.view.leaving
        self.adds[body] = rec
        token = self._new_token()
        now = self.now + nd.skew
        core = self._core(nd)
        try:
            res = self._guard(
                nd,
                core.add_job,
                now,
                token,
                queue,
                body,
                timeout_ms=timeout,
                repl=repl,
                delay_s=delay,
                retry_s=retry,
                ttl_s=cfg.ttl_s,
                async_=async_,
            )
        except DisqueError as e:
            # Refused before anything was created: a delivery of it would be a phantom.
            self._add_done(rec, "failed", why=f"{e.code} {e.message}")
            self._flush(nd)
            self._at(self.now + rng.randint(10, 200), self._produce, p)
            return
        if self._tr:
            mode = "ASYNC " if async_ else ""
            self._t(
                f"add  {nd.name} {body!r} {queue} REPLICATE {repl} RETRY {retry} "
                f"DELAY {delay} {mode}TIMEOUT {timeout} -> {res!r}"
            )
        if res is PENDING:
            nd.pending[token] = _Op("add", p, rec)
            # The creator holds the job in memory (WAIT_REPL, not logged yet) and may still
            # send copies of it: for invariant 2 it is a holder until the add resolves.
            for j in core.jobs.values():
                if j.body == body and j.state == WAIT_REPL:
                    rec.waiting_id = j.id
                    self._copies.setdefault(j.id, []).append((self.step, nd.idx, _WAITING))
                    break
            if rng.random() < cfg.client_cancel_prob:
                self._at(self.now + rng.randint(1, timeout), self._cancel, (nd.idx, nd.gen, token))
            self._flush(nd)
        else:
            assert isinstance(res, str), res
            self._flush(nd)  # the reply leaves after the step's AOF records (group commit)
            self._add_done(rec, "ok", job_id=res)
            self._at(self.now + rng.randint(10, 200), self._produce, p)

    def _cancel(self, arg: tuple[int, int, int]) -> None:
        """The producer hangs up before its sync ADDJOB answered (client timeout)."""
        idx, gen, token = arg
        nd = self.nodes[idx]
        if not nd.up or nd.gen != gen:
            return
        op = nd.pending.pop(token, None)
        if op is None:
            return
        core = self._core(nd)
        self._guard(nd, core.cancel, token)
        if self._tr:
            self._t(f"hangup {nd.name} {op.kind} token {token}")
        if op.add is not None:
            self.stats["add_cancelled"] += 1
            self._add_done(op.add, "indeterminate", why="client hung up", nd=nd)
            self._at(self.now + self.rng.randint(10, 200), self._produce, op.client)
        else:
            self.stats["get_cancelled"] += 1
            self._next_get(op.client)
        self._flush(nd)

    def _add_done(
        self,
        rec: AddRec,
        status: str,
        job_id: str | None = None,
        why: str = "",
        nd: _Node | None = None,
    ) -> None:
        if rec.waiting_id is not None and nd is not None:
            # The creator's unlogged WAIT_REPL copy: gone unless it became a logged one.
            j = nd.core.jobs.get(rec.waiting_id) if nd.core is not None else None
            if j is None or j.state == ACKED:
                self._copies[rec.waiting_id].append((self.step, nd.idx, _GONE))
            rec.waiting_id = None
        rec.status = status
        rec.t_end = self.now
        rec.why = why
        if job_id is not None:
            rec.job_id = job_id
            self._body_of.setdefault(job_id, rec.body)
        self.stats[
            {"ok": "add_ok", "failed": "add_failed", "indeterminate": "add_indeterminate"}[status]
        ] += 1
        if self._tr:
            detail = job_id if job_id is not None else why
            self._t(f"add-{status} n{rec.node} {rec.body!r} {detail}")

    def _on_reply(self, nd: _Node, token: int, res: object) -> None:
        op = nd.pending.pop(token, None)
        if op is None:
            raise InvariantViolation(
                self.seed, "client protocol", f"{nd.name}: reply for unknown token {token}: {res}"
            )
        if op.kind == "add":
            rec = op.add
            assert rec is not None
            if isinstance(res, str):
                self._add_done(rec, "ok", job_id=res, nd=nd)
            elif isinstance(res, DisqueError):
                self._add_done(rec, "indeterminate", why=f"{res.code} {res.message}", nd=nd)
            else:
                raise InvariantViolation(
                    self.seed, "client protocol", f"ADDJOB {rec.body!r} answered {res!r}"
                )
            self._at(self.now + self.rng.randint(10, 200), self._produce, op.client)
        else:
            if isinstance(res, list):
                self._delivered(nd, res, op.client)
            elif res is not None:
                raise InvariantViolation(self.seed, "client protocol", f"GETJOB answered {res!r}")
            elif self._tr:
                self._t(f"get  {nd.name} c{op.client} timed out")
            self._next_get(op.client)

    def _client_lost(self, nd: _Node, token: int, op: _Op) -> None:
        """The node died under a blocked client: its connection is reset."""
        if op.kind == "add":
            assert op.add is not None
            self._add_done(op.add, "indeterminate", why=f"{nd.name} crashed", nd=nd)
            self._at(self.now + self.rng.randint(10, 200), self._produce, op.client)
        else:
            self._next_get(op.client)

    def _next_get(self, c: int) -> None:
        if c >= 0:
            self._at(self.now + self.rng.randint(20, 300), self._consume, c)

    def _consume(self, c: int) -> None:
        cfg = self.cfg
        if self.now >= self.t_drain:
            return
        rng = self.rng
        up = self._up_nodes(cfg.consumer_nodes)
        if not up:
            self._at(self.now + 100, self._consume, c)
            return
        nd = rng.choice(up)
        queues = list(cfg.queues)
        rng.shuffle(queues)
        nohang = rng.random() < 0.4
        timeout = rng.randint(50, 1000)
        count = rng.choice((1, 1, 1, 2, 3))
        self._get(nd, c, queues, nohang, timeout, count)

    def _get(
        self, nd: _Node, c: int, queues: list[str], nohang: bool, timeout: int, count: int
    ) -> None:
        token = self._new_token()
        now = self.now + nd.skew
        core = self._core(nd)
        try:
            res = self._guard(
                nd, core.get_job, now, token, queues, nohang=nohang, timeout_ms=timeout, count=count
            )
        except DisqueError as e:
            if e.code != "LEAVING":
                raise InvariantViolation(
                    self.seed, "client protocol", f"{nd.name} GETJOB raised {e}"
                ) from e
            self.stats["get_leaving"] += 1
            if self._tr:
                self._t(f"get  {nd.name} c{c} -> -LEAVING")
            self._next_get(c)
            self._flush(nd)
            return
        if self._tr:
            how = "NOHANG" if nohang else f"TIMEOUT {timeout}"
            shown = [j.id for j in res] if isinstance(res, list) else res
            self._t(f"get  {nd.name} c{c} {how} COUNT {count} {queues} -> {shown}")
        if res is PENDING:
            nd.pending[token] = _Op("get", c)
            if c >= 0 and self.rng.random() < self.cfg.get_cancel_prob:
                self._at(
                    self.now + self.rng.randint(1, timeout), self._cancel, (nd.idx, nd.gen, token)
                )
        else:
            if isinstance(res, list):
                self._delivered(nd, res, c)
            self._next_get(c)
        self._flush(nd)

    def _delivered(self, nd: _Node, jobs: list[DJob], c: int) -> None:
        for j in jobs:
            d = Delivery(self.step, self.now, nd.idx, j.id, j.body)
            self.deliveries.append(d)
            prev = self.delivered.setdefault(j.id, [])
            if prev:
                self.stats["redeliveries"] += 1
            prev.append(d)
            self.stats["deliveries"] += 1
            self._body_of.setdefault(j.id, j.body)
            if self._tr:
                self._t(f"DELIVERED {nd.name} c{c} {j.id} {j.body!r}")
            self._check_delivery(d)
            if c < 0:
                # The drainer acks everything at once where it got it.
                self._at(self.now, self._drain_ack, (nd.idx, nd.gen, j.id))
                continue
            hi = max(50, j.retry_s * 1000 * 3 // 4) if j.retry_s else 500
            self._at(self.now + self.rng.randint(5, hi), self._process, (nd.idx, j.id, c, 0))

    def _process(self, arg: tuple[int, str, int, int]) -> None:
        """What the consumer does with a job it got from node ``idx``."""
        idx, job_id, c, round_ = arg
        cfg = self.cfg
        rng = self.rng
        up = self._up_nodes()
        if not up:
            self.stats["dropped_by_consumer"] += 1
            return
        same = self.nodes[idx]
        r = rng.random()
        if round_ == 0 and r < 0.06:
            self._client_cmd(same if same.up else rng.choice(up), "nack", job_id)
        elif round_ == 0 and r < 0.08:
            # Admin ENQUEUE, maybe on a node that only holds a copy.
            self._client_cmd(rng.choice(up), "enqueue", job_id)
        elif round_ == 0 and r < 0.15:
            target = same if same.up else rng.choice(up)
            self._client_cmd(target, "working", job_id)
            self._at(self.now + rng.randint(5, 800), self._process, (idx, job_id, c, 1))
        elif r < 0.27:
            self.stats["dropped_by_consumer"] += 1
            if self._tr:
                self._t(f"drop c{c} {job_id} (consumer died before ACK)")
        else:
            if same.up and rng.random() >= cfg.ack_other_node_prob:
                target = same
            else:
                target = rng.choice(up)
            self._client_cmd(target, "fastack" if rng.random() < 0.12 else "ack", job_id)

    def _client_cmd(self, nd: _Node, cmd: str, job_id: str) -> None:
        now = self.now + nd.skew
        core = self._core(nd)
        res: object
        try:
            if cmd == "ack":
                res = self._guard(nd, core.ack_job, now, [job_id])
                self.stats["acks"] += 1
                if res == 0:
                    self.stats["dummy_acks"] += 1
                self._client_acks.setdefault(job_id, self.now)
            elif cmd == "fastack":
                res = self._guard(nd, core.fast_ack, now, [job_id])
                self.stats["fastacks"] += 1
                self._client_acks.setdefault(job_id, self.now)
            elif cmd == "nack":
                res = self._guard(nd, core.nack, now, [job_id])
                self.stats["nacks"] += 1
            elif cmd == "enqueue":
                res = self._guard(nd, core.enqueue, now, [job_id])
                self.stats["enqueues"] += 1
                if res:
                    self._admin_enqueued.add(job_id)
            else:
                res = self._guard(nd, core.working, now, job_id)
                self.stats["workings"] += 1
        except DisqueError as e:
            res = f"-{e.code}"  # NOJOB / TOOLATE: normal answers for WORKING
        if self._tr:
            self._t(f"{cmd:<4} {nd.name} {job_id} -> {res}")
        self._flush(nd)

    # ================================================================== end of run
    def _drain_round(self, first: object) -> None:
        """After healing and settling: take everything out of every node, ack it where it
        came from, and stop once no live job is left anywhere (or give up)."""
        cfg = self.cfg
        rng = self.rng
        if first:
            self._normalise()  # a PAUSE sent before the heal may have landed after it
        queues = list(cfg.queues)
        if cfg.drain == "consumers" and cfg.consumer_nodes is not None:
            # Federation must bring the jobs here: block, do not poll.
            for idx in cfg.consumer_nodes:
                nd = self.nodes[idx]
                if nd.up and not any(op.kind == "get" for op in nd.pending.values()):
                    self._get(nd, -1, queues, False, 500, 10)
        else:
            for nd in self._up_nodes():
                for _ in range(50):
                    token = self._new_token()
                    now = self.now + nd.skew
                    core = self._core(nd)
                    res = self._guard(nd, core.get_job, now, token, queues, nohang=True, count=10)
                    if not isinstance(res, list):
                        break
                    if self._tr:
                        self._t(f"drain {nd.name} -> {[j.id for j in res]}")
                    self._delivered(nd, res, -1)
                    self._flush(nd)
        if not self._live_jobs() or self.now >= self.t_give_up:
            if self._tr:
                self._t("END drain")
            if cfg.final_gc_ms:
                self._at(self.now + cfg.final_gc_ms, self._check_gc, None)
            else:
                self._done = True
            return
        self._at(self.now + 100 + rng.randint(0, 100), self._drain_round, False)

    def _drain_ack(self, arg: tuple[int, int, str]) -> None:
        idx, gen, job_id = arg
        nd = self.nodes[idx]
        if nd.up and nd.gen == gen:
            self._client_cmd(nd, "ack", job_id)

    def _check_gc(self, _: object) -> None:
        """Liveness (optional): with every node up and connected for ``final_gc_ms``, acked
        jobs are garbage collected everywhere (Disque 05-acks: evicted when all owners are
        reachable). GC retries back off up to 3 minutes, so give it well over that."""
        self._done = True
        for nd in self.nodes:
            for j in self._core(nd).jobs.values():
                if j.state == ACKED:
                    raise self._violation(
                        "6 (acks are garbage collected)",
                        f"{nd.name} still holds {j.id} ACKED {self.cfg.final_gc_ms} ms after "
                        f"the drain (delivered={self._names(sorted(j.delivered))}, "
                        f"confirmed={self._names(sorted(j.confirmed))})",
                        j.id,
                    )

    def _live_jobs(self) -> bool:
        for nd in self.nodes:
            if nd.core is None:
                return True
            for j in nd.core.jobs.values():
                if j.state == QUEUED or j.state == WAIT_REPL:
                    return True
                if j.state == ACTIVE and j.qtime_ms:
                    return True
            if any(op.kind == "add" for op in nd.pending.values()):
                return True  # an ADDJOB still waiting may yet create a job
        return False

    def _leftover(self) -> list[str]:
        out = []
        for nd in self.nodes:
            if nd.core is None:
                continue
            for j in nd.core.jobs.values():
                if j.state != ACKED:
                    out.append(f"{nd.name}: {j.id} {STATE_NAMES[j.state]} {j.body!r}")
        return out

    # ================================================================== invariants
    def _check_structure(self, nd: _Node) -> None:
        """Invariant 4: a node's queues and its jobs table agree."""
        core = nd.core
        if core is None:
            return
        jobs = core.jobs
        where = f"{nd.name} t={self.now - T0_MS}"
        in_queues = 0
        for name, q in core.queues.items():
            for ctime, job_id in q.skiplist:
                j = jobs.get(job_id)
                if j is None or j.state != QUEUED or j.queue != name or j.ctime != ctime:
                    what = "missing" if j is None else f"{STATE_NAMES[j.state]} in {j.queue!r}"
                    raise self._violation(
                        "4 (queues match jobs)",
                        f"{where}: queue {name!r} holds {job_id} but the job is {what}",
                        job_id,
                    )
            in_queues += len(q.skiplist)
        queued = 0
        for job_id, j in jobs.items():
            if j.state == QUEUED:
                queued += 1
                jq = core.queues.get(j.queue)
                if jq is None or (j.ctime, j.id) not in jq.skiplist:
                    raise self._violation(
                        "4 (queues match jobs)",
                        f"{where}: {job_id} is QUEUED but not in queue {j.queue!r}",
                        job_id,
                    )
            elif j.id != job_id:
                raise self._violation("4 (queues match jobs)", f"{where}: jobs[{job_id}] is {j.id}")
        if queued != in_queues:
            raise self._violation(
                "4 (queues match jobs)", f"{where}: {queued} QUEUED jobs, {in_queues} queued ids"
            )

    def _check_all_structures(self) -> None:
        for nd in self.nodes:
            self._check_structure(nd)

    def _check_delivery(self, d: Delivery) -> None:
        """Invariant 5, checked as deliveries happen."""
        rec = self.adds.get(d.body)
        if rec is None or rec.status == "failed":
            why = "never submitted" if rec is None else f"its ADDJOB was refused ({rec.why})"
            raise self._violation(
                "5 (no phantom jobs)", f"{d.job_id} {d.body!r} delivered but {why}", d.job_id
            )
        first = self.delivered[d.job_id][0]
        if rec.job_id is not None and rec.job_id != d.job_id:
            raise self._violation(
                "5 (one ADDJOB, one job)",
                f"{d.body!r} was added as {rec.job_id} but delivered as {d.job_id}",
                d.job_id,
            )
        if rec.retry_s == 0 and first is not d:
            if d.job_id in self._admin_enqueued:
                return  # an operator asked for this delivery (ENQUEUE <id>)
            if "amo-enqueue-once" in self.cfg.exempt and any(
                first.t <= t <= d.t for t in self._enqueue_once_restarts
            ):
                return
            raise self._violation(
                "5 (at-most-once)",
                f"RETRY 0 job {d.job_id} delivered again by n{d.node} at t={d.t - T0_MS} "
                f"(first by n{first.node} at t={first.t - T0_MS})",
                d.job_id,
            )

    def _check_final(self) -> None:
        cfg = self.cfg
        # Invariant 1: acknowledged ADDJOBs are delivered.
        for rec in self.adds.values():
            if rec.status != "ok" or rec.retry_s == 0:
                continue  # indeterminate/refused, or at-most-once (may be lost by design)
            assert rec.job_id is not None
            if rec.job_id in self.delivered:
                continue
            if rec.t_start + cfg.ttl_s * 1000 <= self.now + 2 * cfg.clock_skew_ms + 1000:
                continue  # it may have expired (every node drops its own copy at its TTL)
            if cfg.fsync_lost and self._lost_everywhere(rec.job_id):
                continue  # every logged copy was lost unsynced: everysec does not promise it
            if rec.extrepl and (
                (rec.async_ and "extrepl-async" in cfg.exempt)
                or (rec.repl == 1 and not rec.async_ and "extrepl-repl1" in cfg.exempt)
            ):
                continue
            holders = self._holders_at_end(rec.job_id)
            raise self._violation(
                "1 (acknowledged ADDJOB delivered)",
                f"{rec.job_id} {rec.body!r} (REPLICATE {rec.repl} RETRY {rec.retry_s}"
                f"{' ASYNC' if rec.async_ else ''}, added on n{rec.node} "
                f"t={rec.t_start - T0_MS}..{rec.t_end - T0_MS}) was never delivered; "
                f"at the end: {holders}",
                rec.job_id,
            )
        # Invariant 2: no delivery after every holder learned the ack (or deleted the job).
        for job_id, ds in self.delivered.items():
            if cfg.fsync_lost and job_id in self._lost_del:
                continue  # a lost DELJOB legitimately brings a copy back
            dead = self._dead_step(job_id)
            if dead is None:
                continue
            late = [d for d in ds if d.step > dead[0]]
            if late:
                d = late[0]
                acked = self._client_acks.get(job_id)
                why = (
                    f"a client acked it at t={acked - T0_MS}"
                    if acked is not None
                    else "no client acked it (deleted)"
                )
                raise self._violation(
                    "2 (no delivery after the ack is everywhere)",
                    f"{job_id} delivered by n{d.node} at t={d.t - T0_MS} (step {d.step}) after "
                    f"every holder ({', '.join(f'n{i}' for i in dead[1])}) had it acked or "
                    f"deleted at step {dead[0]}; {why}",
                    job_id,
                )

    def _lost_everywhere(self, job_id: str) -> bool:
        """fsync_lost: every node that logged the job lost a LOADJOB of it in a crash."""
        lost = self._lost_load.get(job_id)
        if not lost:
            return False
        loaders = {node for _, node, st in self._copies.get(job_id, ()) if st == _HOLDS}
        return loaders <= lost

    def _dead_step(self, job_id: str) -> tuple[int, list[int]] | None:
        """The first step after which every node that ever held a copy (hindsight: including
        those that get one later) had its latest AOF record for the job be a DELJOB, and no
        copy was on the wire."""
        events = self._copies.get(job_id)
        if not events:
            return None
        holders = sorted({node for _, node, st in events if st in (_HOLDS, _WAITING)})
        if not holders:
            return None
        latest: dict[int, int] = {}
        flying = 0
        for k, (step, node, st) in enumerate(events):
            if st == _FLYING:
                flying += 1
            elif st == _LANDED:
                flying -= 1
            else:
                latest[node] = st
            # Judge whole steps only: within one step the order of our records is arbitrary.
            last_of_step = k + 1 == len(events) or events[k + 1][0] != step
            if last_of_step and not flying and all(latest.get(h) == _GONE for h in holders):
                return step, holders
        return None

    def _holders_at_end(self, job_id: str) -> str:
        parts = []
        for nd in self.nodes:
            j = nd.core.jobs.get(job_id) if nd.core is not None else None
            in_aof = any((p.id if isinstance(p, JobData) else p) == job_id for _, p in nd.aof)
            if j is not None or in_aof:
                st = STATE_NAMES[j.state] if j is not None else "-"
                parts.append(f"{nd.name}={st}{'(in AOF)' if in_aof else ''}")
        return ", ".join(parts) or "no node knows it"

    def _violation(
        self, invariant: str, detail: str, job_id: str | None = None
    ) -> InvariantViolation:
        return InvariantViolation(self.seed, invariant, detail, job_id=job_id)

    def _enrich(self, e: InvariantViolation) -> InvariantViolation:
        """Attach the readable part: config, the job's history, the last events."""
        lines = [
            f"config: {config_diff(self.cfg)}",
            f"replay: {replay_command(self.seed, self.cfg)}",
        ]
        if e.report:
            lines.append(e.report)
        if not self._tr:
            lines.append("(run with trace=True for the job's history)")
        else:
            keys: list[str] = []
            if e.job_id is not None:
                keys.append(e.job_id)
                body = self._body_of.get(e.job_id)
                if body is not None:
                    keys.append(repr(body))
            if keys:
                hist = [ln for ln in self.trace if "NEMESIS" in ln or any(k in ln for k in keys)]
                if len(hist) > 400:
                    hist = [*hist[:100], f"... {len(hist) - 400} lines ...", *hist[-300:]]
                lines.append(f"--- history of {' / '.join(keys)} (and nemesis) ---")
                lines.extend(hist)
            lines.append("--- last 40 events ---")
            lines.extend(self.trace[-40:])
        return InvariantViolation(e.seed, e.invariant, e.detail, "\n".join(lines), e.job_id)

    # ================================================================== trace
    def _t(self, line: str) -> None:
        self.trace.append(f"{self.now - T0_MS:>7} {line}")

    def _name(self, node_id: str) -> str:
        nd = self.by_id.get(node_id)
        return nd.name if nd is not None else node_id[:8]

    def _names(self, node_ids: list[str]) -> str:
        return ",".join(sorted(self._name(n) for n in node_ids))

    def _fmt(self, msg: Message) -> str:
        if isinstance(msg, ReplJob):
            d = msg.job
            nd = self._names(d.nodes_delivered)
            return f"REPLJOB {d.id} {d.body!r} {d.queue} r{d.repl} nd=[{nd}]"
        if isinstance(msg, YourJobs):
            return "YOURJOBS " + " ".join(f"{d.id} {d.body!r}" for d in msg.jobs)
        if isinstance(msg, GotJob):
            return f"GOTJOB {msg.job_id}"
        if isinstance(msg, Enqueue):
            return f"ENQUEUE {msg.job_id}"
        if isinstance(msg, Queued):
            return f"QUEUED {msg.job_id} nacks+{int(msg.incr_nacks)} dl+{int(msg.incr_deliveries)}"
        if isinstance(msg, WillQueue):
            return f"WILLQUEUE {msg.job_id}"
        if isinstance(msg, SetAck):
            return f"SETACK {msg.job_id} may_have={msg.may_have}"
        if isinstance(msg, GotAck):
            return f"GOTACK {msg.job_id} known={int(msg.known)}"
        if isinstance(msg, DelJob):
            return "DELJOB " + " ".join(msg.job_ids)
        if isinstance(msg, NeedJobs):
            return f"NEEDJOBS {msg.queue} {msg.count}"
        if isinstance(msg, Working):
            return f"WORKING {msg.job_id}"
        if isinstance(msg, Pause):
            return f"PAUSE {msg.queue} {msg.flags}"
        if isinstance(msg, (Ping, Ack)):
            gossip = " ".join(
                f"{self._name(m.node_id)}:{MEMBER_STATE_NAMES.get(m.state, m.state)}"
                f":{m.incarnation}"
                for m in msg.gossip
            )
            kind = "PING" if isinstance(msg, Ping) else "ACK"
            extra = f" for {self._name(msg.target)}" if isinstance(msg, Ack) and msg.target else ""
            return f"{kind} #{msg.probe_id}{extra} [{gossip}]"
        if isinstance(msg, PingReq):
            return f"PINGREQ #{msg.probe_id} {self._name(msg.target)}"
        return repr(msg)  # pragma: no cover - a new message type


def _carried_ids(msg: Message) -> list[str]:
    """Jobs a message carries a copy of (the receiver may register them)."""
    if isinstance(msg, ReplJob):
        return [msg.job.id]
    if isinstance(msg, YourJobs):
        return [d.id for d in msg.jobs]
    return []


# ====================================================================== sweeps and replay
def sweep_config(seed: int, **overrides: Any) -> SimConfig:
    """The configuration the CI sweep uses for ``seed``: drawn from the seed itself, so
    ``python -m disq.testing.sim --seed N`` replays a failing CI seed with nothing else.
    Small and short on purpose: thousands of these run in CI."""
    r = random.Random(f"disq-sim-config:{seed}")
    nodes = r.choice((3, 3, 3, 4, 4, 5, 5, 6, 7))
    top = min(3, nodes)
    lo = r.choice((1, 2, 2, 3)) if top >= 3 else r.choice((1, 2))
    lo = min(lo, top)
    cfg = SimConfig(
        nodes=nodes,
        loss=r.choice((0.0, 0.0, 0.01, 0.05, 0.1, 0.2)),
        dup=r.choice((0.0, 0.0, 0.05, 0.1, 0.2)),
        delay_ms=(1, r.choice((3, 10, 30, 80, 200))),
        partitions=r.random() < 0.7,
        crashes=r.random() < 0.7,
        duration_ms=r.randint(1500, 3000),
        jobs=r.randint(12, 25),
        producers=r.randint(1, 3),
        consumers=r.randint(1, 3),
        repl=(lo, top),
        max_retry_s=r.choice((1, 1, 2)),
        at_most_once_prob=r.choice((0.0, 0.0, 0.1)),
        fsync_lost=False,
        clock_skew_ms=r.choice((0, 0, 50, 300)),
        view=r.choice(("swim", "swim", "oracle", "static")),
        max_down=r.choice((None, None, None, nodes)),  # sometimes the whole cluster goes down
        memory_pressure=r.random() < 0.25,
        leaving=r.random() < 0.2,
        pauses=r.random() < 0.2,
        enqueue_on_restart_prob=r.choice((0.0, 0.0, 0.5)),
        check_every=5,
        exempt=("extrepl-async",),
    )
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


def config_diff(cfg: SimConfig) -> str:
    """Only the fields that differ from the defaults, as ``SimConfig`` keyword arguments."""
    base = SimConfig()
    parts = [
        f"{f.name}={getattr(cfg, f.name)!r}"
        for f in dataclasses.fields(SimConfig)
        if f.name != "trace" and getattr(cfg, f.name) != getattr(base, f.name)
    ]
    return ", ".join(parts) or "defaults"


def replay_command(seed: int, cfg: SimConfig) -> str:
    """The CLI line that replays this run: the seed's sweep config plus ``--set`` for every
    field that differs from it."""
    base = sweep_config(seed)
    sets = [
        f" --set {shlex.quote(f'{f.name}={getattr(cfg, f.name)!r}')}"
        for f in dataclasses.fields(SimConfig)
        if f.name != "trace" and getattr(cfg, f.name) != getattr(base, f.name)
    ]
    return f"python -m disq.testing.sim --seed {seed} --trace{''.join(sets)}"


def run_seed(seed: int, config: SimConfig | None = None) -> SimResult:
    """Run one seed (default: its sweep configuration) without tracing; if an invariant
    breaks, replay it with tracing so the error carries the job's whole story."""
    cfg = config if config is not None else sweep_config(seed)
    try:
        return Simulation.from_config(seed, cfg).run()
    except InvariantViolation as first:
        if cfg.trace:
            raise
        try:
            Simulation.from_config(seed, dataclasses.replace(cfg, trace=True)).run()
        except InvariantViolation as traced:
            raise traced from None
        raise InvariantViolation(
            seed, first.invariant, first.detail + " (NOT reproduced with tracing on!)"
        ) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m disq.testing.sim", description="Run one seeded cluster simulation."
    )
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--nodes", type=int, help="override the seed's node count (3-7)")
    ap.add_argument("--view", choices=("swim", "oracle", "static"))
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--fsync-lost", action="store_true")
    ap.add_argument("--trace", action="store_true", help="print every event")
    ap.add_argument("--seeds", type=int, default=1, help="run this many seeds from --seed")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a SimConfig field (Python literal), e.g. --set loss=0.3 --set jobs=80",
    )
    args = ap.parse_args(argv)
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in {f.name for f in dataclasses.fields(SimConfig)}:
            ap.error(f"unknown SimConfig field {key!r}")
        overrides[key] = ast.literal_eval(value)
    if args.nodes is not None:
        overrides["nodes"] = args.nodes
        overrides["repl"] = None
        overrides["max_down"] = None
    if args.view is not None:
        overrides["view"] = args.view
    if args.jobs is not None:
        overrides["jobs"] = args.jobs
    if args.fsync_lost:
        overrides["fsync_lost"] = True
    out = sys.stdout.write
    failed = 0
    for seed in range(args.seed, args.seed + args.seeds):
        cfg = sweep_config(seed, trace=args.trace, **overrides)
        try:
            res = run_seed(seed, cfg)
        except InvariantViolation as e:
            failed += 1
            out(f"{e}\n")
            continue
        if args.trace:
            for line in res.trace:
                out(line + "\n")
        stats = " ".join(f"{k}={v}" for k, v in res.stats.items() if v)
        out(f"seed {seed} ok: {stats} trace={res.trace_hash[:16]}\n")
        for line in res.leftover:
            out(f"  leftover {line}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
