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
  (``NodeStep.flush``): first the AOF records the step produced are appended to the node's
  in-memory AOF (they are durable from then on), then its messages, its client replies and
  its beanstalk wake-ups are released. So a GOTJOB, an ADDJOB reply or an INSERTED never
  leaves before the record it vouches for is written (group commit). With ``fsync_lost`` the
  unsynced tail (since the last once-a-second fsync) is dropped at a crash, as ``appendfsync
  everysec`` after a power loss; that weakens invariant 1 (see ``Invariants.check_final``).
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
from typing import Any

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.disque.job import ACKED, ACTIVE, BEANSTALK_ORIGIN, QUEUED, STATE_NAMES, WAIT_REPL
from disq.core.membership import Membership
from disq.core.messages import ALIVE, Member
from disq.core.node_core import NodeCore
from disq.core.schedule.scheduler import KEY_PREFIX
from disq.testing.sim.beanstalk_load import BEAN_STATES, BeanstalkLoad
from disq.testing.sim.config import INF, T0_MS, SimConfig, sweep_config
from disq.testing.sim.invariants import Invariants
from disq.testing.sim.model import InvariantViolation, SimDisqueCore, SimNode, SimResult
from disq.testing.sim.nemesis import Nemesis
from disq.testing.sim.network import Network, OracleView, StaticView
from disq.testing.sim.schedules import Schedules
from disq.testing.sim.step import NodeStep, StepOutputs
from disq.testing.sim.workload import Workload
from disq.testing.sim.world import World

MEET_RETRY_MS = 500  # as cluster_services.MEET_RETRY_S


class Simulation:
    """One seeded run: builds the nodes, wires the parts (each owns its state; the
    ``World`` holds what they share), starts the clients and the nemesis, and drains the
    cluster at the end."""

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
        self.w = w = World(seed, cfg)
        self.stepper = NodeStep(w)
        self.network = Network(w, self.stepper)
        self.schedules = Schedules(w, self.stepper)
        self.checks = Invariants(w, self.schedules)
        self.workload = Workload(w, self.stepper, self.checks, self.schedules)
        self.beanstalk = BeanstalkLoad(w, self.stepper)
        crashed = (self.workload.node_crashed, self.beanstalk.node_crashed)
        self.nemesis = Nemesis(w, self.stepper, self._start_node, crashed)
        self.stepper.connect(
            StepOutputs(
                send=self.network.send,
                reply=self.workload.on_reply,
                wake=self.beanstalk.on_wake,
                record=self.checks.track_aof,
                frames=self.schedules.track_frames if cfg.schedules else None,
                check=self.checks.check_structure,
            )
        )

        for nd in w.nodes:
            self._start_node(nd, True)
        if cfg.view == "swim":
            # --join: every node meets node 0 (and one random other, so node 0 being slow
            # does not serialise the whole join).
            for nd in w.nodes[1:]:
                assert nd.member is not None
                self.network.send(nd, w.ids[0], nd.member.meet_message())
                other = w.rng.randrange(cfg.nodes)
                if other != nd.idx:
                    self.network.send(nd, w.ids[other], nd.member.meet_message())
                # Both meets can be lost: the node resends, as cluster_services.meet_grpc
                # does every 0.5 s until it knows the node it joins through (else nodes that
                # met only each other and a node 0 alone would be two clusters).
                w.at(T0_MS + MEET_RETRY_MS, self._remeet, nd.idx)

        if cfg.max_deliveries:
            w.at(T0_MS + 1, self.workload.set_policy, None)
        w.start_clients(self.workload.produce, self.workload.consume)
        if cfg.beanstalk_jobs:
            w.start_clients(self.beanstalk.produce, self.beanstalk.consume)
        self.nemesis.start()
        self.schedules.start()
        w.at(w.t_heal, self.nemesis.heal_all, None)
        w.at(w.t_drain, self._drain_round, True)

    def _remeet(self, idx: int) -> None:
        w = self.w
        nd = w.nodes[idx]
        if nd.member is None or nd.member.member(w.ids[0]) is not None:
            return  # down (its restart meets again), or it knows the node it joins through
        self.network.send(nd, w.ids[0], nd.member.meet_message())
        w.at(w.now + MEET_RETRY_MS, self._remeet, idx)

    def _start_node(self, nd: SimNode, fresh: bool) -> None:
        """Build the node's cores: new (``fresh``), or restarted from its AOF and its
        membership snapshot, as ``disq-node`` does from its data dir."""
        w = self.w
        cfg = w.cfg
        now = w.now + nd.skew
        peers = [i for i in w.ids if i != nd.id]
        rng_core = random.Random(w.rng.getrandbits(64))
        nd.gen += 1
        nd.up = True
        nd.wake_at = INF
        nd.same_time_ticks = 0
        nd.member = None
        if cfg.view == "swim":
            rng_m = random.Random(w.rng.getrandbits(64))
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
            nd.view = OracleView(nd.id, peers, w)
        else:
            nd.view = StaticView(nd.id, peers, w)
        core = SimDisqueCore(nd.view, rng_core, now)
        core.vote_keys = cfg.vote_keys
        nc = NodeCore(
            BeanstalkCore(persist=True),
            core,
            nd.member,
            beanstalk_replicate=nd.brepl,
            contain_errors=False,
        )
        nc.new_token = w.new_token
        nc.set_persist(True)  # as the server does: the scheduler logs SCHEDULE/SCHEDTICK too
        nd.nc, nd.core = nc, core
        if not fresh:
            records = list(nd.aof)
            if cfg.enqueue_on_restart_prob and w.rng.random() < cfg.enqueue_on_restart_prob:
                core.aof_enqueue_once = True
                w.enqueue_once_restarts.append(w.now)
            w.guard(nd, nc.restore, now, records)
            if w.tr:
                once = " (aof-enqueue-jobs-once)" if cfg.enqueue_on_restart_prob else ""
                w.t(f"{nd.name} restart: restore {len(records)} AOF records{once}")
        self.stepper.flush(nd)

    # ================================================================== event loop
    def run(self) -> SimResult:
        """Run to the end and check the invariants. Raises ``InvariantViolation``."""
        w = self.w
        heap = w.heap
        try:
            while heap and not w.done:
                t, _, fn, arg = heapq.heappop(heap)
                w.now = t
                w.step += 1
                fn(arg)
            self.checks.check_all_structures()
            self.checks.check_final()
        except InvariantViolation as e:
            raise self.checks.enrich(e) from None
        except Exception as e:  # a bug of the simulator itself: still report the seed
            v = InvariantViolation(
                w.seed, "simulator raised", f"{type(e).__name__}: {e}", traceback.format_exc()
            )
            raise self.checks.enrich(v) from e
        return self.result()

    def result(self) -> SimResult:
        w = self.w
        w.stats["steps"] = w.step
        return SimResult(
            seed=w.seed,
            config=w.cfg,
            stats=dict(w.stats),
            adds=w.adds,
            deliveries=w.deliveries,
            trace_hash=hashlib.sha256("\n".join(w.trace).encode()).hexdigest(),
            trace=w.trace,
            leftover=self._leftover(),
            bputs=w.bputs,
            bdeliveries=w.bdeliveries,
        )

    # ================================================================== end of run
    def _drain_round(self, first: object) -> None:
        """After healing and settling: take everything out of every node, ack it where it
        came from, and stop once no live job is left anywhere (or give up)."""
        w = self.w
        cfg = w.cfg
        if first:
            self.nemesis.normalise()  # a PAUSE sent before the heal may have landed after it
        queues = list(w.queues_all)
        if cfg.drain == "consumers" and cfg.consumer_nodes is not None:
            # Federation must bring the jobs here: block, do not poll.
            for idx in cfg.consumer_nodes:
                nd = w.nodes[idx]
                if nd.up and not any(op.kind == "get" for op in nd.pending.values()):
                    self.workload.get(nd, -1, queues, False, 500, 10)
        else:
            for nd in w.up_nodes():
                for _ in range(50):
                    token = w.new_token()
                    now = w.now + nd.skew
                    nc = w.node_core(nd)
                    res = w.guard(nd, nc.get_job, now, token, queues, nohang=True, count=10)
                    if not isinstance(res, list):
                        break
                    if w.tr:
                        w.t(f"drain {nd.name} -> {[j.id for j in res]}")
                    self.workload.got_jobs(nd, res, -1)
                    self.stepper.flush(nd)
                if w.bputs:
                    self.beanstalk.drain(nd)
        busy = self._live_jobs() or self.schedules.waiting()
        if not busy or w.now >= w.t_give_up:
            if w.tr:
                w.t("END drain")
            if cfg.final_gc_ms:
                w.at(w.now + cfg.final_gc_ms, self.checks.check_gc, None)
            else:
                w.done = True
            return
        w.at(w.now + 100 + w.rng.randint(0, 100), self._drain_round, False)

    def _live_jobs(self) -> bool:
        w = self.w
        if w.bputs and self.beanstalk.live():
            return True
        for nd in w.nodes:
            if nd.core is None:
                return True
            for j in nd.core.jobs.values():
                if j.flags & BEANSTALK_ORIGIN:
                    continue  # the beanstalk core's job (above)
                if j.idem_key.startswith(KEY_PREFIX):
                    continue  # a schedule's tick: it makes more; schedules.waiting covers them
                if j.state == QUEUED or j.state == WAIT_REPL:
                    return True
                if j.state == ACTIVE and j.qtime_ms:
                    return True
            if any(op.kind == "add" for op in nd.pending.values()):
                return True  # an ADDJOB still waiting may yet create a job
        return False

    def _leftover(self) -> list[str]:
        out = []
        for nd in self.w.nodes:
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
