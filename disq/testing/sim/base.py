"""The simulation's shared state and one node step: the only place a node's Ready is taken.

A step is one event handled by one node (a message, a timer, a client command). Then
:meth:`SimBase._flush` does what the server runtime does after a loop iteration:
``rd = node.ready(now)``; ``apply_ready(rd, persist, send, reply, wake)`` (records appended to
the node's in-memory AOF first, then its messages, then its replies and beanstalk wake-ups);
``node.advance()``; and the node's next timer at ``node.next_deadline_ms()``.
"""

from __future__ import annotations

import heapq
import random
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any, ParamSpec, TypeVar

from disq.core.beanstalk.model import Session
from disq.core.disque.api import DeferredResult, DisqueError
from disq.core.disque.job import DJob
from disq.core.messages import MEMBER_STATE_NAMES, Message
from disq.core.node_core import apply_ready
from disq.persistence.cluster_records import to_core_records
from disq.persistence.framing import iter_frames
from disq.testing.sim.config import INF, T0_MS, SimConfig
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

_SAME_TIME_TICKS_MAX = 10_000  # a node whose deadline never moves past now is spinning

# AOF-derived copy states per (job, node), for invariant 2.
HOLDS = 1  # latest record is LOADJOB: a copy that a restart would bring back
GONE = 0  # latest record is DELJOB (acked or deleted), or the record was lost
# A copy travelling in a REPLJOB or YOURJOBS is a copy too (a RETRY 0 job moved by federation
# exists only there): sent (+1) and landed or lost on the way (-1).
FLYING = 2
LANDED = 3
WAITING = 4  # the creator's WAIT_REPL copy: in memory only, but it can still send copies


class SimBase:
    """State every part of the simulation shares, the event heap and the node step. The
    mixins (network, nemesis, workload, beanstalk workload, invariants) add the rest."""

    seed: int
    cfg: SimConfig
    rng: random.Random
    _tr: bool
    trace: list[str]
    now: int
    step: int
    _seq: int
    _heap: list[tuple[int, int, Callable[[Any], None], Any]]
    _token: int
    _done: bool
    repl_range: tuple[int, int]
    max_down: int
    max_retry_s: int
    nodes: list[SimNode]
    by_id: dict[str, SimNode]
    ids: list[str]
    side: list[int]
    leaving: set[str]
    adds: dict[bytes, AddRec]
    deliveries: list[Delivery]
    delivered: dict[str, list[Delivery]]
    _body_of: dict[str, bytes]
    _copies: dict[str, list[tuple[int, int, int]]]
    _lost_load: dict[str, set[int]]
    _lost_del: set[str]
    _client_acks: dict[str, int]
    # invariant 9: job id -> most deliveries of it seen when an ACK/FASTACK (a consumer's or
    # the drain's) reached a node; job id -> times a consumer died holding it
    _ack_cover: dict[str, int]
    _drops: dict[str, int]
    _enqueue_once_restarts: list[int]
    _admin_enqueued: set[str]
    _jobs_left: int
    _job_seq: int
    stats: dict[str, int]
    t_clients: int
    t_heal: int
    t_drain: int
    t_give_up: int
    queues_all: tuple[str, ...]  # what consumers and the drain read (schedules' queues too)
    # idempotency keys: key -> its adds in order; (node, key) pairs the node must know
    idem_adds: dict[str, list[AddRec]]
    # the beanstalk door: puts by body, deliveries by body
    bputs: dict[bytes, BeanRec]
    bdeliveries: list[Delivery]
    bdelivered: dict[bytes, list[Delivery]]
    _bjobs_left: int

    # ------------------------------------------------------------------ provided elsewhere
    def _send(self, src: SimNode, dest: str, msg: Message) -> None:
        raise NotImplementedError

    def _on_reply(self, nd: SimNode, token: int, res: DeferredResult) -> None:
        raise NotImplementedError

    def _on_wake(self, nd: SimNode, session: Session, res: Any) -> None:
        raise NotImplementedError

    def _track_aof(self, nd: SimNode, rec: tuple[str, object]) -> None:
        raise NotImplementedError

    def _check_structure(self, nd: SimNode) -> None:
        raise NotImplementedError

    def _track_sched(self, nd: SimNode, frames: list[tuple[int, bytes]]) -> None:
        raise NotImplementedError

    def _sched_delivery(self, d: Delivery, j: DJob) -> None:
        raise NotImplementedError

    def _avail_note(self) -> None:
        raise NotImplementedError

    def _check_schedules(self) -> None:
        raise NotImplementedError

    def _sched_waiting(self) -> bool:
        raise NotImplementedError

    def _check_delivery(self, d: Delivery) -> None:
        raise NotImplementedError

    def _client_lost(self, nd: SimNode, token: int, op: Any) -> None:
        raise NotImplementedError

    def _start_node(self, nd: SimNode, fresh: bool) -> None:
        raise NotImplementedError

    def oracle_reachable(self, me: str, peers: list[str]) -> list[str]:
        raise NotImplementedError

    def oracle_up(self, peers: list[str]) -> list[str]:
        raise NotImplementedError

    def _bput_done(self, rec: BeanRec, status: str, why: str = "") -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ event loop
    def _at(self, t: int, fn: Callable[[Any], None], arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, arg))

    def _new_token(self) -> int:
        """One token counter for every node (NodeCore.new_token is replaced by this)."""
        self._token += 1
        return self._token

    def _guard(self, nd: SimNode, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
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

    def _core(self, nd: SimNode) -> SimDisqueCore:
        assert nd.core is not None
        return nd.core

    def _up_nodes(
        self, allowed: tuple[int, ...] | None = None, frozen: bool = False
    ) -> list[SimNode]:
        """Live nodes (in ``allowed``); frozen ones too only if ``frozen`` (a client that
        picks one waits for its thaw)."""
        return [
            nd
            for nd in self.nodes
            if nd.up and (frozen or not nd.frozen) and (allowed is None or nd.idx in allowed)
        ]

    def _wait_for_thaw(self, nd: SimNode, fn: Callable[[], None]) -> bool:
        """A frozen node (SIGSTOP) reads nothing: ``fn`` (a peer message, a client command)
        waits in its socket buffer, in order, until the thaw. True if it was held."""
        if not nd.frozen:
            return False
        nd.held.append(fn)
        return True

    def _violation(
        self, invariant: str, detail: str, job_id: str | None = None
    ) -> InvariantViolation:
        return InvariantViolation(self.seed, invariant, detail, job_id=job_id)

    # ------------------------------------------------------------------ the node step
    def _flush(self, nd: SimNode) -> None:
        """End of a step: take the node's Ready and apply it as the server runtime does
        (records, then messages, then replies and wake-ups), then its next timer."""
        if self._wait_for_thaw(nd, partial(self._flush, nd)):
            return  # a frozen node's output stays in its process until the thaw
        nc = nd.nc
        assert nc is not None
        nd.steps += 1
        rd = self._guard(nd, nc.ready, self.now + nd.skew)
        for node_id, state in rd.member_changes:
            nd.mstate[node_id] = state
            if self._tr:
                self._t(
                    f"{nd.name} view: {self._name(node_id)} {MEMBER_STATE_NAMES.get(state, state)}"
                )
        # Sorted by peer: the cores iterate sets of node ids (hash order differs between
        # processes), and message delays are drawn in send order.
        rd.messages = {peer: rd.messages[peer] for peer in sorted(rd.messages)}
        applied = apply_ready(
            rd,
            partial(self._persist, nd),
            partial(self._send_all, nd),
            partial(self._on_reply, nd),
            partial(self._on_wake, nd),
        )
        assert applied  # the in-memory AOF never refuses
        nc.advance()
        if self.cfg.check_every and nd.steps % self.cfg.check_every == 0:
            self._check_structure(nd)
        self._schedule_tick(nd)

    def _persist(self, nd: SimNode, records: list[bytes]) -> bool:
        frames = list(iter_frames(b"".join(records)))
        nd.aof.extend(frames)
        for rec in to_core_records(frames):
            self._track_aof(nd, rec)
        if self.cfg.schedules:
            self._track_sched(nd, frames)
        return True

    def _send_all(self, nd: SimNode, peer: str, msgs: list[Message]) -> None:
        for msg in msgs:
            self._send(nd, peer, msg)

    def _schedule_tick(self, nd: SimNode) -> None:
        nc = nd.nc
        assert nc is not None
        dl = nc.next_deadline_ms()
        if dl < 0:
            return
        t = max(dl - nd.skew, self.now)
        if t < nd.wake_at:
            nd.wake_at = t
            self._at(t, self._tick, (nd.idx, nd.gen))

    def _tick(self, arg: tuple[int, int]) -> None:
        idx, gen = arg
        nd = self.nodes[idx]
        if not nd.up or nd.gen != gen or nd.wake_at != self.now:
            return  # an old life's timer, or superseded by an earlier one
        nd.wake_at = INF
        if nd.frozen:
            return  # no timer runs while frozen: the thaw schedules the next one
        assert nd.nc is not None
        self._guard(nd, nd.nc.tick, self.now + nd.skew)
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

    # ------------------------------------------------------------------ trace
    def _t(self, line: str) -> None:
        self.trace.append(f"{self.now - T0_MS:>7} {line}")

    def _name(self, node_id: str) -> str:
        nd = self.by_id.get(node_id)
        return nd.name if nd is not None else node_id[:8]

    def _names(self, node_ids: list[str]) -> str:
        return ",".join(sorted(self._name(n) for n in node_ids))
