"""A deterministic, seeded simulation of a whole disq cluster (design.md sections 1 and 4).

The REAL node core (``NodeCore``: beanstalk core, ``DisqueCore`` and, by default, the SWIM
``Membership``) of 3-7 nodes runs against a fake clock and a fake network. One
``random.Random(seed)`` drives everything: message delays (so messages reorder), loss,
duplication, partitions, crashes and restarts, and the clients; each node's cores get their
own ``Random`` derived from it. Events sit in one heap
ordered by ``(time, sequence)``: no wall clock, no threads, so a seed replays byte for byte
(``python -m disq.testing.sim --seed N --trace``).

What a node is here, and why it matches ``disq/server``:

- One *step* = one event handled by one node (a message, a timer, a client command). Then
  the node's ``Ready`` is taken and applied with ``apply_ready`` as the real loop does
  (``SimBase._flush``): first the AOF records the step produced are appended to the node's
  in-memory AOF (they are durable from then on), then its messages, its client replies and
  its beanstalk wake-ups are released. So a GOTJOB, an ADDJOB reply or an INSERTED never
  leaves before the record it vouches for is written (group commit). With ``fsync_lost`` the
  unsynced tail (since the last once-a-second fsync) is dropped at a crash, as ``appendfsync
  everysec`` after a power loss; that weakens invariant 1 (see ``_check_final``).
- A crash throws the node's memory away (cores, blocked clients, in-flight messages to it).
  A restart builds new cores for the same node id and replays its AOF with ``restore``; the
  membership comes back from its last snapshot, as ``disq-node`` does from its data dir.
- Clients talk to any live node (clients are never partitioned from nodes: partitions cut
  node-to-node links only). Producers ADDJOB unique bodies (sync or ASYNC, REPLICATE from a
  range, RETRY 1-3 s, sometimes DELAY 1 or at-most-once, sometimes hanging up early);
  consumers GETJOB (NOHANG or blocking, sometimes hanging up) and then ACK (sometimes on
  another node, sometimes FASTACK), NACK, WORKING, admin ENQUEUE, or vanish without acking.
- The nemesis (random from the seed, or a fixed ``nemesis_script``): partitions (random
  halves, one node isolated), heal, crash (never more than ``max_down`` nodes down or frozen
  at once), restart, AOF rewrite, and optionally memory warnings (external replication),
  CLUSTER LEAVING, queue PAUSE and freezes (SIGSTOP: the node takes no steps and runs no
  timers, messages and client commands to it wait in order, its own output waits; all of it
  resumes at the thaw). At ``duration_ms`` everything heals, every frozen node thaws and
  every node restarts; the consumers go on for ``settle_ms`` (requeues happen), then every
  node is drained.

The invariants are the spec: see :mod:`disq.testing.sim.invariants`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import random
import traceback
from collections.abc import Callable
from typing import Any

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.disque.job import ACKED, ACTIVE, BEANSTALK_ORIGIN, QUEUED, STATE_NAMES, WAIT_REPL
from disq.core.membership import Membership
from disq.core.messages import ALIVE, Member
from disq.core.node_core import NodeCore
from disq.core.schedule.scheduler import KEY_PREFIX
from disq.testing.sim.beanstalk_load import BEAN_STATES, BeanstalkMixin
from disq.testing.sim.config import INF, SCHED_SKIP_QUEUE, T0_MS, SimConfig, sweep_config
from disq.testing.sim.invariants import InvariantsMixin
from disq.testing.sim.model import (
    AddRec,
    Delivery,
    InvariantViolation,
    SimDisqueCore,
    SimNode,
    SimResult,
)
from disq.testing.sim.nemesis import NemesisMixin
from disq.testing.sim.network import NetworkMixin, OracleView, StaticView
from disq.testing.sim.schedules import SchedulesMixin
from disq.testing.sim.workload import WorkloadMixin

MEET_RETRY_MS = 500  # as cluster_services.MEET_RETRY_S


class Simulation(
    NetworkMixin, NemesisMixin, WorkloadMixin, BeanstalkMixin, SchedulesMixin, InvariantsMixin
):
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

        self.nodes: list[SimNode] = []
        for i in range(n):
            node_id = f"{self.rng.getrandbits(160):040x}"
            skew = self.rng.randint(-cfg.clock_skew_ms, cfg.clock_skew_ms)
            self.nodes.append(SimNode(i, node_id, skew))
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
        self._ack_cover: dict[str, int] = {}  # invariant 9 (see base.py)
        self._drops: dict[str, int] = {}
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
                "msgs_held",
                "crashes",
                "restarts",
                "freezes",
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
                "idem_retries",
                "bput_ok",
                "bput_failed",
                "bput_indeterminate",
                "bdeliveries",
                "bredeliveries",
                "bdeletes",
                "bburys",
                "breleases",
                "bvanishs",
                "bkicks",
            )
        }
        self.idem_adds = {}
        self.bputs = {}
        self.bdeliveries = []
        self.bdelivered = {}
        self._bjobs_left = cfg.beanstalk_jobs
        if cfg.beanstalk_jobs:
            blo, bhi = cfg.beanstalk_repl
            for nd in self.nodes:
                nd.brepl = max(1, min(n, self.rng.randint(blo, bhi)))

        # Phases (global time).
        self.t_clients = T0_MS + (cfg.warmup_ms if cfg.view == "swim" else 0)
        self.t_heal = self.t_clients + cfg.duration_ms
        settle = cfg.settle_ms
        if settle is None:
            settle = 3 * self.max_retry_s * 1000 + 2000
        self.t_drain = self.t_heal + settle
        self.t_give_up = self.t_drain + cfg.drain_max_ms
        self.queues_all = cfg.queues
        if cfg.schedules and SCHED_SKIP_QUEUE not in cfg.queues:
            self.queues_all = (*cfg.queues, SCHED_SKIP_QUEUE)

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
                # Both meets can be lost: the node resends, as cluster_services.meet_grpc
                # does every 0.5 s until it knows the node it joins through (else nodes that
                # met only each other and a node 0 alone would be two clusters).
                self._at(T0_MS + MEET_RETRY_MS, self._remeet, nd.idx)

        for p in range(cfg.producers):
            self._at(self.t_clients + self.rng.randint(0, 50), self._produce, p)
        for c in range(cfg.consumers):
            start = self.t_clients + cfg.consumer_start_ms + self.rng.randint(0, 50)
            self._at(start, self._consume, c)
        if cfg.beanstalk_jobs:
            for p in range(cfg.producers):
                self._at(self.t_clients + self.rng.randint(0, 50), self._bproduce, p)
            for c in range(cfg.consumers):
                start = self.t_clients + cfg.consumer_start_ms + self.rng.randint(0, 50)
                self._at(start, self._bconsume, c)
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
            or cfg.freezes
        ):
            self._at(self.t_clients + self._nemesis_gap(), self._nemesis, None)
        if cfg.fsync_lost:
            self._at(T0_MS + self.rng.randint(0, 999), self._fsync, None)
        self._sched_init()
        self._at(self.t_heal, self._heal_all, None)
        self._at(self.t_drain, self._drain_round, True)

    def _remeet(self, idx: int) -> None:
        nd = self.nodes[idx]
        if nd.member is None or nd.member.member(self.ids[0]) is not None:
            return  # down (its restart meets again), or it knows the node it joins through
        self._send(nd, self.ids[0], nd.member.meet_message())
        self._at(self.now + MEET_RETRY_MS, self._remeet, idx)

    def _start_node(self, nd: SimNode, fresh: bool) -> None:
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
            nd.view = OracleView(nd.id, peers, self)
        else:
            nd.view = StaticView(nd.id, peers, self)
        core = SimDisqueCore(nd.view, rng_core, now)
        core.vote_keys = cfg.vote_keys
        nc = NodeCore(
            BeanstalkCore(persist=True),
            core,
            nd.member,
            beanstalk_replicate=nd.brepl,
            contain_errors=False,
        )
        nc.new_token = self._new_token
        nc.set_persist(True)  # as the server does: the scheduler logs SCHEDULE/SCHEDTICK too
        nd.nc, nd.core = nc, core
        if not fresh:
            records = list(nd.aof)
            if cfg.enqueue_on_restart_prob and self.rng.random() < cfg.enqueue_on_restart_prob:
                core.aof_enqueue_once = True
                self._enqueue_once_restarts.append(self.now)
            self._guard(nd, nc.restore, now, records)
            if self._tr:
                once = " (aof-enqueue-jobs-once)" if cfg.enqueue_on_restart_prob else ""
                self._t(f"{nd.name} restart: restore {len(records)} AOF records{once}")
        self._flush(nd)

    # ================================================================== event loop
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
            bputs=self.bputs,
            bdeliveries=self.bdeliveries,
        )

    # ================================================================== end of run
    def _drain_round(self, first: object) -> None:
        """After healing and settling: take everything out of every node, ack it where it
        came from, and stop once no live job is left anywhere (or give up)."""
        cfg = self.cfg
        rng = self.rng
        if first:
            self._normalise()  # a PAUSE sent before the heal may have landed after it
        queues = list(self.queues_all)
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
                if self.bputs:
                    self._bdrain(nd)
        busy = self._live_jobs() or self._sched_waiting()
        if not busy or self.now >= self.t_give_up:
            if self._tr:
                self._t("END drain")
            if cfg.final_gc_ms:
                self._at(self.now + cfg.final_gc_ms, self._check_gc, None)
            else:
                self._done = True
            return
        self._at(self.now + 100 + rng.randint(0, 100), self._drain_round, False)

    def _live_jobs(self) -> bool:
        if self.bputs and self._bean_live():
            return True
        for nd in self.nodes:
            if nd.core is None:
                return True
            for j in nd.core.jobs.values():
                if j.flags & BEANSTALK_ORIGIN:
                    continue  # the beanstalk core's job (above)
                if j.idem_key.startswith(KEY_PREFIX):
                    continue  # a schedule's tick: it makes more; _sched_waiting covers them
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
                if j.state != ACKED and not j.flags & BEANSTALK_ORIGIN:
                    out.append(f"{nd.name}: {j.id} {STATE_NAMES[j.state]} {j.body!r}")
            if nd.nc is not None:
                for job in nd.nc.beanstalk.jobs.values():
                    state = BEAN_STATES.get(job.state, str(job.state))
                    out.append(f"{nd.name}: beanstalk {job.id} {state} {job.body!r}")
        return out


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
