"""The simulator's records: what clients saw (adds, puts, deliveries), the result, the
violation, and a simulated node's state."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from disq.core.disque.api import ClusterView
from disq.core.disque.core import DisqueCore
from disq.core.membership import Membership
from disq.core.node_core import NodeCore
from disq.testing.sim.config import INF, SimConfig

if TYPE_CHECKING:
    from disq.core.beanstalk.model import Session


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
    idem_key: str = ""
    attempt: int = 0  # 0: the first add with its key; n: the n-th retry
    timeout_ms: int = 0  # the ADDJOB's ms-timeout


@dataclass(slots=True)
class BeanRec:
    """One beanstalk put as its producer saw it (the body is unique)."""

    body: bytes
    node: int
    repl: int  # the node's beanstalk_replicate
    t_start: int
    client: int = 0
    status: str = "pending"  # ok (INSERTED) | failed (refused at once) | indeterminate
    disque_id: str = ""  # the cluster record's id, when replicated
    t_end: int = 0
    why: str = ""


@dataclass(slots=True)
class Delivery:
    step: int
    t: int
    node: int
    job_id: str  # a beanstalk delivery: the node's numeric id, as a string
    body: bytes


@dataclass(slots=True)
class Op:
    kind: str  # "add" | "get" | "bput"
    client: int
    add: AddRec | None = None
    bput: BeanRec | None = None


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
    bputs: dict[bytes, BeanRec] = dataclasses.field(default_factory=dict)
    bdeliveries: list[Delivery] = dataclasses.field(default_factory=list)


class SimNode:
    __slots__ = (
        "aof",
        "bprod",
        "brepl",
        "core",
        "frozen",
        "gen",
        "held",
        "id",
        "idx",
        "member",
        "mstate",
        "name",
        "nc",
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
        self.nc: NodeCore | None = None  # the node: beanstalk core, Disque core, membership
        self.core: SimDisqueCore | None = None  # nc.disque
        self.member: Membership | None = None  # nc.membership
        self.view: ClusterView | None = None
        self.brepl = 1  # beanstalk_replicate
        self.aof: list[tuple[int, bytes]] = []  # framed records as (rtype, payload)
        self.synced = 0  # AOF records up to here survive a crash when fsync_lost is on
        self.snapshot: dict[str, Any] | None = None
        self.mstate: dict[str, int] = {}  # membership events: what this node thinks of peers
        self.wake_at = INF
        self.same_time_ticks = 0
        self.pending: dict[int, Op] = {}  # client token -> blocked command on this node
        # beanstalk producer session -> its put waiting for INSERTED
        self.bprod: dict[Session, BeanRec] = {}
        self.steps = 0
        # Frozen (SIGSTOP): no steps, no timers; what reaches it (peer messages, client
        # commands) waits here, in arrival order, until the thaw.
        self.frozen = False
        self.held: list[Callable[[], None]] = []


class SimDisqueCore(DisqueCore):
    """The real Disque core; only the memory warning is the nemesis's to set. NodeCore
    recomputes the level from ``memory.max_bytes`` after every step (0: no warning), so a
    level forced by the nemesis is kept while no limit is configured."""

    forced_warning = 0

    def update_memory(self, now_ms: int, other_bytes: int = 0) -> int:
        if self.memory.max_bytes <= 0:
            self.memory.warning = self.forced_warning
            return self.forced_warning
        return super().update_memory(now_ms, other_bytes)
