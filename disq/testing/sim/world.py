"""The simulation's shared state: the seed's ``Random``, the clock and the event heap, the
nodes and the network's sides, the phases of the run, the trace, and the client-side records
every part reads (what the invariants are checked against). Every part of the simulation
holds the one ``World``; none holds another's state."""

from __future__ import annotations

import heapq
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from disq.core.disque.api import DisqueError
from disq.core.node_core import NodeCore
from disq.testing.sim.config import DEAD_LETTER_QUEUE, SCHED_SKIP_QUEUE, T0_MS, SimConfig
from disq.testing.sim.model import (
    AddRec,
    BeanRec,
    Delivery,
    InvariantViolation,
    SimDisqueCore,
    SimNode,
)

_P = ParamSpec("_P")
_R = TypeVar("_R")

# AOF-derived copy states per (job, node), for invariant 2.
HOLDS = 1  # latest record is LOADJOB: a copy that a restart would bring back
GONE = 0  # latest record is DELJOB (acked or deleted), or the record was lost
# A copy travelling in a REPLJOB or YOURJOBS is a copy too (a RETRY 0 job moved by federation
# exists only there): sent (+1) and landed or lost on the way (-1).
FLYING = 2
LANDED = 3
WAITING = 4  # the creator's WAIT_REPL copy: in memory only, but it can still send copies

STATS = (
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


@dataclass(slots=True)
class Jobs:
    """A kind of producers' jobs still to put, and the prefix of their bodies."""

    prefix: str
    left: int


class World:
    """State every part of the simulation shares, the event heap and the trace."""

    def __init__(self, seed: int, cfg: SimConfig) -> None:
        self.seed = seed
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.tr = cfg.trace
        self.trace: list[str] = []
        self.now = T0_MS
        self.step = 0
        self._seq = 0
        self.heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self.token = 0  # the last client token handed out (every node's)
        self.done = False

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
        # Dead letters delivered (invariant 11): the original's id -> the dead letters' ids.
        self.dead_letters: dict[str, set[str]] = {}
        self.dead_letter_ids: set[str] = set()
        self.body_of: dict[str, bytes] = {}
        # job id -> [(step, node, HOLDS|GONE|FLYING|LANDED|WAITING)] from the AOF stream, the
        # copies on the wire and the creators' WAIT_REPL copies: invariant 2.
        self.copies: dict[str, list[tuple[int, int, int]]] = {}
        # fsync_lost: job id -> nodes that lost a LOADJOB of it in a crash.
        self.lost_load: dict[str, set[int]] = {}
        self.lost_del: set[str] = set()  # fsync_lost: a DELJOB of this job was lost
        self.client_acks: dict[str, int] = {}  # job id -> first client ACK/FASTACK time
        # invariant 9: job id -> most deliveries of it seen when an ACK/FASTACK (a consumer's
        # or the drain's) reached a node; job id -> times a consumer died holding it
        self.ack_cover: dict[str, int] = {}
        self.drops: dict[str, int] = {}
        self.enqueue_once_restarts: list[int] = []  # times of aof-enqueue-jobs-once restarts
        self.admin_enqueued: set[str] = set()  # jobs an admin ENQUEUE really queued
        self.job_seq = 0  # bodies of Disque and beanstalk jobs alike
        self.stats: dict[str, int] = dict.fromkeys(STATS, 0)
        # idempotency keys: key -> its adds in order
        self.idem_adds: dict[str, list[AddRec]] = {}
        # the beanstalk door: puts by body, deliveries by body
        self.bputs: dict[bytes, BeanRec] = {}
        self.bdeliveries: list[Delivery] = []
        self.bdelivered: dict[bytes, list[Delivery]] = {}
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
        # what consumers and the drain read (schedules' queues too)
        self.queues_all = cfg.queues
        if cfg.schedules and SCHED_SKIP_QUEUE not in cfg.queues:
            self.queues_all = (*cfg.queues, SCHED_SKIP_QUEUE)
        if cfg.max_deliveries:
            self.queues_all = (*self.queues_all, DEAD_LETTER_QUEUE)
        # (sim time, per node: available, side, takes copies) at each nemesis action, for
        # the schedules' invariant (only with schedules: nothing else reads it)
        self.avail_log: list[tuple[int, tuple[bool, ...], tuple[int, ...], tuple[bool, ...]]] = []

    # ------------------------------------------------------------------ event loop
    def at(self, t: int, fn: Callable[[Any], None], arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, fn, arg))

    def new_token(self) -> int:
        """One token counter for every node (NodeCore.new_token is replaced by this)."""
        self.token += 1
        return self.token

    def guard(self, nd: SimNode, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
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

    def violation(
        self, invariant: str, detail: str, job_id: str | None = None
    ) -> InvariantViolation:
        return InvariantViolation(self.seed, invariant, detail, job_id=job_id)

    # ------------------------------------------------------------------ nodes
    @staticmethod
    def core(nd: SimNode) -> SimDisqueCore:
        """The node's Disque core: what the invariants and the nemesis read and bend."""
        assert nd.core is not None
        return nd.core

    @staticmethod
    def node_core(nd: SimNode) -> NodeCore:
        """The node's node core: the one API clients' commands go in by, as on a node."""
        assert nd.nc is not None
        return nd.nc

    def up_nodes(
        self, allowed: tuple[int, ...] | None = None, frozen: bool = False
    ) -> list[SimNode]:
        """Live nodes (in ``allowed``); frozen ones too only if ``frozen`` (a client that
        picks one waits for its thaw)."""
        return [
            nd
            for nd in self.nodes
            if nd.up and (frozen or not nd.frozen) and (allowed is None or nd.idx in allowed)
        ]

    def client_node(
        self, among: tuple[int, ...] | None, again: Callable[[int], None], client: int, frozen: bool
    ) -> SimNode | None:
        """The node a client's next call goes to, at random among the live ones of ``among``
        (a frozen one too if ``frozen``: the call waits for its thaw); None when there is
        none, and ``again(client)`` in 100 ms."""
        up = self.up_nodes(among, frozen=frozen)
        if not up:
            self.at(self.now + 100, again, client)
            return None
        return self.rng.choice(up)

    def start_clients(self, produce: Callable[[int], None], consume: Callable[[int], None]) -> None:
        """Producers start with the clients phase, consumers ``consumer_start_ms`` later (each
        within 50 ms)."""
        for p in range(self.cfg.producers):
            self.at(self.t_clients + self.rng.randint(0, 50), produce, p)
        for c in range(self.cfg.consumers):
            start = self.t_clients + self.cfg.consumer_start_ms + self.rng.randint(0, 50)
            self.at(start, consume, c)

    def next_put(
        self, jobs: Jobs, again: Callable[[int], None], client: int, frozen: bool
    ) -> tuple[SimNode, bytes] | None:
        """A producer's next job: the node it goes to (``client_node`` among
        ``producer_nodes``) and its unique body; None once ``jobs`` are all put or the chaos
        phase is over, or (``again`` then) while no node is up."""
        if jobs.left <= 0 or self.now >= self.t_heal:
            return None
        nd = self.client_node(self.cfg.producer_nodes, again, client, frozen)
        if nd is None:
            return None
        jobs.left -= 1
        self.job_seq += 1  # Disque's and beanstalk's bodies share the numbering
        return nd, f"{jobs.prefix}{self.job_seq:04d}".encode()

    @staticmethod
    def wait_for_thaw(nd: SimNode, fn: Callable[[], None]) -> bool:
        """A frozen node (SIGSTOP) reads nothing: ``fn`` (a peer message, a client command)
        waits in its socket buffer, in order, until the thaw. True if it was held."""
        if not nd.frozen:
            return False
        nd.held.append(fn)
        return True

    def note_availability(self) -> None:
        """After every nemesis action: who could take part in firing a schedule's tick."""
        if not self.cfg.schedules:
            return
        ok = tuple(nd.up and not nd.frozen and nd.id not in self.leaving for nd in self.nodes)
        copies = tuple(
            a and nd.core is not None and not nd.core.memory.warning
            for a, nd in zip(ok, self.nodes, strict=True)
        )
        snap = (self.now, ok, tuple(self.side), copies)
        if self.avail_log and self.avail_log[-1][0] == self.now:
            self.avail_log[-1] = snap
        else:
            self.avail_log.append(snap)

    # ------------------------------------------------------------------ trace
    def t(self, line: str) -> None:
        self.trace.append(f"{self.now - T0_MS:>7} {line}")

    def name(self, node_id: str) -> str:
        nd = self.by_id.get(node_id)
        return nd.name if nd is not None else node_id[:8]

    def names(self, node_ids: list[str]) -> str:
        return ",".join(sorted(self.name(n) for n in node_ids))
