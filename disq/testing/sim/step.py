"""One node step: the only place a node's Ready is taken.

A step is one event handled by one node (a message, a timer, a client command). Then
:meth:`NodeStep.flush` does what the server runtime does after a loop iteration:
``rd = node.ready(now)``; ``apply_ready(rd, persist, send, reply, wake)`` (records appended to
the node's in-memory AOF first, then its messages, then its replies and beanstalk wake-ups);
``node.advance()``; and the node's next timer at ``node.next_deadline_ms()``. Where the
outputs go (the network, the clients, the checks) is given by :class:`StepOutputs`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from disq.core.beanstalk.model import Session
from disq.core.disque.api import DeferredResult
from disq.core.messages import MEMBER_STATE_NAMES, Message
from disq.core.node_core import apply_ready
from disq.persistence.cluster_records import to_core_records
from disq.persistence.framing import iter_frames
from disq.testing.sim.config import INF, T0_MS
from disq.testing.sim.model import InvariantViolation, SimNode
from disq.testing.sim.world import World

_SAME_TIME_TICKS_MAX = 10_000  # a node whose deadline never moves past now is spinning


@dataclass(frozen=True, slots=True)
class StepOutputs:
    """Where a step's output goes."""

    send: Callable[[SimNode, str, Message], None]  # a peer message: the network
    reply: Callable[[SimNode, int, DeferredResult], None]  # a blocked Disque client's answer
    wake: Callable[[SimNode, Session, Any], None]  # a beanstalk put's INSERTED
    record: Callable[[SimNode, tuple[str, object]], None]  # each job record the AOF got
    frames: Callable[[SimNode, list[tuple[int, bytes]]], None] | None  # every frame, if wanted
    check: Callable[[SimNode], None]  # the structural check (invariant 4)


class NodeStep:
    """Ends a node's steps as the runtime does and runs its timers."""

    def __init__(self, world: World) -> None:
        self.w = world
        self._out: StepOutputs | None = None

    def connect(self, out: StepOutputs) -> None:
        """The parts a step's output goes to exist only once the step does (they step nodes
        themselves): the simulation connects them before the first step."""
        self._out = out

    def flush(self, nd: SimNode) -> None:
        """End of a step: take the node's Ready and apply it as the server runtime does
        (records, then messages, then replies and wake-ups), then its next timer."""
        w = self.w
        if w.wait_for_thaw(nd, partial(self.flush, nd)):
            return  # a frozen node's output stays in its process until the thaw
        out = self._out
        assert out is not None
        nc = nd.nc
        assert nc is not None
        nd.steps += 1
        rd = w.guard(nd, nc.ready, w.now + nd.skew)
        for node_id, state in rd.member_changes:
            nd.mstate[node_id] = state
            if w.tr:
                w.t(f"{nd.name} view: {w.name(node_id)} {MEMBER_STATE_NAMES.get(state, state)}")
        # Sorted by peer: the cores iterate sets of node ids (hash order differs between
        # processes), and message delays are drawn in send order.
        rd.messages = {peer: rd.messages[peer] for peer in sorted(rd.messages)}
        applied = apply_ready(
            rd,
            partial(self._persist, nd),
            partial(self._send_all, nd),
            partial(out.reply, nd),
            partial(out.wake, nd),
        )
        assert applied  # the in-memory AOF never refuses
        nc.advance()
        if w.cfg.check_every and nd.steps % w.cfg.check_every == 0:
            out.check(nd)
        self.schedule_tick(nd)

    def _persist(self, nd: SimNode, records: list[bytes]) -> bool:
        out = self._out
        assert out is not None
        frames = list(iter_frames(b"".join(records)))
        nd.aof.extend(frames)
        for rec in to_core_records(frames):
            out.record(nd, rec)
        if out.frames is not None:
            out.frames(nd, frames)
        return True

    def _send_all(self, nd: SimNode, peer: str, msgs: list[Message]) -> None:
        out = self._out
        assert out is not None
        for msg in msgs:
            out.send(nd, peer, msg)

    def schedule_tick(self, nd: SimNode) -> None:
        nc = nd.nc
        assert nc is not None
        dl = nc.next_deadline_ms()
        if dl < 0:
            return
        t = max(dl - nd.skew, self.w.now)
        if t < nd.wake_at:
            nd.wake_at = t
            self.w.at(t, self._tick, (nd.idx, nd.gen))

    def _tick(self, arg: tuple[int, int]) -> None:
        w = self.w
        idx, gen = arg
        nd = w.nodes[idx]
        if not nd.up or nd.gen != gen or nd.wake_at != w.now:
            return  # an old life's timer, or superseded by an earlier one
        nd.wake_at = INF
        if nd.frozen:
            return  # no timer runs while frozen: the thaw schedules the next one
        assert nd.nc is not None
        w.guard(nd, nd.nc.tick, w.now + nd.skew)
        self.flush(nd)
        if nd.wake_at == w.now:
            nd.same_time_ticks += 1
            if nd.same_time_ticks > _SAME_TIME_TICKS_MAX:
                raise InvariantViolation(
                    w.seed,
                    "3 (no core spins)",
                    f"{nd.name}: next_deadline_ms() stays <= now after "
                    f"{_SAME_TIME_TICKS_MAX} ticks at t={w.now - T0_MS}",
                )
        else:
            nd.same_time_ticks = 0
