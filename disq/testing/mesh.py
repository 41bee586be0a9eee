"""A few node cores wired together in memory: instant, in-order delivery and a fake clock.

The unit tests' cluster. Each step takes every node's :class:`~disq.core.node_core.Ready`
and applies it with :func:`~disq.core.node_core.apply_ready` (records, then messages, then
replies and wake-ups), exactly as the server runtime and the simulator do; the only drain
loop is :meth:`Mesh.pump`. The simulator (``disq.testing.sim``) is the same idea with delays,
loss, partitions and crashes, chosen by a seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.beanstalk.model import Session
from disq.core.disque.api import DeferredResult
from disq.core.disque.core import DisqueCore
from disq.core.messages import Message
from disq.core.node_core import NodeCore, apply_ready
from disq.persistence.framing import iter_frames

T0_MS = 1_000_000
# Drop rule: (source index, destination index, message) -> True to lose the message.
DropRule = Callable[[int, int, Message], bool]


def node_ids(n: int) -> list[str]:
    """``n`` distinct 40-character node ids, in a fixed order."""
    return [f"{i:02x}" * 20 for i in range(1, n + 1)]


@dataclass
class StaticView:
    """Membership as the Disque core sees it, set by the test (``down``: unreachable)."""

    my_id: str
    peers: list[str]
    down: set[str] = field(default_factory=set)
    leaving: bool = False

    def cluster_size(self) -> int:
        return len(self.peers) + 1

    def reachable_peers(self) -> list[str]:
        return [p for p in self.peers if p not in self.down]

    def all_peers(self) -> list[str]:
        return list(self.peers)


class Mesh:
    """``n`` nodes, each a :class:`NodeCore` over a real beanstalk core and Disque core."""

    def __init__(
        self,
        n: int,
        seed: int = 1,
        *,
        now_ms: int = T0_MS,
        beanstalk_replicate: int = 1,
        core_class: type[DisqueCore] = DisqueCore,  # a test's mutant subclass
    ) -> None:
        self.now = now_ms
        self.ids = node_ids(n)
        self.views = {nid: StaticView(nid, [p for p in self.ids if p != nid]) for nid in self.ids}
        self.nodes: list[NodeCore] = []
        for k, nid in enumerate(self.ids):
            disque = core_class(self.views[nid], random.Random(seed + k), now_ms)
            self.nodes.append(
                NodeCore(
                    BeanstalkCore(persist=True),
                    disque,
                    beanstalk_replicate=beanstalk_replicate,
                    contain_errors=False,
                )
            )
        self.cut: set[str] = set()  # nodes whose messages are dropped, both ways
        self.drop: DropRule | None = None
        # What each node's Ready handed out: deferred replies, beanstalk wake-ups, records.
        self.replies: dict[str, list[tuple[int, DeferredResult]]] = {i: [] for i in self.ids}
        self.wakeups: dict[str, list[tuple[Session, Any]]] = {i: [] for i in self.ids}
        self.aof: dict[str, list[bytes]] = {i: [] for i in self.ids}
        self.events: dict[str, list[tuple[int, str]]] = {i: [] for i in self.ids}  # kind, id
        self.delivered = 0  # messages delivered so far

    def disque(self, i: int) -> DisqueCore:
        core = self.nodes[i].disque
        assert core is not None
        return core

    def beanstalk(self, i: int) -> BeanstalkCore:
        return self.nodes[i].beanstalk

    def restart_disque(self, i: int, records: bytes, seed: int) -> DisqueCore:
        """Node ``i``'s Disque core restarted: a fresh core replays ``records`` (framed, as
        its AOF holds them) and takes the old one's place."""
        nid = self.ids[i]
        fresh = DisqueCore(self.views[nid], random.Random(seed), self.now)
        fresh.restore(self.now, list(iter_frames(records)))
        cluster = self.nodes[i].cluster_cores
        assert cluster is not None
        cluster.replace_disque(fresh)
        return fresh

    def pump(self, drop: DropRule | None = None) -> int:
        """Apply every node's Ready and deliver its messages at once, until all is quiet.
        ``drop`` (or ``self.drop``) loses the messages it returns True for. Returns the
        number of messages delivered."""
        drop = drop or self.drop
        moved = 0
        while True:
            batch: list[tuple[int, str, list[Message]]] = []
            for i, node in enumerate(self.nodes):
                if not node.has_ready():
                    continue
                nid = self.ids[i]
                rd = node.ready(self.now)
                for buf in rd.events:
                    got = zip(buf.kinds, buf.job_ids, strict=True)
                    self.events[nid] += [(k, str(j)) for k, j in got]

                applied = apply_ready(
                    rd,
                    self._persist(nid),
                    self._sender(i, batch),
                    self._replier(nid),
                    self._waker(nid),
                )
                assert applied
                node.advance()
            if not batch:
                self.delivered += moved
                return moved
            for src, dest, msgs in batch:
                src_id = self.ids[src]
                if src_id in self.cut or dest in self.cut:
                    continue
                dst = self.ids.index(dest)
                kept = [m for m in msgs if drop is None or not drop(src, dst, m)]
                if kept:
                    self.nodes[dst].on_peer_messages(self.now, src_id, kept)
                    moved += len(kept)

    def _sender(
        self, i: int, batch: list[tuple[int, str, list[Message]]]
    ) -> Callable[[str, list[Message]], None]:
        def send(dest: str, msgs: list[Message]) -> None:
            batch.append((i, dest, msgs))

        return send

    def _replier(self, nid: str) -> Callable[[int, DeferredResult], None]:
        def reply(token: int, result: DeferredResult) -> None:
            self.replies[nid].append((token, result))

        return reply

    def _waker(self, nid: str) -> Callable[[Session, Any], None]:
        def wake(session: Session, result: Any) -> None:
            self.wakeups[nid].append((session, result))

        return wake

    def _persist(self, nid: str) -> Callable[[list[bytes]], bool]:
        def persist(records: list[bytes]) -> bool:
            self.aof[nid].extend(records)
            return True

        return persist

    def advance(self, ms: int, step: int = 10) -> None:
        """Move the clock ``ms`` forward in steps of ``step``: due ticks, then a pump."""
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + step)
            for node in self.nodes:
                if 0 <= node.next_deadline_ms() <= self.now:
                    node.tick(self.now)
            self.pump()
